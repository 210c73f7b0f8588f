package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// moveCluster fakes two nodes, a (shard 0) and b (shard 1), while the slot
// of routing key rk moves from shard 0 to shard 1 under map version 2:
// node a refuses every request of that slot with the moved status (as
// cluster.StatusError builds it from the state machine's *fsm.MovedError),
// node b serves them. Both answer the cluster map; it says version 2 (the
// slot on shard 1) from the publishAfter-th ClusterMap call on, version 1
// before (never, when publishAfter is 0).
type moveCluster struct {
	rk           []byte
	slot         shard.Slot
	publishAfter int64

	mapCalls  atomic.Int64
	refusedOn atomic.Int64 // requests node a refused
	mu        sync.Mutex
	puts      map[string]int // node b: puts applied, by key
	kv        map[string][]byte
	redisOn   []uint32 // node b: the shard each Redis request named

	a, b *grpc.Server
	addr [2]string
}

func newMoveCluster(t *testing.T, rk []byte, publishAfter int64) *moveCluster {
	t.Helper()
	mc := &moveCluster{rk: rk, slot: shard.SlotOf(rk), publishAfter: publishAfter, puts: map[string]int{}, kv: map[string][]byte{}}
	for i := range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		n := &moveNode{mc: mc, owner: i == 1}
		rpc.RegisterClusterServer(srv, n)
		rpc.RegisterKVServer(srv, n)
		rpc.RegisterRedisServer(srv, n)
		go srv.Serve(l)
		t.Cleanup(srv.Stop)
		mc.addr[i] = l.Addr().String()
	}
	return mc
}

func (mc *moveCluster) clusterMap() *rpc.ClusterMapResponse {
	n := mc.mapCalls.Add(1)
	version := uint64(1)
	if mc.publishAfter > 0 && n >= mc.publishAfter {
		version = 2
	}
	other := mc.slot + 1 // wraps: shard 1 owns a slot under both maps
	resp := &rpc.ClusterMapResponse{MapVersion: version, NumShards: 2, Slots: make([]uint32, shard.NumSlots),
		Nodes:  []*rpc.NodeInfo{{Id: "a", GrpcAddr: mc.addr[0]}, {Id: "b", GrpcAddr: mc.addr[1]}},
		Shards: []*rpc.ShardInfo{{Id: 0, Replicas: []string{"a"}, LeaderId: "a"}, {Id: 1, Replicas: []string{"b"}, LeaderId: "b"}}}
	resp.Slots[other] = 1
	if version == 2 {
		resp.Slots[mc.slot] = 1
	}
	return resp
}

// moved is node a's answer, built as a node builds it.
func (mc *moveCluster) moved() error {
	mc.refusedOn.Add(1)
	return cluster.StatusError(&fsm.MovedError{Slot: mc.slot, Target: 1, MapVersion: 2}, 0, nil)
}

type moveNode struct {
	rpc.UnimplementedClusterServer
	rpc.UnimplementedKVServer
	rpc.UnimplementedRedisServer
	mc    *moveCluster
	owner bool // node b
}

func (n *moveNode) ClusterMap(context.Context, *rpc.ClusterMapRequest) (*rpc.ClusterMapResponse, error) {
	return n.mc.clusterMap(), nil
}

func (n *moveNode) check(rk []byte) error {
	switch {
	case shard.SlotOf(rk) != n.mc.slot:
		return status.Error(codes.Internal, "test: a key of another slot")
	case !n.owner:
		return n.mc.moved()
	}
	return nil
}

func (n *moveNode) Put(_ context.Context, req *rpc.PutRequest) (*rpc.PutResponse, error) {
	if err := n.check(req.GetRoutingKey()); err != nil {
		return nil, err
	}
	n.mc.mu.Lock()
	defer n.mc.mu.Unlock()
	n.mc.puts[string(req.GetKey())]++
	n.mc.kv[string(req.GetKey())] = req.GetValue()
	return &rpc.PutResponse{Index: 1}, nil
}

func (n *moveNode) Get(_ context.Context, req *rpc.GetRequest) (*rpc.GetResponse, error) {
	if err := n.check(req.GetRoutingKey()); err != nil {
		return nil, err
	}
	n.mc.mu.Lock()
	defer n.mc.mu.Unlock()
	v, ok := n.mc.kv[string(req.GetKey())]
	return &rpc.GetResponse{Found: ok, Value: v}, nil
}

