package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The edges of a slot move, without the mover: the test proposes the
// state machine's move ops itself (freeze on the source, ingest and adopt
// on the target) and never publishes a map, so the client cannot follow
// the move and must fail with the moved error when its context ends.

// moveOp proposes a slot-move command to the leader of shard id.
func (tc *testCluster) moveOp(id shard.ID, cmd *fsm.Command) {
	tc.t.Helper()
	_, r := tc.leaderReplica(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Propose(ctx, cmd); err != nil {
		tc.t.Fatalf("shard %d: %s: %v", id, cmd.Op, err)
	}
}

// wantMoved checks that err is the client's moved error for slot, to
// target at version, reached when the context ended.
func wantMoved(t *testing.T, what string, err error, slot shard.Slot, target shard.ID, version uint64) {
	t.Helper()
	var me *client.MovedError
	switch {
	case err == nil:
		t.Errorf("%s: succeeded on a frozen slot", what)
	case !errors.As(err, &me):
		t.Errorf("%s: error %v, want a *client.MovedError", what, err)
	case *me != (client.MovedError{Slot: uint32(slot), TargetShard: uint32(target), MapVersion: version}):
		t.Errorf("%s: %+v, want slot %d to shard %d at version %d", what, *me, slot, target, version)
	case !errors.Is(err, context.DeadlineExceeded):
		t.Errorf("%s: error %v does not wrap the deadline", what, err)
	}
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// TestSlotFrozenEdges freezes the slot of one user on its shard, then
// ingests and adopts it on the other shard, and checks every edge: routed
// reads and writes (KV, registry, billing; linearizable and stale; unary
// and pipelined; coalesced writes) answer moved, never Internal or stale
// data, and the Go client retries them until its deadline; users of other
// slots are served; shard-wide listings and lookups by id list the user's
// records from one shard only; the RESP front retries, then answers
// TRYAGAIN; a Redis request whose keys route elsewhere answers moved.
func TestSlotFrozenEdges(t *testing.T) {
	tc := newTestCluster(t, 1, 2, func(c *Config) {
		c.RedisAddr = "127.0.0.1:0"
		c.RequestTimeout = time.Second
	})
	c := tc.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// u (frozen) and u2 (served) on the same shard, in different slots.
	var u, u2 keys.UserID
	for i := 1; ; i++ {
		u2 = keys.UserID(idBytesFor(0x22, i))
		if i == 1 {
			u = keys.UserID(idBytesFor(0x21, 1))
		}
		if c.ShardOf(u2[:]) == c.ShardOf(u[:]) && shard.SlotOf(u2[:]) != shard.SlotOf(u[:]) {
			break
		}
	}
	src := c.ShardOf(u[:])
	dst := 1 - src
	slot := shard.SlotOf(u[:])
	agent := keys.AgentID(idBytesFor(0xa2, 1))
	agent2 := keys.AgentID(idBytesFor(0xa2, 2))
	sb := idBytesFor(0x52, 1)
	sess := keys.SessionID(sb[:16])
	reg := c.Registry()
	for _, a := range []*records.AgentRecord{
		{AgentID: agent, UserID: u, Name: "frozen", Status: records.AgentRunning, Spec: records.AgentSpecRecord{RuntimeVersion: "v"}, CreatedAt: 1, UpdatedAt: 1},
		{AgentID: agent2, UserID: u2, Name: "served", Status: records.AgentRunning, Spec: records.AgentSpecRecord{RuntimeVersion: "v"}, CreatedAt: 1, UpdatedAt: 1},
	} {
		if err := reg.PutAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.PutSession(ctx, &records.SessionRecord{SessionID: sess, AgentID: agent, UserID: u, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	if err := reg.PutUser(ctx, &records.UserRecord{UserID: u, Email: "u@x", CreatedAt: 1, LastSeenAt: 1}); err != nil {
		t.Fatal(err)
	}
	for _, rk := range [][]byte{u[:], u2[:]} {
		if err := c.Put(ctx, rk, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// A Redis namespace in the frozen slot's shard, in a slot of its own.
	ns := ""
	for i := 0; ns == ""; i++ {
		cand := fmt.Sprintf("ns%d", i)
		if s := shard.SlotOf(keys.RedisRoutingKey([]byte(cand + ":k"))); c.ShardOf(keys.RedisRoutingKey([]byte(cand+":k"))) == src && s != slot {
			ns = cand
		}
	}
	rkey := ns + ":k"
	rslot := shard.SlotOf(keys.RedisRoutingKey([]byte(rkey)))
	rdb := redisClient(t, tc, 0, 2)
	if err := rdb.Set(ctx, rkey, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	version := tc.nodes[0].ShardMap().Version + 1 // never published
	frozen := shard.SlotSetOf(slot, rslot)
	tc.moveOp(src, &fsm.Command{Op: fsm.OpFreezeSlots, Move: &fsm.SlotMove{ID: 7, Slots: &frozen, Peer: dst, MapVersion: version}})

	// Routed reads and writes of the frozen slot: moved until the deadline.
	_, err := c.Get(shortCtx(t), u[:], []byte("k"))
	wantMoved(t, "Get", err, slot, dst, version)
	_, err = c.Get(shortCtx(t), u[:], []byte("k"), client.Stale())
	wantMoved(t, "stale Get", err, slot, dst, version)
	_, _, err = c.Scan(shortCtx(t), u[:], nil, nil, 0)
	wantMoved(t, "Scan", err, slot, dst, version)
	wantMoved(t, "Put", c.Put(shortCtx(t), u[:], []byte("k"), []byte("w")), slot, dst, version)
	_, err = reg.GetAgentOf(shortCtx(t), u, agent)
	wantMoved(t, "GetAgentOf", err, slot, dst, version)
	_, err = reg.ListAgentsByUser(shortCtx(t), u)
	wantMoved(t, "ListAgentsByUser", err, slot, dst, version)
	_, err = reg.GetUser(shortCtx(t), u)
	wantMoved(t, "GetUser", err, slot, dst, version)
	_, err = reg.UpdateAgentStatusOf(shortCtx(t), u, agent, records.AgentStopped)
	wantMoved(t, "UpdateAgentStatusOf", err, slot, dst, version)

	// Other slots are served.
	if v, err := c.Get(ctx, u2[:], []byte("k")); err != nil || string(v) != "v" {
		t.Errorf("Get of a served slot = %q, %v", v, err)
	}

	// Coalesced writes: each command of a multi gets its own answer.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rk := u2[:]
			if i%2 == 0 {
				rk = u[:]
			}
			errs[i] = c.Put(shortCtx(t), rk, []byte(fmt.Sprintf("c%d", i)), []byte("v"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 {
			wantMoved(t, fmt.Sprintf("concurrent put %d", i), err, slot, dst, version)
		} else if err != nil {
			t.Errorf("concurrent put %d of a served slot: %v", i, err)
		}
	}

	// The node's answer itself: the moved status with its detail, for a
	// read (the fence) and a write (the state machine's refusal), unary.
	cc, err := grpc.NewClient(tc.nodes[0].Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	kv := rpc.NewKVClient(cc)
	_, gerr := kv.Get(ctx, &rpc.GetRequest{RoutingKey: u[:], Key: []byte("k")})
	_, perr := kv.Put(ctx, &rpc.PutRequest{RoutingKey: u[:], Key: []byte("k"), Value: []byte("w")})
	for what, err := range map[string]error{"Get": gerr, "Put": perr} {
		k, d := rpc.KindOf(status.Convert(err))
		m, _ := d.(*rpc.Moved)
		if k != rpc.KindMoved || m.GetSlot() != uint32(slot) || m.GetTargetShard() != uint32(dst) || m.GetMapVersion() != version {
			t.Errorf("node's %s: %v (kind %s, detail %v), want moved slot %d to %d at %d", what, err, k, d, slot, dst, version)
		}
	}

	// Fan-out before the move is published: the source holds the user's
	// records but does not own them, and the client's map (version-1)
	// does not know the new owner: a listing is unavailable (moved, until
	// the deadline), never silently missing them; a lookup by id answers
	// moved, not "not found".
	_, err = reg.ListAllAgents(shortCtx(t))
	wantMoved(t, "ListAllAgents while frozen", err, slot, dst, version)
	_, err = reg.GetAgent(shortCtx(t), agent)
	var me *client.MovedError
	if !errors.As(err, &me) || errors.Is(err, client.ErrNotFound) {
		t.Errorf("GetAgent by id while frozen: %v, want a moved error, not not-found", err)
	}

	// The RESP front retries the frozen slot until the command's timeout,
	// then answers TRYAGAIN.
	if err := rdb.Set(ctx, rkey, "w", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") || !strings.Contains(err.Error(), "moved") {
		t.Errorf("SET on a frozen slot through the front: %v, want TRYAGAIN naming the move", err)
	}
	// The internal Redis service: keys that route to another shard than
	// the request names are a map disagreement (moved), not CROSSSLOT.
	_, err = rpc.NewRedisClient(cc).Exec(ctx, &rpc.RedisExecRequest{Shard: uint32(dst), Cmds: []*rpc.RedisArgv{{Args: [][]byte{[]byte("GET"), []byte(rkey)}}}})
	if k, d := rpc.KindOf(status.Convert(err)); k != rpc.KindMoved || d.(*rpc.Moved).GetTargetShard() != uint32(src) {
		t.Errorf("Redis request naming the wrong shard: %v, want moved to shard %d", err, src)
	}

	// The target ingests the frozen slot's data and adopts it: the
	// source still holds it (no drop yet), and each record must be
	// listed by one shard only.
	var pairs []fsm.Pair
	_, sr := tc.leaderReplica(src)
	if err := sr.FSM().ExportSlots(ctx, 7, nil, func(k, v []byte) error {
		pairs = append(pairs, fsm.Pair{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Before elastic shards every shard owns every slot: the target first
	// gives the slots up (a move away of its own, frozen and dropped:
	// it holds no data of them), as a shard that never owned them.
	tc.moveOp(dst, &fsm.Command{Op: fsm.OpFreezeSlots, Move: &fsm.SlotMove{ID: 6, Slots: &frozen, Peer: src, MapVersion: version}})
	tc.moveOp(dst, &fsm.Command{Op: fsm.OpDropSlots, Move: &fsm.SlotMove{ID: 6, Max: fsm.MaxDropKeys}})
	tc.moveOp(dst, &fsm.Command{Op: fsm.OpIngestSlots, Move: &fsm.SlotMove{ID: 7, Slots: &frozen, Peer: src, Pairs: pairs}})
	// Ingested, not adopted: the target lists none of it either.
	if got := shardAgentNames(t, cc, dst); strings.Contains(got, "frozen") {
		t.Errorf("target lists %q while ingesting", got)
	}
	tc.moveOp(dst, &fsm.Command{Op: fsm.OpAdoptSlots, Move: &fsm.SlotMove{ID: 7, Slots: &frozen, Peer: src}})

	if got := shardAgentNames(t, cc, src); got != "served" {
		t.Errorf("source (frozen, not dropped) lists %q, want only the served agent", got)
	}
	if got := shardAgentNames(t, cc, dst); got != "frozen" {
		t.Errorf("target (adopted) lists %q, want the moved agent", got)
	}
	// A shard-addressed request chosen from a map older than the move's
	// (the client's, still at version-1) is answered moved by each shard
	// that gave slots away under it (api's staleMap); one from the move's
	// map, or naming no version, is served.
	for _, id := range []shard.ID{src, dst} {
		_, err := rpc.NewRegistryClient(cc).ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: uint32(id), MapVersion: version - 1})
		if k, _ := rpc.KindOf(status.Convert(err)); k != rpc.KindMoved {
			t.Errorf("shard %d listing under map version %d: %v, want moved", id, version-1, err)
		}
		if _, err := rpc.NewRegistryClient(cc).ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: uint32(id), MapVersion: version}); err != nil {
			t.Errorf("shard %d listing under map version %d: %v", id, version, err)
		}
		_, err = rpc.NewRegistryClient(cc).GetAgent(ctx, &rpc.AgentRef{Target: &rpc.Target{Shard: uint32(id), HasShard: true, MapVersion: version - 1}, AgentId: agent[:]})
		if k, _ := rpc.KindOf(status.Convert(err)); k != rpc.KindMoved {
			t.Errorf("shard %d lookup under map version %d: %v, want moved", id, version-1, err)
		}
	}
	if _, err := reg.GetAgent(shortCtx(t), agent); !errors.As(err, &me) {
		t.Errorf("GetAgent by id after adopt, map unpublished: %v, want moved", err)
	}
	if a, err := rpc.NewRegistryClient(cc).GetAgent(ctx, &rpc.AgentRef{Target: &rpc.Target{Shard: uint32(dst), HasShard: true, MapVersion: version}, AgentId: agent[:]}); err != nil || a.GetAgent().GetName() != "frozen" {
		t.Errorf("target's lookup by id after adopt: %v, %v", a, err)
	}
	for id, want := range map[shard.ID]int{src: 0, dst: 1} {
		resp, err := rpc.NewRegistryClient(cc).ListSessionsByAgent(ctx, &rpc.ListSessionsByAgentRequest{Target: &rpc.Target{Shard: uint32(id), HasShard: true}, AgentId: agent[:]})
		if err != nil || len(resp.GetSessions()) != want {
			t.Errorf("shard %d lists %d sessions of the agent (%v), want %d", id, len(resp.GetSessions()), err, want)
		}
	}
	// Routed calls still go to the source by the client's map (the map
	// is never published): moved until the deadline.
	_, err = c.Get(shortCtx(t), u[:], []byte("k"))
	wantMoved(t, "Get after adopt, map unpublished", err, slot, dst, version)
}

// idBytesFor is a test id of 32 bytes: tag, then n.
func idBytesFor(tag byte, n int) [32]byte {
	var b [32]byte
	b[0] = tag
	b[1], b[2] = byte(n>>8), byte(n)
	return b
}

func agentNames(as []*records.AgentRecord) string {
	var names []string
	for _, a := range as {
		names = append(names, a.Name)
	}
	return strings.Join(names, ",")
}

// shardAgentNames lists the agents shard id answers for itself.
func shardAgentNames(t *testing.T, cc *grpc.ClientConn, id shard.ID) string {
	t.Helper()
	resp, err := rpc.NewRegistryClient(cc).ListShardAgents(context.Background(), &rpc.ShardAgentsRequest{Shard: uint32(id)})
	if err != nil {
		t.Fatalf("ListShardAgents of shard %d: %v", id, err)
	}
	var names []string
	for _, a := range resp.GetAgents() {
		names = append(names, a.GetName())
	}
	return strings.Join(names, ",")
}
