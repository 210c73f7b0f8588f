package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// keepAliveStreamsStarted sums the KeepAliveStream streams the nodes have
// started (grpc_server_started_total of their /metrics).
func (tc *testCluster) keepAliveStreamsStarted(t *testing.T) int {
	t.Helper()
	n := 0
	for _, node := range tc.nodes {
		resp, err := http.Get("http://" + node.Addrs().HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "grpc_server_started_total{") && strings.Contains(line, `grpc_method="KeepAliveStream"`) {
				v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				n += int(v)
			}
		}
		resp.Body.Close()
	}
	return n
}

// inParallel runs f(i) for i in 0..n-1 on workers goroutines.
func inParallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// TestLeaseKeepAliveMultiplexed: one client keeps 3,000 leases alive (more
// than the 1,024 streams a node serves on one connection; 1,200 under the
// race detector) over one
// keep-alive stream per shard: every lease is renewed in the background,
// two KeepAlives of one lease share it, and the nodes see a handful of
// streams, not one per lease. A KeepAliveStream answers many keep-alives
// sent without waiting, each naming its lease.
func TestLeaseKeepAliveMultiplexed(t *testing.T) {
	leases := 3000
	if raceEnabled {
		leases = 1200 // the grants, one commit each, are slow under the race detector
	}
	tc := newTestCluster(t, 3, 2, func(c *Config) {
		leaseTweak(c)
		c.HTTPAddr = freePort(t)
		// Leaderships that hold on a loaded machine under the race
		// detector: each leader change opens streams anew (the count
		// below is about leases, not elections).
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := tc.client()
	ls := c.Leases()
	// Renewed every 10/3 s: 900 keep-alives a second. Each lease is kept
	// alive as soon as it is granted (granting 3,000 takes longer than a
	// TTL under the race detector).
	ttl := 10 * time.Second
	ids := make([]client.LeaseID, leases)
	kas := make([]*client.KeepAlive, leases)
	defer func() {
		for _, ka := range kas {
			if ka != nil {
				ka.Stop()
			}
		}
	}()
	before := tc.keepAliveStreamsStarted(t)
	var errMu sync.Mutex
	var startErr error
	inParallel(leases, 32, func(i int) {
		fail := func(err error) {
			errMu.Lock()
			startErr = err
			errMu.Unlock()
		}
		for {
			id, err := ls.Grant(ctx, fmt.Appendf(nil, "mux-%d", i), ttl)
			if errors.Is(err, client.ErrOutcomeUnknown) && ctx.Err() == nil {
				continue // the lease it may have made expires by itself
			}
			if err != nil {
				fail(fmt.Errorf("grant %d: %w", i, err))
				return
			}
			ids[i] = id
			break
		}
		ka, err := ls.KeepAlive(ctx, ids[i])
		if err != nil {
			fail(fmt.Errorf("KeepAlive of lease %d (%s): %w", i, ids[i], err))
			return
		}
		kas[i] = ka
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
	twin, err := ls.KeepAlive(ctx, ids[0]) // a second KeepAlive of the same lease
	if err != nil {
		t.Fatal(err)
	}
	kas = append(kas, twin)

	// Every KeepAlive renews in the background: each has a renewal sent
	// after all had started.
	started := time.Now()
	waitFor(t, 60*time.Second, "every lease renewed in the background", func() error {
		late := 0
		for i, ka := range kas {
			if err := ka.Err(); err != nil {
				t.Fatalf("KeepAlive %d stopped: %v", i, err)
			}
			if _, renewed := ka.TTL(); !renewed.After(started) {
				late++
			}
		}
		if late > 0 {
			return fmt.Errorf("%d of %d not renewed since %v", late, len(kas), time.Since(started))
		}
		return nil
	})
	for i, ka := range kas {
		if got, _ := ka.TTL(); got != ttl {
			t.Fatalf("KeepAlive %d: TTL %v, want %v", i, got, ttl)
		}
	}
	// One stream per shard, reopened after a leader change (the
	// reconciler may move leaderships meanwhile): a handful, not one per
	// lease.
	streams := tc.keepAliveStreamsStarted(t) - before
	if streams < 1 || streams > 16 {
		t.Fatalf("%d keep-alive streams started for %d leases, want 1..16", streams, leases)
	}
	if all, err := ls.List(ctx); err != nil || len(all) != leases {
		t.Fatalf("List: %d leases, %v; want %d", len(all), err, leases)
	}

	// The server answers keep-alives sent without waiting, each naming
	// its lease (asked again if leadership moved meanwhile).
	sid := c.ShardOf([]byte("mux-0"))
	smap := tc.nodes[0].smapNow()
	var ofShard []uint64
	for _, id := range ids {
		if smap.ShardOfSlot(shard.Slot(keys.LeaseSlot(uint64(id)))) == sid {
			ofShard = append(ofShard, uint64(id))
		}
	}
	waitFor(t, 30*time.Second, "keep-alives answered on one raw stream", func() error {
		return rawKeepAlives(ctx, t, tc.nodes[tc.leaderOf(sid)].Addrs().GRPCAddr, ofShard, ttl)
	})
	t.Logf("%d leases kept alive over %d streams; %d renewed at once on one raw stream", leases, streams, len(ofShard))
}

// rawKeepAlives sends a keep-alive of each of ids on one KeepAliveStream
// to addr without waiting for answers, and checks each is answered once
// with ttl (t.Fatal); a stream error is returned.
func rawKeepAlives(ctx context.Context, t *testing.T, addr string, ids []uint64, ttl time.Duration) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := rpc.NewLeaseClient(cc).KeepAliveStream(sctx)
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() {
		for _, id := range ids {
			if err := st.Send(&rpc.LeaseKeepAliveRequest{Id: id}); err != nil {
				sent <- err
				return
			}
		}
		sent <- st.CloseSend()
	}()
	defer func() { cancel(); <-sent }()
	answered := map[uint64]int{}
	for range ids {
		resp, err := st.Recv()
		if err != nil {
			return fmt.Errorf("after %d answers: %w", len(answered), err)
		}
		if resp.GetTtlMs() != ttl.Milliseconds() {
			t.Fatalf("keep-alive of %016x: ttl %d ms", resp.GetId(), resp.GetTtlMs())
		}
		answered[resp.GetId()]++
	}
	if resp, err := st.Recv(); err == nil {
		t.Fatalf("an answer more than asked: %v", resp)
	}
	for _, id := range ids {
		if answered[id] != 1 {
			t.Fatalf("lease %016x answered %d times", id, answered[id])
		}
	}
	return nil
}
