// Package watch fans a replica's history out to its watchers: one tail
// per replica state machine reads and decodes each revision's history
// record once and hands every watcher of that replica the events its
// filter selects (a watcher never reads history for itself except to
// catch up to the tail). A watcher's buffer is bounded: one that falls
// behind is cancelled (ErrSlow) and resumes from its last revision.
//
// Usage (the Watch gRPC service in package api):
//
//	w, err := hub.Watch(ctx, f, watch.Filter{RoutingKey: rk, Prefix: p, Slot: s}, after, send)
//	// send got the catch-up revisions; then:
//	for { select { case it := <-w.C: ...; case <-w.Done(): err := w.Err() } }
//	w.Close()
package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// Filter selects events: those of RoutingKey whose stored key starts with
// Prefix, and the freeze of Slot (the slot of RoutingKey).
type Filter struct {
	RoutingKey []byte
	Prefix     []byte
	Slot       shard.Slot
}

// Item is what a watcher receives for one revision: the events it
// selects, or the freeze that ends it (Moved).
type Item struct {
	Revision uint64
	Events   []fsm.Event
	Moved    *fsm.Event
}

// Match returns the events of evs that f selects, and the freeze of f's
// slot if evs holds one (later events are not returned: none of the slot
// follows it).
func (f *Filter) Match(evs []fsm.Event) ([]fsm.Event, *fsm.Event) {
	var out []fsm.Event
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case fsm.EventPut, fsm.EventDelete:
			if bytes.Equal(e.RoutingKey, f.RoutingKey) && bytes.HasPrefix(e.Key, f.Prefix) {
				out = append(out, *e)
			}
		case fsm.EventFrozen:
			if e.Slots.Has(f.Slot) {
				return out, e
			}
		}
	}
	return out, nil
}

var (
	// ErrSlow: the watcher's buffer filled; it was cancelled. Resume from
	// the last revision received.
	ErrSlow = errors.New("watch: slow watcher cancelled: its buffer filled; resume from the last revision received")
	// ErrTooManyNode: the node serves its maximum of watchers.
	ErrTooManyNode = errors.New("watch: too many watchers on this node")
	// ErrClosed: the replica closed (moved away or the node is stopping);
	// watch again.
	ErrClosed = errors.New("watch: replica closed")
)

// Limits bound the hub.
type Limits struct {
	MaxWatchers int // per node; default 10000
	Buffer      int // revisions buffered per watcher; default 1024
}

func (l Limits) withDefaults() Limits {
	if l.MaxWatchers <= 0 {
		l.MaxWatchers = 10000
	}
	if l.Buffer <= 0 {
		l.Buffer = 1024
	}
	return l
}

// Hub holds the tails of a node's replicas.
type Hub struct {
	limits Limits
	mu     sync.Mutex
	tails  map[*fsm.FSM]*tail
	count  int // watchers registered or catching up
	// decoded counts the revisions the tails decoded (for tests: once per
	// revision, whatever the number of watchers).
	decoded atomic.Uint64
	// afterDispatch, if set (tests only, before the first Watch), runs on
	// a tail's goroutine after each revision it dispatched.
	afterDispatch func(rev uint64)
}

// NewHub returns an empty hub.
func NewHub(l Limits) *Hub {
	return &Hub{limits: l.withDefaults(), tails: make(map[*fsm.FSM]*tail)}
}

// Decoded is the number of revisions the tails have read and decoded.
func (h *Hub) Decoded() uint64 { return h.decoded.Load() }

// Watchers is the number of watchers of the node.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Watcher is one registered watch.
type Watcher struct {
	// C carries the items after the catch-up, in revision order.
	C      <-chan Item
	c      chan Item
	filter Filter
	after  uint64        // items at or below it are not sent
	upTo   atomic.Uint64 // every item up to it is in c (or was)
	done   chan struct{}
	once   sync.Once
	err    error
	t      *tail
	h      *Hub
}

// Done is closed when the watcher is cancelled (Err says why).
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Err is why the watcher ended (after Done).
func (w *Watcher) Err() error { return w.err }

// Progress returns a revision up to which every item of w is in C: when
// C is empty after Progress returned r, nothing changed up to r.
func (w *Watcher) Progress() uint64 { return w.upTo.Load() }

