package fsm

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
)

// redisTable lists the commands the state machine runs, with Redis 7's
// arities and key positions.
func redisTable() []*redisSpec {
	w, sl, in := rWrite, rShardLocal, rInternal|rShardLocal
	return []*redisSpec{
		// connection commands that MULTI may queue
		{name: "ping", arity: -1, check: maxArgs("ping", 2), run: cmdPing},
		{name: "echo", arity: 2, run: func(_ *rexec, a [][]byte) (resp.Value, error) { return resp.BulkBytes(a[1]), nil }},
		// keyspace
		{name: "del", arity: -2, flags: w, first: 1, last: -1, step: 1, run: cmdDel},
		{name: "exists", arity: -2, first: 1, last: -1, step: 1, run: cmdExists},
		{name: "type", arity: 2, first: 1, last: 1, step: 1, run: cmdType},
		{name: "keys", arity: 2, flags: sl, run: cmdKeys},
		{name: "swarmkv.scan", arity: -2, flags: in, run: cmdShardScan},
		{name: "swarmkv.dbsize", arity: 1, flags: in, run: cmdDBSize},
		{name: "swarmkv.versions", arity: -1, flags: in, first: 1, last: -1, step: 1, run: cmdVersions},
		// strings
		{name: "get", arity: 2, first: 1, last: 1, step: 1, run: cmdGet},
		{name: "set", arity: -3, flags: w, first: 1, last: 1, step: 1, run: cmdSet},
		{name: "mget", arity: -2, first: 1, last: -1, step: 1, run: cmdMGet},
		{name: "mset", arity: -3, flags: w, first: 1, last: -1, step: 2, check: pairs("mset", 1), run: cmdMSet},
		{name: "incr", arity: 2, flags: w, first: 1, last: 1, step: 1, run: incrBy(1, false)},
		{name: "decr", arity: 2, flags: w, first: 1, last: 1, step: 1, run: incrBy(-1, false)},
		{name: "incrby", arity: 3, flags: w, first: 1, last: 1, step: 1, run: incrBy(1, true)},
		{name: "decrby", arity: 3, flags: w, first: 1, last: 1, step: 1, run: incrBy(-1, true)},
		// hashes
		{name: "hset", arity: -4, flags: w, first: 1, last: 1, step: 1, fieldFirst: 2, fieldStp: 2, check: pairs("hset", 2), run: cmdHSet(false)},
		{name: "hmset", arity: -4, flags: w, first: 1, last: 1, step: 1, fieldFirst: 2, fieldStp: 2, check: pairs("hmset", 2), run: cmdHSet(true)},
		{name: "hsetnx", arity: 4, flags: w, first: 1, last: 1, step: 1, fieldFirst: 2, run: cmdHSetNX},
		{name: "hget", arity: 3, first: 1, last: 1, step: 1, run: cmdHGet},
		{name: "hmget", arity: -3, first: 1, last: 1, step: 1, run: cmdHMGet},
		{name: "hgetall", arity: 2, first: 1, last: 1, step: 1, run: hashList(true, true)},
		{name: "hkeys", arity: 2, first: 1, last: 1, step: 1, run: hashList(true, false)},
		{name: "hvals", arity: 2, first: 1, last: 1, step: 1, run: hashList(false, true)},
		{name: "hdel", arity: -3, flags: w, first: 1, last: 1, step: 1, run: cmdRemove(keys.RedisHash, keys.RedisHashField)},
		{name: "hexists", arity: 3, first: 1, last: 1, step: 1, run: cmdHExists},
		{name: "hlen", arity: 2, first: 1, last: 1, step: 1, run: cmdLen(keys.RedisHash)},
		{name: "hincrby", arity: 4, flags: w, first: 1, last: 1, step: 1, fieldFirst: 2, run: cmdHIncrBy},
		// sets
		{name: "sadd", arity: -3, flags: w, first: 1, last: 1, step: 1, fieldFirst: 2, fieldStp: 1, run: cmdSAdd},
		{name: "srem", arity: -3, flags: w, first: 1, last: 1, step: 1, run: cmdRemove(keys.RedisSet, keys.RedisSetMember)},
		{name: "smembers", arity: 2, first: 1, last: 1, step: 1, run: cmdSMembers},
		{name: "sismember", arity: 3, first: 1, last: 1, step: 1, run: cmdSIsMember},
		{name: "scard", arity: 2, first: 1, last: 1, step: 1, run: cmdLen(keys.RedisSet)},
		// lists
		{name: "rpush", arity: -3, flags: w, first: 1, last: 1, step: 1, run: cmdPush(false)},
		{name: "lpush", arity: -3, flags: w, first: 1, last: 1, step: 1, run: cmdPush(true)},
		{name: "lpop", arity: -2, flags: w, first: 1, last: 1, step: 1, check: maxArgs("lpop", 3), run: cmdPop(true)},
		{name: "rpop", arity: -2, flags: w, first: 1, last: 1, step: 1, check: maxArgs("rpop", 3), run: cmdPop(false)},
		{name: "lrange", arity: 4, first: 1, last: 1, step: 1, run: cmdLRange},
		{name: "ltrim", arity: 4, flags: w, first: 1, last: 1, step: 1, run: cmdLTrim},
		{name: "llen", arity: 2, first: 1, last: 1, step: 1, run: cmdLen(keys.RedisList)},
		{name: "lindex", arity: 3, first: 1, last: 1, step: 1, run: cmdLIndex},
	}
}

