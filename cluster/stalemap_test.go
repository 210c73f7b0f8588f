package cluster

import (
	"fmt"
	"strings"
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

// TestSplitStaleMapRedisFanOut: the RESP front of a node whose map is
// still the one before a split (its sync held) never answers KEYS, DBSIZE
// or a SCAN for part of the keyspace: the source shard, which no longer
// owns every slot the stale map gives it, answers its leg with TRYAGAIN,
// and once the node's map caught up the same commands see every key
// (before, they missed the moved keys until the node's map followed: the
// new shard was not asked, and the source had dropped them).
func TestSplitStaleMapRedisFanOut(t *testing.T) {
	var hold atomic.Bool
	tc := newTestCluster(t, 4, 2, func(c *Config) {
		c.RedisAddr = "127.0.0.1:0"
		if c.ID == "n4" {
			c.Testing.HoldSync = hold.Load
			c.RequestTimeout = time.Second // a TRYAGAIN within go-redis's read timeout
		}
	})
	ctx := ctxT(t, 120*time.Second)
	const n = 200
	rdb1, rdb4 := redisClient(t, tc, 0, 2), redisClient(t, tc, 3, 2)
	for i := range n {
		if err := rdb1.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	scanAll := func() (int, error) {
		var cursor uint64
		total := 0
		for {
			ks, next, err := rdb4.Scan(ctx, cursor, "*", 50).Result()
			if err != nil {
				return total, err
			}
			total += len(ks)
			if cursor = next; cursor == 0 {
				return total, nil
			}
		}
	}
	// complete fails unless KEYS, DBSIZE and SCAN through n4 all see n
	// keys; partial reports an answer for part of the keyspace.
	check := func() (partial, complete error) {
		if ks, err := rdb4.Keys(ctx, "*").Result(); err != nil {
			complete = fmt.Errorf("keys: %w", err)
		} else if len(ks) != n {
			return fmt.Errorf("KEYS answered %d keys of %d", len(ks), n), nil
		}
		if sz, err := rdb4.DBSize(ctx).Result(); err != nil {
			complete = fmt.Errorf("dbsize: %w", err)
		} else if sz != n {
			return fmt.Errorf("DBSIZE answered %d of %d", sz, n), nil
		}
		if got, err := scanAll(); err != nil {
			complete = fmt.Errorf("scan: %w", err)
		} else if got != n {
			return fmt.Errorf("SCAN answered %d keys of %d", got, n), nil
		}
		return nil, complete
	}
	waitFor(t, 20*time.Second, "n4 sees every key", func() error {
		p, c := check()
		if p != nil {
			return p
		}
		return c
	})

	hold.Store(true)
	mv, err := tc.nodes[0].SplitShard(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 45*time.Second)
	if v := tc.nodes[3].smapNow().Version; v >= mv.MapVersion {
		t.Fatalf("n4's map version %d: its sync was held, want below %d", v, mv.MapVersion)
	}
	for range 2 {
		partial, complete := check()
		if partial != nil {
			t.Fatalf("through a node whose map is behind the split: %v", partial)
		}
		if complete == nil || !strings.Contains(complete.Error(), "TRYAGAIN") {
			t.Fatalf("through a node whose map is behind the split: %v, want TRYAGAIN", complete)
		}
	}

	hold.Store(false)
	tc.nodes[3].kickSync()
	waitFor(t, 20*time.Second, "n4 sees every key after its map caught up", func() error {
		p, c := check()
		if p != nil {
			t.Fatal(p)
		}
		return c
	})
}