func (w *Watcher) cancel(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// Close unregisters w.
func (w *Watcher) Close() {
	w.cancel(context.Canceled)
	if w.t != nil {
		w.t.remove(w)
	}
	w.h.mu.Lock()
	w.h.count--
	w.h.mu.Unlock()
}

// catchUpChunk is how many revisions one catch-up read covers.
const catchUpChunk = 4096

// Watch registers a watcher of f's events that filt selects, after
// revision after. The revisions between after and the tail's position
// are read from history and passed to send (in order; send's error ends
// the catch-up) before the watcher joins the tail; an Item with Moved
// ends it too (Watch returns it with a nil watcher). Errors: ErrTooManyNode,
// *fsm.CompactedError, the FSM's.
func (h *Hub) Watch(ctx context.Context, f *fsm.FSM, filt Filter, after uint64, send func(Item) error) (*Watcher, *Item, error) {
	h.mu.Lock()
	if h.count >= h.limits.MaxWatchers {
		h.mu.Unlock()
		return nil, nil, fmt.Errorf("%w (%d)", ErrTooManyNode, h.limits.MaxWatchers)
	}
	h.count++
	h.mu.Unlock()
	c := make(chan Item, h.limits.Buffer)
	w := &Watcher{C: c, c: c, filter: filt, done: make(chan struct{}), h: h}
	ok := false
	defer func() {
		if !ok {
			h.mu.Lock()
			h.count--
			h.mu.Unlock()
		}
	}()
	pos := after
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		t := h.tail(f)
		if t.register(w, pos) {
			ok = true
			return w, nil, nil
		}
		// The tail is ahead: catch up to where it is, reading history.
		upTo := min(t.position(), pos+catchUpChunk)
		var moved *Item
		err := f.ReadHistory(pos, upTo, func(rev uint64, evs []fsm.Event) error {
			m, frozen := filt.Match(evs)
			if frozen != nil {
				moved = &Item{Revision: rev, Events: m, Moved: frozen}
				return errStop
			}
			if len(m) > 0 {
				return send(Item{Revision: rev, Events: m})
			}
			return nil
		})
		if moved != nil {
			return nil, moved, nil
		}
		if err != nil {
			return nil, nil, err
		}
		pos = upTo
	}
}

var errStop = errors.New("stop")

// idleCheck is how often an idle tail checks it still has watchers.
const idleCheck = time.Second

// tail returns f's tail, starting it if needed.
func (h *Hub) tail(f *fsm.FSM) *tail {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tails[f]
	if t == nil {
		t = &tail{h: h, f: f, watchers: make(map[string]map[*Watcher]struct{})}
		t.pos = f.AppliedIndex()
		ctx, cancel := context.WithCancel(context.Background())
		t.stop = cancel
		h.tails[f] = t
		go t.run(ctx)
	}
	return t
}

// tail reads f's history once for all its watchers.
type tail struct {
	h    *Hub
	f    *fsm.FSM
	stop context.CancelFunc
	mu   sync.Mutex
	pos  uint64 // every revision up to it has been dispatched
	n    int    // watchers
	// watchers by routing key.
	watchers map[string]map[*Watcher]struct{}
	ended    bool
}

func (t *tail) position() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pos
}

// register adds w when the tail has dispatched nothing after pos (w then
// skips revisions at or below pos); false when the tail is ahead or ended.
func (t *tail) register(w *Watcher, pos uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended || t.pos > pos {
		return false
	}
	w.after = pos
	w.upTo.Store(pos)
	w.t = t
	rk := string(w.filter.RoutingKey)
	m := t.watchers[rk]
	if m == nil {
		m = make(map[*Watcher]struct{})
		t.watchers[rk] = m
	}
	m[w] = struct{}{}
	t.n++
	return true
}

func (t *tail) remove(w *Watcher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rk := string(w.filter.RoutingKey)
	if m := t.watchers[rk]; m != nil {
		if _, ok := m[w]; ok {
			delete(m, w)
			t.n--
			if len(m) == 0 {
				delete(t.watchers, rk)
			}
		}
	}
}

