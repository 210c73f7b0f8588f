package main

import (
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
)

// TestPrintStatusVersion: status prints the protocol version the cluster
// runs, what a raise waits for or that it is due, and version 1 for the
// answer of a node before protocol versions (which has no such field).
func TestPrintStatusVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   cluster.ClusterStatus
		want []string
	}{
		{"raised", cluster.ClusterStatus{ProtocolVersion: 2, Protocol: cluster.VersionPlan{Active: 2, Target: 2, Highest: 2}},
			[]string{"protocol version 2\n\n"}},
		{"waiting", cluster.ClusterStatus{ProtocolVersion: 1, Protocol: cluster.VersionPlan{Active: 1, Target: 1, Highest: 2, WaitingFor: []string{"n3 speaks 1..1"}}},
			[]string{"protocol version 1\n", "protocol version 2 waits for: n3 speaks 1..1\n"}},
		{"due", cluster.ClusterStatus{ProtocolVersion: 1, Protocol: cluster.VersionPlan{Active: 1, Target: 2, Highest: 2}},
			[]string{"protocol version 2 is due"}},
		{"old node", cluster.ClusterStatus{}, []string{"protocol version 1 (answered by a node before protocol versions)\n\n"}},
	} {
		var b strings.Builder
		if err := printStatus(&b, tc.st); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, b.String())
			}
		}
	}
}

// TestJoinWait: join --wait is done once the node holds replicas, or once
// it has been active for joinSettle with none placed on it (a fourth node
// of a one-shard cluster of three gets none until the shard policy adds a
// shard: waiting for replicas there hung for the whole --timeout); never
// while the node is not active yet.
func TestJoinWait(t *testing.T) {
	now := time.Unix(1000, 0)
	w := joinWait{now: func() time.Time { return now }}
	pending := cluster.MemberInfo{ID: "n4", Status: cluster.StatusLeaving, Gossip: "alive"}
	active := cluster.MemberInfo{ID: "n4", Status: cluster.StatusActive, Gossip: "alive"}
	if ok, _ := w.done("n4", pending); ok {
		t.Fatal("done before the node is active")
	}
	now = now.Add(time.Hour)
	if ok, _ := w.done("n4", pending); ok {
		t.Fatal("done before the node is active, an hour on")
	}
	if ok, _ := w.done("n4", active); ok {
		t.Fatal("done as soon as the node is active, with no replica")
	}
	now = now.Add(joinSettle - time.Millisecond)
	if ok, _ := w.done("n4", active); ok {
		t.Fatal("done before joinSettle")
	}
	now = now.Add(time.Millisecond)
	if ok, line := w.done("n4", active); !ok || !strings.Contains(line, "0 replicas: every shard has its replicas on other nodes") {
		t.Fatalf("after joinSettle with no replica: %v, %q", ok, line)
	}
	placed := active
	placed.Replicas = 2
	if ok, line := (&joinWait{now: time.Now}).done("n4", placed); !ok || line != "n4: 2 replicas, gossip alive" {
		t.Fatalf("placed: %v, %q", ok, line)
	}
}
