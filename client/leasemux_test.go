package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// kaNode fakes a node leading the one shard of its map, with a Lease
// service whose KeepAliveStream answers lease id with ttlOf(id) (0 for the
// leases in gone), in batches of batch requests, the last asked first;
// each answer waits until hold is closed (nil: no wait). failNext makes
// the next request end its stream with Unavailable.
type kaNode struct {
	rpc.UnimplementedClusterServer
	rpc.UnimplementedLeaseServer
	addr     string
	batch    int
	hold     chan struct{}
	gone     map[uint64]bool
	failNext atomic.Bool
	// delay, if set, answers each request on a goroutine of its own after
	// delay[id] (instead of in batches).
	delay map[uint64]time.Duration
	// notLeaderTo, if set, ends every stream at once with a NotLeader
	// status that names this address as the leader.
	notLeaderTo string

	streams atomic.Int64 // streams opened
	mu      sync.Mutex
	asked   map[uint64]int // keep-alives received, by lease
}

func ttlOf(id uint64) int64 { return 2000 + int64(id&0xffff) }

func newKaNode(t *testing.T, batch int) *kaNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &kaNode{addr: l.Addr().String(), batch: batch, gone: map[uint64]bool{}, asked: map[uint64]int{}}
	srv := grpc.NewServer()
	rpc.RegisterClusterServer(srv, n)
	rpc.RegisterLeaseServer(srv, n)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return n
}

func (n *kaNode) ClusterMap(context.Context, *rpc.ClusterMapRequest) (*rpc.ClusterMapResponse, error) {
	return &rpc.ClusterMapResponse{MapVersion: 1, NumShards: 1, Slots: make([]uint32, shard.NumSlots),
		Nodes:  []*rpc.NodeInfo{{Id: "a", GrpcAddr: n.addr}},
		Shards: []*rpc.ShardInfo{{Id: 0, Replicas: []string{"a"}, LeaderId: "a"}}}, nil
}

func (n *kaNode) KeepAliveStream(st rpc.Lease_KeepAliveStreamServer) error {
	n.streams.Add(1)
	if n.notLeaderTo != "" {
		s, err := status.New(codes.FailedPrecondition, "test: not the leader of shard 0").
			WithDetails(&rpc.NotLeader{Shard: 0, LeaderId: "other", LeaderAddr: n.notLeaderTo})
		if err != nil {
			return err
		}
		return s.Err()
	}
	var batch []uint64
	var wg sync.WaitGroup
	var sendMu sync.Mutex
	defer wg.Wait()
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		n.mu.Lock()
		n.asked[req.GetId()]++
		n.mu.Unlock()
		if n.failNext.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "test: the stream broke")
		}
		if n.delay != nil {
			wg.Add(1)
			go func(id uint64) {
				defer wg.Done()
				select {
				case <-time.After(n.delay[id]):
				case <-st.Context().Done():
					return
				}
				sendMu.Lock()
				defer sendMu.Unlock()
				_ = st.Send(&rpc.LeaseKeepAliveResponse{Id: id, TtlMs: ttlOf(id)})
			}(req.GetId())
			continue
		}
		batch = append(batch, req.GetId())
		if len(batch) < n.batch {
			continue
		}
		if n.hold != nil {
			<-n.hold
		}
		for _, id := range slices.Backward(batch) {
			ttl := ttlOf(id)
			if n.gone[id] {
				ttl = 0
			}
			if err := st.Send(&rpc.LeaseKeepAliveResponse{Id: id, TtlMs: ttl}); err != nil {
				return err
			}
		}
		batch = batch[:0]
	}
}

func (n *kaNode) askedFor(id client.LeaseID) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.asked[uint64(id)]
}

func kaClient(t *testing.T, n *kaNode) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.addr}, AttemptTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func leaseN(i int) client.LeaseID { return client.LeaseID(keys.LeaseIDOf(byte(i%256), uint64(i+1))) }

// TestKeepAliveStreamShared: concurrent keep-alives of many leases share
// one stream and each gets the answer about its own lease, though the
// node answers them in another order; a lease gone is ErrLeaseNotFound.
func TestKeepAliveStreamShared(t *testing.T) {
	const leases = 50
	n := newKaNode(t, leases)
	gone := leaseN(7)
	n.gone[uint64(gone)] = true
	c := kaClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, leases)
	ttls := make([]time.Duration, leases)
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttls[i], errs[i] = c.Leases().KeepAliveOnceStream(ctx, leaseN(i))
		}()
	}
	wg.Wait()
	for i := range leases {
		id := leaseN(i)
		if id == gone {
			if !errors.Is(errs[i], client.ErrLeaseNotFound) || !errors.Is(errs[i], client.ErrNotFound) {
				t.Errorf("lease %s (gone): %v, want ErrLeaseNotFound", id, errs[i])
			}
			continue
		}
		if want := time.Duration(ttlOf(uint64(id))) * time.Millisecond; errs[i] != nil || ttls[i] != want {
			t.Errorf("lease %s: %v %v, want %v", id, ttls[i], errs[i], want)
		}
	}
	if s := n.streams.Load(); s != 1 {
		t.Fatalf("%d streams opened for %d leases, want 1", s, leases)
	}
}

