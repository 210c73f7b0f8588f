package api

import (
	"context"
	"fmt"
	"strings"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/shard"
)

// The execution of Redis requests on a shard leader, shared by the
// internal Redis gRPC service (redis_service.go) and the RESP front
// (package redisfront, for a shard this node leads): the checks of a
// request and its run on a local replica, over the node's narrow API
// (Config, ShardMap, LocalReplica) and the replica's (IsLeader, Propose,
// ReadBarrier, FSM).

// RedisRequest is one Redis request on a shard: one command, or a
// MULTI/EXEC block with its WATCH guards.
type RedisRequest struct {
	Shard   shard.ID
	Cmds    []fsm.RedisArgv
	Multi   bool
	Watches []fsm.RedisWatch
	// Slots, if set, for a shard-wide read (a leg of a fan-out: KEYS,
	// SCAN, DBSIZE), are the slots the sender's map gives Shard: RedisOn
	// answers StaleSlotsReply when the shard no longer owns one of them
	// (a move the sender's map does not show yet: the read would answer
	// for part of them, and the new owner is not asked).
	Slots *shard.SlotSet
}

// staleSlotsPrefix starts StaleSlotsReply's text.
const staleSlotsPrefix = "TRYAGAIN swarmkv: stale shard map"

// StaleSlotsReply is the answer to a shard-wide read whose Slots the
// shard no longer all owns: TRYAGAIN (Redis clients retry it), after the
// sender's map has caught up with the move.
func StaleSlotsReply(id shard.ID) resp.Value {
	return resp.Error(fmt.Sprintf("%s: shard %d no longer owns every slot the sender's map gives it (a slot move); retry", staleSlotsPrefix, id))
}

// IsStaleSlots reports whether v is a StaleSlotsReply.
func IsStaleSlots(v resp.Value) bool {
	return v.IsError() && strings.HasPrefix(string(v.Str), staleSlotsPrefix)
}

// ownsAll reports whether r's shard owns every slot of req.Slots (true
// without Slots).
func ownsAll(r *replica.Replica, req *RedisRequest) bool {
	return req.Slots == nil || r.FSM().Owned().Contains(*req.Slots)
}

// CheckRedis validates a request as the state machine will (so a bad one
// costs no Raft round), within the Redis bounds of cfg (the node's
// Config: RedisMax*, Limits.MaxValueSize), and checks that its keys route
// to its shard under smap (the node's shard map, nil before bootstrap).
// It returns the error reply, or nil.
func CheckRedis(cfg *cluster.Config, smap *shard.Map, req *RedisRequest) *resp.Value {
	errv := func(s string) *resp.Value { v := resp.Error(s); return &v }
	switch {
	case !req.Multi && (len(req.Cmds) != 1 || len(req.Watches) > 0):
		return errv("ERR swarmkv: a request without multi carries exactly one command and no watches")
	case len(req.Cmds) > cfg.RedisMaxMultiCommands:
		return errv(fmt.Sprintf("ERR swarmkv: transaction too long (more than %d commands)", cfg.RedisMaxMultiCommands))
	case len(req.Watches) > fsm.MaxRedisWatches:
		return errv("ERR swarmkv: too many watched keys")
	}
	// What one entry carries: the RESP front's bounds, for calls that
	// did not come through it (the Go client).
	size := 0
	for _, argv := range req.Cmds {
		size += resp.CommandSize(argv)
	}
	switch {
	case req.Multi && size > cfg.RedisMaxMultiBytes:
		return errv(fmt.Sprintf("ERR swarmkv: transaction too big (more than %d bytes)", cfg.RedisMaxMultiBytes))
	case !req.Multi && size > cfg.RedisMaxCommandBytes:
		return errv(fmt.Sprintf("ERR swarmkv: command too big (more than %d bytes)", cfg.RedisMaxCommandBytes))
	}
	var ks [][]byte
	for _, argv := range req.Cmds {
		if v := fsm.CheckRedis(argv, cfg.Limits.MaxValueSize); v != nil {
			return v
		}
		if c := fsm.LookupRedis(argv[0]); req.Multi && (c.ShardLocal || c.Internal) {
			return errv("ERR swarmkv: " + c.Name + " is not allowed in MULTI")
		}
		ks = append(ks, fsm.RedisKeys(argv)...)
	}
	for _, w := range req.Watches {
		if len(w.Key) > keys.MaxRedisKeyLen {
			return errv("ERR swarmkv: watched key too long")
		}
		ks = append(ks, w.Key)
	}
	if smap == nil {
		return errv("CLUSTERDOWN swarmkv: cluster not bootstrapped yet")
	}
	if int(req.Shard) >= smap.NumShards {
		return errv("ERR swarmkv: no such shard")
	}
	for _, k := range ks {
		if smap.ShardOf(keys.RedisRoutingKey(k)) != req.Shard {
			return errv(resp.ErrCrossSlot)
		}
	}
	return nil
}

