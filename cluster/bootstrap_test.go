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
	policy := policyText(n.cfg.bootstrapPolicy())
	announce := func(id, cluster string) {
		b, _ := json.Marshal(gossip.Meta{Version: ProtocolVersion, ID: id, Raft: "r" + id, GRPC: "g" + id, Shards: 8, Expect: 3, Cluster: cluster, Policy: policy})
		n.members.Set(id, b, true, ProtocolVersion)
	}
	// A peer with another shard policy: no bootstrap together.
	policy = "auto=true,nodes_per_shard=3,max_shard_bytes=1073741824,max_shard_load=0"
	announce("n1", "")
	if st, why := n.planBootstrap(); st != nil || !strings.Contains(why, `node n1 has the shard policy "auto=true`) {
		t.Fatalf("a peer with another policy: %v %q", st, why)
	}
	policy = policyText(n.cfg.bootstrapPolicy())
	announce("n1", "")
	if st, why := n.planBootstrap(); st != nil || !strings.Contains(why, "2 of 3") {
		t.Fatalf("with 2 of 3 nodes: %v %q", st, why)
	}
	announce("n2", "")
	st, why := n.planBootstrap()
	if st == nil {
		t.Fatalf("with 3 nodes: %q", why)
	}
	if st.NumShards != 8 || st.Policy == nil || st.Policy.Auto || st.Policy.MaxShardBytes != 1<<30 {
		t.Fatalf("--shards 8: %d shards, policy %+v; want 8, the count rule off, the size rule on", st.NumShards, st.Policy)
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
