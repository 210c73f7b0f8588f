package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Routing, proposing and reading, shared by every service of the package:
// a request's routing key (or a Target: a shard, or a user id) resolves to
// the node's local replica of its shard (route, target; none here:
// NotLeader with the leader hint, so the client refreshes its map); a
// write is proposed to it (proposeRouted, proposeTo); a read passes the
// replica's read barrier first when linearizable, then reads a view of
// the shard fenced on the slot of its routing key (read, readKey,
// readTarget, readShard, userRead; fsm.FSM.Read). One write traced through these hops:
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

// read routes rk, passes the read barrier for c and runs fn on a view of
// the shard's state fenced on rk's slot (fsm.FSM.Read: refused before fn
// when the shard does not own the slot, the moved status after fn when it
// lost it meanwhile).
func (s *server) read(ctx context.Context, rk []byte, c rpc.Consistency, fn func(fsm.View) error) error {
	id, r, err := s.route(rk)
	if err != nil {
		return err
	}
	rc, err := s.consistency(id, c)
	if err != nil {
		return err
	}
	return s.statusErr(id, r.Read(ctx, rc, rk, fn))
}

// consistency is the replica's consistency for c (InvalidArgument for an
// unknown one).
func (s *server) consistency(id shard.ID, c rpc.Consistency) (replica.Consistency, error) {
	if err := validateConsistency(c); err != nil {
		return 0, s.statusErr(id, err)
	}
	if c == rpc.Consistency_CONSISTENCY_LINEARIZABLE {
		return replica.Linearizable, nil
	}
	return replica.Stale, nil
}

// readKey is read of the one key key: its value, fsm.ErrNotFound when
// absent (fsm.FSM.ReadKey: fenced the same way, without a view).
func (s *server) readKey(ctx context.Context, rk []byte, c rpc.Consistency, key []byte) ([]byte, error) {
	id, r, err := s.route(rk)
	if err != nil {
		return nil, err
	}
	rc, err := s.consistency(id, c)
	if err != nil {
		return nil, err
	}
	v, err := r.ReadKey(ctx, rc, rk, key)
	if errors.Is(err, fsm.ErrNotFound) {
		return nil, err
	}
	return v, s.statusErr(id, err)
}

// shardReplica returns the local replica of shard id for a request that
// addresses a shard directly (fan-out).
func (s *server) shardReplica(id uint32) (shard.ID, *replica.Replica, error) {
	smap := s.node.ShardMap()
	if smap == nil {
		return 0, nil, s.statusErr(0, cluster.ErrNotBootstrapped)
	}
	r := s.node.LocalReplica(shard.ID(id))
	// Ids may have holes (merged shards): one that owns no slot in the map
	// and has no replica here is unknown to this node: InvalidArgument, or
	// Unavailable (retry) when a newer map may name it, a split just
	// published (Node.UnknownShard). (A replica that owns no slot yet, a
	// split's target, answers for itself: its state machine refuses the
	// slots it does not own.)
	if int(id) >= smap.NumShards || (r == nil && !slices.Contains(smap.Shards(), shard.ID(id))) {
		if int(id) >= shard.MaxShards {
			return 0, nil, s.statusErr(0, invalid("shard %d: shard ids are below %d", id, shard.MaxShards))
		}
		return 0, nil, s.statusErr(shard.ID(id), s.node.UnknownShard(shard.ID(id)))
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
		id, r, err := s.shardReplica(t.GetShard())
		if err != nil {
			return id, nil, err
		}
		return id, r, s.staleMap(id, r, t.GetMapVersion())
	}
	if len(t.GetUserId()) != idLen {
		return 0, nil, s.statusErr(0, invalid("user_id is %d bytes, want %d", len(t.GetUserId()), idLen))
	}
	return s.route(t.GetUserId())
}

// readTarget resolves t, passes the read barrier for c and runs fn on a
// view of the shard's state: fenced on the user's slot for a user, not
// fenced for a shard (whose map version is checked: staleMap).
func (s *server) readTarget(ctx context.Context, t *rpc.Target, idLen int, c rpc.Consistency, fn func(fsm.View) error) error {
	id, r, err := s.target(t, idLen)
	if err != nil {
		return err
	}
	rc, err := s.consistency(id, c)
	if err != nil {
		return err
	}
	rk := targetKey(t)
	if rk == nil {
		// Checked after the barrier too (staleMap), as readShard does.
		return s.statusErr(id, r.Read(ctx, rc, nil, func(v fsm.View) error {
			if err := s.staleMap(id, r, t.GetMapVersion()); err != nil {
				return err
			}
			return fn(v)
		}))
	}
	return s.statusErr(id, r.Read(ctx, rc, rk, fn))
}

// readShard is readTarget for a shard id (a fan-out's listing).
func (s *server) readShard(ctx context.Context, shardID uint32, mapVersion uint64, c rpc.Consistency, fn func(fsm.View) error) error {
	id, r, err := s.shardReplica(shardID)
	if err != nil {
		return err
	}
	rc, err := s.consistency(id, c)
	if err != nil {
		return err
	}
	// The map version is checked after the read barrier (in fn).
	return s.statusErr(id, r.Read(ctx, rc, nil, func(v fsm.View) error {
		if err := s.staleMap(id, r, mapVersion); err != nil {
			return err
		}
		return fn(v)
	}))
}

