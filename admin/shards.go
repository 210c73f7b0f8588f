package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// The elastic shards' routes (docs/operations.md):
//
//	POST   /v1/shards/{shard}/split   split a shard; slots optional: ?slots=0-15,32, or the body
//	                                  (text "0-15,32" or {"slots":"0-15,32"}); default the upper half
//	POST   /v1/shards/merge?into=A&from=B  merge shard B into shard A
//	GET    /v1/moves                  the moves in progress
//	DELETE /v1/moves/{id}             cancel a move (before its target adopted the slots)
//	GET    /v1/shards/policy          the automatic shard policy
//	POST   /v1/shards/policy          change it: a JSON body with the fields to set
//	                                  (auto, nodes_per_shard, max_shard_bytes, max_shard_load)

// maxShardBody bounds the body of a split or policy request.
const maxShardBody = 64 << 10

type handleFunc func(pattern string, fn func(ctx context.Context, r *http.Request) (any, error))

func shardRoutes(n Node, handle handleFunc) {
	handle("POST /v1/shards/{shard}/split", func(ctx context.Context, r *http.Request) (any, error) {
		id, err := parseShardID(r.PathValue("shard"))
		if err != nil {
			return nil, err
		}
		body, err := readBody(r)
		if err != nil {
			return nil, err
		}
		q := r.URL.Query()
		slots, err := splitSlots(q.Get("slots"), q.Has("slots"), body)
		if err != nil {
			return nil, err
		}
		return n.SplitShard(ctx, id, slots)
	})
	handle("POST /v1/shards/merge", func(ctx context.Context, r *http.Request) (any, error) {
		q := r.URL.Query()
		if !q.Has("into") || !q.Has("from") {
			return nil, fmt.Errorf("%w: merge needs ?into=<shard>&from=<shard>", cluster.ErrInvalidArgument)
		}
		into, err := parseShardID(q.Get("into"))
		if err != nil {
			return nil, err
		}
		from, err := parseShardID(q.Get("from"))
		if err != nil {
			return nil, err
		}
		return n.MergeShards(ctx, into, from)
	})
	handle("GET /v1/moves", func(ctx context.Context, r *http.Request) (any, error) {
		ms, err := n.Moves(ctx)
		if ms == nil {
			ms = []placement.Move{}
		}
		return ms, err
	})
	handle("DELETE /v1/moves/{id}", func(ctx context.Context, r *http.Request) (any, error) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%w: move id %q: want a positive number", cluster.ErrInvalidArgument, r.PathValue("id"))
		}
		return n.CancelMove(ctx, id)
	})
	handle("GET /v1/shards/policy", func(ctx context.Context, r *http.Request) (any, error) {
		p, _, err := n.ShardPolicy(ctx)
		return p, err
	})
	handle("POST /v1/shards/policy", func(ctx context.Context, r *http.Request) (any, error) {
		body, err := readBody(r)
		if err != nil {
			return nil, err
		}
		patch, err := placement.DecodePolicyPatch(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", cluster.ErrInvalidArgument, err)
		}
		if patch.IsEmpty() {
			return nil, fmt.Errorf("%w: nothing to change: send the fields to set (auto, nodes_per_shard, max_shard_bytes, max_shard_load)", cluster.ErrInvalidArgument)
		}
		return n.SetShardPolicy(ctx, patch)
	})
}

// readBody reads a request body of at most maxShardBody bytes.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxShardBody+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the body: %v", cluster.ErrInvalidArgument, err)
	}
	if len(b) > maxShardBody {
		return nil, fmt.Errorf("%w: body over %d bytes", cluster.ErrInvalidArgument, maxShardBody)
	}
	return b, nil
}

// parseShardID parses a shard number of a path or query.
func parseShardID(s string) (shard.ID, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v >= shard.MaxShards {
		return 0, fmt.Errorf("%w: shard %q: want a shard number (0..%d)", cluster.ErrInvalidArgument, s, shard.MaxShards-1)
	}
	return shard.ID(v), nil
}

// splitSlots reads a split's slots from the query (query, when has) or
// the body (text "0-15,32" or the JSON {"slots":"0-15,32"}); nil when
// neither gives any (the upper half). Both at once, an empty set and bad
// text are refused (ErrInvalidArgument).
func splitSlots(query string, has bool, body []byte) (*shard.SlotSet, error) {
	text := ""
	body = bytes.TrimSpace(body)
	switch {
	case has && len(body) > 0:
		return nil, fmt.Errorf("%w: slots given both in the query and the body", cluster.ErrInvalidArgument)
	case has:
		text = query
	case len(body) > 0 && body[0] == '{':
		var req struct {
			Slots *string `json:"slots"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || dec.More() {
			return nil, fmt.Errorf("%w: split body: want {\"slots\":\"0-15,32\"} or the text 0-15,32 (%v)", cluster.ErrInvalidArgument, err)
		}
		if req.Slots == nil {
			return nil, nil
		}
		text = *req.Slots
	case len(body) > 0:
		text = string(body)
	default:
		return nil, nil
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, fmt.Errorf("%w: no slots given (omit them to split off the upper half)", cluster.ErrInvalidArgument)
	}
	s, err := shard.ParseSlotSet(text)
	if err != nil {
		return nil, fmt.Errorf("%w: slots %q: %v", cluster.ErrInvalidArgument, text, err)
	}
	if s.IsEmpty() {
		return nil, fmt.Errorf("%w: no slots given (omit them to split off the upper half)", cluster.ErrInvalidArgument)
	}
	return &s, nil
}
