package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/shardmove"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Elastic shards' glue: package cluster/shardmove runs the mover, the
// pull and export of a move's data, and the automatic shard policy; the
// node gives it its Host and delegates to it.

func (n *Node) newMover() *shardmove.Mover {
	t := n.cfg.Testing
	return shardmove.New(shardmove.Host{
		ID: n.cfg.ID, Log: n.log, Limits: applyLimits, PolicyInterval: n.cfg.PolicyInterval, PolicyCooldown: n.cfg.PolicyCooldown,
		AfterMovePhase: t.AfterMovePhase, BeforeAdopt: t.BeforeAdopt, AfterIngest: t.AfterIngest, AfterPrecopy: t.AfterPrecopy,
		PullChunk:   t.PullChunk,
		Unavailable: func(d time.Duration) { n.metrics.ObserveMoveUnavailable(d) },
		MetaTerm: func() uint64 {
			if r := n.metaReplica(); r != nil && r.Raft().State() == raft.Leader {
				return r.ReadyTerm()
			}
			return 0
		},
		Read:         func(ctx context.Context) (*State, error) { st, _, err := n.metaRead(ctx); return st, err },
		Update:       func(ctx context.Context, fn func(*State) error) error { _, err := n.metaUpdate(ctx, fn); return err },
		OnMetaLeader: n.onMetaLeader, Committed: n.adminMeta,
		Local:   func() *State { st, _ := n.LocalState(); return st },
		Replica: n.localReplica, Admin: n.adminClient, Hint: n.leaderHint, Status: StatusError, Kind: ErrorKind,
		Leader: func(ctx context.Context, g placement.Group) *rpc.ReplicaStatusResponse {
			return n.recon.Observe(ctx, g).Leader
		},
		Leaders: func(ctx context.Context, gs []placement.Group) []*rpc.ReplicaStatusResponse {
			return n.recon.Leaders(ctx, gs)
		},
	})
}

// The Admin service's calls of a move and of the policy.

func (s *adminServer) SlotCommand(ctx context.Context, req *rpc.SlotCommandRequest) (*rpc.SlotCommandResponse, error) {
	return s.node.mover.SlotCommand(ctx, req)
}

func (s *adminServer) SlotStatus(ctx context.Context, req *rpc.SlotStatusRequest) (*rpc.SlotStatusResponse, error) {
	return s.node.mover.SlotStatus(ctx, req)
}

func (s *adminServer) ExportSlots(req *rpc.ExportSlotsRequest, ss grpc.ServerStreamingServer[rpc.ExportSlotsChunk]) error {
	if err := s.node.checkNodeStream(ss.Context(), rpc.Admin_ExportSlots_FullMethodName); err != nil {
		return err // node-to-node only: a member's node identity
	}
	return s.node.mover.Export(req, ss)
}

func (s *adminServer) PullSlots(ctx context.Context, req *rpc.PullSlotsRequest) (*rpc.PullSlotsResponse, error) {
	return s.node.mover.Pull(ctx, req)
}

func (s *adminServer) MoveAdmin(ctx context.Context, req *rpc.MoveAdminRequest) (*rpc.MoveAdminResponse, error) {
	return s.node.mover.MoveAdmin(ctx, req)
}

func (s *adminServer) ShardPolicy(ctx context.Context, req *rpc.ShardPolicyRequest) (*rpc.ShardPolicyResponse, error) {
	return s.node.mover.PolicyAdmin(ctx, req)
}

// The node's API for operators (package admin, the CLI); shardmove.Mover's
// methods of the same names (Split, Merge, Cancel) document them.

// SplitShard starts splitting shard id (slots nil: the upper half of its
// slots) into a new shard and returns the move as planned.
func (n *Node) SplitShard(ctx context.Context, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	return n.mover.Split(ctx, id, slots)
}

// MergeShards starts merging shard from into shard into.
func (n *Node) MergeShards(ctx context.Context, into, from shard.ID) (placement.Move, error) {
	return n.mover.Merge(ctx, into, from)
}

// CancelMove aborts move id if it is not adopted yet.
func (n *Node) CancelMove(ctx context.Context, id uint64) (placement.Move, error) {
	return n.mover.Cancel(ctx, id)
}

// Moves returns the moves in progress, as the committed cluster state
// records them.
func (n *Node) Moves(ctx context.Context) ([]placement.Move, error) { return n.mover.Moves(ctx) }

// ShardPolicy returns the automatic shard policy of the committed cluster
// state; ok is false for a state without one (the defaults are returned).
func (n *Node) ShardPolicy(ctx context.Context) (p placement.ShardPolicy, ok bool, err error) {
	return n.mover.ShardPolicy(ctx)
}

// SetShardPolicy changes the automatic shard policy (the fields patch
// sets) and returns it; an invalid policy is refused and changes nothing.
func (n *Node) SetShardPolicy(ctx context.Context, patch placement.PolicyPatch) (placement.ShardPolicy, error) {
	return n.mover.SetShardPolicy(ctx, patch)
}
