package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/internal/retry"
)

// KeepAlive keeps a lease alive in the background: Leases.KeepAlive (a
// keep-alive stream), Pools.StartRunner (a runner's heartbeats) and
// Registry.StartAgentHeartbeat (an agent's). It renews every third of the
// lease's TTL; a renewal that fails is retried with backoff until the
// lease's TTL from the last acknowledged renewal has passed (then Err is
// ErrLeaseLost: the lease may have expired), and one that finds the lease
// gone stops it at once (ErrLeaseNotFound). Its methods are safe for
// concurrent use.
type KeepAlive struct {
	id     LeaseID
	cancel context.CancelFunc
	done   chan struct{}
	revoke func(ctx context.Context) error

	mu struct {
		sync.Mutex
		err     error
		ttl     time.Duration
		renewed time.Time
	}
}

// renewBackoff draws the waits between failed renewals.
var renewBackoff = retry.Options{Initial: 50 * time.Millisecond, Max: time.Second}

// renewFunc renews a lease once: its TTL, and when the request that
// renewed it was sent (the lease lives at least TTL from then).
type renewFunc func(context.Context) (ttl time.Duration, sent time.Time, err error)

// renewCall is a renewFunc of a call that retries within itself: the
// time before the call is when it was sent, at the latest.
func renewCall(call func(context.Context) (time.Duration, error)) renewFunc {
	return func(ctx context.Context) (time.Duration, time.Time, error) {
		sent := time.Now()
		ttl, err := call(ctx)
		return ttl, sent, err
	}
}

// startKeepAlive renews once (its error is returned, nothing started),
// then keeps renewing on a goroutine until ctx ends, Stop, or the lease is
// lost; cleanup runs when it stops, on that goroutine.
func startKeepAlive(ctx context.Context, id LeaseID, renew renewFunc, cleanup func(), revoke func(context.Context) error) (*KeepAlive, error) {
	ttl, sent, err := renew(ctx)
	if err != nil {
		cleanup()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	k := &KeepAlive{id: id, cancel: cancel, done: make(chan struct{}), revoke: revoke}
	k.mu.ttl, k.mu.renewed = ttl, sent
	go func() {
		defer stop()
		defer close(k.done)
		defer cleanup()
		k.setErr(k.run(rctx, renew, sent, ttl))
	}()
	return k, nil
}

// run renews until ctx ends (nil) or the lease is lost (the error).
func (k *KeepAlive) run(ctx context.Context, renew renewFunc, last time.Time, ttl time.Duration) error {
	backoff := renewBackoff.Backoff()
	failing := false
	var lastErr error
	for {
		wait := time.Until(last.Add(ttl / 3))
		if failing {
			wait = backoff.Next()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		deadline := last.Add(ttl)
		if !time.Now().Before(deadline) {
			if lastErr == nil {
				lastErr = errors.New("no renewal answered in time")
			}
			return fmt.Errorf("%w: lease %s not renewed within its TTL %v: %w", ErrLeaseLost, k.id, ttl, lastErr)
		}
		actx, cancel := context.WithDeadline(ctx, deadline)
		got, sent, err := renew(actx)
		cancel()
		switch {
		case err == nil:
			last, ttl, failing = sent, got, false
			backoff = renewBackoff.Backoff()
			k.mu.Lock()
			k.mu.ttl, k.mu.renewed = got, sent
			k.mu.Unlock()
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidArgument):
			return leaseErr(k.id, err)
		default:
			failing, lastErr = true, err
		}
	}
}

func (k *KeepAlive) setErr(err error) {
	k.mu.Lock()
	k.mu.err = err
	k.mu.Unlock()
}

// Lease is the lease kept alive.
func (k *KeepAlive) Lease() LeaseID { return k.id }

// TTL is the lease's TTL as the last renewal answered, and when that
// renewal was sent: the lease does not expire before renewed + ttl.
func (k *KeepAlive) TTL() (ttl time.Duration, renewed time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.ttl, k.mu.renewed
}

// Done is closed once the KeepAlive has stopped.
func (k *KeepAlive) Done() <-chan struct{} { return k.done }

// Err says why the KeepAlive stopped: nil after Stop (or its context's
// end), ErrLeaseNotFound when the lease ended, ErrLeaseLost when it could
// not be renewed within its TTL. nil while it runs.
func (k *KeepAlive) Err() error {
	select {
	case <-k.done:
	default:
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.err
}

// Stop stops renewing and waits for the background goroutine to end; the
// lease then expires by itself, its TTL after the last renewal.
func (k *KeepAlive) Stop() {
	k.cancel()
	<-k.done
}

// Close stops renewing and revokes the lease: what it holds ends now (kv
// keys and runners deleted, agents failed). A lease already gone is not
// an error.
func (k *KeepAlive) Close(ctx context.Context) error {
	k.Stop()
	if err := k.revoke(ctx); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// startLeasedHeartbeat grants a lease of ttl on routing key rk and keeps it
// alive by calling beat (a heartbeat that attaches its record to the
// lease) every round: the runner and agent heartbeats of Pools.StartRunner
// and Registry.StartAgentHeartbeat. A failed first heartbeat revokes the
// lease and returns the error.
func (c *Client) startLeasedHeartbeat(ctx context.Context, rk []byte, ttl time.Duration, beat func(context.Context, LeaseID) error) (*KeepAlive, error) {
	ls := c.Leases()
	id, err := ls.Grant(ctx, rk, ttl)
	if err != nil {
		return nil, err
	}
	revoke := func(ctx context.Context) error { _, err := ls.Revoke(ctx, id); return err }
	renew := func(ctx context.Context) (time.Duration, error) {
		if err := beat(ctx, id); err != nil {
			return 0, err
		}
		return ttl, nil
	}
	k, err := startKeepAlive(ctx, id, renewCall(renew), func() {}, revoke)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = revoke(rctx)
		return nil, err
	}
	return k, nil
}
