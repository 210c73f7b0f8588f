package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
)

// redisHarness applies Redis commands to an FSM as the cluster does:
// writes as OpRedis log entries, reads with RedisRead.
type redisHarness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newRedisHarness(t testing.TB) *redisHarness {
	return &redisHarness{t: t, f: mustOpen(t, testConfig(1, t.TempDir()), nil)}
}

func argv(args ...string) RedisArgv {
	out := make(RedisArgv, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// apply proposes c and returns its result.
func (h *redisHarness) apply(c *Command) *Result {
	h.t.Helper()
	h.index++
	out := h.f.ApplyBatch([]*raft.Log{cmdLog(h.index, mustEncode(h.t, c))})
	return out[0].(*Result)
}

// do runs one command and returns its RESP2 reply.
func (h *redisHarness) do(args ...string) string {
	h.t.Helper()
	return string(h.doValue(args...).Append(nil, 2))
}

func (h *redisHarness) doValue(args ...string) resp.Value {
	h.t.Helper()
	a := argv(args...)
	if v := CheckRedis(a, 1<<20); v != nil {
		return *v
	}
	if LookupRedis(a[0]).Write {
		res := h.apply(&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{a}}})
		if res.Err != nil {
			h.t.Fatalf("%q: %v", args, res.Err)
		}
		return *res.Reply
	}
	v, err := h.f.RedisRead(a)
	if err != nil {
		h.t.Fatalf("%q: %v", args, err)
	}
	return v
}

func (h *redisHarness) expect(want string, args ...string) {
	h.t.Helper()
	if got := h.do(args...); got != want {
		h.t.Errorf("%q = %q, want %q", args, got, want)
	}
}

func TestRedisStrings(t *testing.T) {
	h := newRedisHarness(t)
	h.expect("$-1\r\n", "GET", "k")
	h.expect("+OK\r\n", "SET", "k", "v")
	h.expect("$1\r\nv\r\n", "get", "k")
	h.expect("$-1\r\n", "SET", "k", "w", "NX")
	h.expect("+OK\r\n", "SET", "k", "w", "XX")
	h.expect("$-1\r\n", "SET", "n", "w", "XX")
	h.expect("$1\r\nw\r\n", "SET", "k", "x", "GET")
	h.expect("-ERR syntax error\r\n", "SET", "k", "x", "NX", "XX")
	h.expect("-ERR syntax error\r\n", "SET", "k", "x", "BOGUS")
	h.expect("+OK\r\n", "MSET", "a", "1", "b", "2")
	h.expect("-ERR wrong number of arguments for 'mset' command\r\n", "MSET", "a", "1", "b")
	h.expect("*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n", "MGET", "a", "zz", "b")
	h.expect(":2\r\n", "INCR", "a")
	h.expect(":12\r\n", "INCRBY", "a", "10")
	h.expect(":11\r\n", "DECR", "a")
	h.expect(":1\r\n", "DECRBY", "a", "10")
	h.expect(":1\r\n", "INCR", "fresh")
	h.expect("-ERR value is not an integer or out of range\r\n", "INCR", "k")
	h.expect("-ERR value is not an integer or out of range\r\n", "INCRBY", "a", "x")
	h.expect("+OK\r\n", "SET", "big", "9223372036854775807")
	h.expect("-ERR increment or decrement would overflow\r\n", "INCR", "big")
	h.expect("$19\r\n9223372036854775807\r\n", "GET", "big")
	h.expect("+string\r\n", "TYPE", "k")
	h.expect("+none\r\n", "TYPE", "nope")
	h.expect(":2\r\n", "EXISTS", "k", "k", "nope")
	h.expect(":2\r\n", "DEL", "k", "a", "nope")
	h.expect(":0\r\n", "EXISTS", "k")
	h.expect("-ERR wrong number of arguments for 'get' command\r\n", "GET")
	h.expect("-ERR unknown command 'FOO', with args beginning with: 'x' \r\n", "FOO", "x")
}

