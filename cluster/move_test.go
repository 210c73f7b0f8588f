package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// anyMap returns the shard map of the first live node.
func (tc *testCluster) anyMap() *shard.Map {
	for _, n := range tc.nodes {
		if n != nil {
			return n.smapNow()
		}
	}
	return nil
}

// retryable reports whether a write through a replica may be sent again:
// the slot moved (the test's map is stale), no leader, or an unknown
// outcome (the test writes each key with one value only).
func retryable(err error) bool {
	var moved *fsm.MovedError
	return errors.As(err, &moved) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, ErrClosed) || errors.Is(err, ErrLeaderNotReady) || errors.Is(err, context.DeadlineExceeded)
}

// putRouted writes rk/key=value through the node API: the leader replica
// of the shard a node's map names, retrying on the moved answer (the
// client of this branch does not follow moves yet).
func (tc *testCluster) putRouted(ctx context.Context, rk []byte, key string, value []byte) error {
	return tc.writeRouted(ctx, rk, fsm.Mutation{Kind: fsm.MutPut, Key: kvKey(rk, key), Value: value})
}

// writeRouted applies mutation m of routing key rk on the leader of the
// shard the map names, retrying while the map moves.
func (tc *testCluster) writeRouted(ctx context.Context, rk []byte, m fsm.Mutation) error {
	return tc.onRoutedLeader(ctx, rk, func(ctx context.Context, r *replica.Replica) error {
		_, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{m}}})
		return err
	})
}

// getRouted reads rk/key linearizably from the owner the map names,
// retrying while leaders change or the map moves.
func (tc *testCluster) getRouted(ctx context.Context, rk []byte, key string) (v []byte, err error) {
	err = tc.onRoutedLeader(ctx, rk, func(ctx context.Context, r *replica.Replica) error {
		if err := r.ReadBarrier(ctx); err != nil {
			return err
		}
		if err := r.FSM().CheckRoutingKey(rk); err != nil {
			return err
		}
		v, err = r.FSM().Get(kvKey(rk, key))
		return err
	})
	return v, err
}

