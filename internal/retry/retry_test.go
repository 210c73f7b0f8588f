package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errAgain = errors.New("again")

func TestDoRetriesUntilSuccess(t *testing.T) {
	n := 0
	err := Do(context.Background(), Options{Initial: time.Millisecond}, func() error {
		if n++; n < 3 {
			return errAgain
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Do = %v after %d attempts, want nil after 3", err, n)
	}
}

func TestDoStopsAtRefusedError(t *testing.T) {
	errFinal := errors.New("final")
	n := 0
	err := Do(context.Background(), Options{Initial: time.Millisecond, Retryable: func(err error) bool { return err == errAgain }},
		func() error {
			if n++; n < 2 {
				return errAgain
			}
			return errFinal
		})
	if err != errFinal || n != 2 {
		t.Fatalf("Do = %v after %d attempts, want final after 2", err, n)
	}
}

func TestDoBounds(t *testing.T) {
	n := 0
	err := Do(context.Background(), Options{Initial: time.Millisecond, MaxAttempts: 4}, func() error { n++; return errAgain })
	if err != errAgain || n != 4 {
		t.Fatalf("MaxAttempts: Do = %v after %d attempts, want again after 4", err, n)
	}

	// MaxElapsed stops the loop: no wait starts that would end past the
	// bound, so Do returns near it. Timers fire late on a loaded machine,
	// so the check allows a scheduling slack (CI once saw 100.28ms); a loop
	// that ignored the bound would run on for its context's lifetime.
	start := time.Now()
	err = Do(context.Background(), Options{Initial: 10 * time.Millisecond, MaxElapsed: 100 * time.Millisecond}, func() error { return errAgain })
	if el := time.Since(start); err != errAgain || el > 100*time.Millisecond+time.Second {
		t.Fatalf("MaxElapsed: Do = %v after %v, want again soon after 100ms", err, el)
	}

	// The context ending returns op's last error, not the context's.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	n = 0
	err = Do(ctx, Options{Initial: 10 * time.Millisecond}, func() error { n++; return errAgain })
	if err != errAgain || n < 2 || ctx.Err() == nil {
		t.Fatalf("ctx: Do = %v after %d attempts, want again after several, at the deadline", err, n)
	}
}

func TestBackoffDelays(t *testing.T) {
	b := Options{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond}.Backoff()
	for i, nominal := range []time.Duration{100, 200, 400, 400, 400} {
		nominal *= time.Millisecond
		lo, hi := time.Duration(float64(nominal)*(1-Jitter)), time.Duration(float64(nominal)*(1+Jitter))+1
		if d := b.Next(); d < lo || d > hi {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, lo, hi)
		}
	}
	// Jitter: the delays are not all the same.
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[Options{Initial: time.Second}.Backoff().Next()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 first delays all equal: no jitter")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx) {
		t.Fatalf("Wait on an ended context = true")
	}
}