func TestRedisHashes(t *testing.T) {
	h := newRedisHarness(t)
	h.expect(":2\r\n", "HSET", "h", "f1", "v1", "f2", "v2")
	h.expect(":1\r\n", "HSET", "h", "f1", "v1b", "f3", "v3")
	h.expect("-ERR wrong number of arguments for 'hset' command\r\n", "HSET", "h", "f1", "v1", "f2")
	h.expect("$3\r\nv1b\r\n", "HGET", "h", "f1")
	h.expect("$-1\r\n", "HGET", "h", "nope")
	h.expect("$-1\r\n", "HGET", "nokey", "f")
	h.expect("*2\r\n$2\r\nv2\r\n$-1\r\n", "HMGET", "h", "f2", "x")
	h.expect("*6\r\n$2\r\nf1\r\n$3\r\nv1b\r\n$2\r\nf2\r\n$2\r\nv2\r\n$2\r\nf3\r\n$2\r\nv3\r\n", "HGETALL", "h")
	if got := string(h.doValue("HGETALL", "h").Append(nil, 3)); !strings.HasPrefix(got, "%3\r\n") {
		t.Errorf("HGETALL in RESP3 = %q, want a map", got)
	}
	h.expect("*0\r\n", "HGETALL", "nokey")
	h.expect("*3\r\n$2\r\nf1\r\n$2\r\nf2\r\n$2\r\nf3\r\n", "HKEYS", "h")
	h.expect("*3\r\n$3\r\nv1b\r\n$2\r\nv2\r\n$2\r\nv3\r\n", "HVALS", "h")
	h.expect(":3\r\n", "HLEN", "h")
	h.expect(":1\r\n", "HEXISTS", "h", "f2")
	h.expect(":0\r\n", "HEXISTS", "h", "f9")
	h.expect(":5\r\n", "HINCRBY", "h", "n", "5")
	h.expect(":3\r\n", "HINCRBY", "h", "n", "-2")
	h.expect("-ERR hash value is not an integer\r\n", "HINCRBY", "h", "f1", "1")
	h.expect("-ERR value is not an integer or out of range\r\n", "HINCRBY", "h", "n", "1.5")
	h.expect(":0\r\n", "HSETNX", "h", "f1", "zz")
	h.expect(":1\r\n", "HSETNX", "h", "f9", "zz")
	h.expect(":2\r\n", "HDEL", "h", "f1", "f9", "nope")
	h.expect(":3\r\n", "HLEN", "h")
	h.expect(":3\r\n", "HDEL", "h", "f2", "f3", "n")
	h.expect(":0\r\n", "EXISTS", "h")
	h.expect("+OK\r\n", "HMSET", "h2", "a", "1")
	h.expect("+hash\r\n", "TYPE", "h2")
}

func TestRedisSets(t *testing.T) {
	h := newRedisHarness(t)
	h.expect(":3\r\n", "SADD", "s", "b", "a", "c", "a")
	h.expect(":0\r\n", "SADD", "s", "a")
	h.expect("*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", "SMEMBERS", "s")
	if got := string(h.doValue("SMEMBERS", "s").Append(nil, 3)); !strings.HasPrefix(got, "~3\r\n") {
		t.Errorf("SMEMBERS in RESP3 = %q, want a set", got)
	}
	h.expect(":1\r\n", "SISMEMBER", "s", "a")
	h.expect(":0\r\n", "SISMEMBER", "s", "z")
	h.expect(":3\r\n", "SCARD", "s")
	h.expect(":2\r\n", "SREM", "s", "a", "b", "z")
	h.expect(":1\r\n", "SREM", "s", "c")
	h.expect(":0\r\n", "EXISTS", "s")
	h.expect("*0\r\n", "SMEMBERS", "s")
	h.expect(":0\r\n", "SCARD", "s")
}

