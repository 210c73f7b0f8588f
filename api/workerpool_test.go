package api

import (
	"sync"
	"testing"
	"time"
)

// TestWorkerPoolShrinksUnderLoad: after a burst grew the pool to 100
// workers, a steady load that one worker can carry soon leaves a few
// workers, not 100: the most recently idle worker takes the next call, so
// the others time out. (A FIFO hand-off kept all 100 alive: each got a
// call before its idle time ran out.)
func TestWorkerPoolShrinksUnderLoad(t *testing.T) {
	const burst, idle = 100, 100 * time.Millisecond
	w := newWorkerPool(idle)
	defer w.close()
	// The burst: 100 calls at once, each held until all started, so 100
	// workers run them. The calls are released on every way out of the
	// test, or close would wait for them forever.
	var started, finished sync.WaitGroup
	started.Add(burst)
	finished.Add(burst)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll()
	for range burst {
		w.submit(func() {
			defer finished.Done()
			started.Done()
			<-release
		})
	}
	started.Wait()
	if n := w.workers.Load(); n != burst {
		t.Fatalf("%d workers run a burst of %d concurrent calls", n, burst)
	}
	releaseAll()
	finished.Wait()
	// The steady load: one call at a time, back to back, until the pool
	// is down to a few workers (it takes about one idle time), or 5 s.
	var calls int
	done := make(chan struct{}, 1)
	start := time.Now()
	for n := w.workers.Load(); n > 3; n = w.workers.Load() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d workers left after %d calls one at a time over %v, want at most 3", n, calls, time.Since(start))
		}
		for range 1000 {
			w.submit(func() { done <- struct{}{} })
			<-done
			calls++
		}
	}
}

// TestWorkerPoolClose: close ends the idle workers and waits for them; a
// call submitted after close runs on the caller's goroutine.
func TestWorkerPoolClose(t *testing.T) {
	w := newWorkerPool(time.Hour)
	var wg sync.WaitGroup
	wg.Add(10)
	for range 10 {
		w.submit(wg.Done)
	}
	wg.Wait()
	w.close() // returns only when the 10 idle workers exited (goleak checks)
	ran := false
	w.submit(func() { ran = true })
	if !ran {
		t.Fatal("a call after close did not run on the caller's goroutine")
	}
	w.close() // idempotent
}