func maxArgs(name string, n int) func([][]byte) *resp.Value {
	return func(argv [][]byte) *resp.Value {
		if len(argv) > n {
			v := resp.WrongArgs(name)
			return &v
		}
		return nil
	}
}

// pairs requires an even number of arguments from argv[from] on (MSET k
// v ...: 1, HSET key f v ...: 2).
func pairs(name string, from int) func([][]byte) *resp.Value {
	return func(argv [][]byte) *resp.Value {
		if (len(argv)-from)%2 != 0 {
			v := resp.WrongArgs(name)
			return &v
		}
		return nil
	}
}

// parseInt parses a decimal int64 as Redis's string2ll does: no sign but
// '-', no leading zeros, no spaces, at most 20 bytes.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, false
	}
	return v, strconv.FormatInt(v, 10) == string(b)
}

func intArg(b []byte) (int64, error) {
	v, ok := parseInt(b)
	if !ok {
		return 0, fail(resp.ErrNotInteger)
	}
	return v, nil
}

func cmdPing(_ *rexec, a [][]byte) (resp.Value, error) {
	if len(a) == 2 {
		return resp.BulkBytes(a[1]), nil
	}
	return resp.Simple("PONG"), nil
}

// ---- keyspace ----

func cmdDel(x *rexec, a [][]byte) (resp.Value, error) {
	n := int64(0)
	for _, k := range a[1:] {
		m, found, err := x.meta(k)
		if err != nil {
			return resp.Value{}, err
		}
		if found {
			if err := x.remove(k, &m); err != nil {
				return resp.Value{}, err
			}
			n++
		}
	}
	return resp.Int(n), nil
}

func cmdExists(x *rexec, a [][]byte) (resp.Value, error) {
	n := int64(0)
	for _, k := range a[1:] {
		_, found, err := x.meta(k)
		if err != nil {
			return resp.Value{}, err
		}
		if found {
			n++
		}
	}
	return resp.Int(n), nil
}

func cmdType(x *rexec, a [][]byte) (resp.Value, error) {
	m, found, err := x.meta(a[1])
	if err != nil || !found {
		return resp.Simple("none"), err
	}
	return resp.Simple(m.Type.String()), nil
}

// cmdKeys lists this shard's keys matching the pattern (the front merges
// the shards' answers). A reply that would pass the reply limits is an
// error (KeysTooMany), never built: Redis has no KEYS limit, so a bounded
// KEYS refuses rather than truncates.
func cmdKeys(x *rexec, a [][]byte) (resp.Value, error) {
	pat := a[1]
	lim := x.reply.WithDefaults()
	prefix := keys.RedisKey(resp.LiteralPrefix(pat))
	out := []resp.Value{}
	size := 0
	err := x.eachKey(prefix, keys.PrefixEnd(prefix), func(k []byte) error {
		if !resp.Match(pat, k[1:]) || !x.owns(k[1:]) {
			return nil
		}
		size += BulkSize(len(k) - 1)
		if len(out) >= lim.MaxKeys || size > lim.MaxBytes {
			return fail(KeysTooMany(lim, len(out) >= lim.MaxKeys))
		}
		out = append(out, resp.BulkBytes(bytes.Clone(k[1:])))
		return nil
	})
	return resp.Array(out...), err
}