func TestRedisLists(t *testing.T) {
	h := newRedisHarness(t)
	h.expect(":3\r\n", "RPUSH", "l", "a", "b", "c")
	h.expect(":5\r\n", "LPUSH", "l", "y", "z") // z y a b c
	h.expect("*5\r\n$1\r\nz\r\n$1\r\ny\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", "LRANGE", "l", "0", "-1")
	h.expect("*2\r\n$1\r\nb\r\n$1\r\nc\r\n", "LRANGE", "l", "-2", "100")
	h.expect("*0\r\n", "LRANGE", "l", "3", "1")
	h.expect("*0\r\n", "LRANGE", "l", "9", "10")
	h.expect("*1\r\n$1\r\nz\r\n", "LRANGE", "l", "-100", "0")
	h.expect("-ERR value is not an integer or out of range\r\n", "LRANGE", "l", "a", "1")
	h.expect("$1\r\nc\r\n", "LINDEX", "l", "-1")
	h.expect("$-1\r\n", "LINDEX", "l", "5")
	h.expect(":5\r\n", "LLEN", "l")
	h.expect("$1\r\nz\r\n", "LPOP", "l")
	h.expect("*2\r\n$1\r\nc\r\n$1\r\nb\r\n", "RPOP", "l", "2")
	h.expect("*0\r\n", "LPOP", "l", "0")
	h.expect("-ERR value is out of range, must be positive\r\n", "LPOP", "l", "-1")
	h.expect("-ERR wrong number of arguments for 'lpop' command\r\n", "LPOP", "l", "1", "2")
	h.expect("$-1\r\n", "LPOP", "nolist")
	h.expect("*-1\r\n", "LPOP", "nolist", "2")
	h.expect(":5\r\n", "RPUSH", "l", "1", "2", "3") // y a 1 2 3
	h.expect("+OK\r\n", "LTRIM", "l", "-3", "-1")
	h.expect("*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n", "LRANGE", "l", "0", "-1")
	h.expect("+OK\r\n", "LTRIM", "l", "5", "10")
	h.expect(":0\r\n", "EXISTS", "l")
	h.expect("+OK\r\n", "LTRIM", "nolist", "0", "1")
}

func TestRedisWrongType(t *testing.T) {
	h := newRedisHarness(t)
	h.do("SET", "str", "v")
	h.do("HSET", "hash", "f", "v")
	h.do("SADD", "set", "m")
	h.do("RPUSH", "list", "e")
	const wt = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
	for _, c := range [][]string{
		{"GET", "hash"}, {"INCR", "set"}, {"HSET", "str", "f", "v"}, {"HGET", "list", "f"},
		{"HGETALL", "set"}, {"HDEL", "str", "f"}, {"HLEN", "str"}, {"SADD", "hash", "m"},
		{"SMEMBERS", "str"}, {"SISMEMBER", "list", "m"}, {"RPUSH", "set", "x"}, {"LPOP", "hash"},
		{"LRANGE", "str", "0", "1"}, {"LTRIM", "set", "0", "1"}, {"LLEN", "hash"}, {"SET", "list", "x", "GET"},
	} {
		h.expect(wt, c...)
	}
	// MGET answers nil for other types; SET replaces them.
	h.expect("*2\r\n$-1\r\n$1\r\nv\r\n", "MGET", "hash", "str")
	h.expect("+OK\r\n", "SET", "hash", "now a string")
	h.expect("+string\r\n", "TYPE", "hash")
	if kvs := mustDump(t, h.f); slices.ContainsFunc(kvs, func(kv KV) bool { return kv.Key[0] == keys.TableRedisHash }) {
		t.Error("SET over a hash left its fields behind")
	}
}

