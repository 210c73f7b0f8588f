package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// awaitTyped reads a typed watch until an event matches, failing on the
// watch's error or after timeout; every event read is passed to seen
// first (nil: none). It returns the event and its message's revision.
func awaitTyped[K comparable, R any](t *testing.T, ch <-chan client.TypedWatchResponse[K, R], timeout time.Duration, what string,
	seen func(client.TypedWatchResponse[K, R], client.TypedEvent[K, R]), match func(client.TypedEvent[K, R]) bool) (client.TypedEvent[K, R], uint64) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			if r.Err != nil {
				t.Fatalf("%s: %v", what, r.Err)
			}
			for _, e := range r.Events {
				if seen != nil {
					seen(r, e)
				}
				if match(e) {
					return e, r.Revision
				}
			}
		case <-deadline:
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}

// listed reads a typed ListWatch's listing: the records by id, and its
// revision.
func listed[K comparable, R any](t *testing.T, ch <-chan client.TypedWatchResponse[K, R]) (map[K]R, uint64) {
	t.Helper()
	out := map[K]R{}
	for r := range ch {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if !r.Listing {
			t.Fatalf("a change %+v before the listing ended", r)
		}
		for _, e := range r.Events {
			if e.Type != client.EventPut {
				t.Fatalf("listing event %+v", e)
			}
			out[e.ID] = e.Record
		}
		if r.ListDone {
			return out, r.Revision
		}
	}
	t.Fatal("the watch ended during its listing")
	return nil, 0
}

