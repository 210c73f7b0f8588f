package cluster

import (
	"encoding/json"
	"fmt"
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
		n.members.Set(id, b, true, n.acceptVersions)
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

// TestBootstrapRunsHighestVersion: a new cluster runs the highest protocol
// version every bootstrapping node speaks from its first state on (not
// version 1 until a raise), and nodes that share none do not bootstrap.
func TestBootstrapRunsHighestVersion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peers  [][2]int // n1's and n2's ranges; {1, 0}: a binary before ranges ("v" 1 only)
		want   int
		refuse string
	}{
		{"all new", [][2]int{{1, 2}, {1, 2}}, 2, ""},
		{"one before ranges", [][2]int{{1, 2}, {1, 0}}, 1, ""},
		{"one speaks 1 only", [][2]int{{1, 1}, {1, 2}}, 1, ""},
		{"one speaks more", [][2]int{{1, 3}, {1, 2}}, 2, ""},
		{"no common version", [][2]int{{1, 1}, {2, 2}}, 0, "no common protocol version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{cfg: Config{ID: "n3", DataDir: "x", Shards: 1, BootstrapExpect: 3}.WithDefaults()}
			n.addrs = NodeAddrs{ID: "n3", RaftAddr: "r3", GRPCAddr: "g3"}
			policy := policyText(n.cfg.bootstrapPolicy())
			for i, r := range tc.peers {
				id := fmt.Sprintf("n%d", i+1)
				m := gossip.Meta{Version: r[0], Min: r[0], Max: r[1], ID: id, Raft: "r" + id, GRPC: "g" + id, Shards: 1, Expect: 3, Policy: policy}
				if r[1] == 0 {
					m.Min = 0
				}
				b, _ := json.Marshal(m)
				// Recorded as gossip would (the delegate's pairwise check
				// is not what is tested here).
				n.members.Set(id, b, true, func(lo, hi int) error { return nil })
			}
			st, why := n.planBootstrap()
			if tc.refuse != "" {
				if st != nil || !strings.Contains(why, tc.refuse) {
					t.Fatalf("planBootstrap = %v, %q; want refused: %s", st, why, tc.refuse)
				}
				return
			}
			if st == nil || st.ActiveVersion() != tc.want {
				t.Fatalf("planBootstrap = %+v, %q; want version %d", st, why, tc.want)
			}
		})
	}
}