func TestRedisMultiAndWatch(t *testing.T) {
	h := newRedisHarness(t)
	h.do("SET", "a", "1")
	ver := func(k string) uint64 {
		v := h.doValue("swarmkv.versions", k)
		return uint64(v.Elems[0].Int)
	}
	va := ver("a")
	if va == 0 || ver("absent") != 0 {
		t.Fatalf("versions: a=%d absent=%d", va, ver("absent"))
	}
	multi := func(watch []RedisWatch, cmds ...RedisArgv) *Result {
		return h.apply(&Command{Op: OpRedisMulti, Redis: &RedisTx{Cmds: cmds, Watch: watch}})
	}
	res := multi([]RedisWatch{{Key: []byte("a"), Version: va}, {Key: []byte("absent")}},
		argv("INCR", "a"), argv("GET", "a"), argv("HSET", "a", "f", "v"), argv("RPUSH", "q", "x"))
	if got := string(res.Reply.Append(nil, 2)); got != "*4\r\n:2\r\n$1\r\n2\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n:1\r\n" || !res.Succeeded {
		t.Fatalf("EXEC = %q (succeeded %v)", got, res.Succeeded)
	}
	// a changed since va: the block is aborted and writes nothing.
	res = multi([]RedisWatch{{Key: []byte("a"), Version: va}}, argv("SET", "b", "1"))
	if got := string(res.Reply.Append(nil, 2)); got != "*-1\r\n" || res.Succeeded {
		t.Fatalf("aborted EXEC = %q", got)
	}
	h.expect("$-1\r\n", "GET", "b")
	// A watched absent key that appeared aborts too.
	res = multi([]RedisWatch{{Key: []byte("q")}}, argv("SET", "b", "1"))
	if res.Succeeded {
		t.Fatal("EXEC ran although watched absent key q exists")
	}
	// Proposing a front-only command is invalid.
	res = h.apply(&Command{Op: OpRedisMulti, Redis: &RedisTx{Cmds: []RedisArgv{argv("KEYS", "*")}}})
	if !errors.Is(res.Err, ErrInvalidCommand) {
		t.Fatalf("KEYS in a block: %v", res.Err)
	}
	res = h.apply(&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("GET")}}})
	if !errors.Is(res.Err, ErrInvalidCommand) {
		t.Fatalf("bad arity proposed: %v", res.Err)
	}
}

func TestRedisKeysAndScan(t *testing.T) {
	h := newRedisHarness(t)
	want := map[string]bool{}
	for i := range 57 {
		k := fmt.Sprintf("asset:metadata:%02d", i)
		h.do("HSET", k, "id", strconv.Itoa(i))
		want[k] = true
	}
	h.do("MSET", "m1", "1", "m2", "2", "m3", "3") // one creation index
	h.do("SADD", "asset:category:tool", "x")
	got := h.doValue("KEYS", "asset:metadata:*")
	if len(got.Elems) != 57 {
		t.Fatalf("KEYS found %d keys, want 57", len(got.Elems))
	}
	h.expect("*1\r\n$19\r\nasset:category:tool\r\n", "KEYS", "asset:c*")
	seen := map[string]int{}
	cursor := "0"
	for pages := 0; ; pages++ {
		v := h.doValue("swarmkv.scan", cursor, "COUNT", "7", "TYPE", "hash", "MATCH", "asset:*")
		for _, e := range v.Elems[1].Elems {
			seen[e.String()]++
		}
		cursor = v.Elems[0].String()
		if cursor == "0" {
			break
		}
		if pages > 100 {
			t.Fatal("scan does not end")
		}
	}
	if len(seen) != 57 {
		t.Fatalf("scan saw %d keys, want 57", len(seen))
	}
	for k, n := range seen {
		if !want[k] || n != 1 {
			t.Fatalf("scan returned %q %d times", k, n)
		}
	}
	// COUNT 1 still returns the three keys MSET created together.
	v := h.doValue("swarmkv.scan", "0", "MATCH", "m*", "COUNT", "1")
	total := len(v.Elems[1].Elems)
	for c := v.Elems[0].String(); c != "0"; {
		v = h.doValue("swarmkv.scan", c, "MATCH", "m*", "COUNT", "1")
		total += len(v.Elems[1].Elems)
		c = v.Elems[0].String()
	}
	if total != 3 {
		t.Fatalf("scan of m* saw %d keys", total)
	}
}

