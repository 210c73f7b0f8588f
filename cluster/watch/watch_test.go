package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/leakcheck"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// testFSM is a state machine fed entries one by one.
type testFSM struct {
	t     *testing.T
	f     *fsm.FSM
	mu    sync.Mutex
	index uint64
}

func newFSM(t *testing.T) *testFSM {
	f, err := fsm.Open(fsm.Config{Shard: 1, Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return &testFSM{t: t, f: f}
}

func (tf *testFSM) apply(c *fsm.Command) uint64 {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	data, err := fsm.EncodeCommand(c)
	if err != nil {
		tf.t.Error(err)
		return 0
	}
	tf.index++
	res := tf.f.Apply(&raft.Log{Index: tf.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result)
	if res.Err != nil {
		tf.t.Errorf("apply: %v", res.Err)
	}
	return tf.index
}

func (tf *testFSM) put(rk, k, v string) uint64 {
	return tf.apply(&fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{
		{Kind: fsm.MutPut, Key: keys.KV([]byte(rk), []byte(k)), Value: []byte(v)}}}})
}

func filterOf(rk string) Filter {
	return Filter{RoutingKey: []byte(rk), Prefix: keys.KVPrefix([]byte(rk), nil), Slot: shard.SlotOf([]byte(rk))}
}

// collect receives from w (after the catch-up items in got) until it has
// n events or the deadline passes.
func collect(t *testing.T, w *Watcher, got []Item, n int) []Item {
	t.Helper()
	count := func() int {
		c := 0
		for _, it := range got {
			c += len(it.Events)
		}
		return c
	}
	deadline := time.After(20 * time.Second)
	for count() < n {
		select {
		case <-w.Ready():
			got = append(got, w.Take()...)
		case <-w.Done():
			t.Fatalf("watcher ended: %v", w.Err())
		case <-deadline:
			t.Fatalf("got %d events, want %d", count(), n)
		}
	}
	return got
}

// checkSeq checks items hold exactly the values 0..n-1 of key k, in
// order, each with the revision it was written at.
func checkSeq(t *testing.T, items []Item, revs map[string]uint64, n int) {
	t.Helper()
	i := 0
	var last uint64
	for _, it := range items {
		if it.Revision <= last {
			t.Fatalf("revision %d after %d", it.Revision, last)
		}
		last = it.Revision
		for _, e := range it.Events {
			want := fmt.Sprint(i)
			if string(e.Value) != want || revs[want] != it.Revision {
				t.Fatalf("event %d: value %q at %d, want %q at %d", i, e.Value, it.Revision, want, revs[want])
			}
			i++
		}
	}
	if i != n {
		t.Fatalf("%d events, want %d", i, n)
	}
}

// TestHubExactlyOnce: watchers joining at different revisions, some
// catching up from history, each get every write of their routing key
// after their start exactly once, in order; other routing keys' writes
// are not sent; the tail decodes each revision once however many
// watchers there are.
func TestHubExactlyOnce(t *testing.T) {
	tf := newFSM(t)
	h := NewHub(Limits{})
	const n, watchers = 300, 20
	revs := map[string]uint64{}
	var mu sync.Mutex
	ctx := context.Background()
	type state struct {
		w     *Watcher
		items []Item
		from  int
	}
	ws := make([]*state, watchers)
	for i := range n {
		if i%(n/watchers) == 0 && i/(n/watchers) < watchers {
			// Join after value i-1 was written: expect values i..n-1;
			// half of them start from an older revision and catch up.
			st := &state{from: i}
			after := tf.index
			if i > 10 && i%2 == 0 {
				mu.Lock()
				after = revs[fmt.Sprint(i-10)] - 0
				st.from = i - 9
				mu.Unlock()
			}
			w, moved, err := h.Watch(ctx, tf.f, filterOf("alice"), after, func(it Item) error {
				st.items = append(st.items, it)
				return nil
			})
			if err != nil || moved != nil {
				t.Fatal(err, moved)
			}
			st.w = w
			ws[i/(n/watchers)] = st
		}
		rev := tf.put("alice", "k", fmt.Sprint(i))
		tf.put("bob", "k", fmt.Sprint(i)) // never sent to alice's watchers
		mu.Lock()
		revs[fmt.Sprint(i)] = rev
		mu.Unlock()
	}
	for _, st := range ws {
		items := collect(t, st.w, st.items, n-st.from)
		sub := map[string]uint64{}
		for k, v := range revs {
			var x int
			fmt.Sscan(k, &x)
			if x >= st.from {
				sub[fmt.Sprint(x-st.from)] = v
			}
		}
		// Renumber values for checkSeq.
		for j := range items {
			for e := range items[j].Events {
				var x int
				fmt.Sscan(string(items[j].Events[e].Value), &x)
				items[j].Events[e].Value = []byte(fmt.Sprint(x - st.from))
			}
		}
		checkSeq(t, items, sub, n-st.from)
		st.w.Close()
	}
	if d := h.Decoded(); d > 2*n {
		t.Errorf("tail decoded %d revisions for %d written: more than once each", d, 2*n)
	}
	if h.Watchers() != 0 {
		t.Errorf("%d watchers left", h.Watchers())
	}
}

func TestHubSlowWatcherAndCap(t *testing.T) {
	tf := newFSM(t)
	h := NewHub(Limits{MaxWatchers: 2, Buffer: 4})
	ctx := context.Background()
	slow, _, err := h.Watch(ctx, tf.f, filterOf("a"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := h.Watch(ctx, tf.f, filterOf("b"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Watch(ctx, tf.f, filterOf("c"), 0, nil); !errors.Is(err, ErrTooManyNode) {
		t.Fatalf("third watcher: %v", err)
	}
	for i := range 20 {
		tf.put("a", "k", fmt.Sprint(i))
	}
	select {
	case <-slow.Done():
		if !errors.Is(slow.Err(), ErrSlow) {
			t.Fatalf("slow watcher ended with %v", slow.Err())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("slow watcher not cancelled")
	}
	// The other watcher is not affected, and the items the slow one had
	// queued are in order: it resumes from the last it received.
	var last uint64
	for _, it := range slow.Take() {
		last = it.Revision
	}
	slow.Close()
	resumed, _, err := h.Watch(ctx, tf.f, filterOf("a"), last, func(Item) error { return nil })
	if err != nil {
		t.Fatalf("resume from %d: %v", last, err)
	}
	resumed.Close()
	select {
	case <-other.Done():
		t.Fatalf("other watcher ended: %v", other.Err())
	default:
	}
	other.Close()
}

func TestHubCompactedAndMoved(t *testing.T) {
	tf := newFSM(t)
	h := NewHub(Limits{})
	ctx := context.Background()
	for i := range 10 {
		tf.put("a", "k", fmt.Sprint(i))
	}
	tf.apply(&fsm.Command{Op: fsm.OpCompactHistory, Time: 1, History: &fsm.HistoryRetention{MaxRevisions: 5}})
	var ce *fsm.CompactedError
	if _, _, err := h.Watch(ctx, tf.f, filterOf("a"), 2, nil); !errors.As(err, &ce) || ce.Oldest != 6 {
		t.Fatalf("watch from 2: %v", err)
	}
	w, _, err := h.Watch(ctx, tf.f, filterOf("a"), tf.index, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var s shard.SlotSet
	s.Add(shard.SlotOf([]byte("a")))
	tf.apply(&fsm.Command{Op: fsm.OpRestrictSlots, Move: &fsm.SlotMove{Slots: func() *shard.SlotSet { a := shard.AllSlots(); return &a }()}})
	fz := tf.apply(&fsm.Command{Op: fsm.OpFreezeSlots, Move: &fsm.SlotMove{ID: 3, Slots: &s, Peer: 2, MapVersion: 1}})
	select {
	case <-w.Ready():
		it := w.Take()[0]
		if it.Moved == nil || it.Moved.MoveID != 3 || it.Revision != fz {
			t.Fatalf("got %+v, want the freeze at %d", it, fz)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no moved item")
	}
	// A watch started below the freeze catches up to it and gets it.
	_, moved, err := h.Watch(ctx, tf.f, filterOf("a"), fz-1, func(Item) error { return nil })
	if err != nil || moved == nil || moved.Revision != fz {
		t.Fatalf("catch-up over the freeze: %+v %v", moved, err)
	}
}

// TestHubRegisterBetweenDispatches: a watcher that registers right after
// the tail dispatched a revision, from a position before it, gets that
// revision (from history, catching up) and every later one (from the
// tail), each once. The tail once moved its position only after a whole
// history read: such a watcher registered at the stale position and the
// revision already dispatched was lost to it.
func TestHubRegisterBetweenDispatches(t *testing.T) {
	tf := newFSM(t)
	h := NewHub(Limits{})
	ctx := context.Background()
	base := tf.put("alice", "k", "base")
	var (
		once    sync.Once
		late    *Watcher
		lateGot []Item
		joined  = make(chan error, 1)
	)
	h.afterDispatch = func(rev uint64) {
		once.Do(func() {
			w, _, err := h.Watch(ctx, tf.f, filterOf("alice"), base, func(it Item) error {
				lateGot = append(lateGot, it)
				return nil
			})
			late = w
			joined <- err
		})
	}
	first, _, err := h.Watch(ctx, tf.f, filterOf("alice"), base, func(Item) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	revs := map[string]uint64{}
	revs["0"] = tf.put("alice", "k", "0")
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	for i := 1; i < 5; i++ {
		revs[fmt.Sprint(i)] = tf.put("alice", "k", fmt.Sprint(i))
	}
	checkSeq(t, collect(t, first, nil, 5), revs, 5)
	checkSeq(t, collect(t, late, lateGot, 5), revs, 5)
}