// BulkSize is the RESP size of a bulk string of n bytes ($n CRLF data
// CRLF).
func BulkSize(n int) int { return 1 + len(strconv.Itoa(n)) + 2 + n + 2 }

// KeysTooMany is the error reply of a KEYS over lim: over its key count
// when keys, else over its bytes.
func KeysTooMany(lim ReplyLimits, keys bool) string {
	if keys {
		return "ERR KEYS result exceeds " + strconv.Itoa(lim.MaxKeys) + " keys; use SCAN"
	}
	return "ERR KEYS result exceeds " + strconv.Itoa(lim.MaxBytes) + " bytes; use SCAN"
}

// cmdDBSize counts this shard's keys (swarmkv.dbsize; the front sums the
// shards' counts) without reading values or building a list.
func cmdDBSize(x *rexec, _ [][]byte) (resp.Value, error) {
	prefix := keys.RedisKey(nil)
	n := int64(0)
	err := x.eachKey(prefix, keys.PrefixEnd(prefix), func(k []byte) error {
		if x.owns(k[1:]) {
			n++
		}
		return nil
	})
	return resp.Int(n), err
}

// cmdShardScan is SCAN on one shard: swarmkv.scan <cursor> [MATCH p]
// [COUNT n] [TYPE t]. The cursor is a creation index (0: start); the reply
// is [next cursor (0: done), [keys]]. A page ends after COUNT entries or
// once its keys reach the reply byte bound (ReplyLimits.MaxBytes). Keys
// created by one command share a creation index and are returned together,
// so a page may exceed either.
func cmdShardScan(x *rexec, a [][]byte) (resp.Value, error) {
	cursor, err := strconv.ParseUint(string(a[1]), 10, 64)
	if err != nil {
		return resp.Value{}, fail(resp.ErrInvalidCursor)
	}
	opt, errv := ParseScanOptions(a[2:])
	if errv != nil {
		return *errv, nil
	}
	out := []resp.Value{}
	seen, size := 0, 0
	maxBytes := x.reply.WithDefaults().MaxBytes
	var next, group uint64
	stop := errStop
	err = x.eachRange(keys.RedisScanFrom(cursor), keys.PrefixEnd([]byte{keys.TableRedisScan}), func(k, _ []byte) error {
		created, key, err := keys.DecodeRedisScan(k)
		if err != nil {
			return fail("ERR swarmkv: corrupt scan entry: " + err.Error())
		}
		if (seen >= opt.Count || size >= maxBytes) && created != group {
			next = created
			return stop
		}
		group = created
		seen++
		if !resp.Match(opt.Match, key) || !x.owns(key) {
			return nil
		}
		if opt.Type != "" {
			m, found, err := x.meta(key)
			if err != nil {
				return err
			}
			if !found || m.Type.String() != opt.Type {
				return nil
			}
		}
		out = append(out, resp.BulkBytes(bytes.Clone(key)))
		size += BulkSize(len(key))
		return nil
	})
	if err != nil && err != stop {
		return resp.Value{}, err
	}
	return resp.Array(resp.Bulk(strconv.FormatUint(next, 10)), resp.Array(out...)), nil
}

var errStop = fail("stop")

// ScanOptions are SCAN's MATCH, COUNT and TYPE.
type ScanOptions struct {
	Match []byte // "*" when absent
	Count int    // 10 when absent
	Type  string // lowercase; "" when absent
}

// ParseScanOptions parses SCAN's options as Redis does, or returns the
// error reply.
func ParseScanOptions(a [][]byte) (ScanOptions, *resp.Value) {
	o := ScanOptions{Match: []byte("*"), Count: 10}
	for i := 0; i < len(a); i += 2 {
		if i+1 >= len(a) {
			v := resp.Error(resp.ErrSyntax)
			return o, &v
		}
		switch strings.ToLower(string(a[i])) {
		case "match":
			o.Match = a[i+1]
		case "count":
			n, ok := parseInt(a[i+1])
			if !ok {
				v := resp.Error(resp.ErrNotInteger)
				return o, &v
			}
			if n < 1 {
				v := resp.Error(resp.ErrSyntax)
				return o, &v
			}
			o.Count = int(min(n, 1<<20))
		case "type":
			o.Type = strings.ToLower(string(a[i+1]))
		default:
			v := resp.Error(resp.ErrSyntax)
			return o, &v
		}
	}
	return o, nil
}