// Keys returns every key the request names: its commands' and its
// watches' (aliases into the request).
func (req *RedisRequest) Keys() [][]byte {
	var ks [][]byte
	for _, argv := range req.Cmds {
		ks = append(ks, fsm.RedisKeys(argv)...)
	}
	for _, w := range req.Watches {
		ks = append(ks, w.Key)
	}
	return ks
}

// RedisShardOf returns the one shard that owns every key of ks under smap
// and the slot of the first key; ok is false when ks is empty or its keys
// route to several shards.
func RedisShardOf(smap *shard.Map, ks [][]byte) (id shard.ID, first shard.Slot, ok bool) {
	for i, k := range ks {
		slot := shard.SlotOf(keys.RedisRoutingKey(k))
		s := smap.ShardOfSlot(slot)
		if i == 0 {
			id, first = s, slot
		} else if s != id {
			return 0, 0, false
		}
	}
	return id, first, len(ks) > 0
}

// misrouted returns the moved answer to a request checked by CheckRedis
// and refused as CROSSSLOT when its keys do route to one shard, another
// than the one it names under smap: the sender's map and this node's
// disagree (a slot moved). A *fsm.MovedError naming that shard and smap's
// version makes the sender refresh its map and send it again, where a
// CROSSSLOT reply would fail it for good. nil when the keys do span
// shards.
func misrouted(smap *shard.Map, req *RedisRequest) error {
	if smap == nil {
		return nil
	}
	id, slot, ok := RedisShardOf(smap, req.Keys())
	if !ok || id == req.Shard {
		return nil
	}
	return &fsm.MovedError{Slot: slot, Target: id, MapVersion: smap.Version}
}

// RedisOn runs a request checked by CheckRedis on node n's replica r,
// which must lead its shard: a block or a write is proposed (one log
// entry; refused until the cluster runs the protocol version it needs,
// replica.Config.Admit), a single read is answered from the state
// machine after the read barrier.
// index is the entry's log index (0 for reads). A key of a slot the shard
// does not own fails it with *fsm.MovedError, nothing executed (a block
// is refused whole, before any write).
func RedisOn(ctx context.Context, n Replicas, r *replica.Replica, req *RedisRequest) (v resp.Value, index uint64, err error) {
	if req.Multi || fsm.LookupRedis(req.Cmds[0][0]).Write {
		op := fsm.OpRedis
		if req.Multi {
			op = fsm.OpRedisMulti
		}
		cmd := &fsm.Command{Op: op, Redis: &fsm.RedisTx{Cmds: req.Cmds, Watch: req.Watches}}
		res, err := r.Propose(ctx, cmd)
		if err != nil {
			return resp.Value{}, 0, err
		}
		return *res.Reply, res.Index, nil
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return resp.Value{}, 0, err
	}
	if !ownsAll(r, req) {
		return StaleSlotsReply(req.Shard), 0, nil
	}
	// Fenced on the keys' slots before and after the read (a freeze and
	// drop completing during it answers moved).
	v, err = r.FSM().ReadRedis(req.Cmds[0])
	if err != nil {
		return resp.Value{}, 0, err
	}
	if !ownsAll(r, req) { // the same, for a shard-wide read
		return StaleSlotsReply(req.Shard), 0, nil
	}
	return v, 0, nil
}

// RedisLocal runs a request (checked by the caller as CheckRedis does)
// on node n's replica of its shard when that replica leads the shard, as
// RedisOn does. It returns cluster.ErrNotLeader when n holds no leading
// replica of the shard (the caller forwards the request to the leader),
// fsm.ErrInvalidCommand for a command the state machine refuses.
func RedisLocal(ctx context.Context, n Replicas, req *RedisRequest) (resp.Value, error) {
	r := n.LocalReplica(req.Shard)
	if r == nil || !r.IsLeader() {
		return resp.Value{}, cluster.ErrNotLeader
	}
	v, _, err := RedisOn(ctx, n, r, req)
	return v, err
}
