package rpc

import (
	"fmt"

	"github.com/swarmkv/swarmkv/resp"
)

// maxReplyDepth bounds the nesting of a RedisReply (EXEC of SCAN-like
// replies nests three deep).
const maxReplyDepth = 8

// ReplyToProto converts a Redis reply for the wire.
func ReplyToProto(v resp.Value) *RedisReply {
	p := &RedisReply{Kind: uint32(v.Kind), Str: v.Str, Int: v.Int}
	if len(v.Elems) > 0 {
		p.Elems = make([]*RedisReply, len(v.Elems))
		for i := range v.Elems {
			p.Elems[i] = ReplyToProto(v.Elems[i])
		}
	}
	return p
}

// ReplyFromProto converts a reply from the wire; an unknown kind, a map of
// odd length, elements of a scalar or nesting deeper than 8 is an error
// wrapping ErrBadReply.
func ReplyFromProto(p *RedisReply) (resp.Value, error) { return replyFromProto(p, 0) }

// ErrBadReply is returned by ReplyFromProto for a malformed reply.
var ErrBadReply = fmt.Errorf("rpc: malformed redis reply")

func replyFromProto(p *RedisReply, depth int) (resp.Value, error) {
	if p == nil {
		return resp.Value{}, fmt.Errorf("%w: missing", ErrBadReply)
	}
	if depth > maxReplyDepth {
		return resp.Value{}, fmt.Errorf("%w: nested deeper than %d", ErrBadReply, maxReplyDepth)
	}
	k := resp.Kind(p.GetKind())
	if k < resp.KindSimple || k > resp.KindSet {
		return resp.Value{}, fmt.Errorf("%w: kind %d", ErrBadReply, p.GetKind())
	}
	v := resp.Value{Kind: k, Str: p.GetStr(), Int: p.GetInt()}
	if k == resp.KindMap && len(p.GetElems())%2 != 0 {
		return resp.Value{}, fmt.Errorf("%w: map of %d elements", ErrBadReply, len(p.GetElems()))
	}
	switch k {
	case resp.KindArray, resp.KindMap, resp.KindSet:
		v.Elems = make([]resp.Value, len(p.GetElems()))
		for i, e := range p.GetElems() {
			var err error
			if v.Elems[i], err = replyFromProto(e, depth+1); err != nil {
				return resp.Value{}, err
			}
		}
	default:
		if len(p.GetElems()) > 0 {
			return resp.Value{}, fmt.Errorf("%w: kind %d with elements", ErrBadReply, k)
		}
	}
	return v, nil
}

// ArgvToProto converts commands for the wire.
func ArgvToProto(cmds [][][]byte) []*RedisArgv {
	out := make([]*RedisArgv, len(cmds))
	for i, c := range cmds {
		out[i] = &RedisArgv{Args: c}
	}
	return out
}
