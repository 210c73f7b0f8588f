package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// leaseTweak makes the leaders checkpoint often (the tests' TTLs are
// short).
func leaseTweak(c *Config) { c.LeaseCheckpointInterval = 100 * time.Millisecond }

// newLeaseTest starts the lease tests' cluster (3 nodes, one shard, its
// leaders checkpointing often) and returns it with a client through it and
// a context that ends after timeout, or with the test.
func newLeaseTest(t *testing.T, timeout time.Duration) (*testCluster, context.Context, *client.Client) {
	t.Helper()
	tc := newTestCluster(t, 3, 1, leaseTweak)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	c := tc.client()
	t.Cleanup(cancel) // runs before the client's Close, as a deferred cancel would
	return tc, ctx, c
}

// grantUntilKnown grants a lease, asking again while the outcome is
// unknown (a lease granted meanwhile expires by itself).
func grantUntilKnown(ctx context.Context, t *testing.T, ls *client.Leases, rk []byte, ttl time.Duration) client.LeaseID {
	t.Helper()
	for {
		id, err := ls.Grant(ctx, rk, ttl)
		if err == nil {
			return id
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) || ctx.Err() != nil {
			t.Fatalf("grant for %s: %v", rk, err)
		}
	}
}

// putLeased puts rk/k with lease id (none: 0), sending it again while the
// outcome is unknown.
func putLeased(ctx context.Context, t *testing.T, c *client.Client, rk []byte, k string, id client.LeaseID) {
	t.Helper()
	for {
		var opts []client.WriteOption
		if id != 0 {
			opts = append(opts, client.WithLease(id))
		}
		err := c.Put(ctx, rk, []byte(k), []byte("v"), opts...)
		if err == nil {
			return
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) || ctx.Err() != nil {
			t.Fatalf("put %s/%s: %v", rk, k, err)
		}
	}
}

// present reports whether kv key rk/k is stored (a linearizable read).
func present(ctx context.Context, t *testing.T, c *client.Client, rk []byte, k string) bool {
	t.Helper()
	_, err := c.Get(ctx, rk, []byte(k))
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get %s/%s: %v", rk, k, err)
	}
	return err == nil
}

