package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
)

// withLeases gives the replica a lessor with fast ticks.
func withLeases(lc LeaseConfig) func(*Config) {
	return func(c *Config) {
		if lc.TickInterval == 0 {
			lc.TickInterval = 20 * time.Millisecond
		}
		c.Leases = &lc
	}
}

// primed waits until r's lessor serves.
func primed(t *testing.T, r *Replica) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.Leases().ready(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("lessor not primed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func putLeased(ctx context.Context, r *Replica, rk, k string, lease uint64) error {
	_, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{
		{Kind: fsm.MutPut, Key: keys.KV([]byte(rk), []byte(k)), Value: []byte("v"), Lease: lease}}}})
	return err
}

func hasKey(t *testing.T, r *Replica, rk, k string) bool {
	t.Helper()
	_, err := r.FSM().Get(keys.KV([]byte(rk), []byte(k)))
	if err != nil && !errors.Is(err, fsm.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestLessorKeepAliveAndExpiry: a kept-alive lease outlives its TTL; once
// no longer kept alive it expires, its key with it; keep-alives and TTL
// queries of an ended lease answer not found; the cap refuses a grant
// and changes nothing.
func TestLessorKeepAliveAndExpiry(t *testing.T) {
	r := openSingle(t, t.TempDir(), nil, withLeases(LeaseConfig{MaxLeases: 2, CheckpointInterval: 50 * time.Millisecond}))
	defer r.Close()
	primed(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := r.Leases()
	ttl := fsm.MinLeaseTTL
	id, err := ls.Grant(ctx, []byte("alice"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := putLeased(ctx, r, "alice", "k", id); err != nil {
		t.Fatal(err)
	}
	// Keep it alive for two TTLs.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		got, err := ls.KeepAlive(ctx, id)
		if err != nil || got != ttl {
			t.Fatalf("keep-alive: %v %v", got, err)
		}
		if !hasKey(t, r, "alice", "k") {
			t.Fatal("a kept-alive lease's key is gone")
		}
	}
	st, err := ls.TimeToLive(ctx, id)
	if err != nil || st.Remaining <= 0 || st.Remaining > ttl || st.Record.TTLMs != ttl.Milliseconds() {
		t.Fatalf("TimeToLive: %+v %v", st, err)
	}
	// The cap: one more lease fits, then none; nothing changes.
	if _, err := ls.Grant(ctx, []byte("bob"), ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Grant(ctx, []byte("carol"), ttl); !errors.Is(err, ErrLeaseLimit) {
		t.Fatalf("grant over the cap: %v", err)
	}
	if recs, _ := r.FSM().Leases(0, 0, nil); len(recs) != 2 {
		t.Fatalf("%d leases after a refused grant", len(recs))
	}
	// Abandoned: gone within TTL plus the bound.
	took := waitUntil(t, ttl+5*time.Second, "expiry", func() bool { return !hasKey(t, r, "alice", "k") })
	t.Logf("expired %v after the last keep-alive", took)
	if _, err := ls.KeepAlive(ctx, id); !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of an expired lease: %v", err)
	}
	if _, err := ls.TimeToLive(ctx, id); !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("TimeToLive of an expired lease: %v", err)
	}
}

// TestLessorCheckpointRestart: a lease not kept alive gets its remaining
// TTL checkpointed; a restarted leader gives it that remainder, not a
// full TTL; a keep-alive then clears the checkpoint (a commit) before it
// renews.
func TestLessorCheckpointRestart(t *testing.T) {
	dir := t.TempDir()
	lc := LeaseConfig{CheckpointInterval: 50 * time.Millisecond}
	r := openSingle(t, dir, nil, withLeases(lc))
	primed(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := 6 * time.Second
	granted := time.Now()
	id, err := r.Leases().Grant(ctx, []byte("alice"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	var rem time.Duration
	waitUntil(t, 30*time.Second, "a checkpoint", func() bool {
		rec, err := r.FSM().Lease(id)
		if err != nil {
			t.Fatal(err)
		}
		rem = rec.Remaining()
		return rem > 0
	})
	// Not kept alive for max(interval, TTL/2) after the grant (which
	// counts as a keep-alive), and at least max(interval, TTL/10) below a
	// full TTL.
	if took := time.Since(granted); took < ttl/2 {
		t.Fatalf("checkpointed %v after the grant, before TTL/2", took)
	}
	if rem > ttl-ttl/10 {
		t.Fatalf("checkpointed %v of %v", rem, ttl)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openSingle(t, dir, nil, withLeases(lc))
	defer r.Close()
	primed(t, r)
	st, err := r.Leases().TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := r.FSM().Lease(id); st.Remaining > rec.Remaining() {
		t.Fatalf("after the restart the lease has %v left, more than its checkpoint %v", st.Remaining, rec.Remaining())
	}
	if _, err := r.Leases().KeepAlive(ctx, id); err != nil {
		t.Fatal(err)
	}
	if rec, _ := r.FSM().Lease(id); rec.RemainingMs != 0 {
		t.Fatalf("the keep-alive did not clear the checkpoint: %+v", rec)
	}
	if st, _ := r.Leases().TimeToLive(ctx, id); st.Remaining < ttl-time.Second {
		t.Fatalf("after the keep-alive %v left of %v", st.Remaining, ttl)
	}
}

// TestLessorRestartsEndAbandonedLease: a leader restarted every third of
// the TTL (each restart an election that primes the lessor again) still
// expires an abandoned lease; a lease kept alive through the same
// restarts lives on.
func TestLessorRestartsEndAbandonedLease(t *testing.T) {
	dir := t.TempDir()
	lc := LeaseConfig{CheckpointInterval: 50 * time.Millisecond}
	r := openSingle(t, dir, nil, withLeases(lc))
	primed(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ttl := 3 * time.Second
	abandoned, err := r.Leases().Grant(ctx, []byte("alice"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := r.Leases().Grant(ctx, []byte("bob"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := putLeased(ctx, r, "alice", "a", abandoned); err != nil {
		t.Fatal(err)
	}
	if err := putLeased(ctx, r, "bob", "b", kept); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for restarts := 0; hasKey(t, r, "alice", "a"); restarts++ {
		if time.Since(start) > 8*ttl {
			t.Fatalf("the abandoned lease outlived %d restarts, %v", restarts, time.Since(start))
		}
		// Keep bob's lease alive through the third of a TTL, then restart.
		for end := time.Now().Add(ttl / 3); time.Now().Before(end); time.Sleep(ttl / 10) {
			if _, err := r.Leases().KeepAlive(ctx, kept); err != nil {
				t.Fatalf("keep-alive after %d restarts: %v", restarts, err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		r = openSingle(t, dir, nil, withLeases(lc))
		primed(t, r)
	}
	defer r.Close()
	t.Logf("abandoned lease expired %v after its grant", time.Since(start))
	if !hasKey(t, r, "bob", "b") {
		t.Fatal("the kept-alive lease's key is gone")
	}
}
