package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/internal/freeport"
	"github.com/swarmkv/swarmkv/internal/testlog"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/internal/faultnet"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// testCluster is an in-process cluster: N nodes in this test process on
// loopback, their Raft traffic through a fault-injecting network.
type testCluster struct {
	t     testing.TB
	net   *faultnet.Network
	cfgs  []Config
	nodes []*Node // nil while a node is down
	// redis holds each node's RESP front (Config.RedisAddr), admin its
	// admin HTTP API (Config.HTTPAddr), started and closed with its node
	// as package server composes them.
	redis map[int]testFront // by node index
	admin map[int]func()    // by node index: the admin server's Close
}

// testFront is a running RESP front: its bound address and its Close.
type testFront struct {
	addr  string
	close func()
}

// StartRedisFront starts node n's RESP front on addr for the harness,
// returning the bound address and the front's Close. The core cannot
// import package redisfront (imports run one way, TestImportsOneWay), so
// fronts_test.go, in package cluster_test, sets it to redisfront.Start.
var StartRedisFront func(n *Node, addr string) (bound string, close func(), err error)

// APIServices are the client-facing gRPC services (KV, Cluster, Registry,
// Billing, Pools, Redis, Pipeline) and their auth interceptors the harness
// starts its nodes with, as server.New does; set by fronts_test.go to
// api.Services (the core cannot import package api).
var APIServices func(n *Node) Services

// StartAdmin serves node n's admin HTTP API (on the listener New bound,
// Node.HTTPListener) for the harness, returning the server's Close; set by
// fronts_test.go to admin.Start. AdminAuth is package admin's auth guard
// (admin.Authorize), for tests of the HTTP auth rules on a bare Node.
var (
	StartAdmin func(n *Node) (close func())
	AdminAuth  func(n *Node, next http.Handler) http.Handler
)

