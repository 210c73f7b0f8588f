package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// TestShardIDReuseIncarnation: a node is down while shard 2, a split's
// group, is merged away and its id reused by another split. Restarted, it
// must not bring the dead group's replica (its log, its data) into the new
// group: it deletes it (its incarnation is older) and catches up on the new
// group's log; every replica of the new group holds its data and none of
// the dead group's, and every acknowledged write is readable.
func TestShardIDReuseIncarnation(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	ctx := ctxT(t, 150*time.Second)
	m0 := tc.anyMap()
	all0 := m0.SlotsOf(0)
	s1 := shard.SlotSetOf(all0[len(all0)/2:]...) // the first split's slots
	s2 := shard.SlotSetOf(all0[:len(all0)/4]...) // the second's
	if s1.Len() == 0 || s2.Len() == 0 || !s1.Intersect(s2).IsEmpty() {
		t.Fatalf("slots %s, %s", s1, s2)
	}

	mv1, err := tc.nodes[0].SplitShard(ctx, 0, &s1)
	if err != nil || mv1.Target != 2 {
		t.Fatalf("first split %+v, %v", mv1, err)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	oldRK, _ := rkInSlots(s1, true, 0)
	for i := range 30 {
		if err := tc.putRouted(ctx, oldRK, fmt.Sprintf("old%d", i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}

	// Stop a node that does not lead the meta group, once its replica of
	// shard 2 has the old group's writes.
	down := -1
	for i, n := range tc.nodes {
		if r := n.metaReplica(); r != nil && !r.IsLeader() {
			down = i
			break
		}
	}
	if down < 0 {
		t.Fatal("no meta follower")
	}
	var oldLast uint64
	waitFor(t, 10*time.Second, "the node to be stopped has the old group's writes", func() error {
		r := tc.nodes[down].localReplica(2)
		if r == nil || r.Incarnation() != mv1.ID {
			return fmt.Errorf("replica %v", r)
		}
		if _, err := r.FSM().Get(kvKey(oldRK, "old29")); err != nil {
			return err
		}
		oldLast = r.Raft().LastIndex()
		return nil
	})
	tc.stop(down)
	up := (down + 1) % 3

	mm, err := tc.nodes[up].MergeShards(ctx, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	mv3, err := tc.nodes[up].SplitShard(ctx, 0, &s2)
	if err != nil || mv3.Target != 2 || mv3.ID <= mm.ID {
		t.Fatalf("second split %+v, %v: want shard id 2 reused", mv3, err)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	newRK, _ := rkInSlots(s2, true, 0)
	for i := range 5 {
		if err := tc.putRouted(ctx, newRK, fmt.Sprintf("new%d", i), []byte("new")); err != nil {
			t.Fatal(err)
		}
	}

	tc.start(down)
	tc.waitReady()
	n := tc.nodes[down]
	waitFor(t, 20*time.Second, "the restarted node holds the new group's replica", func() error {
		r := n.localReplica(2)
		if r == nil {
			return errors.New("no replica of shard 2")
		}
		if r.Incarnation() != mv3.ID {
			return fmt.Errorf("replica of incarnation %d open, want %d", r.Incarnation(), mv3.ID)
		}
		if r.FSM().Owned() != s2 {
			return fmt.Errorf("replica owns %s, want %s", r.FSM().Owned(), s2)
		}
		if _, err := r.FSM().Get(kvKey(newRK, "new4")); err != nil {
			return fmt.Errorf("new group's write: %w", err)
		}
		return nil
	})
	if inc, found, err := replica.ReadIncarnation(n.shardDir(2)); err != nil || !found || inc != mv3.ID {
		t.Fatalf("recorded incarnation %d %v %v, want %d", inc, found, err, mv3.ID)
	}
	// No replica of the new group holds the dead group's data, and they
	// agree on the log.
	li, lr := tc.leaderReplica(2)
	waitFor(t, 10*time.Second, "replicas of shard 2 agree", func() error {
		for _, nn := range tc.nodes {
			r := nn.localReplica(2)
			if r == nil {
				return fmt.Errorf("%s holds no replica of shard 2", nn.ID())
			}
			if _, err := r.FSM().Get(kvKey(oldRK, "old29")); !errors.Is(err, fsm.ErrNotFound) {
				return fmt.Errorf("%s's replica holds the dead group's write: %v", nn.ID(), err)
			}
			if r.Raft().LastIndex() != lr.Raft().LastIndex() || r.FSM().AppliedIndex() != lr.FSM().AppliedIndex() {
				return fmt.Errorf("%s at log %d applied %d, leader %s at %d applied %d", nn.ID(), r.Raft().LastIndex(),
					r.FSM().AppliedIndex(), tc.nodes[li].ID(), lr.Raft().LastIndex(), lr.FSM().AppliedIndex())
			}
		}
		return nil
	})
	t.Logf("dead group's log ended at %d; the new group's is at %d", oldLast, lr.Raft().LastIndex())
	for i := range 30 {
		if v, err := tc.getRouted(ctx, oldRK, fmt.Sprintf("old%d", i)); err != nil || string(v) != "old" {
			t.Fatalf("old%d: %q %v", i, v, err)
		}
	}
	for i := range 5 {
		if v, err := tc.getRouted(ctx, newRK, fmt.Sprintf("new%d", i)); err != nil || string(v) != "new" {
			t.Fatalf("new%d: %q %v", i, v, err)
		}
	}
	if err := tc.putRouted(ctx, newRK, "after", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaIncarnationOnOpen: replica.Open keeps a folder of its
// incarnation (and an old folder without a record, for incarnation 0),
// deletes one of an older incarnation with its log, and refuses one of a
// newer incarnation.
func TestReplicaIncarnationOnOpen(t *testing.T) {
	tc := newTestCluster(t, 1, 1, nil)
	n := tc.nodes[0]
	dir := n.shardDir(0)
	if inc, found, err := replica.ReadIncarnation(dir); err != nil || !found || inc != 0 {
		t.Fatalf("bootstrap group's record: %d %v %v", inc, found, err)
	}
	ctx := ctxT(t, 30*time.Second)
	rk := []byte("user-1")
	if err := tc.putRouted(ctx, rk, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	st, err := n.ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := *st.Placement(0)
	reopen := func(inc uint64) (*replica.Replica, error) {
		t.Helper()
		n.adoptMu.Lock() // the sync loop's placeLocal waits
		defer n.adoptMu.Unlock()
		n.mu.Lock()
		r := n.mu.replicas[0]
		delete(n.mu.replicas, 0)
		n.mu.Unlock()
		if r != nil {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		p.Incarnation = inc
		if err := n.openShard(st, p, false); err != nil {
			return nil, err
		}
		return n.localReplica(0), nil
	}
	// A folder written before incarnations (no record): incarnation 0.
	if err := os.Remove(filepath.Join(dir, "incarnation")); err != nil {
		t.Fatal(err)
	}
	r, err := reopen(0)
	if err != nil || r.Raft().LastIndex() == 0 {
		t.Fatalf("reopen without a record: %v", err)
	}
	if _, err := r.FSM().Get(kvKey(rk, "k")); err != nil {
		t.Fatalf("data after reopening: %v", err)
	}
	if inc, found, err := replica.ReadIncarnation(dir); err != nil || !found || inc != 0 {
		t.Fatalf("record after reopening: %d %v %v", inc, found, err)
	}
	// A newer incarnation is placed: the folder and the log go.
	if r, err = reopen(7); err != nil {
		t.Fatal(err)
	}
	if last := r.Raft().LastIndex(); last != 0 {
		t.Fatalf("replica of incarnation 7 starts with the old log (last index %d)", last)
	}
	if _, err := r.FSM().Get(kvKey(rk, "k")); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("replica of incarnation 7 holds the old data: %v", err)
	}
	if inc, _, _ := replica.ReadIncarnation(dir); inc != 7 {
		t.Fatalf("recorded incarnation %d", inc)
	}
	// An older incarnation than the folder's: refused, folder kept.
	if _, err := reopen(3); err == nil {
		t.Fatal("a folder of a newer incarnation was opened as an older one")
	}
	if inc, _, _ := replica.ReadIncarnation(dir); inc != 7 {
		t.Fatalf("recorded incarnation %d after the refusal", inc)
	}
}
