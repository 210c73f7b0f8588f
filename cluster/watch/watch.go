// Package watch fans a replica's history out to its watchers: one tail
// per replica state machine reads and decodes each revision's history
// record once and hands every watcher of that replica the events its
// filter selects (a watcher never reads history for itself except to
// catch up to the tail). A watcher's buffer is bounded and allocated as
// items arrive (an idle watcher holds a few hundred bytes): one that falls
// behind is cancelled (ErrSlow) and resumes from its last revision.
// Catch-ups read history outside the tail: at most Limits.MaxCatchUps at
// once on a node (ErrTooManyCatchUps beyond, retry later), each holding
// at most Limits.CatchUpBytes of selected events between reading and
// sending, whatever the history's size (docs/security.md, "Watch
// catch-ups").
//
// Usage (the Watch gRPC service in package api):
//
//	w, err := hub.Watch(ctx, f, watch.Filter{RoutingKey: rk, Prefix: p, Slot: s}, after, send)
//	// send got the catch-up revisions; then:
//	for { select { case <-w.Ready(): for _, it := range w.Take() {...}; case <-w.Done(): err := w.Err() } }
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
	// ErrTooManyCatchUps: the node runs its maximum of catch-ups from
	// history (Limits.MaxCatchUps); nothing was registered: watch again
	// after a pause.
	ErrTooManyCatchUps = errors.New("watch: too many watches catching up from history on this node")
	// ErrClosed: the replica closed (moved away or the node is stopping);
	// watch again.
	ErrClosed = errors.New("watch: replica closed")
)

// Limits bound the hub.
type Limits struct {
	MaxWatchers int // per node; default 10000
	Buffer      int // revisions buffered per watcher; default 1024
	// MaxCatchUps bounds the watchers reading history at once to catch
	// up to the tail; default 32.
	MaxCatchUps int
	// CatchUpBytes bounds the selected events (keys and values) a
	// catch-up holds between reading them and sending them; default 1 MiB
	// (a revision whose selected events are larger is sent alone).
	CatchUpBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxWatchers <= 0 {
		l.MaxWatchers = 10000
	}
	if l.Buffer <= 0 {
		l.Buffer = 1024
	}
	if l.MaxCatchUps <= 0 {
		l.MaxCatchUps = 32
	}
	if l.CatchUpBytes <= 0 {
		l.CatchUpBytes = 1 << 20
	}
	return l
}

// Hub holds the tails of a node's replicas.
type Hub struct {
	limits Limits
	mu     sync.Mutex
	tails  map[*fsm.FSM]*tail
	count  int // watchers registered or catching up
	// reads has a token per catch-up reading history now (at most
	// limits.MaxCatchUps): a read holds one, a send to the client none (a
	// client slow to read cannot keep others from catching up).
	reads chan struct{}
	// decoded counts the revisions the tails decoded (for tests: once per
	// revision, whatever the number of watchers).
	decoded atomic.Uint64
	// afterDispatch, if set (tests only, before the first Watch), runs on
	// a tail's goroutine after each revision it dispatched.
	afterDispatch func(rev uint64)
	// afterCatchUpRead, if set (tests only, before the first Watch), runs
	// after each history read of a catch-up with the bytes it holds.
	afterCatchUpRead func(bytes int)
}