// awaitGone polls until rk/k is gone, checking it is still there at every
// poll before notBefore (the lease's TTL after its last acknowledged
// renewal: safety), failing after timeout. It returns when it went.
func awaitGone(ctx context.Context, t *testing.T, c *client.Client, rk []byte, k string, notBefore time.Time, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		polled := time.Now()
		if !present(ctx, t, c, rk, k) {
			if polled.Before(notBefore) {
				t.Fatalf("%s/%s gone %v before its lease could expire", rk, k, notBefore.Sub(polled))
			}
			return polled
		}
		if polled.After(deadline) {
			t.Fatalf("%s/%s still there %v after its lease's TTL", rk, k, polled.Sub(notBefore))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeaseExpiryAndRevoke: revoking a lease deletes its keys and nothing
// else; a lease no longer kept alive expires, its keys with it, never
// before its TTL from the last keep-alive; the keep-alive stream answers
// 0 for a lease that is gone; bad input is refused and changes nothing.
func TestLeaseExpiryAndRevoke(t *testing.T) {
	tc, ctx, c := newLeaseTest(t, 60*time.Second)
	ls := c.Leases()
	rk := []byte("alice")
	ttl := client.MinLeaseTTL

	id := grantUntilKnown(ctx, t, ls, rk, ttl)
	for _, k := range []string{"a", "b"} {
		putLeased(ctx, t, c, rk, k, id)
	}
	putLeased(ctx, t, c, rk, "plain", 0)
	for {
		_, err := c.Batch(ctx, rk, nil, []client.Op{{Key: []byte("c"), Value: []byte("v"), Lease: id}})
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) {
			t.Fatal(err)
		}
	}
	info, err := ls.TimeToLive(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.KeyCount != 3 || len(info.Keys) != 3 || info.Keys[0].Kind != "kv" || string(info.Keys[0].RoutingKey) != "alice" ||
		string(info.Keys[0].Key) != "a" || info.TTL != ttl || info.Remaining <= 0 || info.Remaining > ttl {
		t.Fatalf("TimeToLive: %+v", info)
	}
	if all, err := ls.List(ctx); err != nil || len(all) != 1 || all[0].ID != id || string(all[0].RoutingKey) != "alice" {
		t.Fatalf("List: %+v %v", all, err)
	}
	for unknown := false; ; unknown = true {
		n, err := ls.Revoke(ctx, id)
		if errors.Is(err, client.ErrOutcomeUnknown) {
			continue
		}
		if unknown && errors.Is(err, client.ErrLeaseNotFound) {
			break // the first attempt applied
		}
		if err != nil || n != 3 {
			t.Fatalf("Revoke: %d %v", n, err)
		}
		break
	}
	for _, k := range []string{"a", "b", "c"} {
		if present(ctx, t, c, rk, k) {
			t.Fatalf("%s outlived its revoked lease", k)
		}
	}
	if !present(ctx, t, c, rk, "plain") {
		t.Fatal("the revoke deleted a key without the lease")
	}
	if _, err := ls.Revoke(ctx, id); !errors.Is(err, client.ErrLeaseNotFound) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("second revoke: %v", err)
	}

	// Expiry.
	id2 := grantUntilKnown(ctx, t, ls, rk, ttl)
	putLeased(ctx, t, c, rk, "d", id2)
	sent := time.Now()
	if got, err := ls.KeepAliveOnce(ctx, id2); err != nil || got != ttl {
		t.Fatalf("KeepAliveOnce: %v %v", got, err)
	}
	gone := awaitGone(ctx, t, c, rk, "d", sent.Add(ttl), 30*time.Second)
	t.Logf("the abandoned lease's key went %v after the last keep-alive (TTL %v)", gone.Sub(sent), ttl)
	if _, err := ls.KeepAliveOnce(ctx, id2); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of an expired lease: %v", err)
	}
	if _, err := ls.TimeToLive(ctx, id2, false); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("TimeToLive of an expired lease: %v", err)
	}

	// The stream: a live lease gets its TTL, a gone one 0.
	id3 := grantUntilKnown(ctx, t, ls, rk, ttl)
	leader := tc.leaderOf(0)
	cc, err := grpc.NewClient(tc.nodes[leader].Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := rpc.NewLeaseClient(cc).KeepAliveStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		id  client.LeaseID
		ttl int64
	}{{id3, ttl.Milliseconds()}, {id2, 0}, {id3, ttl.Milliseconds()}} {
		if err := st.Send(&rpc.LeaseKeepAliveRequest{Id: uint64(want.id)}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil || resp.GetId() != uint64(want.id) || resp.GetTtlMs() != want.ttl {
			t.Fatalf("stream keep-alive of %s: %v %v, want ttl %d", want.id, resp, err, want.ttl)
		}
	}
	// A malformed id ends the stream with InvalidArgument.
	if err := st.Send(&rpc.LeaseKeepAliveRequest{Id: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream keep-alive of id 0: %v", err)
	}

	// Bad input: refused, nothing changed.
	if _, err := ls.Grant(ctx, rk, time.Millisecond); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("grant of 1ms: %v", err)
	}
	_, err = rpc.NewLeaseClient(cc).Grant(ctx, &rpc.LeaseGrantRequest{RoutingKey: rk, TtlMs: 1})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "invalid argument: ttl 1ms: want 2s..24h0m0s" {
		t.Fatalf("server grant of 1ms: %v", err)
	}
	if err := c.Put(ctx, []byte("bob"), []byte("x"), []byte("v"), client.WithLease(id3)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("put with a lease of another slot: %v", err)
	}
	absent := client.LeaseID(keys.LeaseIDOf(byte(shard.SlotOf(rk)), 999))
	if err := c.Put(ctx, rk, []byte("x"), []byte("v"), client.WithLease(absent)); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("put with an absent lease: %v", err)
	}
	if present(ctx, t, c, rk, "x") {
		t.Fatal("a refused put wrote")
	}
	if all, err := ls.List(ctx); err != nil || len(all) != 1 || all[0].ID != id3 {
		t.Fatalf("List after the refusals: %+v %v", all, err)
	}
}

