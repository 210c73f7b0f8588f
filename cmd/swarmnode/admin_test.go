package main

import (
	"regexp"
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

// TestPrintSurvives: status and shards show the labels of each member
// and what loss each shard survives.
func TestPrintSurvives(t *testing.T) {
	st := cluster.ClusterStatus{ProtocolVersion: 1,
		Members: []cluster.MemberInfo{{ID: "n1", Status: "active", Gossip: "alive", Zone: "eu-1a", Host: "m1"}, {ID: "n2", Status: "active", Gossip: "alive"}},
		Shards: []cluster.ShardInfo{
			{Shard: "meta", Leader: "n1", ZoneSafe: true, HostSafe: true},
			{Shard: "0", Leader: "n1", HostSafe: true},
			{Shard: "1", Leader: "n1"},
		}}
	var b strings.Builder
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^NODE\s+STATUS\s+GOSSIP\s+VERSION\s+SPEAKS\s+ZONE\s+HOST\s`, `(?m)^n1\s.*\seu-1a\s+m1\s`, `(?m)^n2\s+\S+\s+\S+\s+0\s+-\s+-\s+-\s`,
		`(?m)^SHARD\s+LEADER\s+TERM\s+COMMIT\s+SURVIVES\s`, `(?m)^meta\s+n1\s+0\s+0\s+zone,host\s`, `(?m)^0\s+n1\s+0\s+0\s+host\s`, `(?m)^1\s+n1\s+0\s+0\s+none\s`} {
		if !regexp.MustCompile(re).MatchString(b.String()) {
			t.Errorf("status lacks %s:\n%s", re, b.String())
		}
	}
	b.Reset()
	if err := printShards(&b, st); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^0\s.*\shost$`).MatchString(b.String()) || !regexp.MustCompile(`(?m)^1\s.*\snone$`).MatchString(b.String()) {
		t.Errorf("shards:\n%s", b.String())
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