// TestKeepAliveStreamJoinsRequestInFlight: a second keep-alive of a lease
// whose request is in flight takes that request's answer: the node is
// asked once. Another lease's keep-alive meanwhile is a request of its own.
func TestKeepAliveStreamJoinsRequestInFlight(t *testing.T) {
	n := newKaNode(t, 1)
	n.hold = make(chan struct{})
	c := kaClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := leaseN(1)
	var wg sync.WaitGroup
	ttls := make([]time.Duration, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttls[i], errs[i] = c.Leases().KeepAliveOnceStream(ctx, id)
		}()
	}
	// Both wait on the one request the node holds.
	deadline := time.Now().Add(5 * time.Second)
	for client.KeepAliveWaitersForTest(c, id) < 2 {
		if time.Now().After(deadline) {
			close(n.hold)
			t.Fatalf("%d keep-alives wait on the request in flight, want 2", client.KeepAliveWaitersForTest(c, id))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(n.hold)
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || ttls[i] != time.Duration(ttlOf(uint64(id)))*time.Millisecond {
			t.Errorf("caller %d: %v %v", i, ttls[i], errs[i])
		}
	}
	if got := n.askedFor(id); got != 1 {
		t.Fatalf("the node was asked %d times for one lease's two concurrent keep-alives, want 1", got)
	}
	// The lease renewed again, and another lease: a request each.
	if _, err := c.Leases().KeepAliveOnceStream(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leases().KeepAliveOnceStream(ctx, leaseN(2)); err != nil {
		t.Fatal(err)
	}
	if a, b := n.askedFor(id), n.askedFor(leaseN(2)); a != 2 || b != 1 {
		t.Fatalf("asked %d and %d times, want 2 and 1", a, b)
	}
}

// TestKeepAliveStreamReopened: a stream that breaks fails the keep-alive
// on it, which is sent again on a new stream; a background KeepAlive
// renews across the break without stopping.
func TestKeepAliveStreamReopened(t *testing.T) {
	n := newKaNode(t, 1)
	c := kaClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ka, err := c.Leases().KeepAlive(ctx, leaseN(3)) // TTL 2.003 s: renewed every 668 ms
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Stop()
	_, first := ka.TTL()
	n.failNext.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, renewed := ka.TTL(); renewed.After(first) && n.streams.Load() == 2 {
			break
		}
		if time.Now().After(deadline) {
			_, renewed := ka.TTL()
			t.Fatalf("not renewed on a new stream: %d streams, renewed %v after the first (err %v)", n.streams.Load(), renewed.Sub(first), ka.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ka.Err(); err != nil {
		t.Fatal(err)
	}
	if got := n.askedFor(leaseN(3)); got < 3 {
		t.Fatalf("asked %d times, want the first renewal, the one that broke the stream, and its retry", got)
	}
}

// TestKeepAliveStreamSlowAnswer: a keep-alive answered after more than the
// AttemptTimeout on a stream that meanwhile answers others is waited for
// (ending the busy stream would fail every call on it); on a stream that
// answers nothing for that long, the stream is ended and the keep-alive
// sent again on a new one.
func TestKeepAliveStreamSlowAnswer(t *testing.T) {
	slow, quick := leaseN(4), leaseN(5)
	n := newKaNode(t, 1)
	n.delay = map[uint64]time.Duration{uint64(slow): 900 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	c, err := client.New(dial, client.Config{Endpoints: []string{n.addr}, AttemptTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Leases().KeepAliveOnceStream(ctx, slow)
		done <- err
	}()
	var slowErr error
busy:
	for {
		select {
		case slowErr = <-done:
			break busy
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := c.Leases().KeepAliveOnceStream(ctx, quick); err != nil {
			t.Fatal(err)
		}
	}
	if slowErr != nil || n.streams.Load() != 1 || n.askedFor(slow) != 1 {
		t.Fatalf("slow keep-alive on a busy stream: %v; %d streams, asked %d times; want an answer on 1 stream, asked once", slowErr, n.streams.Load(), n.askedFor(slow))
	}

	// Alone on its stream, it is sent again on a new stream after each
	// 300 ms of silence (never answered in time here: the node takes 900).
	before := n.streams.Load()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	if _, err := c.Leases().KeepAliveOnceStream(sctx, slow); err == nil {
		t.Fatal("answered after 900 ms, with 300 ms of silence ending each stream")
	}
	if s, a := n.streams.Load()-before, n.askedFor(slow); s < 3 || a < 4 {
		t.Fatalf("silent streams: %d more opened, the slow lease asked %d times in all; want at least 3 and 4", s, a)
	}
}

// TestKeepAliveHintsPaced: two nodes that name each other as the leader
// (an election in progress, or stale views) are not called in a tight
// loop: every other hint in a row waits like any retry.
func TestKeepAliveHintsPaced(t *testing.T) {
	a, b := newKaNode(t, 1), newKaNode(t, 1)
	a.notLeaderTo, b.notLeaderTo = b.addr, a.addr
	c := kaClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	ka, err := c.Leases().KeepAlive(ctx, leaseN(6))
	if err == nil {
		ka.Stop()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("keep-alive between two nodes that name each other: %v, want the deadline", err)
	}
	// Paced, 500 ms hold a few dozen attempts at most (the retry pauses
	// start at 10 ms and double); unpaced, thousands.
	if n := a.streams.Load() + b.streams.Load(); n > 100 {
		t.Fatalf("%d streams opened in 500 ms: the hints are followed in a tight loop", n)
	}
}