// staleMap answers moved when shard r gave slots away under a map newer
// than version, the map a shard-addressed request (a fan-out's listing or
// lookup) was chosen from; 0 (unknown) is not checked. Without it a client
// whose map predates a split would list the source, which no longer holds
// the moved records, and never ask the new shard: the records would be
// missing with no error. Reads check it after the read barrier (again:
// target checks it first for writes too). A shard-addressed write whose
// map is current when checked but published stale before it applies is
// not covered: the state machine answers it from its own records (docs:
// Elastic shards).
func (s *server) staleMap(id shard.ID, r *replica.Replica, version uint64) error {
	if version == 0 {
		return nil
	}
	for _, m := range r.FSM().Moves() {
		if (m.State == fsm.MoveFrozen || m.State == fsm.MoveMoved) && m.MapVersion > version {
			slot, _ := m.Slots.First()
			return s.statusErr(id, &fsm.MovedError{Slot: slot, Target: m.Peer, MapVersion: m.MapVersion})
		}
	}
	return nil
}

// userRead parses the user (or account) id b with parse (InvalidArgument
// when malformed) and reads: routed by b, fenced on its slot (read). It
// routes by b itself: parse accepts only the id's exact bytes.
func userRead[ID any](ctx context.Context, s *server, b []byte, parse func([]byte) (ID, error), c rpc.Consistency,
	fn func(ID, fsm.View) error) error {
	user, err := parse(b)
	if err != nil {
		return s.statusErr(0, badInput(err))
	}
	return s.read(ctx, b, c, func(v fsm.View) error { return fn(user, v) })
}

// userGet reads the one record of user b (parsed with parse) under the
// key key names and decodes it into rec: readKey, no view needed;
// codes.NotFound when absent.
func userGet[ID any, R records.Record](ctx context.Context, s *server, b []byte, parse func([]byte) (ID, error), c rpc.Consistency,
	key func(ID) []byte, rec R) error {
	user, err := parse(b)
	if err != nil {
		return s.statusErr(0, badInput(err))
	}
	k := key(user)
	v, err := s.readKey(ctx, b, c, k)
	if errors.Is(err, fsm.ErrNotFound) {
		return status.Error(codes.NotFound, "not found")
	}
	if err != nil {
		return err
	}
	if err := records.Decode(v, rec); err != nil {
		return s.statusErr(0, fmt.Errorf("stored record %x: %w", k, err))
	}
	return nil
}

// Slot fencing. A shard answers a read of a routing key only while it
// owns the key's slot. Every read goes through fsm.FSM.Read (or ReadKey)
// after the read barrier, which refuses a slot the shard does not own
// before reading and turns the answer into the moved status when a freeze
// (and drop) of the slot applied during the read; the client retries at
// the new owner. Listings of a whole shard and lookups by an id without
// its user (fan-out) are not fenced: a listing leaves out the keys of
// slots the shard does not own (fsm.View.OwnsKey), a lookup that finds its
// record in such a slot answers moved (fsm.View.CheckRoutingKey; the
// record is elsewhere or about to be; the client asks every shard again).

// checkViewSlot returns the moved status when the shard v views does not
// own the slot of routing key rk.
func (s *server) checkViewSlot(v fsm.View, rk []byte) error {
	return s.statusErr(v.Shard(), v.CheckRoutingKey(rk))
}

// checkSlot returns the moved status when r's shard does not own the slot
// of routing key rk (a watch's check before it starts; reads are fenced in
// fsm.FSM.Read).
func (s *server) checkSlot(r *replica.Replica, rk []byte) error {
	if err := r.FSM().CheckRoutingKey(rk); err != nil {
		return s.statusErr(r.ID(), err)
	}
	return nil
}

// targetKey is the routing key a Target routes by: its user id, nil for
// a shard.
func targetKey(t *rpc.Target) []byte {
	if t.GetHasShard() {
		return nil
	}
	return t.GetUserId()
}

// owns reports whether the shard v views owns the slot of routing key
// rk: false for a slot it does not own, an error (a status) when it
// cannot tell.
func (s *server) owns(v fsm.View, rk []byte) (bool, error) {
	err := v.CheckRoutingKey(rk)
	var me *fsm.MovedError
	if errors.As(err, &me) {
		return false, nil
	}
	if err != nil {
		return false, s.statusErr(v.Shard(), err)
	}
	return true, nil
}

// ownsKey reports whether the shard v views owns the slot of the stored
// key (and value) kv: listings of a whole shard leave the others out.
func (s *server) ownsKey(v fsm.View, kv fsm.KV) (bool, error) {
	ok, err := v.OwnsKey(kv.Key, kv.Value)
	if err != nil {
		return false, s.statusErr(v.Shard(), err)
	}
	return ok, nil
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

// proposeTo proposes cmd to replica r of shard id. The replica validates
// it (so bad input costs no Raft round) and refuses it before the cluster
// runs the protocol version it needs (replica.Config.Admit, set to
// cluster.Node.CheckCommand: FailedPrecondition, nothing proposed).
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
