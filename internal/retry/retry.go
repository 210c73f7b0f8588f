// Package retry is swarmkv's one retry helper: exponential backoff with
// jitter (github.com/cenkalti/backoff/v5) bounded by the caller's context,
// an optional overall time and attempt bound, and the caller's rule of
// which errors are worth another attempt. Every retry loop of the node and
// the client goes through it, so the delays are drawn one way everywhere.
//
// It owns no state beyond one loop and imports only the standard library
// and backoff; any package may import it.
//
// Usage:
//
//	err := retry.Do(ctx, retry.Options{
//		Initial: 50 * time.Millisecond, Max: time.Second, MaxElapsed: 15 * time.Second,
//		Retryable: func(err error) bool { return status.Code(err) == codes.Unavailable },
//	}, func() error { return call(ctx) })
//
// A loop that decides per attempt whether to wait at all (client.CallShard
// follows a leader hint at once) takes its delays from Options.Backoff.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Jitter is the randomization factor of every delay: a nominal delay d is
// drawn uniformly from [d*(1-Jitter), d*(1+Jitter)], so that callers that
// failed together do not come back together.
const Jitter = 0.5

// Options say how Do retries. The nominal delay before attempt i+1 is
// min(Initial*2^(i-1), Max), drawn with Jitter.
type Options struct {
	// Initial is the nominal delay after the first failed attempt.
	Initial time.Duration
	// Max caps the nominal delay (0: Initial, a fixed delay).
	Max time.Duration
	// MaxElapsed, if set, bounds the whole loop: no wait starts that would
	// end more than MaxElapsed after the first attempt started.
	MaxElapsed time.Duration
	// MaxAttempts, if set, bounds the number of attempts.
	MaxAttempts uint
	// Retryable says which errors are worth another attempt (nil: every
	// error). Do returns the first error it refuses.
	Retryable func(error) bool
	// Notify, if set, is called before each wait with the attempt's error
	// and the delay drawn (for logging).
	Notify func(err error, next time.Duration)
}

// Backoff is a sequence of delays drawn by Options; not safe for
// concurrent use.
type Backoff struct {
	b backoff.ExponentialBackOff
}

// Backoff returns a fresh sequence of o's delays.
func (o Options) Backoff() *Backoff {
	b := &Backoff{b: backoff.ExponentialBackOff{
		InitialInterval:     o.Initial,
		RandomizationFactor: Jitter,
		Multiplier:          2,
		MaxInterval:         max(o.Max, o.Initial),
	}}
	b.b.Reset()
	return b
}

// Next returns the next delay.
func (b *Backoff) Next() time.Duration { return b.b.NextBackOff() }

// Wait sleeps for the next delay; it returns false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Do runs op until it returns nil, returns an error o.Retryable refuses,
// or a bound is reached: ctx ends, MaxElapsed or MaxAttempts. op runs at
// least once. Do returns nil or op's last error as it was (never ctx's
// error in its place: the caller's classification of op's errors, a gRPC
// status for instance, stays intact).
func Do(ctx context.Context, o Options, op func() error) error {
	var last error
	opts := []backoff.RetryOption{
		backoff.WithBackOff(&o.Backoff().b),
		backoff.WithMaxElapsedTime(o.MaxElapsed), // 0: no bound
		backoff.WithMaxTries(o.MaxAttempts),      // 0: no bound
	}
	if o.Notify != nil {
		opts = append(opts, backoff.WithNotify(backoff.Notify(o.Notify)))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = op()
		if last != nil && o.Retryable != nil && !o.Retryable(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, opts...)
	if err != nil && last != nil {
		return last // backoff.Retry answers ctx's cause when ctx ended
	}
	return err
}
