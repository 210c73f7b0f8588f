package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// RedisWatch is a WATCH guard for RedisExec: the key's version (from
// RedisVersions) must still be Version, 0 meaning absent.
type RedisWatch struct {
	Key     []byte
	Version uint64
}

// RedisShard returns the shard a Redis key lives in: by the part inside
// its first "{...}" if non-empty, else by its namespace (the text before
// the first ':'), see keys.RedisRoutingKey.
func (c *Client) RedisShard(key string) shard.ID {
	return c.ShardOf(keys.RedisRoutingKey([]byte(key)))
}

// RedisExec runs Redis commands on the leader of shard id, the shard of
// every key they name: one command (multi false) or one MULTI/EXEC block
// applied atomically after its watches (multi true; the reply is then the
// array of replies, or the null array when a watched key changed). A
// Redis-level failure (WRONGTYPE, CROSSSLOT, ...) is an error reply, not
// an error. A single command that only reads is retried when an attempt's
// outcome is unknown; writes and blocks then fail with ErrOutcomeUnknown.
// This is the primitive beneath Assets; the RESP front uses the same
// service.
func (c *Client) RedisExec(ctx context.Context, id shard.ID, multi bool, watches []RedisWatch, cmds ...[]string) (resp.Value, error) {
	req := &rpc.RedisExecRequest{Shard: uint32(id), Multi: multi}
	for _, cmd := range cmds {
		a := &rpc.RedisArgv{Args: make([][]byte, len(cmd))}
		for i, s := range cmd {
			a.Args[i] = []byte(s)
		}
		req.Cmds = append(req.Cmds, a)
	}
	for _, w := range watches {
		req.Watches = append(req.Watches, &rpc.RedisWatch{Key: w.Key, Version: w.Version})
	}
	return c.RedisExecRequest(ctx, req, !multi && len(cmds) == 1 && len(cmds[0]) > 0 && redisReadOnly[strings.ToLower(cmds[0][0])])
}

// RedisExecRequest sends a prepared request (see RedisExec); idempotent
// says whether an attempt whose outcome is unknown may be retried. When
// the shard answers that a slot of the request's keys moved (nothing was
// executed), the client refreshes its map until it names the slot's new
// owner and sends the request there (req.Shard is updated), as a routed
// call does.
func (c *Client) RedisExecRequest(ctx context.Context, req *rpc.RedisExecRequest, idempotent bool) (resp.Value, error) {
	var out *rpc.RedisExecResponse
	d := &dest{id: shard.ID(req.GetShard()), follow: func(owner shard.ID) { req.Shard = uint32(owner) }}
	err := c.call(ctx, d, CallOptions{Idempotent: idempotent}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		out, err = rpc.NewRedisClient(cc).Exec(ctx, req)
		return err
	})
	if err != nil {
		return resp.Value{}, err
	}
	v, err := rpc.ReplyFromProto(out.GetReply())
	if err != nil {
		return resp.Value{}, fmt.Errorf("swarmkv: %w", err)
	}
	return v, nil
}

// redisReadOnly lists the commands RedisExec retries freely.
var redisReadOnly = map[string]bool{
	"get": true, "mget": true, "exists": true, "type": true, "hget": true, "hmget": true,
	"hgetall": true, "hkeys": true, "hvals": true, "hexists": true, "hlen": true,
	"smembers": true, "sismember": true, "scard": true, "lrange": true, "llen": true,
	"lindex": true, "keys": true, "swarmkv.versions": true, "swarmkv.scan": true,
}

// RedisVersions returns the version of each key (0: absent), the values
// WATCH guards compare; every key must be in shard id.
func (c *Client) RedisVersions(ctx context.Context, id shard.ID, ks ...string) ([]uint64, error) {
	v, err := c.RedisExec(ctx, id, false, nil, append([]string{"swarmkv.versions"}, ks...))
	if err != nil {
		return nil, err
	}
	if v.IsError() {
		return nil, replyError(v)
	}
	out := make([]uint64, len(v.Elems))
	for i, e := range v.Elems {
		out[i] = uint64(e.Int)
	}
	return out, nil
}

// ErrRedis is wrapped by the errors of the Assets store that carry a
// Redis error reply from the server (WRONGTYPE when a seed key holds
// another type, ...).
var ErrRedis = errors.New("swarmkv: redis error reply")

func replyError(v resp.Value) error { return fmt.Errorf("%w: %s", ErrRedis, v.Str) }
