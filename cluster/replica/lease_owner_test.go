package replica

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// TestLessorGrantVersionGate: while the cluster does not run
// fsm.VersionHardening (Config.Admit refuses its commands) a grant is one
// of the earlier versions: no owner, no key bound, the slot's next
// sequence number, and a revoke carries no Deny; once it does, the grant
// records its owner and bound and takes a random id, and a revoke's Deny
// is applied by the state machine.
func TestLessorGrantVersionGate(t *testing.T) {
	var hardening bool
	admit := func(c *Config) {
		c.Admit = func(cmd *fsm.Command) error {
			if !hardening && cmd.Since() >= fsm.VersionHardening {
				return errors.New("cluster runs protocol version 3")
			}
			return nil
		}
	}
	r := openSingle(t, t.TempDir(), nil, withLeases(LeaseConfig{MaxKeysPerLease: 2}), admit)
	defer r.Close()
	primed(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := r.Leases()
	slot := byte(shard.SlotOf([]byte("alice")))

	old, err := ls.GrantOwned(ctx, []byte("alice"), fsm.MinLeaseTTL*5, "token:0123456789abcdef")
	if err != nil || old != keys.LeaseIDOf(slot, 1) {
		t.Fatalf("grant before version 4: %016x %v", old, err)
	}
	if rec, err := r.FSM().Lease(old); err != nil || rec.Owner != "" || rec.MaxKeys != 0 {
		t.Fatalf("record before version 4: %+v %v", rec, err)
	}
	if err := putLeased(ctx, r, "alice", "k", old); err != nil {
		t.Fatal(err)
	}
	// Deny cannot be proposed yet: the revoke runs without it.
	if n, err := ls.RevokeDenying(ctx, old, fsm.LeaseKindKV); err != nil || n != 1 {
		t.Fatalf("revoke before version 4: %d %v", n, err)
	}

	hardening = true
	id, err := ls.GrantOwned(ctx, []byte("alice"), fsm.MinLeaseTTL*5, "token:0123456789abcdef")
	if err != nil || keys.LeaseSlot(id) != slot || id == keys.LeaseIDOf(slot, 2) {
		t.Fatalf("grant at version 4: %016x %v", id, err)
	}
	if rec, err := r.FSM().Lease(id); err != nil || rec.Owner != "token:0123456789abcdef" || rec.MaxKeys != 2 {
		t.Fatalf("record at version 4: %+v %v", rec, err)
	}
	for _, k := range []string{"a", "b"} {
		if err := putLeased(ctx, r, "alice", k, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := putLeased(ctx, r, "alice", "c", id); !errors.Is(err, fsm.ErrLeaseFull) {
		t.Fatalf("third key: %v", err)
	}
	if _, err := ls.RevokeDenying(ctx, id, fsm.LeaseKindKV); !errors.Is(err, fsm.ErrLeaseDenied) {
		t.Fatalf("denied revoke: %v", err)
	}
	if !hasKey(t, r, "alice", "a") {
		t.Fatal("a denied revoke deleted a key")
	}
}

// TestExpiryBatchBoundsKeys: one OpLeaseExpire ends at most maxExpiryKeys
// attached keys (summed over its leases' counts) once it holds a lease, so
// 1,024 full leases of 10,000 keys each are not one apply of ten million
// deletions; leases without a count (granted before keys were counted) go
// alone; small leases still share an entry.
func TestExpiryBatchBoundsKeys(t *testing.T) {
	var counted bool
	admit := func(c *Config) {
		c.Admit = func(cmd *fsm.Command) error {
			if !counted && cmd.Since() >= fsm.VersionHardening {
				return errors.New("cluster runs protocol version 3")
			}
			return nil
		}
	}
	r := openSingle(t, t.TempDir(), nil, withLeases(LeaseConfig{MaxKeysPerLease: maxExpiryKeys}), admit)
	defer r.Close()
	primed(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := r.Leases()
	grant := func() uint64 {
		t.Helper()
		id, err := ls.GrantOwned(ctx, []byte("alice"), fsm.MaxLeaseTTL, "token:0123456789abcdef")
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	legacy := grant() // no count
	counted = true
	var small []uint64
	for range 3 {
		small = append(small, grant())
	}
	big := grant()
	// big holds 6,000 keys, each small lease 1.
	muts := make([]fsm.Mutation, 0, 1000)
	for i := range 6000 {
		muts = append(muts, fsm.Mutation{Kind: fsm.MutPut, Key: keys.KV([]byte("alice"), fmt.Appendf(nil, "big%05d", i)), Value: []byte("v"), Lease: big})
		if len(muts) == cap(muts) {
			if _, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: muts}}); err != nil {
				t.Fatal(err)
			}
			muts = muts[:0]
		}
	}
	for i, id := range small {
		if err := putLeased(ctx, r, "alice", fmt.Sprint("small", i), id); err != nil {
			t.Fatal(err)
		}
	}
	if rec, err := r.FSM().Lease(big); err != nil || rec.Keys != 6000 {
		t.Fatalf("big lease record %+v %v", rec, err)
	}
	l := r.Leases()
	for _, tc := range []struct {
		name string
		due  []uint64
		want int
	}{
		{"small ones share", small, 3},
		{"big after small fits", append(append([]uint64{}, small...), big), 4},
		{"two bigs do not", []uint64{big, big}, 1},
		{"uncounted goes alone", []uint64{legacy, small[0]}, 1},
		{"uncounted after others waits", []uint64{small[0], legacy}, 1},
		{"an unknown id goes alone", []uint64{keys.LeaseIDOf(7, 9), small[0]}, 1},
	} {
		if got := l.expiryBatch(tc.due); got != tc.want {
			t.Errorf("%s: expiryBatch = %d, want %d", tc.name, got, tc.want)
		}
	}
}
