package cluster

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

// TestSplitStaleMapShardRequest: a node whose map is still the one before
// a split (its sync held) and that holds no replica of the new shard
// answers a request addressed to the new shard with a retryable
// Unavailable (RetryInfo naming the shard), not InvalidArgument; a shard
// id no map names is still InvalidArgument; once the node's map caught up
// it answers NotLeader (no replica here) with the leader to retry at.
func TestSplitStaleMapShardRequest(t *testing.T) {
	var hold atomic.Bool
	tc := newTestCluster(t, 4, 2, func(c *Config) {
		if c.ID == "n4" {
			c.Testing.HoldSync = hold.Load
		}
	})
	ctx := ctxT(t, 90*time.Second)
	n4 := tc.nodes[3]
	st, err := tc.nodes[0].ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Placement(0); p == nil || p.Holds(n4.ID()) {
		t.Fatalf("shard 0 placed on %+v: the test needs a node without it", p)
	}
	hold.Store(true)
	mv, err := tc.nodes[0].SplitShard(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	if v := n4.smapNow().Version; v >= mv.MapVersion {
		t.Fatalf("n4's map version %d: its sync was held, want below %d", v, mv.MapVersion)
	}
	if n4.localReplica(mv.Target) != nil {
		t.Fatal("n4 holds a replica of the new shard")
	}
	cc, err := grpc.NewClient(n4.Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	list := func(id uint32) (rpc.Kind, *status.Status) {
		_, err := rpc.NewRegistryClient(cc).ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: id})
		st := status.Convert(err)
		k, _ := rpc.KindOf(st)
		if err == nil {
			k = rpc.Kind(255)
		}
		return k, st
	}
	k, s := list(uint32(mv.Target))
	if k != rpc.KindUnavailable || k.Retry() != rpc.RetrySafe {
		t.Fatalf("new shard %d on a node with the old map: %v (kind %s), want unavailable", mv.Target, s.Err(), k)
	}
	var ri *rpc.RetryInfo
	for _, d := range s.Details() {
		if r, ok := d.(*rpc.RetryInfo); ok {
			ri = r
		}
	}
	if ri == nil || ri.GetShard() != uint32(mv.Target) {
		t.Fatalf("retry info %v in %v", ri, s.Details())
	}
	for _, id := range []uint32{uint32(mv.Target) + 1, 200, 100000} {
		if k, s := list(id); k != rpc.KindInvalidArgument {
			t.Errorf("shard %d, which no map names: %v (kind %s), want invalid argument", id, s.Err(), k)
		}
	}

	hold.Store(false)
	n4.kickSync()
	waitFor(t, 10*time.Second, "n4's map catches up", func() error {
		if v := n4.smapNow().Version; v < mv.MapVersion {
			return fmt.Errorf("map version %d", v)
		}
		return nil
	})
	if k, s := list(uint32(mv.Target)); k != rpc.KindNotLeader {
		t.Fatalf("new shard on n4 with the new map: %v (kind %s), want not leader", s.Err(), k)
	}
}