// transferShard moves shard id's leadership to another voter, asking its
// leader again while leadership is in flux (a transfer finds the node no
// longer leading).
func (tc *testCluster) transferShard(ctx context.Context, id shard.ID) {
	tc.t.Helper()
	waitFor(tc.t, 15*time.Second, fmt.Sprintf("leadership of shard %d transferred", id), func() error {
		i := tc.leaderOf(id)
		if i < 0 {
			return fmt.Errorf("no leader of shard %d", id)
		}
		_, err := tc.nodes[i].TransferLeader(ctx, fmt.Sprint(id), "")
		return err
	})
}

// TestLeaseKeepAliveAcrossLeaderChanges: a lease kept alive (by the
// client's background KeepAlive on its stream) never expires while the
// shard's leadership moves and its leader restarts; stopped, it expires.
func TestLeaseKeepAliveAcrossLeaderChanges(t *testing.T) {
	tc, ctx, c := newLeaseTest(t, 120*time.Second)
	ls := c.Leases()
	rk := []byte("alice")
	// Long enough for the client to find the next leader (an election,
	// its priming) on a loaded machine under the race detector.
	ttl := 5 * time.Second
	id := grantUntilKnown(ctx, t, ls, rk, ttl)
	putLeased(ctx, t, c, rk, "k", id)
	ka, err := ls.KeepAlive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if !present(ctx, t, c, rk, "k") {
			ttl, renewed := ka.TTL()
			if since := time.Since(renewed); since < ttl {
				t.Fatalf("%s: the key is gone %v after the last acknowledged renewal, within the TTL %v", when, since, ttl)
			}
			t.Fatalf("%s: the key is gone: no renewal acknowledged for %v (TTL %v; keep-alive: %v)", when, time.Since(renewed), ttl, ka.Err())
		}
		if err := ka.Err(); err != nil {
			t.Fatalf("%s: keep-alive stopped: %v", when, err)
		}
	}
	for i := range 4 {
		tc.transferShard(ctx, 0)
		time.Sleep(ttl / 2)
		check(fmt.Sprintf("transfer %d", i+1))
	}
	// The leader restarts.
	leader := tc.leaderOf(0)
	tc.stop(leader)
	time.Sleep(ttl)
	check("leader down")
	tc.start(leader)
	tc.waitReady()
	time.Sleep(ttl)
	check("leader back")
	_, renewed := ka.TTL()
	ka.Stop()
	if err := ka.Err(); err != nil {
		t.Fatalf("stopped keep-alive: %v", err)
	}
	gone := awaitGone(ctx, t, c, rk, "k", renewed.Add(ttl), 30*time.Second)
	t.Logf("expired %v after the last renewal (TTL %v)", gone.Sub(renewed), ttl)
}

