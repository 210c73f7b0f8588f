package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
)

// fastMembership makes the reconciler act quickly in tests, with Raft
// timings relaxed enough that a loaded 2-core machine running -race does not
// churn elections (these tests run 9+ groups on 4-5 nodes).
func fastMembership(c *Config) {
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.ReconcileInterval = 100 * time.Millisecond
	c.DeadNodeTimeout = 2 * time.Second
	c.LeaderBalanceInterval = time.Second
}

// add starts a new node that joins the cluster's gossip and waits to be
// admitted; it returns its index.
func (tc *testCluster) add(name string, tweak func(*Config)) int {
	tc.t.Helper()
	base := filepath.Dir(tc.cfgs[0].DataDir)
	cfg := tc.cfgs[0]
	cfg.ID = name
	cfg.DataDir = filepath.Join(base, name)
	cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = freePort(tc.t), freePort(tc.t), freePort(tc.t)
	cfg.BootstrapExpect = 0
	cfg.Logger = testLogger(tc.t).With("test_node", name)
	cfg.Testing.Dial = tc.net.Dialer(name)
	cfg.Testing.WrapRaftListener = func(ln net.Listener) net.Listener { return tc.net.Listen(name, ln) }
	cfg.Join = nil
	for _, c := range tc.cfgs {
		cfg.Join = append(cfg.Join, c.GossipAddr)
	}
	if tweak != nil {
		tweak(&cfg)
	}
	tc.cfgs = append(tc.cfgs, cfg)
	tc.nodes = append(tc.nodes, nil)
	i := len(tc.nodes) - 1
	tc.start(i)
	return i
}

// anyNode returns a live node.
func (tc *testCluster) anyNode() *Node {
	for _, n := range tc.nodes {
		if n != nil {
			return n
		}
	}
	tc.t.Fatal("no live node")
	return nil
}

// settled reports nil when every shard has want voters (no learners) on
// active members, the meta group has wantMeta voters, and no replica lags.
func settled(ctx context.Context, n *Node, want, wantMeta int) (*ClusterStatus, error) {
	st, err := n.Status(ctx)
	if err != nil {
		return nil, err
	}
	active := map[string]bool{}
	for _, m := range st.Members {
		active[m.ID] = m.Status == StatusActive
	}
	for _, s := range st.Shards {
		w := want
		if s.Shard == "meta" {
			w = wantMeta
		}
		if s.Leader == "" {
			return st, fmt.Errorf("%s: no leader", s.Shard)
		}
		voters := 0
		for _, r := range s.Replicas {
			if r.Role != "voter" {
				return st, fmt.Errorf("%s: replica on %s is a %s", s.Shard, r.Node, r.Role)
			}
			if !active[r.Node] {
				return st, fmt.Errorf("%s: replica on %s, which is not active", s.Shard, r.Node)
			}
			voters++
		}
		if voters != w || len(s.Voters) != w {
			return st, fmt.Errorf("%s: %d voters (%v), want %d", s.Shard, voters, s.Voters, w)
		}
	}
	return st, nil
}

// writeLoad runs writers until stop is closed; it returns the keys whose
// writes were acknowledged.
type writeLoad struct {
	mu    sync.Mutex
	acked map[string]string
	errs  int
	// unknown counts the errors that are client.ErrOutcomeUnknown: a
	// write in flight when its shard's leader lost leadership (an
	// election, a removed node) or past its deadline. The client may not
	// retry those (a put is not idempotent: its revision), so it reports
	// them; they are not a move's doing.
	unknown int
	first   []string // the first other errors, with when they came
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startWrites(t *testing.T, c *client.Client, writers int) *writeLoad {
	w := &writeLoad{acked: map[string]string{}, stop: make(chan struct{})}
	for g := range writers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				rk := fmt.Sprintf("user-%d-%d", g, i%50)
				k, v := fmt.Sprintf("k%d-%d", g, i), fmt.Sprint(i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.Put(ctx, []byte(rk), []byte(k), []byte(v))
				cancel()
				w.mu.Lock()
				if err == nil {
					w.acked[rk+"/"+k] = v
				} else {
					w.errs++
					if errors.Is(err, client.ErrOutcomeUnknown) {
						w.unknown++
					} else if len(w.first) < 5 {
						w.first = append(w.first, fmt.Sprintf("%s: put %s/%s: %v", time.Now().Format("15:04:05.000"), rk, k, err))
					}
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return w
}

// waitAcked waits until more writes than now are acknowledged: the load
// runs (a condition, not a sleep: a slow host only makes it wait longer).
func (w *writeLoad) waitAcked(t *testing.T, more int) {
	t.Helper()
	w.mu.Lock()
	want := len(w.acked) + more
	w.mu.Unlock()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d more writes acknowledged", more), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if n := len(w.acked); n < want {
			return fmt.Errorf("%d of %d acknowledged, %d errors", n, want, w.errs)
		}
		return nil
	})
}