// onRoutedLeader calls fn (bounded by 2 s) with the leader replica of the
// shard the map names for routing key rk, again while it fails with a
// retryable error or no leader is known, until ctx ends; it returns fn's
// last error (ctx's if fn never ran).
func (tc *testCluster) onRoutedLeader(ctx context.Context, rk []byte, fn func(context.Context, *replica.Replica) error) error {
	err := ErrLeaderNotReady
	for ctx.Err() == nil {
		id := tc.anyMap().ShardOf(rk)
		if i := tc.currentLeaderOf(id); i >= 0 {
			if r := tc.nodes[i].localReplica(id); r != nil {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err = fn(actx, r)
				cancel()
				if err == nil || !retryable(err) {
					return err
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if errors.Is(err, ErrLeaderNotReady) {
		return ctx.Err()
	}
	return err
}

// waitMovesDone waits until the cluster state has no move left.
func (tc *testCluster) waitMovesDone(ctx context.Context, timeout time.Duration) {
	tc.t.Helper()
	waitFor(tc.t, timeout, "moves done", func() error {
		for _, n := range tc.nodes {
			if n == nil {
				continue
			}
			ms, err := n.Moves(ctx)
			if err != nil {
				return err
			}
			if len(ms) > 0 {
				return fmt.Errorf("move %d is %s (%s)", ms[0].ID, ms[0].Phase, ms[0].Error)
			}
			return nil
		}
		return errors.New("no live node")
	})
}

// rkInSlots returns a routing key whose slot is (in) or is not (!in) in s.
func rkInSlots(s shard.SlotSet, in bool, from int) ([]byte, int) {
	for i := from; ; i++ {
		rk := []byte(fmt.Sprintf("user-%d", i))
		if s.Has(shard.SlotOf(rk)) == in {
			return rk, i + 1
		}
	}
}

// moveScrapes returns the swarmkv_move_unavailable_seconds count summed
// over the live nodes.
func (tc *testCluster) moveScrapes() int {
	re := regexp.MustCompile(`(?m)^swarmkv_move_unavailable_seconds_count (\d+)`)
	total := 0
	for _, n := range tc.nodes {
		if n == nil {
			continue
		}
		rec := httptest.NewRecorder()
		n.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if m := re.FindStringSubmatch(rec.Body.String()); m != nil {
			c, _ := strconv.Atoi(m[1])
			total += c
		}
	}
	return total
}

type ackedWrite struct {
	rk    []byte
	key   string
	value []byte
}

// TestSplitMerge splits a shard of a 3-node cluster while a writer writes
// to keys of the moving slots and of others, checks that every
// acknowledged write is readable from its owner, the map version grew,
// the source holds none of the moved data and answers the moved slots
// with MovedError (and the target the others); then merges it back.
func TestSplitMerge(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	ctx := ctxT(t, 90*time.Second)
	n0 := tc.nodes[0]
	m0 := tc.anyMap()
	src := shard.ID(0)
	owned := shard.SlotSetOf(m0.SlotsOf(src)...)
	all := owned.Slots()
	moving := shard.SlotSetOf(all[len(all)-len(all)/2:]...)

	// A writer: routing keys in the moving slots, in the source's other
	// slots and in the other shard, each key written once.
	var rks [][]byte
	next := 0
	for range 4 {
		var rk []byte
		rk, next = rkInSlots(moving, true, next)
		rks = append(rks, rk)
	}
	for _, set := range []shard.SlotSet{owned.Minus(moving), shard.AllSlots().Minus(owned)} {
		for range 2 {
			var rk []byte
			rk, next = rkInSlots(set, true, next)
			rks = append(rks, rk)
		}
	}
	var mu sync.Mutex
	var acked []ackedWrite
	stop := make(chan struct{})
	var werr atomic.Value
	var wg sync.WaitGroup
	writer := func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			w := ackedWrite{rk: rks[i%len(rks)], key: fmt.Sprintf("k%05d", i), value: []byte(fmt.Sprintf("v%d", i))}
			if err := tc.putRouted(ctx, w.rk, w.key, w.value); err != nil {
				werr.Store(err)
				return
			}
			mu.Lock()
			acked = append(acked, w)
			mu.Unlock()
		}
	}
	wg.Add(1)
	go writer()
	// waitWrites waits for more acknowledged writes than now (the writer
	// runs), or fails with the writer's error.
	waitWrites := func(more int) {
		t.Helper()
		mu.Lock()
		want := len(acked) + more
		mu.Unlock()
		waitFor(t, 30*time.Second, fmt.Sprintf("%d more writes", more), func() error {
			if err, _ := werr.Load().(error); err != nil {
				t.Fatalf("writer: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(acked) < want {
				return fmt.Errorf("%d of %d acknowledged", len(acked), want)
			}
			return nil
		})
	}
	waitWrites(20)

	mv, err := n0.SplitShard(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mv.Kind != placement.MoveSplit || mv.Source != src || mv.Target != 2 || mv.Slots != moving || mv.MapVersion != m0.Version+1 {
		t.Fatalf("planned %+v, want split of shard 0's slots %s into shard 2", mv, moving)
	}
	// The same split again (a retried request) answers the move in
	// progress; another plan for the moving shard is refused.
	// (Or, if the move finished meanwhile, refused: the slots are moved.)
	if again, err := tc.nodes[1].SplitShard(ctx, src, &moving); (err != nil || again.ID != mv.ID) &&
		!strings.Contains(fmt.Sprint(err), "does not own slots") {
		t.Fatalf("the same split again: %+v, %v; want move %d", again, err, mv.ID)
	}
	other := shard.SlotSetOf(moving.Slots()[0])
	if _, err := tc.nodes[1].SplitShard(ctx, src, &other); ErrorKind(err).String() != "failed precondition" {
		t.Fatalf("another split of a moving shard: %v", err)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	waitWrites(20) // writes after the publish
	close(stop)
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitFor(t, 10*time.Second, "every node has the new map", func() error {
		for _, n := range tc.nodes {
			if m := n.smapNow(); m.Version < mv.MapVersion {
				return fmt.Errorf("%s has map version %d", n.ID(), m.Version)
			}
		}
		return nil
	})
	m1 := tc.anyMap()
	if m1.NumShards != 3 || shard.SlotSetOf(m1.SlotsOf(2)...) != moving || m1.Version != mv.MapVersion {
		t.Fatalf("map after split: version %d, %d shards, shard 2 owns %v", m1.Version, m1.NumShards, m1.SlotsOf(2))
	}
	checkAcked := func(when string, acked []ackedWrite) {
		t.Helper()
		for _, w := range acked {
			v, err := tc.getRouted(ctx, w.rk, w.key)
			if err != nil || string(v) != string(w.value) {
				t.Fatalf("%s: acknowledged %s/%s = %q: got %q, %v", when, w.rk, w.key, w.value, v, err)
			}
		}
	}
	mu.Lock()
	writes := acked
	mu.Unlock()
	inMoving := 0
	for _, w := range writes {
		if moving.Has(shard.SlotOf(w.rk)) {
			inMoving++
		}
	}
	if inMoving == 0 || len(writes) == inMoving {
		t.Fatalf("writer covered %d writes, %d in the moving slots", len(writes), inMoving)
	}
	checkAcked("after split", writes)
	// No key is answered by both groups; the source keeps none of the
	// moved data, on any replica.
	waitFor(t, 10*time.Second, "source dropped the moved data", func() error {
		for _, n := range tc.nodes {
			sr, tr := n.localReplica(src), n.localReplica(2)
			if sr == nil || tr == nil {
				return fmt.Errorf("%s lacks a replica", n.ID())
			}
			for _, w := range writes {
				in := moving.Has(shard.SlotOf(w.rk))
				kept := owned.Minus(moving).Has(shard.SlotOf(w.rk))
				var me *fsm.MovedError
				if err := sr.FSM().CheckRoutingKey(w.rk); kept == errors.As(err, &me) {
					return fmt.Errorf("%s: source check of %s: %v", n.ID(), w.rk, err)
				}
				if err := tr.FSM().CheckRoutingKey(w.rk); in == errors.As(err, &me) {
					return fmt.Errorf("%s: target check of %s: %v", n.ID(), w.rk, err)
				}
				if in {
					if _, err := sr.FSM().Get(kvKey(w.rk, w.key)); !errors.Is(err, fsm.ErrNotFound) {
						return fmt.Errorf("%s: source still holds %s/%s: %v", n.ID(), w.rk, w.key, err)
					}
				}
			}
		}
		return nil
	})
	if c := tc.moveScrapes(); c < 1 {
		t.Errorf("swarmkv_move_unavailable_seconds observed %d moves", c)
	}

	// Merge it back.
	mm, err := tc.nodes[2].MergeShards(ctx, src, 2)
	if err != nil {
		t.Fatal(err)
	}
	if mm.Kind != placement.MoveMerge || mm.Slots != moving || mm.ID != mv.ID+1 {
		t.Fatalf("merge planned %+v", mm)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	waitFor(t, 10*time.Second, "shard 2 gone everywhere", func() error {
		for _, n := range tc.nodes {
			m := n.smapNow()
			if m.Version <= mv.MapVersion || len(m.SlotsOf(2)) != 0 || m.NumShards != 2 {
				return fmt.Errorf("%s: map version %d, %d shards", n.ID(), m.Version, m.NumShards)
			}
			if n.localReplica(2) != nil {
				return fmt.Errorf("%s still holds shard 2", n.ID())
			}
		}
		return nil
	})
	checkAcked("after merge", writes)
	st, err := n0.ClusterState(ctx)
	if err != nil || st.Placement(2) != nil {
		t.Fatalf("state after merge: %v, %+v", err, st.Shards)
	}
}

// TestMoveResumesAfterMetaLeaderCrash stops the meta leader right after
// its mover committed the freeze; another node takes over the meta group
// and finishes the move from the recorded phase.
func TestMoveResumesAfterMetaLeaderCrash(t *testing.T) {
	var halted atomic.Bool
	haltedAt := make(chan struct{})
	tc := newTestCluster(t, 3, 2, func(c *Config) {
		c.Testing.AfterMovePhase = func(id uint64, phase string) bool {
			if phase == placement.PhaseFrozen && halted.CompareAndSwap(false, true) {
				close(haltedAt)
				return true
			}
			return false
		}
	})
	ctx := ctxT(t, 90*time.Second)
	rk, _ := rkInSlots(shard.SlotSetOf(tc.anyMap().SlotsOf(1)...), true, 0)
	for i := range 20 {
		if err := tc.putRouted(ctx, rk, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	mv, err := tc.nodes[0].SplitShard(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-haltedAt:
	case <-ctx.Done():
		t.Fatal("the mover never froze")
	}
	leader := -1
	for i, n := range tc.nodes {
		if r := n.metaReplica(); r != nil && r.IsLeader() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no meta leader")
	}
	st, err := tc.nodes[(leader+1)%3].ClusterState(ctx)
	if err != nil || st.Move(mv.ID) == nil || st.Move(mv.ID).Phase != placement.PhaseFrozen {
		t.Fatalf("state at the crash: %v %+v", err, st.Moves)
	}
	tc.stop(leader)
	tc.waitMovesDone(ctx, 45*time.Second)
	tc.start(leader)
	tc.waitReady()
	waitFor(t, 10*time.Second, "the restarted node follows the new map", func() error {
		for _, n := range tc.nodes {
			m := n.smapNow()
			if m.Version < mv.MapVersion || shard.SlotSetOf(m.SlotsOf(mv.Target)...) != mv.Slots {
				return fmt.Errorf("%s: map version %d, target owns %v", n.ID(), m.Version, m.SlotsOf(mv.Target))
			}
		}
		return nil
	})
	for i := range 20 {
		if v, err := tc.getRouted(ctx, rk, fmt.Sprintf("k%d", i)); err != nil || string(v) != "v" {
			t.Fatalf("k%d after the resumed move: %q %v", i, v, err)
		}
	}
}

// TestMergeCollisionAborts: a merge whose pre-copy (before the freeze;
// at protocol version 2 the ingest after it) finds a key the target holds
// with a value of its own slots aborts: the source owns its slots again
// and serves writes, the map and placements are unchanged, the move is
// gone.
func TestMergeCollisionAborts(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	ctx := ctxT(t, 60*time.Second)
	m0 := tc.anyMap()
	from := shard.SlotSetOf(m0.SlotsOf(1)...)
	rk, _ := rkInSlots(from, true, 0)
	if err := tc.putRouted(ctx, rk, "x", []byte("B")); err != nil {
		t.Fatal(err)
	}
	// A usage event id both shards hold, for users of each: an id keyed
	// without its user, so the merge collides on it.
	evKey, err := keys.UsageEvent("ev-collide")
	if err != nil {
		t.Fatal(err)
	}
	into := shard.SlotSetOf(m0.SlotsOf(0)...)
	for _, side := range []struct {
		id    shard.ID
		slots shard.SlotSet
	}{{0, into}, {1, from}} {
		var acct keys.AccountID
		for i := 0; !side.slots.Has(shard.SlotOf(acct[:])); i++ {
			binary.BigEndian.PutUint32(acct[:], uint32(i))
		}
		v, err := records.Encode(&records.UsageEvent{EventID: "ev-collide", UserID: acct, Resource: "r", Quantity: 1, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, r := tc.leaderReplica(side.id)
		if _, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
			Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: evKey, Value: v}}}}); err != nil {
			t.Fatal(err)
		}
	}
	_, r0 := tc.leaderReplica(0)
	mv, err := tc.nodes[1].MergeShards(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 30*time.Second)
	st, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.MapVersion != m0.Version || st.Placement(1) == nil || len(st.Moves) != 0 || st.NextMoveID != mv.ID+1 {
		t.Fatalf("state after the aborted merge: version %d, shards %+v, moves %+v", st.MapVersion, st.Shards, st.Moves)
	}
	_, r1 := tc.leaderReplica(1)
	if r1.FSM().Owned() != from {
		t.Fatalf("source owns %v after the abort, want %v", r1.FSM().Owned(), from)
	}
	if v, err := tc.getRouted(ctx, rk, "x"); err != nil || string(v) != "B" {
		t.Fatalf("source's key after the abort: %q %v", v, err)
	}
	if err := tc.putRouted(ctx, rk, "y", []byte("C")); err != nil {
		t.Fatalf("write after the abort: %v", err)
	}
	// The target registered and dropped the move: it can never adopt it.
	for _, rec := range r0.FSM().Moves() {
		if rec.ID == mv.ID && rec.State != fsm.MoveAborted {
			t.Fatalf("target's record %+v", rec)
		}
	}
	// Bad input: clear errors, nothing changed.
	for _, bad := range []func() error{
		func() error { _, err := tc.nodes[0].MergeShards(ctx, 0, 0); return err },
		func() error { _, err := tc.nodes[0].MergeShards(ctx, 0, 9); return err },
		func() error {
			s := shard.SlotSetOf(all(m0, 1)...)
			_, err := tc.nodes[0].SplitShard(ctx, 0, &s)
			return err
		},
	} {
		if err := bad(); ErrorKind(err).String() != "failed precondition" {
			t.Errorf("bad move request: %v", err)
		}
	}
	// Cancelling an unknown or finished move: not found.
	for _, id := range []uint64{99, mv.ID} {
		if _, err := tc.nodes[2].CancelMove(ctx, id); ErrorKind(err) != rpc.KindNotFound {
			t.Errorf("cancel of move %d: %v (kind %s), want not found", id, err, ErrorKind(err))
		}
	}
	if st2, _ := tc.nodes[0].ClusterState(ctx); st2.Epoch != st.Epoch {
		t.Errorf("refused requests changed the state: epoch %d -> %d", st.Epoch, st2.Epoch)
	}
}

func all(m *shard.Map, id shard.ID) []shard.Slot { return m.SlotsOf(id) }

// TestCancelMove cancels a split whose target ingested the data but has
// not adopted it: the move aborts, the source owns and serves the slots
// again (its data intact), the target's data and the split's group are
// gone on every node, the map is unchanged. A split past its publish
// cannot be cancelled (a clear FailedPrecondition) and finishes.
func TestCancelMove(t *testing.T) {
	ingested := make(chan uint64, 1)
	release := make(chan struct{})
	var holdOnce sync.Once
	published := make(chan uint64, 1)
	cancelled := make(chan struct{})
	var pubOnce sync.Once
	var secondSplit atomic.Uint64
	tc := newTestCluster(t, 3, 2, func(c *Config) {
		c.Testing.BeforeAdopt = func(id uint64) error {
			held := false
			holdOnce.Do(func() {
				held = true
				ingested <- id
				<-release
			})
			if held {
				return errors.New("test: pull held until the move was cancelled")
			}
			return nil
		}
		c.Testing.AfterMovePhase = func(id uint64, phase string) bool {
			if phase == placement.PhasePublished && id == secondSplit.Load() {
				pubOnce.Do(func() {
					published <- id
					<-cancelled
				})
			}
			return false
		}
	})
	ctx := ctxT(t, 120*time.Second)
	m0 := tc.anyMap()
	owned := shard.SlotSetOf(m0.SlotsOf(0)...)
	st0, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all0 := owned.Slots()
	moving := shard.SlotSetOf(all0[len(all0)-len(all0)/2:]...) // the split's default
	rk, _ := rkInSlots(moving, true, 0)
	for i := range 20 {
		if err := tc.putRouted(ctx, rk, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	mv, err := tc.nodes[1].SplitShard(ctx, 0, nil)
	if err != nil || mv.Slots != moving {
		t.Fatalf("split %+v, %v", mv, err)
	}
	var id uint64
	select {
	case id = <-ingested:
	case <-ctx.Done():
		t.Fatal("the target never ingested")
	}
	if id != mv.ID {
		t.Fatalf("held move %d, want %d", id, mv.ID)
	}
	// The target ingested the source's data of the slots, not adopted.
	_, tr := tc.leaderReplica(mv.Target)
	if recs := tr.FSM().Moves(); len(recs) != 1 || recs[0].ID != mv.ID || recs[0].State == fsm.MoveAdopted {
		t.Fatalf("target's move records %+v", recs)
	}
	if v, err := tr.FSM().Get(kvKey(rk, "k19")); err != nil || string(v) != "v" {
		t.Fatalf("target's ingested data: %q %v", v, err)
	}
	cm, err := tc.nodes[2].CancelMove(ctx, mv.ID)
	if err != nil || cm.Phase != placement.PhaseAborting || cm.Error == "" {
		t.Fatalf("cancel: %+v, %v", cm, err)
	}
	close(release)
	tc.waitMovesDone(ctx, 45*time.Second)
	st, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.MapVersion != st0.MapVersion || st.Placement(mv.Target) != nil || len(st.Moves) != 0 {
		t.Fatalf("state after the cancel: version %d (was %d), shards %+v, moves %+v", st.MapVersion, st0.MapVersion, st.Shards, st.Moves)
	}
	waitFor(t, 15*time.Second, "the split's group gone", func() error {
		for _, n := range tc.nodes {
			if n.localReplica(mv.Target) != nil {
				return fmt.Errorf("%s still holds shard %d", n.ID(), mv.Target)
			}
			if _, err := os.Stat(n.shardDir(mv.Target)); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s: shard %d's folder: %v", n.ID(), mv.Target, err)
			}
			if r := n.localReplica(0); r == nil || r.FSM().Owned() != owned {
				return fmt.Errorf("%s: source owns %v, want %s", n.ID(), r.FSM().Owned(), owned)
			}
		}
		return nil
	})
	// The source serves the slots again, reads and writes.
	for i := range 20 {
		if v, err := tc.getRouted(ctx, rk, fmt.Sprintf("k%d", i)); err != nil || string(v) != "v" {
			t.Fatalf("k%d after the cancel: %q %v", i, v, err)
		}
	}
	if err := tc.putRouted(ctx, rk, "after-cancel", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := tc.getRouted(ctx, rk, "after-cancel"); err != nil || string(v) != "v" {
		t.Fatalf("read after the cancel: %q %v", v, err)
	}

	// A split held right after its publish: cancel is refused.
	secondSplit.Store(mv.ID + 1)
	mv2, err := tc.nodes[0].SplitShard(ctx, 0, nil)
	if err != nil || mv2.ID != mv.ID+1 {
		t.Fatalf("second split %+v, %v", mv2, err)
	}
	select {
	case <-published:
	case <-ctx.Done():
		t.Fatal("the second split never published")
	}
	_, err = tc.nodes[1].CancelMove(ctx, mv2.ID)
	close(cancelled)
	if ErrorKind(err) != rpc.KindFailedPrecondition || !strings.Contains(err.Error(), "can no longer be cancelled") {
		t.Fatalf("cancel after the publish: %v (kind %s)", err, ErrorKind(err))
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	waitFor(t, 10*time.Second, "the second split finished", func() error {
		if m := tc.anyMap(); shard.SlotSetOf(m.SlotsOf(mv2.Target)...) != mv2.Slots {
			return fmt.Errorf("shard %d owns %v, want %s", mv2.Target, m.SlotsOf(mv2.Target), mv2.Slots)
		}
		return nil
	})
}

// TestSplitUnavailableWindow measures the unavailability window of a
// split of a shard holding about 10 MB in its moving slots on a 3-node
// in-process cluster (the pull goes over loopback even though the replicas
// share the node): the freeze-to-publish time the mover exports as
// swarmkv_move_unavailable_seconds. It logs the figure
// (docs/architecture.md, "Unavailability") and asserts no time: the
// machine may be shared and noisy (under the race detector with other
// tests running it once took 66 s: pull attempts stalled until the
// round's 30 s bound cut them; docs/architecture.md, Known limits).
func TestSplitUnavailableWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 10 MB")
	}
	if raceEnabled {
		// Before pulls resumed, this split never finished under the race
		// detector in CI (each 30 s round's pull started over). It now
		// does (28.8 s in all at a load average of 13), but costs about a
		// minute of the suite, and its figure means nothing there. Run it
		// with `go test -run TestSplitUnavailableWindow ./cluster/`.
		t.Skip("a 10 MB split: its figure means nothing under the race detector, and it costs a minute of the suite")
	}
	tc := newTestCluster(t, 3, 2, nil)
	ctx := ctxT(t, 180*time.Second)
	owned := shard.SlotSetOf(tc.anyMap().SlotsOf(0)...)
	all0 := owned.Slots()
	moving := shard.SlotSetOf(all0[len(all0)-len(all0)/2:]...)
	const (
		valueSize = 4 << 10
		perEntry  = 64
		entries   = 40 // 40 * 64 * 4 KiB = 10 MiB
	)
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var rks [][]byte // a batch's keys share one slot: one routing key per entry
	next := 0
	for range 8 {
		var rk []byte
		rk, next = rkInSlots(moving, true, next)
		rks = append(rks, rk)
	}
	for e := range entries {
		muts := make([]fsm.Mutation, perEntry)
		for j := range muts {
			muts[j] = fsm.Mutation{Kind: fsm.MutPut, Key: kvKey(rks[e%len(rks)], fmt.Sprintf("big%05d", e*perEntry+j)), Value: value}
		}
		batchOnShard0(ctx, t, tc, muts)
	}
	before := tc.moveWindow()
	start := time.Now()
	mv, err := tc.nodes[0].SplitShard(ctx, 0, &moving)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 120*time.Second)
	total := time.Since(start)
	after := tc.moveWindow()
	if after.count != before.count+1 {
		t.Fatalf("swarmkv_move_unavailable_seconds observed %d moves, want 1", after.count-before.count)
	}
	window := time.Duration((after.sum - before.sum) * float64(time.Second))
	t.Logf("split of %d MiB (%d keys) in slots %s: unavailable for %v (freeze to publish); the whole move took %v",
		entries*perEntry*valueSize>>20, entries*perEntry, mv.Slots.String(), window.Round(time.Millisecond), total.Round(time.Millisecond))
	if window <= 0 { // the figure is logged, never asserted: timing belongs to docs/performance.md
		t.Fatalf("unavailability window %v: the move's window was not observed", window)
	}
	// The moved data is whole at its new owner.
	_, tr := tc.leaderReplica(mv.Target)
	for _, k := range []int{0, entries*perEntry/2 + 1, entries*perEntry - 1} {
		rk := rks[(k/perEntry)%len(rks)] // an entry's keys share its routing key
		if v, err := tr.FSM().Get(kvKey(rk, fmt.Sprintf("big%05d", k))); err != nil || len(v) != valueSize {
			t.Fatalf("big%05d at the target: %d bytes, %v", k, len(v), err)
		}
	}
}

type histogramScrape struct {
	count int
	sum   float64
}

// moveWindow returns swarmkv_move_unavailable_seconds' count and sum over
// the live nodes.
func (tc *testCluster) moveWindow() histogramScrape {
	reCount := regexp.MustCompile(`(?m)^swarmkv_move_unavailable_seconds_count (\S+)`)
	reSum := regexp.MustCompile(`(?m)^swarmkv_move_unavailable_seconds_sum (\S+)`)
	var out histogramScrape
	for _, n := range tc.nodes {
		if n == nil {
			continue
		}
		rec := httptest.NewRecorder()
		n.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if m := reCount.FindStringSubmatch(rec.Body.String()); m != nil {
			c, _ := strconv.Atoi(m[1])
			out.count += c
		}
		if m := reSum.FindStringSubmatch(rec.Body.String()); m != nil {
			f, _ := strconv.ParseFloat(m[1], 64)
			out.sum += f
		}
	}
	return out
}

// TestOnMetaLeaderLostLeadership: a meta change whose proposal finds the
// meta replica no longer leading (ErrNotLeader: nothing committed) runs on
// the new leader instead of failing with "not the leader" (seen by the
// jepsen split-merge nemesis as MergeShards failing on a meta leader
// change); a node that does lead the meta group returns the error as is.
func TestOnMetaLeaderLostLeadership(t *testing.T) {
	tc := newTestCluster(t, 3, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leader, follower *Node
	waitFor(t, 20*time.Second, "a meta leader", func() error {
		for _, n := range tc.nodes {
			if n.leadsMeta() {
				leader = n
				return nil
			}
		}
		return errors.New("none leads the meta group")
	})
	for _, n := range tc.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	remote := 0
	err := follower.onMetaLeader(ctx, func() error { return ErrNotLeader }, func(context.Context, rpc.AdminClient) error { remote++; return nil })
	if err != nil || remote != 1 {
		t.Fatalf("on a meta follower whose change found ErrNotLeader: err %v, forwarded %d times; want forwarded once, no error", err, remote)
	}
	remote = 0
	err = leader.onMetaLeader(ctx, func() error { return ErrNotLeader }, func(context.Context, rpc.AdminClient) error { remote++; return nil })
	if k := ErrorKind(err); k != rpc.KindNotLeader || remote != 0 {
		t.Fatalf("on the meta leader: err %v (kind %s), forwarded %d times; want not leader, not forwarded", err, k, remote)
	}
}

// batchOnShard0 proposes muts as one batch on shard 0's leader, again
// after a transient error (a leader change).
func batchOnShard0(ctx context.Context, t *testing.T, tc *testCluster, muts []fsm.Mutation) {
	t.Helper()
	for {
		_, r := tc.leaderReplica(0)
		_, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: muts}})
		if err == nil {
			return
		}
		if !retryable(err) {
			t.Fatal(err)
		}
	}
}

// The move of writeMovingHalf: keysPerRK pairs under each of rks routing
// keys, 64 KiB values, so that 16 pairs make a 1 MiB chunk.
const keysPerRK, rks = 20, 4

// writeMovingHalf writes n (a multiple of keysPerRK) kv pairs of 64 KiB
// into the upper half of shard 0's slots, keysPerRK a routing key, and
// returns that half, the keys and the value.
func writeMovingHalf(ctx context.Context, t *testing.T, tc *testCluster, n int) (shard.SlotSet, [][]byte, []byte) {
	t.Helper()
	owned := shard.SlotSetOf(tc.anyMap().SlotsOf(0)...)
	all0 := owned.Slots()
	moving := shard.SlotSetOf(all0[len(all0)/2:]...)
	value := bytes.Repeat([]byte("v"), 64<<10)
	var written [][]byte
	next := 0
	for i := range n / keysPerRK {
		var rk []byte
		rk, next = rkInSlots(moving, true, next)
		muts := make([]fsm.Mutation, keysPerRK)
		for j := range muts {
			muts[j] = fsm.Mutation{Kind: fsm.MutPut, Key: kvKey(rk, fmt.Sprintf("k%d-%02d", i, j)), Value: value}
			written = append(written, muts[j].Key)
		}
		batchOnShard0(ctx, t, tc, muts)
	}
	return moving, written, value
}

// TestPrecopyResumesAfterCut: a pre-copy cut off in its third chunk (as
// by the end of the mover's round) resumes after the last chunk the
// target took whole: the pre-copy's pulls read the source's pairs about
// once (the cut chunk twice), and the move completes with every key.
// Before, the next round's pre-copy started from the first key, so a
// shard whose pre-copy took longer than a round never moved (here: 45
// pairs read, then all 80 again). One node: a pass resumes only under
// the same leader and term, which a loaded 3-node test cluster does not
// keep for sure (a new leader's pass starts over, as it must).
func TestPrecopyResumesAfterCut(t *testing.T) {
	var mu sync.Mutex
	read, cuts, precopied := 0, 0, false
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.Testing.PullChunk = func(_ uint64, pairs int) {
			mu.Lock()
			defer mu.Unlock()
			if !precopied {
				read += pairs
			}
		}
		c.Testing.AfterIngest = func(_ uint64, pairs uint64) error {
			mu.Lock()
			defer mu.Unlock()
			if cuts == 0 && !precopied && pairs >= 40 {
				cuts++
				return fmt.Errorf("test: pre-copy cut off after %d pairs", pairs)
			}
			return nil
		}
		c.Testing.AfterPrecopy = func(uint64) {
			mu.Lock()
			defer mu.Unlock()
			precopied = true
		}
	})
	ctx := ctxT(t, 120*time.Second)
	const n = keysPerRK * rks
	moving, written, value := writeMovingHalf(ctx, t, tc, n)
	mv, err := tc.nodes[0].SplitShard(ctx, 0, &moving)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 100*time.Second)
	mu.Lock()
	defer mu.Unlock()
	// One chunk (16 pairs at most) is read twice: the one cut off.
	if cuts != 1 || read < n || read > n+16 {
		t.Fatalf("the pre-copy's pulls read %d pairs of %d (%d cuts): want each once and the cut chunk twice", read, n, cuts)
	}
	_, tr := tc.leaderReplica(mv.Target)
	for _, k := range written {
		if v, err := tr.FSM().Get(k); err != nil || len(v) != len(value) {
			t.Fatalf("key %x at the new shard %d: %d bytes, %v", k, mv.Target, len(v), err)
		}
	}
}

