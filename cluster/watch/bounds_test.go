package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
)

// allocatedBy returns the bytes the heap allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHubIdleWatcherSmall: a watcher that has received nothing holds no
// buffer (issue 37 item 9: each watcher allocated a channel of 1,024
// items at once, about 600 MB for a node's 10,000).
func TestHubIdleWatcherSmall(t *testing.T) {
	tf := newFSM(t)
	tf.put("a", "k", "v")
	h := NewHub(Limits{MaxWatchers: 1000, Buffer: 1024})
	const n = 200
	ws := make([]*Watcher, 0, n)
	allocated := allocatedBy(func() {
		for i := range n {
			w, _, err := h.Watch(context.Background(), tf.f, filterOf(fmt.Sprint("u", i)), tf.index, nil)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
	})
	for _, w := range ws {
		w.Close()
	}
	if per := allocated / n; per > 4096 {
		t.Fatalf("an idle watcher allocated %d bytes", per)
	}
	t.Logf("%d bytes per idle watcher", allocated/n)
}

// TestHubCatchUpSkipsOthers: a watch from revision 0 over a history of
// another routing key's large values does not copy them (issue 37 item 8).
//
// The history stays in the memtable (a large one): reading blocks from
// sstables allocates in Pebble whatever the filter, which is not what
// this measures.
func TestHubCatchUpSkipsOthers(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Shard: 1, Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), MemTableSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	tf := &testFSM{t: t, f: f}
	big := string(bytes.Repeat([]byte{'v'}, 1<<20))
	for i := range 16 {
		tf.put("other", fmt.Sprint("k", i), big)
	}
	tf.put("me", "k", "1")
	h := NewHub(Limits{})
	var got []Item
	var w *Watcher
	allocated := allocatedBy(func() {
		w, _, err = h.Watch(context.Background(), tf.f, filterOf("me"), 0, func(it Item) error {
			got = append(got, it)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	w.Close()
	if len(got) != 1 || len(got[0].Events) != 1 || string(got[0].Events[0].Value) != "1" {
		t.Fatalf("caught up %+v", got)
	}
	if allocated > 4<<20 {
		t.Fatalf("a catch-up over 16 MiB of other keys' values allocated %d bytes", allocated)
	}
	t.Logf("catch-up allocated %d bytes", allocated)
}

// TestHubCatchUpBoundedBytes: a catch-up over a large history of its own
// key holds at most CatchUpBytes (plus one revision) between reading and
// sending, and still delivers every revision once, in order.
func TestHubCatchUpBoundedBytes(t *testing.T) {
	tf := newFSM(t)
	val := bytes.Repeat([]byte{'v'}, 100<<10)
	revs := map[string]uint64{}
	for i := range 40 {
		v := append([]byte(fmt.Sprint(i)), 0)
		revs[fmt.Sprint(i)] = tf.put("me", "k", string(append(v[:len(v)-1:len(v)-1], val...)))
	}
	h := NewHub(Limits{CatchUpBytes: 256 << 10})
	peak, reads := 0, 0
	h.afterCatchUpRead = func(n int) { peak, reads = max(peak, n), reads+1 }
	var got []Item
	w, _, err := h.Watch(context.Background(), tf.f, filterOf("me"), 0, func(it Item) error {
		got = append(got, it)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if peak > 256<<10+len(val)+64 || reads < 10 {
		t.Fatalf("peak %d bytes held in %d reads", peak, reads)
	}
	for i, it := range got {
		if len(it.Events) != 1 || !bytes.HasPrefix(it.Events[0].Value, []byte(fmt.Sprint(i))) || it.Revision != revs[fmt.Sprint(i)] {
			t.Fatalf("item %d: %d events at %d", i, len(it.Events), it.Revision)
		}
	}
	if len(got) != 40 {
		t.Fatalf("%d items, want 40", len(got))
	}
}

// TestHubCatchUpCap: while MaxCatchUps catch-ups read history, a new one
// is refused (ErrTooManyCatchUps) after a short wait and registers
// nothing; once the reads end, a catch-up goes through.
func TestHubCatchUpCap(t *testing.T) {
	tf := newFSM(t)
	for i := range 10 {
		tf.put("a", "k", fmt.Sprint(i))
	}
	h := NewHub(Limits{MaxCatchUps: 1})
	inRead, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.afterCatchUpRead = func(int) {
		once.Do(func() {
			close(inRead)
			<-release
		})
	}
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		w, _, err := h.Watch(ctx, tf.f, filterOf("a"), 0, func(Item) error { return nil })
		if err == nil {
			w.Close()
		}
		first <- err
	}()
	<-inRead
	start := time.Now()
	_, _, err := h.Watch(ctx, tf.f, filterOf("a"), 0, func(Item) error { return nil })
	if !errors.Is(err, ErrTooManyCatchUps) {
		t.Fatalf("second catch-up: %v, want ErrTooManyCatchUps", err)
	}
	if waited := time.Since(start); waited < CatchUpQueueWait {
		t.Fatalf("refused after %v, before the queue wait", waited)
	}
	// A watcher that needs no catch-up is not held back.
	w, _, err := h.Watch(ctx, tf.f, filterOf("b"), tf.index, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := h.Watchers(); n != 0 {
		t.Fatalf("%d watchers counted after all closed", n)
	}
	w, _, err = h.Watch(ctx, tf.f, filterOf("a"), 0, func(Item) error { return nil })
	if err != nil {
		t.Fatalf("catch-up after the reads ended: %v", err)
	}
	w.Close()
}

// TestHubReservesCatchUpPages: with a Reserve, each catch-up page is
// reserved before it is read and released once its items are sent, so a
// catch-up whose client stops taking items keeps its page's reservation
// and a second one of the same budget reads nothing until it is released
// (before, each catch-up held a page however many there were).
func TestHubReservesCatchUpPages(t *testing.T) {
	tf := newFSM(t)
	for i := range 20 {
		tf.put("me", "k", fmt.Sprint(i))
	}
	h := NewHub(Limits{CatchUpBytes: 1 << 10})
	var mu sync.Mutex
	reads := 0
	h.afterCatchUpRead = func(int) { mu.Lock(); reads++; mu.Unlock() }
	budget := make(chan struct{}, 1) // one page for the two catch-ups
	var reserved []int
	reserve := func(ctx context.Context, n int) (func(), error) {
		select {
		case budget <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		reserved = append(reserved, n)
		mu.Unlock()
		var once sync.Once
		return func() { once.Do(func() { <-budget }) }, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, unstick := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := make(chan error, 1)
	go func() {
		w, _, err := h.WatchReserving(ctx, tf.f, filterOf("me"), 0, func(Item) error {
			once.Do(func() { close(stuck); <-unstick }) // a client that stops reading
			return nil
		}, reserve)
		if err == nil {
			w.Close()
		}
		first <- err
	}()
	<-stuck
	mu.Lock()
	r0 := reads
	mu.Unlock()
	second := make(chan error, 1)
	go func() {
		w, _, err := h.WatchReserving(ctx, tf.f, filterOf("me"), 0, func(Item) error { return nil }, reserve)
		if err == nil {
			w.Close()
		}
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("the second catch-up ended (%v) while the first held the budget", err)
	case <-time.After(300 * time.Millisecond):
	}
	mu.Lock()
	if reads != r0 {
		t.Fatalf("the second catch-up read %d pages without a reservation", reads-r0)
	}
	mu.Unlock()
	close(unstick)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reserved) < 2 || reads != len(reserved) {
		t.Fatalf("%d reservations for %d page reads, want one each", len(reserved), reads)
	}
	for _, n := range reserved {
		if n != 1<<10 {
			t.Fatalf("reserved %d bytes, want the page bound %d", n, 1<<10)
		}
	}
}
