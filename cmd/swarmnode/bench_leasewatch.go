package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/swarmkv/swarmkv/client"
)

// The lease-keepalive and watch workloads of bench (docs/performance-log.md,
// "Leases and watches"). They follow etcd's benchmark tool (tools/benchmark
// lease-keepalive, watch and watch-latency) closely enough to set the
// figures side by side: see the doc for what differs.

// inParallel runs fill(i) for i in 0..n-1 on up to 64 goroutines, over the
// clients in turn; the first error stops it.
func (c benchConfig) inParallel(ctx context.Context, cls []*client.Client, n int, fill func(ctx context.Context, cl *client.Client, i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := range min(c.clients, 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := cls[w%len(cls)]
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				octx, cancel := context.WithTimeout(ctx, c.opTimeout)
				err := fill(octx, cl, i)
				cancel()
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("item %d: %w", i, err) })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// grantLeases grants c.leases leases of c.leaseTTL over the routing keys
// (a grant of unknown outcome is asked again: the lease it may have made
// expires by itself).
func (c benchConfig) grantLeases(ctx context.Context, cls []*client.Client, stderr io.Writer) ([]client.LeaseID, error) {
	fmt.Fprintf(stderr, "granting %d leases of %v\n", c.leases, c.leaseTTL)
	ids := make([]client.LeaseID, c.leases)
	err := c.inParallel(ctx, cls, c.leases, func(ctx context.Context, cl *client.Client, i int) error {
		rk, _ := c.keyOf(i)
		for {
			id, err := cl.Leases().Grant(ctx, rk, c.leaseTTL)
			if errors.Is(err, client.ErrOutcomeUnknown) && ctx.Err() == nil {
				continue
			}
			ids[i] = id
			return err
		}
	})
	if err != nil {
		return nil, fmt.Errorf("granting leases: %w", err)
	}
	return ids, nil
}

// revokeLeases revokes the bench's leases (so that their expiry does not
// load the next run), whatever ctx says.
func (c benchConfig) revokeLeases(ctx context.Context, cls []*client.Client, ids []client.LeaseID, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := c.inParallel(ctx, cls, len(ids), func(ctx context.Context, cl *client.Client, i int) error {
		_, err := cl.Leases().Revoke(ctx, ids[i])
		if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrOutcomeUnknown) {
			return nil
		}
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "revoking the leases: %v (they expire %v after their last keep-alive)\n", err, c.leaseTTL)
	}
}

// keepAliveOp renews the leases in turn: operation seq keeps lease seq
// mod n alive.
func (c benchConfig) keepAliveOp(ids []client.LeaseID) op {
	return func(ctx context.Context, cl *client.Client, _ *mrand.Rand, seq int64) error {
		id := ids[int(seq-1)%len(ids)]
		var err error
		if c.kaCall == "once" {
			_, err = cl.Leases().KeepAliveOnce(ctx, id)
		} else {
			_, err = cl.Leases().KeepAliveOnceStream(ctx, id)
		}
		return err
	}
}

// benchWatchers are the watch workload's watchers: watcher i follows
// routing key i mod routingKeys under the run's key tag, from now.
type benchWatchers struct {
	n       int
	perKey  []int64 // watchers of routing key i
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	events  atomic.Int64
	last    atomic.Int64 // UnixNano of the last event received
	want    atomic.Int64 // events the acknowledged puts made
	hists   []*hdrhistogram.Histogram
	errMu   sync.Mutex
	errText string
}