func freePort(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// testHeartbeat is the test clusters' Raft heartbeat and election timeout
// (their leader lease is half of it): short, so failovers are quick,
// and doubled under the race detector, which slows the nodes enough that
// a 100 ms lease made leaders step down every second on a busy 2-core
// machine ("failed to contact quorum"), and a move needing four leaders
// at once could wait out its test's 45 s.
var testHeartbeat = func() time.Duration {
	if raceEnabled {
		return 400 * time.Millisecond
	}
	return 200 * time.Millisecond
}()

// testLogger is test t's nodes' logger: their last lines are printed if
// t fails (SWARM_TEST_LOG=1: everything, as it happens).
func testLogger(t testing.TB) *slog.Logger { return testlog.New(t) }

// newTestCluster starts n nodes with the given shard count; tweak may adjust
// each node's config before start.
func newTestCluster(t testing.TB, n, shards int, tweak func(*Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, net: faultnet.New(1), nodes: make([]*Node, n), redis: map[int]testFront{}, admin: map[int]func(){}}
	base := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		cfg := Config{
			ID:                 name,
			DataDir:            filepath.Join(base, name),
			RaftAddr:           freePort(t),
			GRPCAddr:           freePort(t),
			GossipAddr:         freePort(t),
			BootstrapExpect:    n,
			Shards:             shards,
			HeartbeatTimeout:   testHeartbeat,
			ElectionTimeout:    testHeartbeat,
			LeaderLeaseTimeout: testHeartbeat / 2,
			GossipProfile:      "local",
			Logger:             testLogger(t).With("test_node", name),
			Testing:            Testing{Dial: tc.net.Dialer(name)},
		}
		cfg.Testing.WrapRaftListener = func(ln net.Listener) net.Listener { return tc.net.Listen(name, ln) }
		if tweak != nil {
			tweak(&cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
	}
	for i := range n {
		for j := range n {
			if j != i {
				tc.cfgs[i].Join = append(tc.cfgs[i].Join, tc.cfgs[j].GossipAddr)
			}
		}
		tc.start(i)
	}
	t.Cleanup(tc.closeAll)
	tc.waitReady()
	return tc
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	n, err := New(tc.cfgs[i], APIServices)
	if err != nil {
		tc.t.Fatalf("start %s: %v", tc.cfgs[i].ID, err)
	}
	if tc.cfgs[i].HTTPAddr != "" {
		tc.admin[i] = StartAdmin(n)
	}
	if a := tc.cfgs[i].RedisAddr; a != "" {
		bound, closeFront, err := StartRedisFront(n, a)
		if err != nil {
			if c := tc.admin[i]; c != nil {
				c()
				delete(tc.admin, i)
			}
			n.Close()
			tc.t.Fatalf("start %s: %v", tc.cfgs[i].ID, err)
		}
		tc.redis[i] = testFront{addr: bound, close: closeFront}
	}
	tc.nodes[i] = n
}

// redisAddr returns the address of node i's RESP front.
func (tc *testCluster) redisAddr(i int) string { return tc.redis[i].addr }

// stop closes node i (its data dir stays).
func (tc *testCluster) stop(i int) {
	tc.t.Helper()
	if tc.nodes[i] == nil {
		return
	}
	if f := tc.redis[i]; f.close != nil { // the fronts first, as server.Close
		f.close()
		delete(tc.redis, i)
	}
	if c := tc.admin[i]; c != nil {
		c()
		delete(tc.admin, i)
	}
	if err := tc.nodes[i].Close(); err != nil {
		tc.t.Logf("close %s: %v", tc.cfgs[i].ID, err)
	}
	tc.nodes[i] = nil
}

func (tc *testCluster) closeAll() {
	for i := range tc.nodes {
		tc.stop(i)
	}
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
}

func (tc *testCluster) waitReady() {
	tc.t.Helper()
	waitFor(tc.t, 30*time.Second, "cluster ready", func() error {
		var smap *shard.Map
		for _, n := range tc.nodes {
			if n == nil {
				continue
			}
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s: %w", n.ID(), err)
			}
			smap = n.smapNow()
		}
		// Every shard has a leader that committed an entry of its term,
		// so the first writes of a test do not meet the elections that
		// follow a bootstrap.
		for _, id := range smap.Shards() {
			if !tc.leaderReady(id) {
				return fmt.Errorf("shard %d: no ready leader", id)
			}
		}
		return nil
	})
}

// leaderReady reports whether some live node leads shard id and has
// committed an entry of its term.
func (tc *testCluster) leaderReady(id shard.ID) bool {
	for _, n := range tc.nodes {
		if n == nil {
			continue
		}
		if r := n.localReplica(id); r != nil && r.Raft().State().String() == "Leader" {
			t := r.ReadyTerm()
			return t != 0 && t == r.Raft().CurrentTerm()
		}
	}
	return false
}

// client returns a client connected through every live node.
func (tc *testCluster) client() *client.Client {
	tc.t.Helper()
	var eps []string
	for _, n := range tc.nodes {
		if n != nil {
			eps = append(eps, n.Addrs().GRPCAddr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, AttemptTimeout: time.Second})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// leaderOf returns the index of the node leading shard id, waiting up to
// 30 s for one (leadership may be moving: the reconciler balances leaders;
// under the race detector on a loaded machine CI once saw a shard without
// a leader for 10 s), or -1.
func (tc *testCluster) leaderOf(id shard.ID) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if i := tc.currentLeaderOf(id); i >= 0 || time.Now().After(deadline) {
			return i
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderReplica returns the index of the node leading shard id and its
// replica, failing the test when no leader shows within 30 s.
func (tc *testCluster) leaderReplica(id shard.ID) (int, *replica.Replica) {
	tc.t.Helper()
	i := tc.leaderOf(id)
	if i < 0 {
		tc.t.Fatalf("no leader of shard %d", id)
	}
	return i, tc.nodes[i].localReplica(id)
}

// currentLeaderOf returns the index of the node leading shard id now, or -1.
func (tc *testCluster) currentLeaderOf(id shard.ID) int {
	for i, n := range tc.nodes {
		if n == nil {
			continue
		}
		if r := n.localReplica(id); r != nil && r.Leader() == n.ID() && r.Raft().State().String() == "Leader" {
			return i
		}
	}
	return -1
}

// routingKeyFor returns a routing key that maps to shard id.
func routingKeyFor(m *shard.Map, id shard.ID) []byte {
	for i := 0; ; i++ {
		rk := []byte(fmt.Sprintf("user-%d", i))
		if m.ShardOf(rk) == id {
			return rk
		}
	}
}

func kvKey(rk []byte, k string) []byte { return keys.KV(rk, []byte(k)) }

// putUntilKnown puts key=value, sending it again while the outcome is
// unknown (safe for a test that alone writes that key).
func putUntilKnown(ctx context.Context, c *client.Client, rk, key, value []byte) error {
	for {
		err := c.Put(ctx, rk, key, value)
		if !errors.Is(err, client.ErrOutcomeUnknown) || ctx.Err() != nil {
			return err
		}
	}
}

// smapNow returns the node's current shard map under its lock (the sync
// loop replaces it: tests never read n.mu fields unlocked).
func (n *Node) smapNow() *shard.Map {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.smap
}

// replicaCount returns how many replicas the node has open, under its lock.
func (n *Node) replicaCount() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.mu.replicas)
}
