package api

import (
	"context"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Routing, proposing and reading, shared by every service of the package:
// a request's routing key (or a Target: a shard, or a user id) resolves to
// the node's local replica of its shard (route, target; none here:
// NotLeader with the leader hint, so the client refreshes its map); a
// write is proposed to it (proposeRouted, proposeTo); a read passes the
// replica's read barrier first when linearizable (readReplica, readAt,
// readTarget, userRead). One write traced through these hops:
// docs/architecture.md, "One write, hop by hop".

// route resolves the routing key to a local replica; a node without a
// replica of the shard answers NotLeader so the client refreshes its map.
func (s *server) route(rk []byte) (shard.ID, *replica.Replica, error) {
	id, r, err := s.node.Route(rk)
	if err != nil {
		return id, nil, s.statusErr(id, err)
	}
	if r == nil {
		return id, nil, s.notLeader(id)
	}
	return id, r, nil
}

// readReplica routes a read and, for linearizable reads, waits for the
// read barrier.
func (s *server) readReplica(ctx context.Context, rk []byte, c rpc.Consistency) (*replica.Replica, error) {
	id, r, err := s.route(rk)
	if err != nil {
		return nil, err
	}
	if c == rpc.Consistency_CONSISTENCY_LINEARIZABLE {
		if err := r.ReadBarrier(ctx); err != nil {
			return nil, s.statusErr(id, err)
		}
	}
	return r, nil
}

// shardReplica returns the local replica of shard id for a request that
// addresses a shard directly (fan-out).
func (s *server) shardReplica(id uint32) (shard.ID, *replica.Replica, error) {
	smap := s.node.ShardMap()
	if smap == nil {
		return 0, nil, s.statusErr(0, cluster.ErrNotBootstrapped)
	}
	if int(id) >= smap.NumShards {
		return 0, nil, s.statusErr(0, invalid("shard %d: shard ids are below %d", id, smap.NumShards))
	}
	r := s.node.LocalReplica(shard.ID(id))
	// Ids may have holes (merged shards): one that owns no slot in the map
	// and has no replica here is unknown. (A replica that owns no slot yet,
	// a split's target, answers for itself: its state machine refuses the
	// slots it does not own.)
	if r == nil && !slices.Contains(smap.Shards(), shard.ID(id)) {
		return 0, nil, s.statusErr(0, invalid("shard %d owns no slot (map version %d)", id, smap.Version))
	}
	if r == nil {
		return shard.ID(id), nil, s.notLeader(shard.ID(id))
	}
	return shard.ID(id), r, nil
}

// target resolves a Target: a shard, or the shard of a user id of
// idLen bytes.
func (s *server) target(t *rpc.Target, idLen int) (shard.ID, *replica.Replica, error) {
	if t.GetHasShard() {
		if len(t.GetUserId()) > 0 {
			return 0, nil, s.statusErr(0, invalid("target names both a shard and a user id"))
		}
		return s.shardReplica(t.GetShard())
	}
	if len(t.GetUserId()) != idLen {
		return 0, nil, s.statusErr(0, invalid("user_id is %d bytes, want %d", len(t.GetUserId()), idLen))
	}
	return s.route(t.GetUserId())
}

// readTarget resolves t and passes the read barrier.
func (s *server) readTarget(ctx context.Context, t *rpc.Target, idLen int, c rpc.Consistency) (*replica.Replica, error) {
	id, r, err := s.target(t, idLen)
	if err != nil {
		return nil, err
	}
	return r, s.readAt(ctx, id, r, c)
}

// userRead parses the user (or account) id b with parse (InvalidArgument
// when malformed), routes by it and passes the read barrier for c. It
// routes by b itself: parse accepts only the id's exact bytes.
func userRead[ID any](ctx context.Context, s *server, b []byte, parse func([]byte) (ID, error), c rpc.Consistency) (ID, *replica.Replica, error) {
	user, err := parse(b)
	if err != nil {
		return user, nil, s.statusErr(0, badInput(err))
	}
	id, r, err := s.route(b)
	if err != nil {
		return user, nil, err
	}
	return user, r, s.readAt(ctx, id, r, c)
}

// readAt passes the read barrier of replica r of shard id when c asks for
// a linearizable read.
func (s *server) readAt(ctx context.Context, id shard.ID, r *replica.Replica, c rpc.Consistency) error {
	if err := validateConsistency(c); err != nil {
		return s.statusErr(id, err)
	}
	if c == rpc.Consistency_CONSISTENCY_LINEARIZABLE {
		if err := r.ReadBarrier(ctx); err != nil {
			return s.statusErr(id, err)
		}
	}
	return nil
}

// proposeTo validates cmd at the edge (so bad input costs no Raft round)
// and proposes it to replica r of shard id.
func (s *server) proposeTo(ctx context.Context, id shard.ID, r *replica.Replica, cmd *fsm.Command) (*fsm.Result, error) {
	start := time.Now()
	res, err := r.Propose(ctx, cmd)
	if err != nil {
		return nil, s.statusErr(id, err)
	}
	s.node.ObserveApply(id, time.Since(start))
	return res, nil
}

// proposeRouted routes by routing key, then proposes.
func (s *server) proposeRouted(ctx context.Context, rk []byte, cmd *fsm.Command) (*fsm.Result, error) {
	id, r, err := s.route(rk)
	if err != nil {
		return nil, err
	}
	return s.proposeTo(ctx, id, r, cmd)
}