// startWatchers starts c.watchers watchers over the clients and waits
// until every one has started (its empty listing of the run's keys came).
func (c benchConfig) startWatchers(ctx context.Context, cls []*client.Client, stderr io.Writer) (*benchWatchers, error) {
	ws := &benchWatchers{n: c.watchers, perKey: make([]int64, c.routingKeys)}
	wctx, cancel := context.WithCancel(ctx)
	ws.cancel = cancel
	if c.watchers == 0 {
		return ws, nil
	}
	fmt.Fprintf(stderr, "starting %d watchers over %d routing keys\n", c.watchers, min(c.watchers, c.routingKeys))
	ready := make(chan error, c.watchers)
	ws.hists = make([]*hdrhistogram.Histogram, c.watchers)
	for i := range c.watchers {
		rk, _ := c.keyOf(i % c.routingKeys)
		ws.perKey[i%c.routingKeys]++
		h := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
		ws.hists[i] = h
		ch := cls[i%len(cls)].ListWatch(wctx, rk, client.WithPrefix(c.keyTag))
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			ws.follow(ch, h, ready)
		}()
	}
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	for range c.watchers {
		select {
		case err := <-ready:
			if err != nil {
				ws.stop()
				return nil, fmt.Errorf("starting the watchers: %w", err)
			}
		case <-t.C:
			ws.stop()
			return nil, errors.New("starting the watchers: not all started within a minute")
		case <-ctx.Done():
			ws.stop()
			return nil, ctx.Err()
		}
	}
	return ws, nil
}

// follow counts the events of one watch into h, after its listing (ready
// is told when it ends, or the error that ended the watch first).
func (ws *benchWatchers) follow(ch <-chan client.WatchResponse, h *hdrhistogram.Histogram, ready chan<- error) {
	started := false
	for r := range ch {
		if r.Err != nil {
			if !started {
				ready <- r.Err
				return
			}
			ws.errMu.Lock()
			if ws.errText == "" {
				ws.errText = "watch: " + r.Err.Error()
			}
			ws.errMu.Unlock()
			return
		}
		if r.Listing {
			if r.ListDone && !started {
				started = true
				ready <- nil
			}
			continue
		}
		if len(r.Events) == 0 {
			continue
		}
		now := time.Now()
		for _, e := range r.Events {
			if len(e.Value) >= 8 {
				sent := int64(binary.BigEndian.Uint64(e.Value))
				h.RecordValue(max(1, (now.UnixNano()-sent)/1000))
			}
		}
		ws.events.Add(int64(len(r.Events)))
		ws.last.Store(now.UnixNano())
	}
	if !started {
		ready <- errors.New("watch ended before it started")
	}
}

// putOp is the put workload on the watched keys; each value starts with
// the time it was sent (the watchers' delivery delay), and each put
// acknowledged counts the events it makes.
func (ws *benchWatchers) putOp(c benchConfig, valueSize int) op {
	return func(ctx context.Context, cl *client.Client, rng *mrand.Rand, _ int64) error {
		i := rng.IntN(c.keySpace)
		rk, k := c.keyOf(i)
		v := make([]byte, max(valueSize, 8))
		binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
		err := cl.Put(ctx, rk, k, v)
		if err == nil {
			ws.want.Add(ws.perKey[i%c.routingKeys])
		}
		return err
	}
}

// finish waits (up to 10 s) for the events of the acknowledged puts, then
// returns what the watchers saw; start is when the puts started.
func (ws *benchWatchers) finish(ctx context.Context, start time.Time) *BenchResult {
	res := &BenchResult{Watchers: ws.n}
	if ws.n == 0 {
		return res
	}
	deadline := time.Now().Add(10 * time.Second)
	for ws.events.Load() < ws.want.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	ws.stop()
	res.Events, res.EventsExpected = ws.events.Load(), ws.want.Load()
	if last := ws.last.Load(); last > 0 && res.Events > 0 {
		res.EventsPerSec = float64(res.Events) / time.Unix(0, last).Sub(start).Seconds()
	}
	h := ws.hists[0]
	for _, o := range ws.hists[1:] {
		h.Merge(o)
	}
	res.EventMeanMs, res.EventP99Ms = h.Mean()/1000, float64(h.ValueAtQuantile(99))/1000
	ws.errMu.Lock()
	res.FirstError = ws.errText
	ws.errMu.Unlock()
	return res
}

// stop ends the watches and waits for their goroutines (idempotent).
func (ws *benchWatchers) stop() {
	ws.cancel()
	ws.wg.Wait()
}
