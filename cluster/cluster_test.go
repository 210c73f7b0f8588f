package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/shard"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestClusterReadWrite: 3 nodes, 8 shards: keys under many routing keys
// are written through one client and read back through every node.
func TestClusterReadWrite(t *testing.T) {
	tc := newTestCluster(t, 3, 8, nil)
	c := tc.client()
	ctx := ctxT(t, 60*time.Second)
	const users, perUser = 20, 10
	for u := range users {
		for k := range perUser {
			rk, key := []byte(fmt.Sprintf("user-%d", u)), []byte(fmt.Sprintf("k%02d", k))
			if err := putUntilKnown(ctx, c, rk, key, []byte(fmt.Sprintf("v-%d-%d", u, k))); err != nil {
				t.Fatalf("put %s/%s: %v", rk, key, err)
			}
		}
	}
	// Every shard got data: the routing is spread.
	m := c.Map()
	used := map[shard.ID]bool{}
	for u := range users {
		used[m.ShardOf([]byte(fmt.Sprintf("user-%d", u)))] = true
	}
	if len(used) < 4 {
		t.Errorf("20 routing keys hit only %d of 8 shards", len(used))
	}
	for _, n := range tc.nodes {
		nc, err := client.New(ctx, client.Config{Endpoints: []string{n.Addrs().GRPCAddr}})
		if err != nil {
			t.Fatal(err)
		}
		for u := range users {
			rk := []byte(fmt.Sprintf("user-%d", u))
			items, more, err := nc.Scan(ctx, rk, []byte("k"), nil, 0)
			if err != nil || more || len(items) != perUser {
				t.Fatalf("scan %s via %s: %d items more=%v err=%v", rk, n.ID(), len(items), more, err)
			}
			for k, it := range items {
				if want := fmt.Sprintf("v-%d-%d", u, k); string(it.Value) != want {
					t.Fatalf("scan %s item %d = %q, want %q", rk, k, it.Value, want)
				}
			}
			// Stale reads from any replica converge.
			waitFor(t, 5*time.Second, "stale read", func() error {
				v, err := nc.Get(ctx, rk, []byte("k09"), client.Stale())
				if err != nil {
					return err
				}
				if string(v) != fmt.Sprintf("v-%d-9", u) {
					return fmt.Errorf("got %q", v)
				}
				return nil
			})
		}
		nc.Close()
	}
	// Delete, guarded batch, not found.
	rk := []byte("user-0")
	if existed, err := c.Delete(ctx, rk, []byte("k00")); err != nil || !existed {
		t.Fatalf("delete: %v %v", existed, err)
	}
	if _, err := c.Get(ctx, rk, []byte("k00")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get deleted key: %v", err)
	}
	res, err := c.Batch(ctx, rk, []client.Guard{{Kind: client.KeyAbsent, Key: []byte("k01")}}, []client.Op{{Key: []byte("x"), Value: []byte("1")}})
	if err != nil || res.Succeeded || res.FailedGuard != 0 {
		t.Fatalf("batch with failing guard: %+v %v", res, err)
	}
	if _, err := c.Get(ctx, rk, []byte("x")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("failed batch wrote: %v", err)
	}
	res, err = c.Batch(ctx, rk, []client.Guard{{Kind: client.ValueEquals, Key: []byte("k01"), Value: []byte("v-0-1")}},
		[]client.Op{{Key: []byte("x"), Value: []byte("1")}, {Key: []byte("k01"), Delete: true}})
	if err != nil || !res.Succeeded {
		t.Fatalf("batch: %+v %v", res, err)
	}
	if v, err := c.Get(ctx, rk, []byte("x")); err != nil || string(v) != "1" {
		t.Fatalf("batch put: %q %v", v, err)
	}
}

// TestBadInputChangesNothing: invalid requests get InvalidArgument.
func TestBadInputChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 1, 2, nil)
	c := tc.client()
	ctx := ctxT(t, 30*time.Second)
	big := bytes.Repeat([]byte("v"), (1<<20)+1)
	cases := map[string]error{
		"empty key":      c.Put(ctx, []byte("u"), nil, []byte("v")),
		"empty routing":  c.Put(ctx, nil, []byte("k"), []byte("v")),
		"oversized key":  c.Put(ctx, []byte("u"), bytes.Repeat([]byte("k"), 4097), []byte("v")),
		"oversized val":  c.Put(ctx, []byte("u"), []byte("k"), big),
		"oversized rkey": c.Put(ctx, bytes.Repeat([]byte("u"), 1025), []byte("k"), nil),
	}
	_, err := c.Batch(ctx, []byte("u"), nil, nil)
	cases["empty batch"] = err
	for name, err := range cases {
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	items, _, err := c.Scan(ctx, []byte("u"), nil, nil, 0)
	if err != nil || len(items) != 0 {
		t.Fatalf("bad input wrote something: %v %v", items, err)
	}
}

