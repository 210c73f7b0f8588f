package cluster

import (
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// TestLeaderCheckRealGroups: on a running cluster, the leader of a shard
// has its real term confirmed by the peers' real replicas, and an older
// term (a deposed leader's) refused.
func TestLeaderCheckRealGroups(t *testing.T) {
	tc := newTestCluster(t, 3, 2, nil)
	const sh = shard.ID(1)
	i, r := tc.leaderReplica(sh)
	cfg := r.Raft().GetConfiguration().Configuration()
	term := r.Raft().CurrentTerm()
	if !tc.nodes[i].checker.Confirm(uint32(sh), term, cfg) {
		t.Fatalf("leader of term %d not confirmed", term)
	}
	if tc.nodes[i].checker.Confirm(uint32(sh), term-1, cfg) {
		t.Fatalf("term %d confirmed while the group is at %d", term-1, term)
	}
	// Reads go through the check, not VerifyLeader.
	before := r.Stats().ReadsChecked
	if err := r.ReadBarrier(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if r.Stats().ReadsChecked == before {
		t.Fatal("read round not confirmed by the batched check")
	}
}

// TestIsolatedLeaderReads: a leader cut off from its peers serves no
// linearizable read, through the check or otherwise.
func TestIsolatedLeaderReads(t *testing.T) {
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		// Long enough that the isolated leader still believes it leads
		// while it is asked.
		c.LeaderLeaseTimeout = 2 * time.Second
		c.HeartbeatTimeout = 2 * time.Second
		c.ElectionTimeout = 2 * time.Second
	})
	const sh = shard.ID(0)
	i, r := tc.leaderReplica(sh)
	tc.net.Isolate(tc.cfgs[i].ID)
	defer tc.net.Heal()
	start := time.Now()
	err := r.ReadBarrier(ctxT(t, 10*time.Second))
	if err == nil {
		t.Fatalf("isolated leader served a linearizable read (state %v)", r.Raft().State())
	}
	t.Logf("isolated leader's read: %v after %v; rounds confirmed %d, verified %d",
		err, time.Since(start).Round(time.Millisecond), r.Stats().ReadsChecked, r.Stats().ReadsVerified)
}
