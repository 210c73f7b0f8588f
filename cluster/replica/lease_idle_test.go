package replica

import (
	"context"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
)

// TestLessorIdleNoPasses: a leading lessor with no leases makes no timed
// pass over 20 TickIntervals (the 100 ms ticker it had woke every
// replica of every group ten times a second); a grant wakes it, the
// abandoned lease still expires within its TTL plus a bound, and the
// lessor is idle again once it holds no lease.
func TestLessorIdleNoPasses(t *testing.T) {
	tick := 10 * time.Millisecond
	r := openSingle(t, t.TempDir(), nil, withLeases(LeaseConfig{TickInterval: tick, CheckpointInterval: 50 * time.Millisecond}))
	defer r.Close()
	primed(t, r)
	ls := r.Leases()
	idle := func(what string) {
		t.Helper()
		before := ls.passes.Load()
		time.Sleep(20 * tick) // a window in which nothing may happen
		if n := ls.passes.Load() - before; n != 0 {
			t.Fatalf("%s: %d passes in 20 intervals, want 0", what, n)
		}
	}
	idle("leader without leases")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := fsm.MinLeaseTTL
	granted := time.Now()
	id, err := ls.Grant(ctx, []byte("alice"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := putLeased(ctx, r, "alice", "k", id); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ttl+5*time.Second, "expiry", func() bool { return !hasKey(t, r, "alice", "k") })
	took := time.Since(granted)
	t.Logf("expired %v after the grant (TTL %v), %d passes", took, ttl, ls.passes.Load())
	if took < ttl {
		t.Fatalf("expired %v after the grant, before its TTL %v", took, ttl)
	}
	if ls.passes.Load() == 0 {
		t.Fatal("no pass expired the lease")
	}
	waitUntil(t, 5*time.Second, "lessor empty", func() bool { return ls.Count() == 0 })
	idle("leader after its last lease expired")
}