// NewHub returns an empty hub.
func NewHub(l Limits) *Hub {
	l = l.withDefaults()
	return &Hub{limits: l, tails: make(map[*fsm.FSM]*tail), reads: make(chan struct{}, l.MaxCatchUps)}
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
	// ready has a token when q holds items (cap 1).
	ready chan struct{}
	qmu   sync.Mutex
	// q holds the items after the catch-up not yet taken, in revision
	// order: it grows as items arrive (never past the hub's Buffer), so an
	// idle watcher costs no buffer.
	q      []Item
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

// Ready has a value when items wait (Take them).
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Take returns the items waiting, in revision order, and empties the
// queue.
func (w *Watcher) Take() []Item {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	q := w.q
	w.q = nil
	return q
}

// Pending is the number of items waiting.
func (w *Watcher) Pending() int {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	return len(w.q)
}

// push queues it unless the queue holds max items already (false).
func (w *Watcher) push(it Item, max int) bool {
	w.qmu.Lock()
	if len(w.q) >= max {
		w.qmu.Unlock()
		return false
	}
	w.q = append(w.q, it)
	w.qmu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

// Err is why the watcher ended (after Done).
func (w *Watcher) Err() error { return w.err }

// Progress returns a revision up to which every item of w has been
// queued: when nothing is pending after Progress returned r, nothing
// changed up to r.
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

// catchUpChunk is how many revisions one catch-up read covers at most
// (the read holds the state machine's read lock).
const catchUpChunk = 4096

// CatchUpQueueWait is how long a new catch-up waits for a read slot
// before it is refused with ErrTooManyCatchUps.
const CatchUpQueueWait = 250 * time.Millisecond

// Watch registers a watcher of f's events that filt selects, after
// revision after. The revisions between after and the tail's position
// are read from history and passed to send (in order; send's error ends
// the catch-up) before the watcher joins the tail; an Item with Moved
// ends it too (Watch returns it with a nil watcher). Errors: ErrTooManyNode,
// ErrTooManyCatchUps, *fsm.CompactedError, the FSM's.
func (h *Hub) Watch(ctx context.Context, f *fsm.FSM, filt Filter, after uint64, send func(Item) error) (*Watcher, *Item, error) {
	return h.WatchReserving(ctx, f, filt, after, send, nil)
}

// Reserve waits until the caller may hold n more bytes of watch messages,
// and returns what gives them back (api's per-identity and node budget).
type Reserve func(ctx context.Context, n int) (release func(), err error)

// WatchReserving is Watch with a memory budget: each catch-up page (up to
// Limits.CatchUpBytes, or one larger revision) is reserved before its
// read slot is taken, and released once its items are sent, so catch-ups
// waiting for a slow client hold no page. nil reserve: no budget.
func (h *Hub) WatchReserving(ctx context.Context, f *fsm.FSM, filt Filter, after uint64, send func(Item) error, reserve Reserve) (*Watcher, *Item, error) {
	h.mu.Lock()
	if h.count >= h.limits.MaxWatchers {
		h.mu.Unlock()
		return nil, nil, fmt.Errorf("%w (%d)", ErrTooManyNode, h.limits.MaxWatchers)
	}
	h.count++
	h.mu.Unlock()
	w := &Watcher{ready: make(chan struct{}, 1), filter: filt, done: make(chan struct{}), h: h}
	ok, started := false, false
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
		for pos < upTo {
			// Its page's bytes first (a wait that holds no read slot).
			release := func() {}
			if reserve != nil {
				var err error
				if release, err = reserve(ctx, h.limits.CatchUpBytes); err != nil {
					return nil, nil, err
				}
			}
			// A read slot: a new catch-up waits a little for one, then is
			// refused; one under way waits its turn.
			wait := ctx
			if !started {
				var cancel context.CancelFunc
				wait, cancel = context.WithTimeout(ctx, CatchUpQueueWait)
				defer cancel()
			}
			select {
			case h.reads <- struct{}{}:
			case <-wait.Done():
				release()
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				return nil, nil, fmt.Errorf("%w (%d)", ErrTooManyCatchUps, h.limits.MaxCatchUps)
			}
			started = true
			items, next, moved, err := h.readSelected(f, filt, pos, upTo)
			<-h.reads
			if err != nil {
				release()
				return nil, nil, err
			}
			// Sent outside the read: a client slow to take them holds
			// no lock of the state machine.
			for _, it := range items {
				if err := send(it); err != nil {
					release()
					return nil, nil, err
				}
			}
			release()
			if moved != nil {
				return nil, moved, nil
			}
			pos = next
		}
	}
}

// readSelected reads the history of f in (pos, upTo] and returns the items
// filt selects, up to about limits.CatchUpBytes of them: next is the
// revision read up to (upTo, or less when the bound stopped the read);
// moved is the freeze of filt's slot, which ends the read.
func (h *Hub) readSelected(f *fsm.FSM, filt Filter, pos, upTo uint64) (items []Item, next uint64, moved *Item, err error) {
	next = upTo
	size := 0
	sel := func(rk, key []byte) bool {
		return bytes.Equal(rk, filt.RoutingKey) && bytes.HasPrefix(key, filt.Prefix)
	}
	err = f.ReadHistorySelected(pos, upTo, sel, func(rev uint64, evs []fsm.Event) error {
		m, frozen := filt.Match(evs)
		if frozen != nil {
			moved = &Item{Revision: rev, Events: m, Moved: frozen}
			return errStop
		}
		if len(m) == 0 {
			return nil
		}
		items = append(items, Item{Revision: rev, Events: m})
		for _, e := range m {
			size += len(e.Key) + len(e.Value)
		}
		if size >= h.limits.CatchUpBytes {
			next = rev
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if h.afterCatchUpRead != nil {
		h.afterCatchUpRead(size)
	}
	return items, next, moved, err
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
	if !w.push(it, t.h.limits.Buffer) {
		w.cancel(ErrSlow)
		return
	}
	if it.Moved != nil {
		// Nothing of the slot follows; the watcher drains C then ends.
		w.after = ^uint64(0)
	}
}