// finish stops the writers and checks every acknowledged write is there.
func (w *writeLoad) finish(t *testing.T, c *client.Client) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lost := 0
	for rkk, v := range w.acked {
		rk, k, _ := strings.Cut(rkk, "/")
		got, err := c.Get(ctx, []byte(rk), []byte(k))
		if err != nil || string(got) != v {
			lost++
			if lost < 5 {
				t.Errorf("acknowledged write %s = %q: read %q, %v", rkk, v, got, err)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(w.acked))
	}
	if len(w.acked) < 20 {
		t.Fatalf("only %d writes acknowledged (%d errors): the load did not run", len(w.acked), w.errs)
	}
	t.Logf("%d acknowledged writes all present (%d failed or indeterminate)", len(w.acked), w.errs)
}

func replicaSpread(st *ClusterStatus) (lo, hi int) {
	lo = 1 << 30
	for _, m := range st.Members {
		if m.Status != StatusActive {
			continue
		}
		lo, hi = min(lo, m.Replicas), max(hi, m.Replicas)
	}
	return lo, hi
}

// TestGrowThreeToFive: two nodes join a loaded 3-node cluster; every shard
// ends with 3 voters, replicas spread evenly (±1), the meta group grows to
// 5 voters, and no acknowledged write is lost.
func TestGrowThreeToFive(t *testing.T) {
	tc := newTestCluster(t, 3, 8, fastMembership)
	c := tc.client()
	load := startWrites(t, c, 4)
	load.waitAcked(t, 20)
	n4, n5 := tc.add("n4", nil), tc.add("n5", nil)
	ctx := ctxT(t, 120*time.Second)
	if err := tc.nodes[n4].Ready(); err == nil || !strings.Contains(err.Error(), "waiting to be admitted") {
		t.Fatalf("n4 before join: Ready = %v, want waiting to be admitted", err)
	}
	for _, id := range []string{"n4", "n5"} {
		waitFor(t, 10*time.Second, id+" in gossip", func() error {
			_, err := tc.nodes[0].JoinNode(ctx, id)
			return err
		})
		// Joining again changes nothing.
		st, err := tc.nodes[1].JoinNode(ctx, id)
		if err != nil || st.Status(id) != StatusActive {
			t.Fatalf("second join of %s: %v, %v", id, st, err)
		}
	}
	var st *ClusterStatus
	waitFor(t, 90*time.Second, "3 voters per shard over 5 nodes, balanced", func() error {
		var err error
		if st, err = settled(ctx, tc.nodes[0], 3, 5); err != nil {
			return err
		}
		if lo, hi := replicaSpread(st); hi-lo > 1 || lo == 0 {
			return fmt.Errorf("replicas per node from %d to %d", lo, hi)
		}
		return nil
	})
	for _, i := range []int{n4, n5} {
		if err := tc.nodes[i].Ready(); err != nil {
			t.Fatalf("%s not ready after admission: %v", tc.cfgs[i].ID, err)
		}
	}
	for _, m := range st.Members {
		t.Logf("%s: %d replicas, %d leaderships, meta voter %v", m.ID, m.Replicas, m.Leaderships, m.MetaVoter)
	}
	load.finish(t, c)
	// Clients that knew only the first three nodes still reach everything.
	c5 := tc.client()
	if got, err := c5.Get(ctx, []byte("user-0-0"), []byte("k0-0")); err != nil && !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("read through a 5-node client: %q %v", got, err)
	}
}

