package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Backups (package backup has the file and the consistency it gives):
// the committed cluster state and each shard's state, which package
// admin serves as GET /v1/backup/state and /v1/backup/shards/{shard}.
// A shard's state is streamed from its leader (Admin.BackupShard when
// another node leads it) after a read barrier, from one Pebble snapshot
// (fsm.ExportState), so it is exact at a committed index.

// backupChunkBytes: about this many key and value bytes per
// Admin.BackupShard message.
const backupChunkBytes = 1 << 20

// BackupState returns the committed cluster state, tokens' secret hashes
// included (a restore needs them), for a backup; while a split or merge
// is in progress it refuses (FailedPrecondition,
// placement.ErrMoveInProgress).
func (n *Node) BackupState(ctx context.Context) (*State, error) {
	st, err := n.adminMeta(ctx)
	if err != nil {
		return nil, err
	}
	if err := placement.CheckNoMoves(st); err != nil {
		return nil, err
	}
	return st, nil
}

// BackupShard streams shard id's whole state from its leader: begin with
// the committed index the state is exact at, then chunk with its records
// in key order (copies chunk may keep). It runs on the local replica when
// it leads the shard, else on the leader through Admin.BackupShard. Until
// begin is called a missing or moving leader is looked for again (for up
// to 15 s); any failure after it is returned: the caller's copy is then
// incomplete.
func (n *Node) BackupShard(ctx context.Context, id shard.ID, begin func(index uint64) error, chunk func([]fsm.Pair) error) error {
	st, _ := n.LocalState()
	if st == nil {
		return errNotBootstrapped
	}
	g, err := n.groupByName(st, fmt.Sprint(id))
	if err != nil {
		return err
	}
	started := false
	start := func(index uint64) error {
		started = true
		return begin(index)
	}
	return retry.Do(ctx, retry.Options{Initial: 100 * time.Millisecond, Max: time.Second, MaxElapsed: 15 * time.Second,
		Retryable: func(err error) bool { return !started && ErrorKind(err).Retry() != rpc.RetryNever }},
		func() error {
			if r := n.localReplica(id); r != nil && r.IsLeader() {
				return n.exportShard(ctx, r, start, chunk)
			}
			obs := n.recon.Observe(ctx, g)
			if obs.Leader == nil || obs.Leader.NodeId == n.cfg.ID {
				return status.Errorf(codes.Unavailable, "cluster: shard %d has no leader right now", id)
			}
			c, err := n.adminClient(obs.Leader.NodeId)
			if err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
			return recvBackup(ctx, c, id, start, chunk)
		})
}

// recvBackup runs one Admin.BackupShard stream.
func recvBackup(ctx context.Context, c rpc.AdminClient, id shard.ID, begin func(uint64) error, chunk func([]fsm.Pair) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.BackupShard(ctx, &rpc.BackupShardRequest{Shard: uint32(id)})
	if err != nil {
		return err
	}
	started := false
	for {
		msg, err := stream.Recv()
		switch {
		case err == io.EOF && started:
			return nil
		case err == io.EOF:
			return status.Errorf(codes.Unavailable, "cluster: shard %d: backup stream ended before it started", id)
		case err != nil:
			return err
		case !started:
			if !msg.Started {
				return fmt.Errorf("cluster: shard %d: backup stream without its start", id)
			}
			started = true
			if err := begin(msg.Index); err != nil {
				return err
			}
		default:
			pairs := make([]fsm.Pair, len(msg.Pairs))
			for i, p := range msg.Pairs {
				pairs[i] = fsm.Pair{Key: p.Key, Value: p.Value}
			}
			if err := chunk(pairs); err != nil {
				return err
			}
		}
	}
}

// exportShard streams the state of the local replica r, which must lead
// its shard: a read barrier, then fsm.ExportState.
func (n *Node) exportShard(ctx context.Context, r *replica.Replica, begin func(uint64) error, chunk func([]fsm.Pair) error) error {
	if err := r.ReadBarrier(ctx); err != nil {
		return err
	}
	hook := n.cfg.Testing.BackupChunk
	return r.FSM().ExportState(ctx, backupChunkBytes, begin, func(pairs []fsm.Pair) error {
		if err := chunk(pairs); err != nil {
			return err
		}
		if hook != nil {
			return hook(ctx, r.ID())
		}
		return nil
	})
}

// BackupShard is Admin.BackupShard: node-to-node only (a member's node
// identity: api's stream guard, and checkNodeStream), on the shard's
// leader.
func (s *adminServer) BackupShard(req *rpc.BackupShardRequest, ss grpc.ServerStreamingServer[rpc.BackupShardChunk]) error {
	n := s.node
	if err := n.checkNodeStream(ss.Context(), rpc.Admin_BackupShard_FullMethodName); err != nil {
		return err
	}
	id := shard.ID(req.Shard)
	hint := func() (string, string) { return n.leaderHint(id) }
	r := n.localReplica(id)
	if r == nil {
		return StatusError(ErrNotLeader, id, hint)
	}
	err := n.exportShard(ss.Context(), r, func(index uint64) error {
		return ss.Send(&rpc.BackupShardChunk{Index: index, Started: true})
	}, func(pairs []fsm.Pair) error {
		msg := &rpc.BackupShardChunk{Pairs: make([]*rpc.SlotPair, len(pairs))}
		for i, p := range pairs {
			msg.Pairs[i] = &rpc.SlotPair{Key: p.Key, Value: p.Value}
		}
		return ss.Send(msg)
	})
	if err != nil && !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		n.log.Warn("backup: shard stream failed", "shard", uint32(id), "err", err)
	}
	return StatusError(err, id, hint)
}
