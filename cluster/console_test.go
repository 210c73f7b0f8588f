package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/events"
)

// hasEvent reports whether node n's events hold one of kind whose text
// contains text.
func hasEvent(n *Node, kind events.Kind, text string) error {
	var seen []string
	for _, e := range n.Events() {
		if e.Kind == kind && strings.Contains(e.Text, text) {
			return nil
		}
		seen = append(seen, e.Text)
	}
	return fmt.Errorf("no %s event %q among %q", kind, text, seen)
}

// TestConsoleStatsAndEvents: NodeStats gathers every member's counters
// (the shard leader's writes counted), a node down answers an error; a
// node's events record the leaders its replicas learn of, gossip
// liveness and the membership changes of the committed state.
func TestConsoleStatsAndEvents(t *testing.T) {
	tc := newTestCluster(t, 3, 1, nil)
	ctx := ctxT(t, 60*time.Second)
	if err := putUntilKnown(ctx, tc.client(), []byte("u"), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	n1 := tc.nodes[0]
	ids := []string{"n1", "n2", "n3"}
	leader := tc.cfgs[tc.leaderOf(0)].ID
	// Every replica learns of its group's leader (the meta group's
	// followers by its first heartbeat: CI once collected the stats before
	// n1's meta replica had heard one).
	waitFor(t, 10*time.Second, "every replica learned of a leader", func() error {
		for _, r := range n1.NodeStats(ctx, ids) {
			if r.Err != nil {
				return r.Err
			}
			for _, c := range r.Stats.Replicas {
				if c.LeaderChanges == 0 {
					return fmt.Errorf("%s: %s learned of no leader yet", r.Node, c.Shard)
				}
			}
		}
		return nil
	})
	res := n1.NodeStats(ctx, ids)
	for i, r := range res {
		if r.Node != ids[i] || r.Err != nil || r.Stats.NodeId != ids[i] {
			t.Fatalf("NodeStats[%d] = %+v", i, r)
		}
		groups := map[string]bool{}
		for _, c := range r.Stats.Replicas {
			groups[c.Shard] = true
			if c.Shard == "0" && c.Leader != (r.Node == leader) {
				t.Errorf("%s: shard 0 leader %v, the leader is %s", r.Node, c.Leader, leader)
			}
			if c.Shard == "0" && c.Leader && c.Commands == 0 {
				t.Errorf("%s leads shard 0 and counted no command", r.Node)
			}
			if c.LeaderChanges == 0 {
				t.Errorf("%s: %s learned of no leader", r.Node, c.Shard)
			}
		}
		if !groups["0"] || !groups["meta"] {
			t.Errorf("%s: replicas %v, want shard 0 and meta", r.Node, groups)
		}
		if r.Node == leader && r.Stats.Apply.GetCount() == 0 {
			t.Errorf("%s: no apply latency observed", r.Node)
		}
	}
	waitFor(t, 10*time.Second, "events of leaders and liveness", func() error {
		for _, c := range []struct {
			kind events.Kind
			text string
		}{{events.Leader, "shard 0: leader " + leader}, {events.Leader, "meta: leader "}, {events.Gossip, "n3 alive"}} {
			if err := hasEvent(n1, c.kind, c.text); err != nil {
				return err
			}
		}
		return nil
	})

	tc.stop(2)
	waitFor(t, 20*time.Second, "n3 seen dead", func() error { return hasEvent(n1, events.Gossip, "n3 dead") })
	if res := n1.NodeStats(ctx, ids); res[2].Err == nil || res[0].Err != nil || res[1].Err != nil {
		t.Errorf("NodeStats with n3 down: %+v", res)
	}
	if _, err := n1.RemoveNode(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n3 leaving", func() error { return hasEvent(n1, events.Member, "n3 leaving (was active)") })
}
