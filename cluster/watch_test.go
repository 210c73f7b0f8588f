package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// writeOnce writes key=key under rk exactly once: a batch guarded by the
// key's absence, sent again while its outcome is unknown (a retry of one
// that applied fails its guard and writes nothing).
func writeOnce(ctx context.Context, c *client.Client, rk []byte, key string) error {
	for {
		_, err := c.Batch(ctx, rk, []client.Guard{{Kind: client.KeyAbsent, Key: []byte(key)}},
			[]client.Op{{Key: []byte(key), Value: []byte(key)}})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
}

// watchCollector gathers a watch's events and checks they are the keys
// w00000.. each exactly once, in order, with revisions that never go down.
type watchCollector struct {
	mu       sync.Mutex
	keys     []string
	lastRev  uint64
	err      error
	follower bool
	shard    shard.ID
	shards   int // shard changes seen
	// reconnects is the client's count of streams reopened.
	reconnects int
}

func (wc *watchCollector) run(ch <-chan client.WatchResponse) {
	for r := range ch {
		wc.mu.Lock()
		if r.Err != nil && wc.err == nil {
			wc.err = r.Err
		}
		if r.Shard != wc.shard {
			wc.shard, wc.lastRev, wc.shards = r.Shard, 0, wc.shards+1 // revisions are per shard
		}
		if r.Revision < wc.lastRev && wc.err == nil {
			wc.err = fmt.Errorf("revision %d after %d", r.Revision, wc.lastRev)
		}
		wc.lastRev = max(wc.lastRev, r.Revision)
		wc.follower = wc.follower || r.Follower
		wc.reconnects = max(wc.reconnects, r.Reconnects)
		for _, e := range r.Events {
			want := fmt.Sprintf("w%05d", len(wc.keys))
			if (string(e.Key) != want || e.Type != client.EventPut) && wc.err == nil {
				wc.err = fmt.Errorf("event %d: %s %q, want put %q", len(wc.keys), e.Type, e.Key, want)
			}
			wc.keys = append(wc.keys, string(e.Key))
		}
		wc.mu.Unlock()
	}
}

func (wc *watchCollector) count() (int, error) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return len(wc.keys), wc.err
}