// TestPullResumesAfterCut: a pull cut off after its first chunk (as by the
// end of the mover's round) resumes after the last key the target
// ingested: the two pulls together ingest every pair of the move once.
// Before the resume, every round's pull started over from the first key,
// so a move whose data took longer than a round to copy never finished.
func TestPullResumesAfterCut(t *testing.T) {
	var mu sync.Mutex
	var pulls []uint64 // pairs ingested by each pull, in order
	cut := false
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		// The pull of protocol version 2 (no pre-copy): its ingests
		// resume after the target's last key (a pull by difference,
		// version 3, starts over and writes only what is missing:
		// TestPrecopySyncBringsWrites).
		c.Testing.MaxProtocolVersion = 2
		c.Testing.AfterIngest = func(_ uint64, pairs uint64) error {
			mu.Lock()
			defer mu.Unlock()
			if len(pulls) == 0 || pairs <= pulls[len(pulls)-1] {
				pulls = append(pulls, pairs) // a new pull's first chunk
			}
			pulls[len(pulls)-1] = pairs
			if !cut {
				cut = true
				return fmt.Errorf("test: pull cut off after %d pairs", pairs)
			}
			return nil
		}
	})
	ctx := ctxT(t, 120*time.Second)
	moving, written, value := writeMovingHalf(ctx, t, tc, keysPerRK*rks)
	mv, err := tc.nodes[0].SplitShard(ctx, 0, &moving)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 100*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(pulls) < 2 || pulls[0] == 0 {
		t.Fatalf("pulls %v: want a cut-off pull then another", pulls)
	}
	var sum uint64
	for _, p := range pulls {
		sum += p
	}
	// A chunk whose ingest committed but whose answer was lost (a leader
	// change under load) is counted by no pull, so the sum may fall short
	// of the move's pairs; it never exceeds them unless a pull resent
	// pairs the target had acknowledged (without the resume: 15 + 80).
	if sum > keysPerRK*rks {
		t.Fatalf("pulls ingested %v pairs, %d in all: more than the move's %d pairs (a pull that starts over ingests some twice)", pulls, sum, keysPerRK*rks)
	}
	// Every pair arrived: the moved keys read back at the new owner.
	id := mv.Target
	_, tr := tc.leaderReplica(id)
	for _, k := range written {
		if v, err := tr.FSM().Get(k); err != nil || len(v) != len(value) {
			t.Fatalf("key %x at the new shard %d: %d bytes, %v", k, id, len(v), err)
		}
	}
}