// TestTypedWatches: the typed watches against a 3-node cluster. Runners:
// the listing holds the runner already up, decoded; a runner started with
// StartRunner appears as a put with its record, and after its heartbeats
// stop, as a delete (not before its lease could expire), on the
// ListWatch and on a Watch from the listing's revision; the runner that
// keeps heartbeating is never deleted. Bots: one pool's ListWatch shows a
// bot registered into it (without a token, HasToken set) and its
// removal, not a bot of another pool, which WatchBots (every pool) shows.
// Pools: the seed pool in the listing, a new pool as a put. Agents: a
// user's agent put, failed by its ended lease, deleted.
func TestTypedWatches(t *testing.T) {
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		leaseTweak(c)
		c.TokenKeys = poolsRing(t, "k1")
	})
	c := tc.client()
	p := c.Pools()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ttl := client.MinLeaseTTL

	r0, err := p.StartRunner(ctx, "runner-0", "", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Stop()
	lw := p.ListWatchRunners(ctx)
	have, rev := listed(t, lw)
	if len(have) != 1 || have["runner-0"] == nil || have["runner-0"].RunnerID != "runner-0" || have["runner-0"].LastSeen == 0 {
		t.Fatalf("runners listed: %+v", have)
	}
	w := p.WatchRunners(ctx, client.WithAfter(rev))

	r1, err := p.StartRunner(ctx, "runner-1", `{"host":"h1"}`, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Stop()
	noR0Delete := func(_ client.RunnerWatchResponse, e client.RunnerEvent) {
		if e.ID == "runner-0" && e.Type == client.EventDelete {
			t.Fatalf("runner-0 keeps heartbeating, yet deleted")
		}
	}
	for _, ch := range []<-chan client.RunnerWatchResponse{lw, w} {
		e, _ := awaitTyped(t, ch, 20*time.Second, "runner-1 put", noR0Delete, func(e client.RunnerEvent) bool { return e.ID == "runner-1" })
		if e.Type != client.EventPut || e.Record == nil || e.Record.RunnerID != "runner-1" || e.Record.Meta != `{"host":"h1"}` || e.Record.LastSeen == 0 {
			t.Fatalf("runner-1's first event: %+v", e)
		}
	}
	r1.Stop()
	_, renewed := r1.TTL()
	for _, ch := range []<-chan client.RunnerWatchResponse{lw, w} {
		e, _ := awaitTyped(t, ch, ttl+30*time.Second, "runner-1 delete", noR0Delete, func(e client.RunnerEvent) bool {
			return e.ID == "runner-1" && e.Type == client.EventDelete
		})
		if e.Record != nil {
			t.Fatalf("delete with a record: %+v", e)
		}
	}
	if el := time.Since(renewed); el < ttl {
		t.Fatalf("runner-1 deleted %v after its last acknowledged heartbeat, within its TTL %v", el, ttl)
	}
	t.Logf("runner-1 deleted %v after its last heartbeat (TTL %v)", time.Since(renewed).Round(time.Millisecond), ttl)

	// Pools and bots.
	pw := p.ListWatchPools(ctx)
	pools, _ := listed(t, pw)
	if pools[records.DefaultPoolID] == nil || pools[records.DefaultPoolID].Visibility != records.VisibilityPublic {
		t.Fatalf("pools listed: %+v", pools)
	}
	bw := p.ListWatchBots(ctx, "pool_w")
	if bots, _ := listed(t, bw); len(bots) != 0 {
		t.Fatalf("bots of pool_w listed: %+v", bots)
	}
	all := p.WatchBots(ctx, client.WithAfter(0))
	if _, err := p.CreatePool(ctx, "alice", client.PoolSpec{PoolID: "pool_w", Name: "w", Visibility: records.VisibilityPrivate}); err != nil {
		t.Fatal(err)
	}
	e, _ := awaitTyped(t, pw, 20*time.Second, "pool_w put", nil, func(e client.PoolEvent) bool { return e.ID == "pool_w" })
	if e.Type != client.EventPut || e.Record.OwnerUserID != "alice" || e.Record.Visibility != records.VisibilityPrivate {
		t.Fatalf("pool_w event: %+v", e)
	}
	for _, b := range []client.BotSpec{
		{AgentID: "bot-other", Token: "tok-o", PoolID: records.DefaultPoolID},
		{AgentID: "bot-w", Token: "tok-w", ClientID: "app-w", Tag: "W#1", PoolID: "pool_w"},
	} {
		if _, err := p.RegisterBot(ctx, "alice", b); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RemoveBot(ctx, "alice", "bot-w"); err != nil {
		t.Fatal(err)
	}
	onlyPoolW := func(_ client.BotWatchResponse, e client.BotEvent) {
		if e.ID != "bot-w" {
			t.Fatalf("pool_w's watch shows %+v", e)
		}
	}
	e2, _ := awaitTyped(t, bw, 20*time.Second, "bot-w registered", onlyPoolW, func(client.BotEvent) bool { return true })
	if e2.Type != client.EventPut || !e2.Record.HasToken || e2.Record.PoolID != "pool_w" || e2.Record.Tag != "W#1" || e2.Record.OwnerUserID != "alice" {
		t.Fatalf("bot-w's first event: %+v %+v", e2, e2.Record)
	}
	e2, _ = awaitTyped(t, bw, 20*time.Second, "bot-w removed", onlyPoolW, func(client.BotEvent) bool { return true })
	if e2.Type != client.EventDelete || e2.ID != "bot-w" {
		t.Fatalf("bot-w's second event: %+v", e2)
	}
	var order []string
	awaitTyped(t, all, 20*time.Second, "every pool's bots", func(_ client.BotWatchResponse, e client.BotEvent) {
		order = append(order, fmt.Sprintf("%s %s", e.Type, e.ID))
	}, func(e client.BotEvent) bool { return e.ID == "bot-w" && e.Type == client.EventDelete })
	if fmt.Sprint(order) != "[put bot-other put bot-w delete bot-w]" {
		t.Fatalf("WatchBots events: %v", order)
	}

	// A user's agents.
	reg := c.Registry()
	user, agent := keys.UserID{7}, keys.AgentID{8}
	aw := reg.ListWatchAgents(ctx, user)
	if as, _ := listed(t, aw); len(as) != 0 {
		t.Fatalf("agents listed: %+v", as)
	}
	now := time.Now().UnixMilli()
	if err := reg.PutAgent(ctx, &records.AgentRecord{AgentID: agent, UserID: user, Name: "scout", Status: records.AgentRunning,
		Spec: records.AgentSpecRecord{CPUMillicores: 100, MemoryMB: 64, RuntimeVersion: "v1"}, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	a, _ := awaitTyped(t, aw, 20*time.Second, "agent put", nil, func(e client.AgentEvent) bool { return e.ID == agent })
	if a.Type != client.EventPut || a.Record.Name != "scout" || a.Record.Status != records.AgentRunning {
		t.Fatalf("agent's first event: %+v", a)
	}
	hb, err := reg.StartAgentHeartbeat(ctx, user, agent, ttl)
	if err != nil {
		t.Fatal(err)
	}
	hb.Stop()
	awaitTyped(t, aw, ttl+30*time.Second, "agent failed", nil, func(e client.AgentEvent) bool {
		return e.ID == agent && e.Type == client.EventPut && e.Record.Status == records.AgentFailed
	})
	if err := reg.DeleteAgentOf(ctx, user, agent); err != nil {
		t.Fatal(err)
	}
	awaitTyped(t, aw, 20*time.Second, "agent deleted", nil, func(e client.AgentEvent) bool {
		return e.ID == agent && e.Type == client.EventDelete
	})
}