// TestWatchExactlyOnce: watchers (the client's, reconnecting; and one
// served by a follower) see every write exactly once, in order, while a
// writer runs through a leadership transfer and a restart of the leader.
func TestWatchExactlyOnce(t *testing.T) {
	tc := newTestCluster(t, 3, 1, nil)
	c := tc.client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rk := []byte("alice")
	var wcs []*watchCollector
	for range 3 {
		wc := &watchCollector{}
		go wc.run(c.Watch(ctx, rk, client.WithProgress(100*time.Millisecond)))
		wcs = append(wcs, wc)
	}
	// A watch on a follower, straight through gRPC.
	li, _ := tc.leaderReplica(0)
	fi := (li + 1) % 3
	cc, err := grpc.NewClient(tc.nodes[fi].Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	fs, err := rpc.NewWatchClient(cc).Watch(ctx, &rpc.WatchRequest{RoutingKey: rk})
	if err != nil {
		t.Fatal(err)
	}
	first, err := fs.Recv()
	if err != nil || first.Created == nil || !first.Created.Follower {
		t.Fatalf("follower watch: %+v %v", first, err)
	}
	var fkeys []string
	fdone := make(chan error, 1)

	const n = 300
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	for i := range n {
		switch i {
		case 100:
			to := tc.cfgs[(tc.leaderOf(0)+1)%3].ID
			waitFor(t, 20*time.Second, "leadership moved", func() error {
				l := tc.leaderOf(0)
				if l >= 0 && tc.cfgs[l].ID == to {
					return nil
				}
				_, err := tc.nodes[fi].TransferLeader(wctx, "0", to)
				return err
			})
		case 200:
			// The node the client's watches started on (the first leader).
			tc.stop(li)
			tc.start(li)
		}
		if err := writeOnce(wctx, c, rk, fmt.Sprintf("w%05d", i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	go func() {
		for len(fkeys) < n {
			m, err := fs.Recv()
			if err != nil {
				fdone <- err
				return
			}
			for _, e := range m.Events {
				fkeys = append(fkeys, string(e.Key))
			}
		}
		fdone <- nil
	}()
	for i, wc := range wcs {
		waitFor(t, 60*time.Second, fmt.Sprintf("watcher %d got every write", i), func() error {
			got, err := wc.count()
			if err != nil {
				t.Fatalf("watcher %d: %v", i, err)
			}
			if got < n {
				return fmt.Errorf("%d of %d", got, n)
			}
			return nil
		})
	}
	if err := <-fdone; err != nil {
		t.Fatalf("follower watch: %v", err)
	}
	for i, k := range fkeys {
		if k != fmt.Sprintf("w%05d", i) {
			t.Fatalf("follower watch event %d: %q", i, k)
		}
	}
	cancel()
	for i, wc := range wcs {
		if got, err := wc.count(); got != n || err != nil {
			t.Fatalf("watcher %d: %d events, %v", i, got, err)
		}
		// The node they started on was restarted: each watch reopened
		// its stream, and says so.
		wc.mu.Lock()
		reconnects := wc.reconnects
		wc.mu.Unlock()
		if reconnects == 0 {
			t.Errorf("watcher %d: Reconnects 0 after a restart of the node serving it", i)
		}
	}
}

// TestWatchCompactedListWatchAndCaps: a watch from a compacted revision
// gets the typed error; ListWatch lists, then follows; a connection over
// its watcher cap is refused with a clear error.
func TestWatchCompactedListWatchAndCaps(t *testing.T) {
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		c.HistoryRevisions = 10
		c.HistoryAge = -1
		c.HistoryCompactEvery = 50 * time.Millisecond
		c.MaxWatchersPerConn = 2
	})
	c := tc.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rk := []byte("bob")
	for i := range 40 {
		if err := writeOnce(ctx, c, rk, fmt.Sprintf("w%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, r := tc.leaderReplica(0)
	waitFor(t, 20*time.Second, "history compacted", func() error {
		if floor, _, _ := r.FSM().HistoryFloor(); floor < 20 {
			return fmt.Errorf("floor %d", floor)
		}
		return nil
	})
	wctx, wcancel := context.WithCancel(ctx)
	resp := <-c.Watch(wctx, rk, client.WithAfter(1))
	wcancel()
	var ce *client.CompactedError
	if !errors.As(resp.Err, &ce) || ce.Oldest < 20 || ce.Current < 40 {
		t.Fatalf("watch from 1: %+v", resp)
	}
	t.Logf("compacted answer: %v", resp.Err)

	lw := c.ListWatch(ctx, rk)
	listed := 0
	for r := range lw {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		listed += len(r.Events)
		if r.ListDone {
			break
		}
	}
	if listed != 40 {
		t.Fatalf("listed %d keys, want 40", listed)
	}
	if err := writeOnce(ctx, c, rk, "w00040"); err != nil {
		t.Fatal(err)
	}
	for r := range lw {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Events) == 1 && string(r.Events[0].Key) == "w00040" {
			break
		}
		if len(r.Events) > 0 {
			t.Fatalf("unexpected events %+v", r.Events)
		}
	}
	// Two watchers on this connection (the ListWatch and this one): the
	// third is refused.
	w2 := c.Watch(ctx, rk, client.WithAfter(ce.Current), client.WithProgress(50*time.Millisecond))
	if r := <-w2; r.Err != nil || !r.Progress && len(r.Events) == 0 {
		t.Fatalf("second watcher: %+v", r)
	}
	r3 := <-c.Watch(ctx, rk, client.WithAfter(ce.Current))
	if status.Code(errors.Unwrap(r3.Err)) != codes.ResourceExhausted && !isExhausted(r3.Err) {
		t.Fatalf("third watcher: %+v", r3)
	}
	t.Logf("cap answer: %v", r3.Err)
}

func isExhausted(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if status.Code(e) == codes.ResourceExhausted {
			return true
		}
	}
	return err != nil && strings.Contains(err.Error(), "too many watchers")
}

// TestWatchFollowsSplit: a watch of a routing key whose slot a split
// moves ends on the source with the moved notice and continues on the new
// shard after its adoption: every write, before, during and after the
// split, is seen exactly once, in order.
func TestWatchFollowsSplit(t *testing.T) {
	tc := newTestCluster(t, 3, 1, nil)
	c := tc.client()
	ctx := ctxT(t, 2*time.Minute)
	var upper shard.SlotSet
	for s := 128; s < 256; s++ {
		upper.Add(shard.Slot(s))
	}
	rk, _ := rkInSlots(upper, true, 0)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc := &watchCollector{}
	go wc.run(c.Watch(wctx, rk, client.WithProgress(100*time.Millisecond)))
	const n = 150
	for i := range n {
		if i == 50 {
			if _, err := tc.nodes[0].SplitShard(ctx, 0, &upper); err != nil {
				t.Fatal(err)
			}
		}
		if err := writeOnce(ctx, c, rk, fmt.Sprintf("w%05d", i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	tc.waitMovesDone(ctx, 60*time.Second)
	waitFor(t, 30*time.Second, "the client's map gives the routing key to the new shard", func() error {
		if err := c.RefreshMap(ctx); err != nil {
			return err
		}
		if id := c.ShardOf(rk); id == 0 {
			return errors.New("still shard 0")
		}
		return nil
	})
	// Writes after the move, on the new shard.
	for i := n; i < n+20; i++ {
		if err := writeOnce(ctx, c, rk, fmt.Sprintf("w%05d", i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	waitFor(t, 60*time.Second, "the watcher got every write", func() error {
		got, err := wc.count()
		if err != nil {
			t.Fatal(err)
		}
		if got < n+20 {
			return fmt.Errorf("%d of %d", got, n+20)
		}
		return nil
	})
	cancel()
	if got, err := wc.count(); got != n+20 || err != nil {
		t.Fatalf("%d events, %v", got, err)
	}
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.shards < 1 || wc.shard == 0 {
		t.Fatalf("the watch did not move: %d shards seen, now on %d", wc.shards, wc.shard)
	}
}
