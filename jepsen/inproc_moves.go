package jepsen

import (
	"context"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

var _ Resharding = (*InProc)(nil)

// The split-merge nemesis's calls, through the member via's cluster.Node
// (which forwards them to the meta leader).

func (d *InProc) adminSplit(ctx context.Context, via string, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	n, err := d.node(via)
	if err != nil {
		return placement.Move{}, err
	}
	return n.SplitShard(ctx, id, slots)
}

func (d *InProc) adminMerge(ctx context.Context, via string, into, from shard.ID) (placement.Move, error) {
	n, err := d.node(via)
	if err != nil {
		return placement.Move{}, err
	}
	return n.MergeShards(ctx, into, from)
}

func (d *InProc) adminState(ctx context.Context, via string) (*cluster.State, error) {
	n, err := d.node(via)
	if err != nil {
		return nil, err
	}
	return n.ClusterState(ctx)
}