// TestDecommissionUnderLoad: a member is removed while clients write; its
// replicas move to the others first, then it is marked removed and holds
// nothing; no acknowledged write is lost.
func TestDecommissionUnderLoad(t *testing.T) {
	tc := newTestCluster(t, 4, 8, fastMembership)
	c := tc.client()
	ctx := ctxT(t, 120*time.Second)
	waitFor(t, 30*time.Second, "settled", func() error { _, err := settled(ctx, tc.nodes[0], 3, 3); return err })
	load := startWrites(t, c, 4)
	load.waitAcked(t, 20)
	st, err := tc.nodes[2].RemoveNode(ctx, "n2")
	if err != nil || st.Status("n2") != StatusLeaving {
		t.Fatalf("remove n2: %v, status %q", err, st.Status("n2"))
	}
	if _, err := tc.nodes[3].RemoveNode(ctx, "n2"); err != nil {
		t.Fatalf("remove n2 again: %v", err)
	}
	waitFor(t, 90*time.Second, "n2 removed", func() error {
		st, err := settled(ctx, tc.nodes[0], 3, 3)
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.ID == "n2" && (m.Status != StatusRemoved || m.Replicas != 0 || m.MetaVoter) {
				return fmt.Errorf("n2: %+v", m)
			}
		}
		return nil
	})
	load.finish(t, c)
	waitFor(t, 10*time.Second, "n2 refuses to serve", func() error {
		err := tc.nodes[1].Ready()
		if err == nil || !strings.Contains(err.Error(), "was removed") {
			return fmt.Errorf("Ready = %v", err)
		}
		if n := tc.nodes[1].replicaCount(); n != 0 {
			return fmt.Errorf("%d replicas still open", n)
		}
		return nil
	})
	if _, err := tc.nodes[0].RemoveNode(ctx, "nope"); status.Code(err) != codes.NotFound {
		t.Fatalf("remove of a non-member: %v, want NotFound", err)
	}
}

// TestDeadNodeReplaced: a node stopped for good has its replicas replaced
// after DeadNodeTimeout; when it comes back with its old data dir, its
// stale replicas are deleted and it is cleanly given replicas again.
func TestDeadNodeReplaced(t *testing.T) {
	tc := newTestCluster(t, 4, 8, fastMembership)
	c := tc.client()
	ctx := ctxT(t, 150*time.Second)
	waitFor(t, 30*time.Second, "settled", func() error { _, err := settled(ctx, tc.nodes[0], 3, 3); return err })
	load := startWrites(t, c, 2)
	tc.stop(3)
	start := time.Now()
	waitFor(t, 60*time.Second, "n4's replicas replaced", func() error {
		st, err := settled(ctx, tc.nodes[0], 3, 3)
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.ID == "n4" && (m.Replicas != 0 || m.MetaVoter) {
				return fmt.Errorf("n4 still holds %d replicas (meta voter %v)", m.Replicas, m.MetaVoter)
			}
		}
		return nil
	})
	t.Logf("replaced %v after the node stopped (dead-node timeout 2s)", time.Since(start).Round(100*time.Millisecond))
	load.finish(t, c)
	// The node returns with its old data dir: it is still a member, its
	// stale replicas are dropped, and the rebalancer gives it new ones.
	tc.start(3)
	waitFor(t, 60*time.Second, "n4 re-added cleanly", func() error {
		st, err := settled(ctx, tc.nodes[0], 3, 3)
		if err != nil {
			return err
		}
		if lo, hi := replicaSpread(st); hi-lo > 1 || lo == 0 {
			return fmt.Errorf("replicas per node from %d to %d", lo, hi)
		}
		return tc.nodes[3].Ready()
	})
	// Writes and reads through every node still agree.
	for i := range 20 {
		rk := []byte(fmt.Sprintf("after-%d", i))
		if err := putUntilKnown(ctx, c, rk, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, rk, []byte("k")); err != nil || string(v) != "v" {
			t.Fatalf("read back %q %v", v, err)
		}
	}
}

