package main

import (
	"strings"
	"testing"

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