func (n *moveNode) Exec(_ context.Context, req *rpc.RedisExecRequest) (*rpc.RedisExecResponse, error) {
	if !n.owner {
		return nil, n.mc.moved()
	}
	n.mc.mu.Lock()
	defer n.mc.mu.Unlock()
	n.mc.redisOn = append(n.mc.redisOn, req.GetShard())
	return &rpc.RedisExecResponse{Reply: rpc.ReplyToProto(resp.OK)}, nil
}

func moveClient(t *testing.T, mc *moveCluster) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{mc.addr[0]}, Unary: true, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMovedFollowed: a write (not idempotent) and a read refused as moved
// by the old owner are sent again, once the map names the new owner, to
// the new owner; the write is applied exactly once, and the caller sees no
// error.
func TestMovedFollowed(t *testing.T) {
	rk := []byte("user-moving")
	mc := newMoveCluster(t, rk, 4) // New's refresh, then two more before the map publishes
	c := moveClient(t, mc)
	if c.ShardOf(rk) != 0 {
		t.Fatalf("before the move the key routes to shard %d, want 0", c.ShardOf(rk))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Put(ctx, rk, []byte("k"), []byte("v")); err != nil {
		t.Fatalf("Put during the move: %v", err)
	}
	if got := mc.refusedOn.Load(); got != 1 {
		t.Errorf("the old owner refused %d requests, want 1 (then the client waits for the map)", got)
	}
	if got := mc.mapCalls.Load(); got < 4 {
		t.Errorf("%d map refreshes, want >= 4 (until the map reached version 2)", got)
	}
	if v := c.Map().Version; v != 2 || c.ShardOf(rk) != 1 {
		t.Errorf("client map version %d routes the key to shard %d, want version 2, shard 1", v, c.ShardOf(rk))
	}
	mc.mu.Lock()
	if n := mc.puts["k"]; n != 1 {
		t.Errorf("the put was applied %d times by the new owner, want exactly once", n)
	}
	mc.mu.Unlock()
	v, err := c.Get(ctx, rk, []byte("k"))
	if err != nil || string(v) != "v" {
		t.Fatalf("Get after the move = %q, %v; want v", v, err)
	}
	if got := mc.refusedOn.Load(); got != 1 {
		t.Errorf("the old owner saw %d requests, want still 1: the client routes by the new map", got)
	}
}

// TestMovedRedisFollowed: a Redis request names its shard; moved, it is
// sent again naming the slot's new owner.
func TestMovedRedisFollowed(t *testing.T) {
	rk := []byte("ns")
	mc := newMoveCluster(t, rk, 3)
	c := moveClient(t, mc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &rpc.RedisExecRequest{Shard: 0, Cmds: []*rpc.RedisArgv{{Args: [][]byte{[]byte("set"), []byte("ns:k"), []byte("v")}}}}
	v, err := c.RedisExecRequest(ctx, req, false)
	if err != nil || v.IsError() {
		t.Fatalf("RedisExecRequest during the move = %v, %v", v, err)
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if len(mc.redisOn) != 1 || mc.redisOn[0] != 1 || req.GetShard() != 1 {
		t.Errorf("the new owner ran %v (shards named), request now names shard %d; want one run naming shard 1", mc.redisOn, req.GetShard())
	}
}

// TestMovedMapNeverCatchesUp: when the map never publishes the move, the
// call fails when the caller's context ends, with an error that names
// the move (a *MovedError) and the deadline, and nothing was executed.
func TestMovedMapNeverCatchesUp(t *testing.T) {
	rk := []byte("user-stuck")
	mc := newMoveCluster(t, rk, 0)
	c := moveClient(t, mc)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Put(ctx, rk, []byte("k"), []byte("v"))
	if err == nil {
		t.Fatal("Put succeeded while the map never named the new owner")
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Errorf("Put failed after %v, want about the context's 400ms", el)
	}
	var me *client.MovedError
	if !errors.As(err, &me) || *me != (client.MovedError{Slot: uint32(mc.slot), TargetShard: 1, MapVersion: 2}) {
		t.Errorf("error %v: want a *client.MovedError for slot %d to shard 1 at version 2", err, mc.slot)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "moved to shard 1") || !strings.Contains(msg, "still at version 1") {
		t.Errorf("error %q should name the move and the map version reached", msg)
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if len(mc.puts) != 0 {
		t.Errorf("puts applied: %v", mc.puts)
	}
}