// TestRemovedNodeReturns: a removed node that comes back with its old data
// dir is refused (it serves nothing and never disturbs the groups it left);
// with a wiped data dir it can join again.
func TestRemovedNodeReturns(t *testing.T) {
	tc := newTestCluster(t, 4, 4, fastMembership)
	ctx := ctxT(t, 120*time.Second)
	if _, err := tc.nodes[0].RemoveNode(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "n4 removed", func() error {
		st, err := tc.nodes[0].fetchMeta(ctx)
		if err != nil {
			return err
		}
		if s := st.Status("n4"); s != StatusRemoved {
			return fmt.Errorf("n4 %s", s)
		}
		return nil
	})
	tc.stop(3)
	tc.start(3)
	waitFor(t, 20*time.Second, "old n4 refused", func() error {
		err := tc.nodes[3].Ready()
		if err == nil || !errors.Is(err, errRefused) {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	// n1's gossip may not see the restarted n4 alive yet ("not alive in
	// gossip": a join refused for that reason); the answer wanted is the
	// one given once it does.
	waitFor(t, 20*time.Second, "join of the old n4 refused asking to wipe it", func() error {
		_, err := tc.nodes[0].JoinNode(ctx, "n4")
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "wipe") {
			if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "not alive in gossip") {
				return err
			}
			t.Fatalf("join of the removed node with its old data dir: %v, want FailedPrecondition asking to wipe it", err)
		}
		return nil
	})
	c := tc.client()
	for i := range 20 {
		if err := putUntilKnown(ctx, c, []byte(fmt.Sprintf("u%d", i)), []byte("k"), []byte("v")); err != nil {
			t.Fatalf("write with the stale node around: %v", err)
		}
	}
	// Wiped, it joins again as a new incarnation.
	tc.stop(3)
	if err := os.RemoveAll(tc.cfgs[3].DataDir); err != nil {
		t.Fatal(err)
	}
	tc.cfgs[3].BootstrapExpect = 0
	tc.start(3)
	// It sees the cluster state (n4 removed) before anyone admits it: it
	// waits to be admitted and does not refuse itself for good, which
	// would outlive the join below (a jepsen remove-readd run hit that).
	st, err := tc.nodes[0].fetchMeta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.nodes[3].applyMeta(st); err == nil || errors.Is(err, errRefused) || !strings.Contains(err.Error(), "was removed; this data dir is new") {
		t.Fatalf("the wiped n4 given the state before its join: %v, want it waiting to be admitted", err)
	}
	if err := tc.nodes[3].Ready(); errors.Is(err, errRefused) {
		t.Fatalf("the wiped n4 refused itself: %v", err)
	}
	waitFor(t, 10*time.Second, "join the wiped node", func() error {
		_, err := tc.nodes[1].JoinNode(ctx, "n4")
		return err
	})
	waitFor(t, 60*time.Second, "n4 back with replicas", func() error {
		st, err := settled(ctx, tc.nodes[0], 3, 3)
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.ID == "n4" && (m.Status != StatusActive || m.Replicas == 0) {
				return fmt.Errorf("n4: %+v", m)
			}
		}
		return tc.nodes[3].Ready()
	})
}

// TestVersionMismatchRefused: a node announcing an unsupported protocol
// version never enters gossip membership, so it cannot be admitted.
func TestVersionMismatchRefused(t *testing.T) {
	tc := newTestCluster(t, 3, 2, fastMembership)
	ctx := ctxT(t, 30*time.Second)
	i := tc.add("n9", func(c *Config) {
		c.Testing.MinProtocolVersion, c.Testing.MaxProtocolVersion = ProtocolVersion+1, ProtocolVersion+1
	})
	time.Sleep(time.Second) // gossip rounds (local profile)
	if _, ok := tc.nodes[0].members.Get("n9"); ok {
		t.Fatalf("n9 with protocol version %d is in n1's gossip membership", ProtocolVersion+1)
	}
	_, err := tc.nodes[0].JoinNode(ctx, "n9")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("join of n9: %v, want FailedPrecondition naming the protocol version", err)
	}
	if err := tc.nodes[i].Ready(); err == nil {
		t.Fatal("n9 is ready")
	}
	st, err := tc.nodes[1].fetchMeta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(st.Nodes, func(a NodeAddrs) bool { return a.ID == "n9" }) {
		t.Fatal("n9 became a member")
	}
}
