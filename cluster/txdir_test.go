package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// txOn returns a purchase of user whose transaction id's slot is in
// shard s of m (the directory shard of the id).
func txOn(m *shard.Map, s shard.ID, user keys.AccountID, amount int64) *records.CreditTransaction {
	for {
		tx := purchaseOf(user, amount)
		if m.ShardOf(tx.TransactionID[:]) == s {
			return tx
		}
	}
}

// TestTransactionIDsUniqueAcrossShards (issue 37, item 11): a transaction
// id is reserved cluster-wide for the account that first records it, so
// another account's AddCredits, ProcessUsage or PutTransaction under it is
// refused with AlreadyExists wherever the two accounts live, through the
// gRPC API, both when the id's directory shard is the caller's (one log
// entry) and when it is the other shard (the reservation crosses shards);
// the exact retry by the first account still succeeds. A merge of the two
// shards afterwards completes: no shard holds another account's record
// under an id of the first (before the directory, the reuse succeeded and
// the merge aborted on the colliding transactions key).
func TestTransactionIDsUniqueAcrossShards(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	c := tc.client()
	ctx := ctxT(t, 3*time.Minute)
	waitFor(t, 30*time.Second, "protocol version 4", func() error {
		if v := tc.nodes[0].ActiveVersion(); v < fsm.VersionHardening {
			return fmt.Errorf("active version %d", v)
		}
		return nil
	})
	m := c.Map()
	f := &billingFixture{ctx: ctx, b: c.Billing(), g: newStoresIDs(11), m: m}
	b := f.b
	u, v := f.account(t, 0, 1000), f.account(t, 1, 1000)

	for _, dir := range []shard.ID{0, 1} { // the shard of the id's slot
		tx := txOn(m, dir, u, 100)
		bal, err := b.AddCredits(ctx, u, 100, tx)
		if err != nil {
			t.Fatalf("dir %d: AddCredits: %v", dir, err)
		}
		stolen := *tx
		stolen.UserID = v
		_, err = b.AddCredits(ctx, v, 100, &stolen)
		wantErr(t, "AddCredits of another account under a used id", err, client.ErrAlreadyExists)
		e, utx := usageOf(v, "steal-"+string(rune('a'+dir)), 30)
		utx.TransactionID = tx.TransactionID
		_, err = b.ProcessUsage(ctx, e, utx)
		wantErr(t, "ProcessUsage of another account under a used id", err, client.ErrAlreadyExists)
		put := purchaseOf(v, 7)
		put.TransactionID = tx.TransactionID
		wantErr(t, "PutTransaction of another account under a used id", b.PutTransaction(ctx, put), client.ErrAlreadyExists)
		if ok, err := b.HasUsageEvent(ctx, e.EventID); err != nil || ok {
			t.Errorf("dir %d: the refused charge's event is stored: %t, %v", dir, ok, err)
		}
		// The exact retry by its account answers the recorded balance.
		if again, err := b.AddCredits(ctx, u, 100, tx); err != nil || again != bal {
			t.Errorf("dir %d: exact retry = %d, %v; want %d", dir, again, err, bal)
		}
		// v's own ids still work.
		if _, err := b.AddCredits(ctx, v, 5, txOn(m, dir, v, 5)); err != nil {
			t.Errorf("dir %d: v's own AddCredits: %v", dir, err)
		}
	}
	if a := f.get(t, u); a.BalanceCents != 1200 {
		t.Errorf("u's balance %d, want 1200", a.BalanceCents)
	}
	if a := f.get(t, v); a.BalanceCents != 1010 {
		t.Errorf("v's balance %d, want 1010", a.BalanceCents)
	}
	if n := len(f.all(t, v)); n != 2 {
		t.Errorf("v has %d transactions, want its own 2", n)
	}

	// The merge of the two shards completes.
	mv, err := tc.nodes[1].MergeShards(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 60*time.Second)
	st, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Placement(1) != nil || st.MapVersion == m.Version {
		t.Fatalf("merge %d did not complete (aborted?): map version %d (was %d), shards %+v", mv.ID, st.MapVersion, m.Version, st.Shards)
	}
	if n := len(f.all(t, u)); n != 2 {
		t.Errorf("after the merge u has %d transactions, want 2", n)
	}
	if a := f.get(t, v); a.BalanceCents != 1010 {
		t.Errorf("after the merge v's balance %d, want 1010", a.BalanceCents)
	}
}

// TestTransactionIDsBeforeVersion4: until the cluster runs
// fsm.VersionHardening the front neither reserves nor sends the directory
// field (every replica would refuse them: FailedPrecondition): billing ops
// behave as before, ids unique per shard.
func TestTransactionIDsBeforeVersion4(t *testing.T) {
	tc := newTestCluster(t, 3, 2, func(c *Config) { c.Testing.MaxProtocolVersion = fsm.VersionHardening - 1 })
	c := tc.client()
	ctx := ctxT(t, 2*time.Minute)
	m := c.Map()
	f := &billingFixture{ctx: ctx, b: c.Billing(), g: newStoresIDs(12), m: m}
	b := f.b
	u, v := f.account(t, 0, 0), f.account(t, 1, 0)
	for _, dir := range []shard.ID{0, 1} {
		tx := txOn(m, dir, u, 100)
		if _, err := b.AddCredits(ctx, u, 100, tx); err != nil {
			t.Fatalf("dir %d: AddCredits at version %d: %v", dir, tc.nodes[0].ActiveVersion(), err)
		}
		other := *tx
		other.UserID = v
		if _, err := b.AddCredits(ctx, v, 100, &other); err != nil {
			t.Errorf("dir %d: v's AddCredits under u's id on another shard: %v (per-shard ids before version 4)", dir, err)
		}
	}
	if n := len(f.all(t, v)); n != 2 {
		t.Errorf("v has %d transactions, want 2", n)
	}
}