// TestPrecopySyncBringsWrites: a split pre-copies the moving slots while
// the source still serves them (protocol version 3); the writes made after
// the pre-copy and before the freeze (overwrites, deletes, new keys) are
// what the new owner serves after the move, on every replica: the sync
// pass brought them, and nothing stale of the pre-copy survives.
func TestPrecopySyncBringsWrites(t *testing.T) {
	var mu sync.Mutex
	var hook func()
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		c.Testing.AfterPrecopy = func(uint64) {
			mu.Lock()
			h := hook
			hook = nil // once
			mu.Unlock()
			if h != nil {
				h()
			}
		}
	})
	ctx := ctxT(t, 90*time.Second)
	owned := shard.SlotSetOf(tc.anyMap().SlotsOf(0)...)
	all0 := owned.Slots()
	moving := shard.SlotSetOf(all0[len(all0)/2:]...)
	rk, _ := rkInSlots(moving, true, 0)
	key := func(i int) string { return fmt.Sprintf("k%02d", i) }
	for i := range 30 {
		if err := tc.putRouted(ctx, rk, key(i), []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	hookDone := make(chan error, 1)
	mu.Lock()
	hook = func() {
		var err error
		for i := 0; i < 35 && err == nil; i++ {
			switch {
			case i < 10:
				err = tc.putRouted(ctx, rk, key(i), []byte("new"))
			case i < 20:
				err = tc.writeRouted(ctx, rk, fsm.Mutation{Kind: fsm.MutDelete, Key: kvKey(rk, key(i))})
			case i >= 30:
				err = tc.putRouted(ctx, rk, key(i), []byte("added"))
			}
		}
		hookDone <- err
	}
	mu.Unlock()
	mv, err := tc.nodes[0].SplitShard(ctx, 0, &moving)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 60*time.Second)
	select {
	case err := <-hookDone:
		if err != nil {
			t.Fatalf("writes after the pre-copy: %v", err)
		}
	default:
		t.Fatal("the mover never called AfterPrecopy: no pre-copy ran")
	}
	want := func(i int) string {
		switch {
		case i < 10:
			return "new"
		case i < 20:
			return ""
		case i < 30:
			return "old"
		}
		return "added"
	}
	waitFor(t, 10*time.Second, "the map routes the key to the new shard", func() error {
		if id := tc.anyMap().ShardOf(rk); id != mv.Target {
			return fmt.Errorf("shard %d, want %d", id, mv.Target)
		}
		return nil
	})
	for i := range 35 {
		v, err := tc.getRouted(ctx, rk, key(i))
		if w := want(i); string(v) != w || (w == "") != errors.Is(err, fsm.ErrNotFound) {
			t.Fatalf("%s after the move: %q, %v; want %q", key(i), v, err, w)
		}
	}
	// Every replica of the new shard holds the same (its followers
	// applied the same sync pass).
	waitFor(t, 10*time.Second, "the new shard's replicas agree", func() error {
		for _, n := range tc.nodes {
			r := n.localReplica(mv.Target)
			if r == nil {
				return fmt.Errorf("%s has no replica of shard %d", n.ID(), mv.Target)
			}
			for i := range 35 {
				v, _ := r.FSM().Get(kvKey(rk, key(i)))
				if string(v) != want(i) {
					return fmt.Errorf("%s: %s = %q, want %q", n.ID(), key(i), v, want(i))
				}
			}
		}
		return nil
	})
}

