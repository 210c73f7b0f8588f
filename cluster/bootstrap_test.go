package cluster

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/cluster/gossip"
)

// TestPlanBootstrapJoinsPeersOfTheSameBootstrap: a node that sees the
// expected members only after some of them bootstrapped still bootstraps
// with them (same plan, same cluster id), and refuses a different cluster.
func TestPlanBootstrapJoinsPeersOfTheSameBootstrap(t *testing.T) {
	n := &Node{cfg: Config{ID: "n3", DataDir: "x", Shards: 8, BootstrapExpect: 3}.WithDefaults()}
	n.addrs = NodeAddrs{ID: "n3", RaftAddr: "r3", GRPCAddr: "g3"}
	announce := func(id, cluster string) {
		b, _ := json.Marshal(gossip.Meta{Version: ProtocolVersion, ID: id, Raft: "r" + id, GRPC: "g" + id, Shards: 8, Expect: 3, Cluster: cluster})
		n.members.Set(id, b, true, ProtocolVersion)
	}
	announce("n1", "")
	if st, why := n.planBootstrap(); st != nil || !strings.Contains(why, "2 of 3") {
		t.Fatalf("with 2 of 3 nodes: %v %q", st, why)
	}
	announce("n2", "")
	st, why := n.planBootstrap()
	if st == nil {
		t.Fatalf("with 3 nodes: %q", why)
	}
	announce("n1", st.ClusterID)
	announce("n2", st.ClusterID)
	again, why := n.planBootstrap()
	if again == nil || again.ClusterID != st.ClusterID {
		t.Fatalf("peers bootstrapped the same plan first: %v %q", again, why)
	}
	announce("n2", "0123456789abcdef")
	if st, why := n.planBootstrap(); st != nil || !strings.Contains(why, "already belongs to cluster 0123456789abcdef") {
		t.Fatalf("a peer of another cluster: %v %q", st, why)
	}
}