// cmdVersions answers the version of each key (0: absent), for WATCH.
func cmdVersions(x *rexec, a [][]byte) (resp.Value, error) {
	out := make([]resp.Value, 0, len(a)-1)
	for _, k := range a[1:] {
		m, found, err := x.meta(k)
		if err != nil {
			return resp.Value{}, err
		}
		if !found {
			m.Version = 0
		}
		out = append(out, resp.Int(int64(m.Version)))
	}
	return resp.Array(out...), nil
}

// ---- strings ----

func cmdGet(x *rexec, a [][]byte) (resp.Value, error) {
	m, found, err := x.typed(a[1], keys.RedisString)
	if err != nil || !found {
		return resp.Null, err
	}
	return resp.BulkBytes(m.Value), nil
}

// setString makes key a string holding v, replacing a key of another type.
func (x *rexec) setString(key, v []byte, old *keys.RedisMeta, found bool) error {
	m := keys.RedisMeta{Type: keys.RedisString, Value: v}
	if found {
		if old.Type == keys.RedisString {
			m.Created = old.Created
		} else if err := x.remove(key, old); err != nil {
			return err
		}
	}
	return x.put(key, &m)
}

func cmdSet(x *rexec, a [][]byte) (resp.Value, error) {
	var nx, xx, get bool
	for i := 3; i < len(a); i++ {
		switch strings.ToLower(string(a[i])) {
		case "nx":
			nx = true
		case "xx":
			xx = true
		case "get":
			get = true
		case "keepttl":
		case "ex", "px", "exat", "pxat":
			return resp.Error("ERR swarmkv does not support key expiry (EX, PX, EXAT, PXAT)"), nil
		default:
			return resp.Error(resp.ErrSyntax), nil
		}
	}
	if nx && xx {
		return resp.Error(resp.ErrSyntax), nil
	}
	old, found, err := x.meta(a[1])
	if err != nil {
		return resp.Value{}, err
	}
	reply := resp.OK
	if get {
		reply = resp.Null
		if found {
			if old.Type != keys.RedisString {
				return resp.Value{}, errWrongType
			}
			reply = resp.BulkBytes(old.Value)
		}
	}
	if (nx && found) || (xx && !found) {
		if get {
			return reply, nil
		}
		return resp.Null, nil
	}
	return reply, x.setString(a[1], a[2], &old, found)
}

func cmdMGet(x *rexec, a [][]byte) (resp.Value, error) {
	out := make([]resp.Value, 0, len(a)-1)
	for _, k := range a[1:] {
		m, found, err := x.meta(k)
		if err != nil {
			return resp.Value{}, err
		}
		if found && m.Type == keys.RedisString {
			out = append(out, resp.BulkBytes(m.Value))
		} else {
			out = append(out, resp.Null)
		}
	}
	return resp.Array(out...), nil
}

func cmdMSet(x *rexec, a [][]byte) (resp.Value, error) {
	for i := 1; i+1 < len(a); i += 2 {
		old, found, err := x.meta(a[i])
		if err != nil {
			return resp.Value{}, err
		}
		if err := x.setString(a[i], a[i+1], &old, found); err != nil {
			return resp.Value{}, err
		}
	}
	return resp.OK, nil
}

// incrBy is INCR (sign 1, no argument), DECR, INCRBY and DECRBY.
func incrBy(sign int64, hasArg bool) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		by := int64(1)
		if hasArg {
			var err error
			if by, err = intArg(a[2]); err != nil {
				return resp.Value{}, err
			}
			if sign < 0 && by == math.MinInt64 {
				return resp.Error("ERR decrement would overflow"), nil
			}
		}
		by *= sign
		m, found, err := x.typed(a[1], keys.RedisString)
		if err != nil {
			return resp.Value{}, err
		}
		cur := int64(0)
		if found {
			if cur, err = intArg(m.Value); err != nil {
				return resp.Value{}, err
			}
		} else {
			m = keys.RedisMeta{Type: keys.RedisString}
		}
		n, ok := addInt(cur, by)
		if !ok {
			return resp.Value{}, fail(resp.ErrOverflow)
		}
		m.Value = strconv.AppendInt(nil, n, 10)
		return resp.Int(n), x.put(a[1], &m)
	}
}