// TestCancelDuringPrecopy: a merge cancelled right after its pre-copy
// (before the mover freezes the source) aborts: the receiver holds
// nothing of the donor's slots any more (fenced and dropped, its move
// record aborted), the donor owns and serves its slots, the map and both
// shards are unchanged.
func TestCancelDuringPrecopy(t *testing.T) {
	var tcp atomic.Pointer[testCluster]
	cancelled := make(chan error, 1)
	var once sync.Once
	tc := newTestCluster(t, 3, 2, func(c *Config) {
		c.Testing.AfterPrecopy = func(id uint64) {
			once.Do(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := tcp.Load().nodes[2].CancelMove(ctx, id)
				cancelled <- err
			})
		}
	})
	tcp.Store(tc)
	ctx := ctxT(t, 90*time.Second)
	m0 := tc.anyMap()
	from := shard.SlotSetOf(m0.SlotsOf(1)...)
	rk, _ := rkInSlots(from, true, 0)
	for i := range 20 {
		if err := tc.putRouted(ctx, rk, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	st0, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mv, err := tc.nodes[0].MergeShards(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 60*time.Second)
	select {
	case err := <-cancelled:
		if err != nil {
			t.Fatalf("cancel after the pre-copy: %v", err)
		}
	default:
		t.Fatal("no pre-copy ran")
	}
	st, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.MapVersion != st0.MapVersion || st.Placement(1) == nil || len(st.Moves) != 0 {
		t.Fatalf("state after the cancel: version %d (was %d), shards %+v, moves %+v", st.MapVersion, st0.MapVersion, st.Shards, st.Moves)
	}
	waitFor(t, 15*time.Second, "the receiver dropped what it pre-copied, the donor owns its slots", func() error {
		for _, n := range tc.nodes {
			r0, r1 := n.localReplica(0), n.localReplica(1)
			if r0 == nil || r1 == nil {
				return fmt.Errorf("%s lacks a replica", n.ID())
			}
			if r1.FSM().Owned() != from {
				return fmt.Errorf("%s: the donor owns %v", n.ID(), r1.FSM().Owned())
			}
			for i := range 20 {
				if _, err := r0.FSM().Get(kvKey(rk, fmt.Sprintf("k%d", i))); !errors.Is(err, fsm.ErrNotFound) {
					return fmt.Errorf("%s: the receiver still holds k%d (%v)", n.ID(), i, err)
				}
			}
			aborted := false
			for _, rec := range r0.FSM().Moves() {
				aborted = aborted || (rec.ID == mv.ID && rec.State == fsm.MoveAborted && rec.Dropped)
			}
			if !aborted {
				return fmt.Errorf("%s: the receiver's records %+v", n.ID(), r0.FSM().Moves())
			}
		}
		return nil
	})
	for i := range 20 {
		if v, err := tc.getRouted(ctx, rk, fmt.Sprintf("k%d", i)); err != nil || string(v) != "v" {
			t.Fatalf("k%d after the cancel: %q %v", i, v, err)
		}
	}
	if err := tc.putRouted(ctx, rk, "after", []byte("w")); err != nil {
		t.Fatalf("write after the cancel: %v", err)
	}
}