// TestRedisListsModel checks pushes, pops, trims and ranges against a
// slice.
func TestRedisListsModel(t *testing.T) {
	h := newRedisHarness(t)
	rng := rand.New(rand.NewPCG(7, 9))
	var model []string
	for i := range 2000 {
		n := rng.IntN(7) - 3
		switch rng.IntN(6) {
		case 0:
			v := strconv.Itoa(i)
			model = append(model, v)
			h.do("RPUSH", "l", v)
		case 1:
			v := strconv.Itoa(i)
			model = append([]string{v}, model...)
			h.do("LPUSH", "l", v)
		case 2:
			got := h.do("LPOP", "l")
			if len(model) == 0 {
				if got != "$-1\r\n" {
					t.Fatalf("LPOP empty = %q", got)
				}
				continue
			}
			if want := string(resp.Bulk(model[0]).Append(nil, 2)); got != want {
				t.Fatalf("step %d LPOP = %q, want %q", i, got, want)
			}
			model = model[1:]
		case 3:
			e := rng.IntN(9) - 4
			h.expect("+OK\r\n", "LTRIM", "l", strconv.Itoa(n), strconv.Itoa(e))
			if lo, hi, ok := listRange(int64(n), int64(e), int64(len(model))); ok {
				model = model[lo : hi+1]
			} else {
				model = nil
			}
		default:
			s, e := rng.IntN(9)-4, rng.IntN(9)-4
			got := h.doValue("LRANGE", "l", strconv.Itoa(s), strconv.Itoa(e))
			var want []string
			if lo, hi, ok := listRange(int64(s), int64(e), int64(len(model))); ok {
				want = model[lo : hi+1]
			}
			var g []string
			for _, x := range got.Elems {
				g = append(g, x.String())
			}
			if !slices.Equal(g, want) {
				t.Fatalf("step %d LRANGE %d %d = %q, want %q", i, s, e, g, want)
			}
		}
		if got, want := h.do("LLEN", "l"), fmt.Sprintf(":%d\r\n", len(model)); got != want {
			t.Fatalf("step %d LLEN = %q, want %q", i, got, want)
		}
	}
}

// FuzzRedisCommand: any argv either fails CheckRedis with an error reply
// or, as a proposed command, validates, survives the log encoding, and
// applies deterministically (two replicas, same reply and state).
func FuzzRedisCommand(f *testing.F) {
	f.Add([]byte("HSET\x00asset:index\x00id\x00x"))
	f.Add([]byte("LTRIM\x00l\x00-3\x00-1"))
	f.Add([]byte("set\x00k\x00v\x00nx\x00get"))
	f.Add([]byte("lpop\x00l\x00-0"))
	f.Add([]byte("mset\x00a\x00\x00b"))
	a, b := newRedisHarness(f), newRedisHarness(f)
	for _, h := range []*redisHarness{a, b} {
		h.do("RPUSH", "l", "1", "2", "3")
		h.do("HSET", "asset:index", "id", "1")
		h.do("SADD", "s", "m")
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a.t, b.t = t, t
		args := bytes.Split(raw, []byte{0})
		if v := CheckRedis(args, 1<<10); v != nil {
			if !v.IsError() {
				t.Fatalf("CheckRedis reply %+v is not an error", v)
			}
			return
		}
		c := LookupRedis(args[0])
		if c.Internal || c.ShardLocal {
			return
		}
		cmd := &Command{Op: OpRedisMulti, Redis: &RedisTx{Cmds: []RedisArgv{args}}}
		if err := cmd.Validate(Limits{MaxValueSize: 1 << 10}); err != nil {
			t.Fatalf("CheckRedis accepted %q, Validate: %v", args, err)
		}
		data := mustEncode(t, cmd)
		dec, err := DecodeCommand(data)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !bytes.Equal(mustEncode(t, dec), data) {
			t.Fatal("re-encoding differs")
		}
		ra, rb := a.apply(cmd), b.apply(dec)
		if ra.Err != nil || rb.Err != nil {
			t.Fatalf("apply %q: %v / %v", args, ra.Err, rb.Err)
		}
		if !bytes.Equal(ra.Reply.Append(nil, 3), rb.Reply.Append(nil, 3)) {
			t.Fatalf("replicas replied differently to %q", args)
		}
	})
}