func addInt(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

// ---- hashes ----

// hash returns key's hash record, creating an empty one (not yet stored)
// when absent.
func (x *rexec) hash(key []byte) (keys.RedisMeta, error) {
	m, found, err := x.typed(key, keys.RedisHash)
	if err == nil && !found {
		m = keys.RedisMeta{Type: keys.RedisHash}
	}
	return m, err
}

func cmdHSet(ok bool) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		m, err := x.hash(a[1])
		if err != nil {
			return resp.Value{}, err
		}
		added := int64(0)
		for i := 2; i+1 < len(a); i += 2 {
			fk := keys.RedisHashField(a[1], a[i])
			_, had, err := x.get(fk)
			if err != nil {
				return resp.Value{}, err
			}
			if !had {
				added++
				m.Count++
			}
			if err := x.w.Set(fk, a[i+1], nil); err != nil {
				return resp.Value{}, err
			}
		}
		if err := x.put(a[1], &m); err != nil {
			return resp.Value{}, err
		}
		if ok {
			return resp.OK, nil
		}
		return resp.Int(added), nil
	}
}

func cmdHSetNX(x *rexec, a [][]byte) (resp.Value, error) {
	m, err := x.hash(a[1])
	if err != nil {
		return resp.Value{}, err
	}
	fk := keys.RedisHashField(a[1], a[2])
	_, had, err := x.get(fk)
	if err != nil || had {
		return resp.Int(0), err
	}
	m.Count++
	if err := x.w.Set(fk, a[3], nil); err != nil {
		return resp.Value{}, err
	}
	return resp.Int(1), x.put(a[1], &m)
}

func cmdHGet(x *rexec, a [][]byte) (resp.Value, error) {
	_, found, err := x.typed(a[1], keys.RedisHash)
	if err != nil || !found {
		return resp.Null, err
	}
	v, had, err := x.get(keys.RedisHashField(a[1], a[2]))
	if err != nil || !had {
		return resp.Null, err
	}
	return resp.BulkBytes(v), nil
}

func cmdHMGet(x *rexec, a [][]byte) (resp.Value, error) {
	_, found, err := x.typed(a[1], keys.RedisHash)
	if err != nil {
		return resp.Value{}, err
	}
	out := make([]resp.Value, len(a)-2)
	for i, f := range a[2:] {
		out[i] = resp.Null
		if !found {
			continue
		}
		v, had, err := x.get(keys.RedisHashField(a[1], f))
		if err != nil {
			return resp.Value{}, err
		}
		if had {
			out[i] = resp.BulkBytes(v)
		}
	}
	return resp.Array(out...), nil
}

// hashList is HGETALL (fields and values, a map), HKEYS and HVALS.
func hashList(fields, values bool) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		_, found, err := x.typed(a[1], keys.RedisHash)
		out := []resp.Value{}
		if err != nil || !found {
			if fields && values {
				return resp.Map(), err
			}
			return resp.Array(), err
		}
		prefix := keys.RedisElemPrefix(keys.TableRedisHash, a[1])
		err = x.each(prefix, func(k, v []byte) error {
			if fields {
				out = append(out, resp.BulkBytes(bytes.Clone(k[len(prefix):])))
			}
			if values {
				out = append(out, resp.BulkBytes(bytes.Clone(v)))
			}
			return nil
		})
		if fields && values {
			return resp.Map(out...), err
		}
		return resp.Array(out...), err
	}
}

// cmdRemove is HDEL and SREM: it removes the named elements (fields or
// members, keyed by elem) of a key of type t, deletes the key when none is
// left, and answers how many it removed.
func cmdRemove(t keys.RedisType, elem func(key, e []byte) []byte) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		m, found, err := x.typed(a[1], t)
		if err != nil || !found {
			return resp.Int(0), err
		}
		n := int64(0)
		for _, e := range a[2:] {
			ek := elem(a[1], e)
			_, had, err := x.get(ek)
			if err != nil {
				return resp.Value{}, err
			}
			if had {
				n++
				m.Count--
				if err := x.w.Delete(ek, nil); err != nil {
					return resp.Value{}, err
				}
			}
		}
		return resp.Int(n), x.shrunk(a[1], &m, n > 0)
	}
}

