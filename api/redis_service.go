package api

import (
	"context"
	"errors"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// redisServer implements the internal Redis gRPC service (rpc/redis.proto)
// on the shard leader: it checks the commands (Redis's error replies for
// bad ones, nothing proposed), checks that every key routes to the
// request's shard, then runs the request on the local replica (redis.go).
// Keys that all route to another shard than the request names are not
// CROSSSLOT but a map the sender and this node disagree on: the answer is
// the moved status (misrouted), so the sender refreshes its map.
// A node that does not lead the shard answers NotLeader, so callers (the
// RESP fronts of other nodes, the Go client) follow the hint.
type redisServer struct {
	rpc.UnimplementedRedisServer
	*server
}

var _ rpc.RedisServer = (*redisServer)(nil)

func (s *redisServer) Exec(ctx context.Context, p *rpc.RedisExecRequest) (*rpc.RedisExecResponse, error) {
	req := RedisRequest{Shard: shard.ID(p.GetShard()), Multi: p.GetMulti()}
	for _, a := range p.GetCmds() {
		req.Cmds = append(req.Cmds, a.GetArgs())
	}
	for _, w := range p.GetWatches() {
		req.Watches = append(req.Watches, fsm.RedisWatch{Key: w.GetKey(), Version: w.GetVersion()})
	}
	if b := p.GetSlots(); len(b) > 0 {
		var slots shard.SlotSet
		if err := slots.UnmarshalBinary(b); err != nil {
			return &rpc.RedisExecResponse{Reply: rpc.ReplyToProto(resp.Error("ERR swarmkv: bad slot set: " + err.Error()))}, nil
		}
		req.Slots = &slots
	}
	smap := s.node.ShardMap()
	if v := CheckRedis(&s.cfg, smap, &req); v != nil {
		if string(v.Str) == resp.ErrCrossSlot {
			if err := misrouted(smap, &req); err != nil {
				return nil, s.statusErr(req.Shard, err)
			}
		}
		return &rpc.RedisExecResponse{Reply: rpc.ReplyToProto(*v)}, nil
	}
	r := s.node.LocalReplica(req.Shard)
	if r == nil {
		return nil, s.notLeader(req.Shard)
	}
	v, index, err := RedisOn(ctx, s.node, r, &req)
	if errors.Is(err, fsm.ErrInvalidCommand) {
		v, err = resp.Error("ERR "+err.Error()), nil
	}
	if err != nil {
		return nil, s.statusErr(req.Shard, err)
	}
	return &rpc.RedisExecResponse{Reply: rpc.ReplyToProto(v), Index: index}, nil
}
