package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// silentPair fakes one shard on two nodes: the map names a its leader,
// but a has gone silent (cut off by a partition: every Put hangs until its
// caller gives up), while b, the new leader, serves.
type silentPair struct {
	addr [2]string
	puts [2]atomic.Int64 // Puts that reached a, b
	// staleHints is how many Puts b answers "not leader, leader is a"
	// before it serves (it has not seen the election yet).
	staleHints int64
}

type silentNode struct {
	rpc.UnimplementedClusterServer
	rpc.UnimplementedKVServer
	p      *silentPair
	i      int
	silent bool
}

func (n *silentNode) ClusterMap(context.Context, *rpc.ClusterMapRequest) (*rpc.ClusterMapResponse, error) {
	return &rpc.ClusterMapResponse{MapVersion: 1, NumShards: 1, Slots: make([]uint32, shard.NumSlots),
		Nodes:  []*rpc.NodeInfo{{Id: "a", GrpcAddr: n.p.addr[0]}, {Id: "b", GrpcAddr: n.p.addr[1]}},
		Shards: []*rpc.ShardInfo{{Id: 0, Replicas: []string{"a", "b"}, LeaderId: "a"}}}, nil
}

func (n *silentNode) Put(ctx context.Context, _ *rpc.PutRequest) (*rpc.PutResponse, error) {
	calls := n.p.puts[n.i].Add(1)
	if n.silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if calls <= n.p.staleHints {
		return nil, rpc.KindNotLeader.Status("not the leader", &rpc.NotLeader{Shard: 0, LeaderId: "a", LeaderAddr: n.p.addr[0]})
	}
	return &rpc.PutResponse{Index: 1}, nil
}

func newSilentPair(t *testing.T, staleHints int64) *silentPair {
	t.Helper()
	p := &silentPair{staleHints: staleHints}
	for i := range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p.addr[i] = l.Addr().String()
		srv := grpc.NewServer()
		n := &silentNode{p: p, i: i, silent: i == 0}
		rpc.RegisterClusterServer(srv, n)
		rpc.RegisterKVServer(srv, n)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Stop(); wg.Wait() })
	}
	return p
}

// client is a client of the pair (it learns the map from b) whose
// attempts time out after 200 ms.
func (p *silentPair) client(ctx context.Context, t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(ctx, client.Config{Endpoints: []string{p.addr[1]}, Unary: true, AttemptTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAmbiguousWriteForgetsSilentLeader: a write (not idempotent) whose
// attempt timed out on the cached leader returns "outcome unknown", and
// the client forgets that leader and passes over its address for a while,
// so the caller's next write asks the other replica instead of waiting on
// the silent node again. Before, the next write went to the same node and
// timed out too, one attempt timeout per write for as long as the
// partition lasted (docs/operations.md, "Losing a zone, measured").
func TestAmbiguousWriteForgetsSilentLeader(t *testing.T) {
	p := newSilentPair(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := p.client(ctx, t)

	err := c.Put(ctx, []byte("rk"), []byte("k"), []byte("v1"))
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("first put, sent to the silent leader: %v, want ErrOutcomeUnknown", err)
	}
	if p.puts[0].Load() != 1 || p.puts[1].Load() != 0 {
		t.Fatalf("first put reached a %d times, b %d times; want 1, 0", p.puts[0].Load(), p.puts[1].Load())
	}
	for i := range 3 {
		if err := c.Put(ctx, []byte("rk"), []byte("k"), []byte("v2")); err != nil {
			t.Fatalf("put %d after the timeout: %v (the client went back to the silent node)", i+2, err)
		}
	}
	if p.puts[0].Load() != 1 || p.puts[1].Load() != 3 {
		t.Fatalf("puts reached a %d times, b %d times; want 1, 3", p.puts[0].Load(), p.puts[1].Load())
	}
}

// TestStaleHintToSilentLeaderNotFollowed: after an attempt timed out on
// the leader, the other replica still names it (its election timeout has
// not passed yet); the client does not send the next write back there on
// that hint, but asks the other replica again until it serves. Before, the
// hint sent the write to the silent node, which cost an attempt timeout
// and left the write's outcome unknown.
func TestStaleHintToSilentLeaderNotFollowed(t *testing.T) {
	p := newSilentPair(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := p.client(ctx, t)
	if err := c.Put(ctx, []byte("rk"), []byte("k"), []byte("v1")); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("first put, sent to the silent leader: %v, want ErrOutcomeUnknown", err)
	}
	if err := c.Put(ctx, []byte("rk"), []byte("k"), []byte("v2")); err != nil {
		t.Fatalf("second put: %v (the client followed the stale hint to the silent node; puts a %d, b %d)", err, p.puts[0].Load(), p.puts[1].Load())
	}
	if a, b := p.puts[0].Load(), p.puts[1].Load(); a != 1 || b != 4 {
		t.Fatalf("puts reached a %d times, b %d times; want 1, 4 (three stale hints, then served)", a, b)
	}
}
