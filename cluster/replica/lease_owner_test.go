package replica

import (
	"context"
	"errors"
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