// TestLeaderKill: the leader of a shard dies; writes to that shard succeed
// again within a few election timeouts, and the restarted node catches up.
func TestLeaderKill(t *testing.T) {
	tc := newTestCluster(t, 3, 4, nil)
	c := tc.client()
	ctx := ctxT(t, 60*time.Second)
	const sh = shard.ID(1)
	rk := routingKeyFor(c.Map(), sh)
	if err := putUntilKnown(ctx, c, rk, []byte("before"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	victim := tc.leaderOf(sh)
	if victim < 0 {
		t.Fatal("no leader for shard 1")
	}
	tc.stop(victim)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := putUntilKnown(wctx, c, rk, []byte("after"), []byte("2"))
	cancel()
	if err != nil {
		t.Fatalf("write after leader kill: %v", err)
	}
	t.Logf("write after killing the leader of shard %d took %v", sh, time.Since(start))
	for i := range 50 {
		if err := putUntilKnown(ctx, c, rk, []byte("k"+strconv.Itoa(i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	tc.start(victim)
	r := tc.nodes[victim].localReplica(sh)
	want := tc.nodes[(victim+1)%3].localReplica(sh)
	waitFor(t, 20*time.Second, "restarted node catches up", func() error {
		if got, w := r.FSM().AppliedIndex(), want.FSM().AppliedIndex(); got < w {
			return fmt.Errorf("applied %d < %d", got, w)
		}
		return nil
	})
	if v, err := r.FSM().Get(kvKey(rk, "after")); err != nil || string(v) != "2" {
		t.Fatalf("restarted node lacks the write made while it was down: %q %v", v, err)
	}
}

// TestCatchUpBySnapshot: with a low snapshot threshold, a node that was
// down while the log was truncated catches up through InstallSnapshot.
func TestCatchUpBySnapshot(t *testing.T) {
	tc := newTestCluster(t, 3, 2, func(c *Config) {
		c.SnapshotThreshold = 64
		c.SnapshotInterval = 50 * time.Millisecond
		c.TrailingLogs = 8
	})
	c := tc.client()
	ctx := ctxT(t, 90*time.Second)
	const sh = shard.ID(0)
	rk := routingKeyFor(c.Map(), sh)
	down := (tc.leaderOf(sh) + 1) % 3
	tc.stop(down)
	for i := range 400 {
		if err := putUntilKnown(ctx, c, rk, []byte(fmt.Sprintf("k%03d", i)), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	leader := tc.nodes[tc.leaderOf(sh)].localReplica(sh)
	waitFor(t, 20*time.Second, "leader snapshot", func() error {
		if s := leader.Raft().Stats()["last_snapshot_index"]; s == "0" || s == "" {
			return fmt.Errorf("last snapshot index %s", s)
		}
		return nil
	})
	tc.start(down)
	r := tc.nodes[down].localReplica(sh)
	waitFor(t, 30*time.Second, "catch up", func() error {
		if got, w := r.FSM().AppliedIndex(), leader.FSM().AppliedIndex(); got < w {
			return fmt.Errorf("applied %d < %d", got, w)
		}
		return nil
	})
	if s := r.Raft().Stats()["last_snapshot_index"]; s == "0" {
		t.Fatalf("restarted follower did not install a snapshot")
	}
	for i := range 400 {
		v, err := r.FSM().Get(kvKey(rk, fmt.Sprintf("k%03d", i)))
		if err != nil || string(v) != strconv.Itoa(i) {
			t.Fatalf("k%03d on restarted node: %q %v", i, v, err)
		}
	}
}

// TestPartitionedLeader: the leader of a shard is cut off by the fault
// network; the majority elects a new leader and writes go on.
func TestPartitionedLeader(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	c := tc.client()
	ctx := ctxT(t, 60*time.Second)
	const sh = shard.ID(0)
	rk := routingKeyFor(c.Map(), sh)
	old := tc.leaderOf(sh)
	tc.net.Isolate(tc.cfgs[old].ID)
	// The first attempt may reach the isolated leader, which accepts it and
	// then loses leadership: its outcome is unknown, and the client leaves
	// the decision to resend to the caller. Writing the same value again is
	// what this caller wants.
	if err := putUntilKnown(ctx, c, rk, []byte("during"), []byte("1")); err != nil {
		t.Fatalf("write with the old leader isolated: %v", err)
	}
	waitFor(t, 10*time.Second, "new leader", func() error {
		if l := tc.currentLeaderOf(sh); l < 0 || l == old {
			return fmt.Errorf("leader %d", l)
		}
		return nil
	})
	tc.net.Heal()
	r := tc.nodes[old].localReplica(sh)
	waitFor(t, 20*time.Second, "healed node catches up", func() error {
		v, err := r.FSM().Get(kvKey(rk, "during"))
		if err != nil || string(v) != "1" {
			return fmt.Errorf("%q %v", v, err)
		}
		return nil
	})
}