// shrunk stores key's record after removals, deleting the key when it has
// no element left.
func (x *rexec) shrunk(key []byte, m *keys.RedisMeta, changed bool) error {
	switch {
	case !changed:
		return nil
	case m.Len() == 0:
		if err := x.w.Delete(keys.RedisScan(m.Created, key), nil); err != nil {
			return err
		}
		return x.w.Delete(keys.RedisKey(key), nil)
	}
	return x.put(key, m)
}

func cmdHExists(x *rexec, a [][]byte) (resp.Value, error) {
	_, found, err := x.typed(a[1], keys.RedisHash)
	if err != nil || !found {
		return resp.Int(0), err
	}
	_, had, err := x.get(keys.RedisHashField(a[1], a[2]))
	if had {
		return resp.Int(1), err
	}
	return resp.Int(0), err
}

// cmdLen is HLEN, SCARD and LLEN.
func cmdLen(t keys.RedisType) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		m, found, err := x.typed(a[1], t)
		if err != nil || !found {
			return resp.Int(0), err
		}
		return resp.Int(m.Len()), nil
	}
}

func cmdHIncrBy(x *rexec, a [][]byte) (resp.Value, error) {
	by, err := intArg(a[3])
	if err != nil {
		return resp.Value{}, err
	}
	m, err := x.hash(a[1])
	if err != nil {
		return resp.Value{}, err
	}
	fk := keys.RedisHashField(a[1], a[2])
	v, had, err := x.get(fk)
	if err != nil {
		return resp.Value{}, err
	}
	cur := int64(0)
	if had {
		var ok bool
		if cur, ok = parseInt(v); !ok {
			return resp.Value{}, fail(resp.ErrHashNotInt)
		}
	} else {
		m.Count++
	}
	n, ok := addInt(cur, by)
	if !ok {
		return resp.Value{}, fail(resp.ErrOverflow)
	}
	if err := x.w.Set(fk, strconv.AppendInt(nil, n, 10), nil); err != nil {
		return resp.Value{}, err
	}
	return resp.Int(n), x.put(a[1], &m)
}

// ---- sets ----

func cmdSAdd(x *rexec, a [][]byte) (resp.Value, error) {
	m, found, err := x.typed(a[1], keys.RedisSet)
	if err != nil {
		return resp.Value{}, err
	}
	if !found {
		m = keys.RedisMeta{Type: keys.RedisSet}
	}
	n := int64(0)
	for _, mem := range a[2:] {
		mk := keys.RedisSetMember(a[1], mem)
		_, had, err := x.get(mk)
		if err != nil {
			return resp.Value{}, err
		}
		if !had {
			n++
			m.Count++
			if err := x.w.Set(mk, nil, nil); err != nil {
				return resp.Value{}, err
			}
		}
	}
	if n == 0 {
		return resp.Int(0), nil
	}
	return resp.Int(n), x.put(a[1], &m)
}

func cmdSMembers(x *rexec, a [][]byte) (resp.Value, error) {
	_, found, err := x.typed(a[1], keys.RedisSet)
	if err != nil || !found {
		return resp.Set(), err
	}
	prefix := keys.RedisElemPrefix(keys.TableRedisSet, a[1])
	out := []resp.Value{}
	err = x.each(prefix, func(k, _ []byte) error {
		out = append(out, resp.BulkBytes(bytes.Clone(k[len(prefix):])))
		return nil
	})
	return resp.Set(out...), err
}

func cmdSIsMember(x *rexec, a [][]byte) (resp.Value, error) {
	_, found, err := x.typed(a[1], keys.RedisSet)
	if err != nil || !found {
		return resp.Int(0), err
	}
	_, had, err := x.get(keys.RedisSetMember(a[1], a[2]))
	if had {
		return resp.Int(1), err
	}
	return resp.Int(0), err
}

// ---- lists ----

func cmdPush(left bool) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		m, found, err := x.typed(a[1], keys.RedisList)
		if err != nil {
			return resp.Value{}, err
		}
		if !found {
			m = keys.RedisMeta{Type: keys.RedisList}
		}
		for _, v := range a[2:] {
			var pos int64
			if left {
				m.Head--
				pos = m.Head
			} else {
				pos = m.Tail
				m.Tail++
			}
			if err := x.w.Set(keys.RedisListElem(a[1], pos), v, nil); err != nil {
				return resp.Value{}, err
			}
		}
		return resp.Int(m.Len()), x.put(a[1], &m)
	}
}

