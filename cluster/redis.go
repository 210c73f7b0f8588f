package cluster

import (
	"context"
	"fmt"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
)

// checkRedisReq validates a request as the state machine will (so a bad
// one costs no Raft round) and checks that its keys route to its shard
// under this node's map. It returns the error reply, or nil.
func (n *Node) checkRedisReq(req *RedisRequest) *resp.Value {
	errv := func(s string) *resp.Value { v := resp.Error(s); return &v }
	switch {
	case !req.Multi && (len(req.Cmds) != 1 || len(req.Watches) > 0):
		return errv("ERR swarmkv: a request without multi carries exactly one command and no watches")
	case len(req.Cmds) > n.cfg.RedisMaxMultiCommands:
		return errv(fmt.Sprintf("ERR swarmkv: transaction too long (more than %d commands)", n.cfg.RedisMaxMultiCommands))
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
	case req.Multi && size > n.cfg.RedisMaxMultiBytes:
		return errv(fmt.Sprintf("ERR swarmkv: transaction too big (more than %d bytes)", n.cfg.RedisMaxMultiBytes))
	case !req.Multi && size > n.cfg.RedisMaxCommandBytes:
		return errv(fmt.Sprintf("ERR swarmkv: command too big (more than %d bytes)", n.cfg.RedisMaxCommandBytes))
	}
	var ks [][]byte
	for _, argv := range req.Cmds {
		if v := fsm.CheckRedis(argv, n.cfg.Limits.MaxValueSize); v != nil {
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
	n.mu.RLock()
	smap := n.mu.smap
	n.mu.RUnlock()
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

// redisLocal runs a checked request on replica r, which must lead its
// shard: a block or a write is proposed (one log entry), a single read is
// answered from the state machine after the read barrier. index is the
// entry's log index (0 for reads).
func (n *Node) redisLocal(ctx context.Context, r *replica.Replica, req *RedisRequest) (resp.Value, uint64, error) {
	if req.Multi || fsm.LookupRedis(req.Cmds[0][0]).Write {
		op := fsm.OpRedis
		if req.Multi {
			op = fsm.OpRedisMulti
		}
		res, err := r.Propose(ctx, &fsm.Command{Op: op, Redis: &fsm.RedisTx{Cmds: req.Cmds, Watch: req.Watches}})
		if err != nil {
			return resp.Value{}, 0, err
		}
		return *res.Reply, res.Index, nil
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return resp.Value{}, 0, err
	}
	v, err := r.FSM().RedisRead(req.Cmds[0])
	return v, 0, err
}
