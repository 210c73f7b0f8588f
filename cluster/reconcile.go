package cluster

import (
	"context"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/reconcile"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/shard"
)

// The reconciler's glue: package cluster/reconcile runs the reconcile
// loop on the meta leader (observing every group, acting on package
// placement's decisions); the node gives it its Host, starts its loop
// (New) and joins it (Close). Status and TransferLeader use its
// observations (Observe) and leadership transfer (Transfer) too.

func (n *Node) newReconciler() *reconcile.Reconciler {
	iso, _ := placement.ParseIsolation(n.cfg.IsolationLevel) // Config.Validate checked it
	return reconcile.New(reconcile.Host{
		Isolation: iso,
		ID:        n.cfg.ID, Log: n.log,
		Interval: n.cfg.ReconcileInterval, DeadNodeTimeout: n.cfg.DeadNodeTimeout, LeaderBalanceInterval: n.cfg.LeaderBalanceInterval,
		Leading: func() bool {
			r := n.metaReplica()
			return r != nil && r.Raft().State() == raft.Leader && r.ReadyTerm() != 0
		},
		Read:    func(ctx context.Context) (*State, error) { st, _, err := n.metaRead(ctx); return st, err },
		Update:  func(ctx context.Context, fn func(*State) error) error { _, err := n.metaUpdate(ctx, fn); return err },
		Members: func() map[string]gossip.Member { return n.members.All() },
		Replica: n.groupReplica, Admin: n.adminClient,
		RaftAddr: func(id string) (string, bool) { a, ok := n.nodeAddrs(id); return a.RaftAddr, ok },
	})
}

// groupReplica returns the local replica of the meta group or of a shard.
func (n *Node) groupReplica(meta bool, id shard.ID) *replica.Replica {
	if meta {
		return n.metaReplica()
	}
	return n.localReplica(id)
}