// TestLeaseAbandonedExpiresDespiteTransfers: leadership moving every third
// of a TTL (each new leader gives leases a full TTL or their checkpointed
// remainder) does not keep an abandoned lease alive forever (liveness),
// nor ends a lease kept alive meanwhile (safety).
func TestLeaseAbandonedExpiresDespiteTransfers(t *testing.T) {
	tc, ctx, c := newLeaseTest(t, 120*time.Second)
	ls := c.Leases()
	ttl := 6 * time.Second
	abandoned := grantUntilKnown(ctx, t, ls, []byte("alice"), ttl)
	kept := grantUntilKnown(ctx, t, ls, []byte("bob"), ttl)
	putLeased(ctx, t, c, []byte("alice"), "a", abandoned)
	granted := time.Now()
	putLeased(ctx, t, c, []byte("bob"), "b", kept)
	ka, err := ls.KeepAlive(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Stop()
	transfers := 0
	for present(ctx, t, c, []byte("alice"), "a") {
		if time.Since(granted) > 10*ttl {
			t.Fatalf("the abandoned lease outlived %d leader transfers, %v", transfers, time.Since(granted))
		}
		tc.transferShard(ctx, 0)
		transfers++
		time.Sleep(ttl / 3)
	}
	t.Logf("the abandoned lease (TTL %v) expired %v after its grant, through %d leader transfers", ttl, time.Since(granted), transfers)
	if transfers < 3 {
		t.Fatalf("only %d transfers before the expiry: the scenario did not happen", transfers)
	}
	if !present(ctx, t, c, []byte("bob"), "b") || ka.Err() != nil {
		t.Fatalf("the kept-alive lease ended: %v", ka.Err())
	}
}

// TestLeaseCheckpointClearedByKeepAlive: a keep-alive of a lease whose
// remaining TTL was checkpointed renews it only once the checkpoint is
// cleared, so a leader elected right after gives it a full TTL from its
// election, not the stale remainder: the lease then lives at least its TTL
// after that keep-alive.
func TestLeaseCheckpointClearedByKeepAlive(t *testing.T) {
	tc, ctx, c := newLeaseTest(t, 60*time.Second)
	ls := c.Leases()
	rk := []byte("alice")
	ttl := 6 * time.Second
	id := grantUntilKnown(ctx, t, ls, rk, ttl)
	putLeased(ctx, t, c, rk, "k", id)
	// Not kept alive for half its TTL: the leader checkpoints it.
	waitFor(t, 2*ttl, "a checkpoint", func() error {
		_, r := tc.leaderReplica(0)
		rec, err := r.FSM().Lease(uint64(id))
		if err != nil {
			return err
		}
		if rec.RemainingMs == 0 {
			return errors.New("no checkpoint yet")
		}
		return nil
	})
	sent := time.Now()
	if _, err := ls.KeepAliveOnce(ctx, id); err != nil {
		t.Fatal(err)
	}
	tc.transferShard(ctx, 0)
	gone := awaitGone(ctx, t, c, rk, "k", sent.Add(ttl), 30*time.Second)
	t.Logf("expired %v after the keep-alive (TTL %v)", gone.Sub(sent), ttl)
}

// TestLeaseAcrossSplitAndMerge: a lease, its key and its keep-alive
// follow the lease's slot through a split and a merge back; an abandoned
// lease of the moved slot expires on its new shard.
func TestLeaseAcrossSplitAndMerge(t *testing.T) {
	tc, ctx, c := newLeaseTest(t, 150*time.Second)
	ls := c.Leases()
	rk := []byte("alice")
	// Long enough to outlast the moved slot's unavailability (freeze to
	// publish) under the race detector on a loaded machine.
	ttl := 6 * time.Second
	kept := grantUntilKnown(ctx, t, ls, rk, ttl)
	abandoned := grantUntilKnown(ctx, t, ls, rk, ttl)
	putLeased(ctx, t, c, rk, "k", kept)
	ka, err := ls.KeepAlive(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	moving := shard.SlotSetOf(shard.SlotOf(rk))
	mv, err := tc.nodes[0].SplitShard(ctx, 0, &moving)
	if err != nil {
		t.Fatal(err)
	}
	// Racing the freeze: refused (moved, then the lease may have expired)
	// or of unknown outcome are fine.
	if err := c.Put(ctx, rk, []byte("a"), []byte("v"), client.WithLease(abandoned)); err != nil && !errors.Is(err, client.ErrLeaseNotFound) && !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 60*time.Second)
	waitFor(t, 10*time.Second, "the client's map names the new shard", func() error {
		if err := c.RefreshMap(ctx); err != nil {
			return err
		}
		if got := c.ShardOf(rk); got != mv.Target {
			return fmt.Errorf("alice on shard %d, want %d", got, mv.Target)
		}
		return nil
	})
	info, err := ls.TimeToLive(ctx, kept, true)
	if err != nil || info.KeyCount != 1 || string(info.Keys[0].Key) != "k" {
		t.Fatalf("TimeToLive on the new shard: %+v %v", info, err)
	}
	// The abandoned lease (and its key, if attached before the freeze)
	// expire on the new shard.
	waitFor(t, ttl+30*time.Second, "the abandoned lease expired on the new shard", func() error {
		if _, err := ls.TimeToLive(ctx, abandoned, false); !errors.Is(err, client.ErrLeaseNotFound) {
			return fmt.Errorf("lease %s: %v", abandoned, err)
		}
		if present(ctx, t, c, rk, "a") {
			return errors.New("its key is still there")
		}
		return nil
	})
	time.Sleep(ttl)
	if !present(ctx, t, c, rk, "k") || ka.Err() != nil {
		t.Fatalf("after the split the kept-alive lease ended: %v", ka.Err())
	}
	// A new lease of the slot is granted there: an id of the slot (its
	// first byte; the rest is random since protocol version 4), none of
	// the ids it holds or held.
	if next := grantUntilKnown(ctx, t, ls, rk, ttl); next == abandoned || next == kept || uint64(next)>>56 != uint64(abandoned)>>56 {
		t.Fatalf("grant after the split: %s, after %s and %s", next, abandoned, kept)
	}

	if _, err := tc.nodes[1].MergeShards(ctx, 0, mv.Target); err != nil {
		t.Fatal(err)
	}
	tc.waitMovesDone(ctx, 60*time.Second)
	time.Sleep(ttl)
	if !present(ctx, t, c, rk, "k") || ka.Err() != nil {
		t.Fatalf("after the merge the kept-alive lease ended: %v", ka.Err())
	}
	if info, err := ls.TimeToLive(ctx, kept, false); err != nil || info.KeyCount != 1 {
		t.Fatalf("TimeToLive after the merge: %+v %v", info, err)
	}
	_, renewed := ka.TTL()
	ka.Stop()
	awaitGone(ctx, t, c, rk, "k", renewed.Add(ttl), 30*time.Second)
}

// TestLeaseRunnersAndAgents: a runner started with a lease is listed while
// it heartbeats and disappears by itself once its heartbeats stop (or at
// once when closed); an agent whose heartbeats stop becomes failed, its
// status index moved.
func TestLeaseRunnersAndAgents(t *testing.T) {
	_, ctx, c := newLeaseTest(t, 60*time.Second)
	p := c.Pools()
	ttl := client.MinLeaseTTL
	runners := func() []string {
		rs, err := p.ListRunners(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.RunnerID)
		}
		return ids
	}
	r1, err := p.StartRunner(ctx, "runner-1", `{"v":1}`, ttl)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := p.StartRunner(ctx, "runner-2", "", ttl)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + ttl/2) // heartbeats keep them
	if ids := runners(); !slices.Contains(ids, "runner-1") || !slices.Contains(ids, "runner-2") {
		t.Fatalf("runners %v", ids)
	}
	if err := r2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := runners(); slices.Contains(ids, "runner-2") {
		t.Fatalf("closed runner still listed: %v", ids)
	}
	_, renewed := r1.TTL()
	r1.Stop() // its heartbeats stop
	waitFor(t, ttl+30*time.Second, "runner-1 gone", func() error {
		if ids := runners(); slices.Contains(ids, "runner-1") {
			return fmt.Errorf("runners %v", ids)
		}
		return nil
	})
	t.Logf("runner-1 gone %v after its last heartbeat (TTL %v)", time.Since(renewed), ttl)

	reg := c.Registry()
	user, agent := keys.UserID{7}, keys.AgentID{8}
	now := time.Now().UnixMilli()
	if err := reg.PutAgent(ctx, &records.AgentRecord{AgentID: agent, UserID: user, Name: "scout", Status: records.AgentRunning,
		Spec: records.AgentSpecRecord{CPUMillicores: 100, MemoryMB: 64, RuntimeVersion: "v1"}, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	hb, err := reg.StartAgentHeartbeat(ctx, user, agent, ttl)
	if err != nil {
		t.Fatal(err)
	}
	a, err := reg.GetAgentOf(ctx, user, agent)
	if err != nil || a.LastHeartbeatAt == nil || a.Status != records.AgentRunning {
		t.Fatalf("agent after a heartbeat: %+v %v", a, err)
	}
	hb.Stop()
	waitFor(t, ttl+30*time.Second, "the agent failed", func() error {
		a, err := reg.GetAgentOf(ctx, user, agent)
		if err != nil {
			return err
		}
		if a.Status != records.AgentFailed {
			return fmt.Errorf("agent %s", a.Status)
		}
		return nil
	})
	failed, err := reg.ListAgentsByStatus(ctx, records.AgentFailed)
	if err != nil || len(failed) != 1 || failed[0].AgentID != agent {
		t.Fatalf("failed agents: %+v %v", failed, err)
	}
	if running, err := reg.ListAgentsByStatus(ctx, records.AgentRunning); err != nil || len(running) != 0 {
		t.Fatalf("running agents: %+v %v", running, err)
	}
	if _, err := reg.AgentHeartbeat(ctx, user, keys.AgentID{9}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("heartbeat of an absent agent: %v", err)
	}
}