func cmdPop(left bool) func(*rexec, [][]byte) (resp.Value, error) {
	return func(x *rexec, a [][]byte) (resp.Value, error) {
		hasCount := len(a) == 3
		count := int64(1)
		if hasCount {
			n, ok := parseInt(a[2])
			if !ok || n < 0 {
				return resp.Error(resp.ErrNotPositive), nil
			}
			count = n
		}
		m, found, err := x.typed(a[1], keys.RedisList)
		if err != nil {
			return resp.Value{}, err
		}
		if !found {
			if hasCount {
				return resp.NullArray, nil
			}
			return resp.Null, nil
		}
		count = min(count, m.Len())
		out := make([]resp.Value, 0, count)
		for range count {
			var pos int64
			if left {
				pos = m.Head
				m.Head++
			} else {
				m.Tail--
				pos = m.Tail
			}
			ek := keys.RedisListElem(a[1], pos)
			v, _, err := x.get(ek)
			if err != nil {
				return resp.Value{}, err
			}
			if err := x.w.Delete(ek, nil); err != nil {
				return resp.Value{}, err
			}
			out = append(out, resp.BulkBytes(v))
		}
		if err := x.shrunk(a[1], &m, count > 0); err != nil {
			return resp.Value{}, err
		}
		if !hasCount {
			return out[0], nil
		}
		return resp.Array(out...), nil
	}
}

// listRange normalizes Redis's start/stop indexes against length n; ok is
// false for an empty range.
func listRange(start, stop, n int64) (int64, int64, bool) {
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	if start < 0 {
		start = 0
	}
	if start > stop || start >= n {
		return 0, 0, false
	}
	if stop >= n {
		stop = n - 1
	}
	return start, stop, true
}

func cmdLRange(x *rexec, a [][]byte) (resp.Value, error) {
	start, err := intArg(a[2])
	if err != nil {
		return resp.Value{}, err
	}
	stop, err := intArg(a[3])
	if err != nil {
		return resp.Value{}, err
	}
	m, found, err := x.typed(a[1], keys.RedisList)
	if err != nil || !found {
		return resp.Array(), err
	}
	lo, hi, ok := listRange(start, stop, m.Len())
	if !ok {
		return resp.Array(), nil
	}
	out := make([]resp.Value, 0, hi-lo+1)
	err = x.eachRange(keys.RedisListElem(a[1], m.Head+lo), keys.RedisListElem(a[1], m.Head+hi+1), func(_, v []byte) error {
		out = append(out, resp.BulkBytes(bytes.Clone(v)))
		return nil
	})
	return resp.Array(out...), err
}

func cmdLTrim(x *rexec, a [][]byte) (resp.Value, error) {
	start, err := intArg(a[2])
	if err != nil {
		return resp.Value{}, err
	}
	stop, err := intArg(a[3])
	if err != nil {
		return resp.Value{}, err
	}
	m, found, err := x.typed(a[1], keys.RedisList)
	if err != nil || !found {
		return resp.OK, err
	}
	n := m.Len()
	lo, hi, ok := listRange(start, stop, n)
	if !ok {
		lo, hi = n, n-1 // remove everything
	}
	for pos := m.Head; pos < m.Head+lo; pos++ {
		if err := x.w.Delete(keys.RedisListElem(a[1], pos), nil); err != nil {
			return resp.Value{}, err
		}
	}
	for pos := m.Head + hi + 1; pos < m.Tail; pos++ {
		if err := x.w.Delete(keys.RedisListElem(a[1], pos), nil); err != nil {
			return resp.Value{}, err
		}
	}
	changed := lo > 0 || hi < n-1
	m.Head, m.Tail = m.Head+lo, m.Head+hi+1
	if m.Tail < m.Head {
		m.Tail = m.Head
	}
	return resp.OK, x.shrunk(a[1], &m, changed)
}

func cmdLIndex(x *rexec, a [][]byte) (resp.Value, error) {
	i, err := intArg(a[2])
	if err != nil {
		return resp.Value{}, err
	}
	m, found, err := x.typed(a[1], keys.RedisList)
	if err != nil || !found {
		return resp.Null, err
	}
	if i < 0 {
		i += m.Len()
	}
	if i < 0 || i >= m.Len() {
		return resp.Null, nil
	}
	v, had, err := x.get(keys.RedisListElem(a[1], m.Head+i))
	if err != nil || !had {
		return resp.Null, err
	}
	return resp.BulkBytes(v), nil
}
