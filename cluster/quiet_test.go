package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// TestQuietCluster: with QuietAfter set, every shard group of a 3-node
// cluster goes quiet on every replica (the notices travel on the nodes'
// Mux, through their fault-injecting network), the meta group never does,
// and a put and a linearizable get on each quiet shard succeed.
func TestQuietCluster(t *testing.T) {
	const shards = 2
	tc := newTestCluster(t, 3, shards, func(c *Config) {
		c.QuietAfter, c.QuietTimeout = time.Second, 2*testHeartbeat
	})
	quiet := func(id shard.ID) error {
		for _, n := range tc.nodes {
			if r := n.localReplica(id); r == nil || !r.Stats().Quiet {
				return fmt.Errorf("shard %d not quiet on %s", id, n.ID())
			}
		}
		return nil
	}
	for id := shard.ID(0); id < shards; id++ {
		waitFor(t, 30*time.Second, fmt.Sprintf("shard %d quiet everywhere", id), func() error { return quiet(id) })
	}
	for _, n := range tc.nodes {
		n.mu.RLock()
		meta := n.mu.meta
		n.mu.RUnlock()
		if meta.Stats().Quiet {
			t.Fatalf("the meta group is quiet on %s", n.ID())
		}
	}
	c := tc.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := tc.nodes[0].smapNow()
	for id := shard.ID(0); id < shards; id++ {
		rk := routingKeyFor(m, id)
		if err := quiet(id); err != nil {
			t.Logf("before the put: %v (woken since by the reconciler)", err)
		}
		if err := putUntilKnown(ctx, c, rk, []byte("k"), []byte("v")); err != nil {
			t.Fatalf("put on quiet shard %d: %v", id, err)
		}
		v, err := c.Get(ctx, rk, []byte("k"))
		if err != nil || string(v) != "v" {
			t.Fatalf("get on shard %d: %q, %v", id, v, err)
		}
		// The get woke the leader in its request path; it goes quiet
		// again only QuietAfter later.
		if _, lr := tc.leaderReplica(id); lr.Stats().Quiet {
			t.Errorf("shard %d: its leader is quiet right after a get", id)
		}
	}
}