// run dispatches revisions as they are applied, until the FSM closes or
// the tail has had no watcher for a round.
func (t *tail) run(ctx context.Context) {
	for {
		t.mu.Lock()
		pos, n := t.pos, t.n
		t.mu.Unlock()
		if n == 0 && !t.retire() {
			continue
		} else if n == 0 {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		stopWait := context.AfterFunc(ctx, cancel)
		err := t.waitOrIdle(wctx, pos+1)
		stopWait()
		cancel()
		if err != nil {
			t.end(err)
			return
		}
		upTo := t.f.AppliedIndex()
		if upTo <= pos {
			continue
		}
		err = t.f.ReadHistory(pos, upTo, func(rev uint64, evs []fsm.Event) error {
			t.h.decoded.Add(1)
			t.dispatch(rev, evs)
			if t.h.afterDispatch != nil {
				t.h.afterDispatch(rev)
			}
			return nil
		})
		if err != nil {
			t.end(err)
			return
		}
		t.mu.Lock()
		t.pos = upTo
		for _, m := range t.watchers {
			for w := range m {
				w.upTo.Store(upTo)
			}
		}
		t.mu.Unlock()
	}
}

// waitOrIdle waits until index is applied; it returns early (nil) every
// second so the loop notices it has no watchers left.
func (t *tail) waitOrIdle(ctx context.Context, index uint64) error {
	ctx, cancel := context.WithTimeout(ctx, idleCheck)
	defer cancel()
	err := t.f.WaitApplied(ctx, index)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if errors.Is(err, fsm.ErrClosed) {
		return ErrClosed
	}
	return err
}

// retire removes the tail from the hub if it still has no watcher; false
// when one registered meanwhile.
func (t *tail) retire() bool {
	t.h.mu.Lock()
	defer t.h.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n > 0 {
		return false
	}
	t.ended = true
	delete(t.h.tails, t.f)
	t.stop()
	return true
}

// end cancels every watcher with err and retires the tail.
func (t *tail) end(err error) {
	t.h.mu.Lock()
	if t.h.tails[t.f] == t {
		delete(t.h.tails, t.f)
	}
	t.h.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = true
	for _, m := range t.watchers {
		for w := range m {
			w.cancel(err)
		}
	}
	t.watchers = map[string]map[*Watcher]struct{}{}
	t.n = 0
	t.stop()
}

// dispatch hands revision rev's events to the watchers that select them.
func (t *tail) dispatch(rev uint64, evs []fsm.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// The tail's position moves with each dispatched revision, under the
	// lock register takes: a watcher registering after rev went out must
	// see pos >= rev and catch up from history, else it would miss rev
	// (it used to move only after a whole read: TestHubCompactedAndMoved
	// saw it at random, TestHubRegisterBetweenDispatches forces it).
	defer func() { t.pos = max(t.pos, rev) }()
	var frozen []*fsm.Event
	for i := range evs {
		if evs[i].Kind == fsm.EventFrozen {
			frozen = append(frozen, &evs[i])
		}
	}
	seen := make(map[string]bool, 2)
	for i := range evs {
		rk := evs[i].RoutingKey
		if evs[i].Kind != fsm.EventPut && evs[i].Kind != fsm.EventDelete || seen[string(rk)] {
			continue
		}
		seen[string(rk)] = true
		for w := range t.watchers[string(rk)] {
			if rev <= w.after {
				continue
			}
			m, moved := w.filter.Match(evs)
			if len(m) > 0 || moved != nil {
				t.send(w, Item{Revision: rev, Events: m, Moved: moved})
			}
		}
	}
	for _, fz := range frozen {
		for _, m := range t.watchers {
			for w := range m {
				if rev > w.after && fz.Slots.Has(w.filter.Slot) && !seen[string(w.filter.RoutingKey)] {
					m2, _ := w.filter.Match(evs)
					t.send(w, Item{Revision: rev, Events: m2, Moved: fz})
				}
			}
		}
	}
}

// send queues it for w, or cancels w when its buffer is full. A Moved
// item is w's last.
func (t *tail) send(w *Watcher, it Item) {
	select {
	case <-w.done:
		return
	default:
	}
	select {
	case w.c <- it:
	default:
		w.cancel(ErrSlow)
		return
	}
	if it.Moved != nil {
		// Nothing of the slot follows; the watcher drains C then ends.
		w.after = ^uint64(0)
	}
}
