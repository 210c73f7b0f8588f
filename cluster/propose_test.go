package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// TestProposeCoalesced: concurrent proposals to one leader share Raft
// entries, and each caller still gets its own command's result: of the
// guarded puts racing for one key exactly one succeeds, every plain put
// succeeds, and a rejected command rejects only itself.
func TestProposeCoalesced(t *testing.T) {
	tc := newTestCluster(t, 3, 1, nil)
	ctx := ctxT(t, 60*time.Second)
	const sh = shard.ID(0)
	_, r := tc.leaderReplica(sh)
	rk := []byte("coalesce")
	race := kvKey(rk, "race")
	before := r.FSM().AppliedIndex()

	const n = 96
	type outcome struct {
		res *fsm.Result
		err error
	}
	out := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for j := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cmd *fsm.Command
			switch j % 3 {
			case 0: // all race for one key
				cmd = &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
					Guards:    []fsm.Guard{{Kind: fsm.GuardAbsent, Key: race}},
					Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: race, Value: []byte(fmt.Sprint(j))}},
				}}
			case 1: // a key of its own
				cmd = &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
					Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: kvKey(rk, fmt.Sprint("k", j)), Value: []byte("v")}},
				}}
			default: // guarded on a key no one writes: fails, writes nothing
				cmd = &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
					Guards:    []fsm.Guard{{Kind: fsm.GuardExists, Key: kvKey(rk, "never")}},
					Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: kvKey(rk, fmt.Sprint("g", j)), Value: []byte("v")}},
				}}
			}
			<-start
			res, err := r.Propose(ctx, cmd)
			out[j] = outcome{res, err}
		}()
	}
	close(start)
	wg.Wait()

	won := 0
	for j, o := range out {
		if o.err != nil {
			t.Fatalf("proposal %d: %v", j, o.err)
		}
		switch j % 3 {
		case 0:
			if o.res.Succeeded {
				won++
			} else if o.res.FailedGuard != 0 {
				t.Errorf("racing proposal %d: %+v", j, *o.res)
			}
		case 1:
			if !o.res.Succeeded {
				t.Errorf("plain put %d: %+v", j, *o.res)
			}
		default:
			if o.res.Succeeded || o.res.FailedGuard != 0 {
				t.Errorf("failing guard %d: %+v", j, *o.res)
			}
		}
	}
	if won != 1 {
		t.Fatalf("%d racing puts succeeded, want 1", won)
	}
	for j := 2; j < n; j += 3 {
		if _, err := r.FSM().Get(kvKey(rk, fmt.Sprint("g", j))); !errors.Is(err, fsm.ErrNotFound) {
			t.Fatalf("a put whose guard failed was written: %v", err)
		}
	}
	entries := r.FSM().AppliedIndex() - before
	t.Logf("%d proposals in %d log entries", n, entries)
	if entries >= n {
		t.Fatalf("%d proposals took %d log entries: nothing coalesced", n, entries)
	}
}

// TestProposeReturnsOnClose: proposals in flight or queued when the
// replica closes all return; none waits forever on a Raft future.
func TestProposeReturnsOnClose(t *testing.T) {
	tc := newTestCluster(t, 3, 1, nil)
	const sh = shard.ID(0)
	i, r := tc.leaderReplica(sh)
	ctx := context.Background() // no deadline: only the close can end a wait
	var wg sync.WaitGroup
	for j := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
				Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: kvKey([]byte("c"), fmt.Sprint(j)), Value: []byte("v")}},
			}})
		}()
	}
	tc.stop(i)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("proposals still waiting 30s after the replica closed")
	}
}

// TestProposeLoneWriter: a writer alone on a replica has each proposal
// carried by an entry of its own (nothing waits to be coalesced with it),
// counted in the proposal counters, applied in order.
func TestProposeLoneWriter(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	ctx := ctxT(t, 60*time.Second)
	// Not the pools shard, whose leader writes the default pool.
	sh := 1 - tc.nodes[0].smapNow().ShardOf(poolsRoutingKey)
	_, r := tc.leaderReplica(sh)
	key := kvKey([]byte("lone"), "k")
	entries0, cmds0 := r.Stats().Entries, r.Stats().Commands
	const n = 20
	for j := range n {
		res, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
			Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: key, Value: []byte(fmt.Sprint(j))}},
		}})
		if err != nil || !res.Succeeded {
			t.Fatalf("put %d: %+v, %v", j, res, err)
		}
	}
	if e, c := r.Stats().Entries-entries0, r.Stats().Commands-cmds0; e != n || c != n {
		t.Fatalf("%d sequential proposals: %d entries, %d commands; want %d each", n, e, c, n)
	}
	v, err := r.FSM().Get(key)
	if err != nil || string(v) != fmt.Sprint(n-1) {
		t.Fatalf("key holds %q, %v; want the last put %q", v, err, fmt.Sprint(n-1))
	}
}
