package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmkv/swarmkv/keys"
)

// The RESP front's replies the tests expect (package redisfront's
// redisVersion and redisNoAuth).
const (
	redisVersion = "7.2.4"
	redisNoAuth  = "NOAUTH Authentication required."
)

// redisCluster starts n nodes with shards shards, each with a RESP front.
func redisCluster(t *testing.T, n, shards int) *testCluster {
	return newTestCluster(t, n, shards, func(c *Config) { c.RedisAddr = "127.0.0.1:0" })
}

// redisClient connects go-redis to node i's RESP front.
func redisClient(t *testing.T, tc *testCluster, i, proto int) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: tc.redisAddr(i), Protocol: proto, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// must returns v, panicking on err (the test then fails with the stack).
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func eqs[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// wantErr checks that err is a Redis error with exactly msg.
func wantRedisErr(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if err == nil || err.Error() != msg {
		t.Errorf("%s: error %v, want %q", what, err, msg)
	}
}

func TestRedisCommands(t *testing.T) {
	tc := redisCluster(t, 1, 4)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			rdb := redisClient(t, tc, 0, proto)
			p := fmt.Sprintf("p%d:", proto) // every key in namespace p2 or p3
			k := func(s string) string { return p + s }

			eq(t, "PING", must(rdb.Ping(ctx).Result()), "PONG")
			eq(t, "ECHO", must(rdb.Echo(ctx, "hi").Result()), "hi")
			eq(t, "SELECT 0", must(rdb.Do(ctx, "SELECT", "0").Text()), "OK")
			wantRedisErr(t, "SELECT 1", rdb.Do(ctx, "SELECT", "1").Err(), "ERR DB index is out of range")
			eq(t, "CLIENT SETNAME", must(rdb.Do(ctx, "CLIENT", "SETNAME", "tester").Text()), "OK")
			eq(t, "CLIENT GETNAME", must(rdb.Do(ctx, "CLIENT", "GETNAME").Text()), "tester")
			eq(t, "CLIENT SETINFO", must(rdb.Do(ctx, "CLIENT", "SETINFO", "LIB-NAME", "x").Text()), "OK")
			if _, err := rdb.Do(ctx, "COMMAND").Result(); err != nil {
				t.Errorf("COMMAND: %v", err)
			}
			info := must(rdb.Info(ctx, "server").Result())
			if !contains(info, "redis_version:"+redisVersion) {
				t.Errorf("INFO = %q", info)
			}
			hello := must(rdb.Do(ctx, "HELLO", strconv.Itoa(proto)).Result())
			if m, ok := hello.(map[any]any); proto == 3 && (!ok || m["proto"] != int64(3) || m["server"] != "redis") {
				t.Errorf("HELLO 3 = %#v", hello)
			}
			wantRedisErr(t, "HELLO 4", rdb.Do(ctx, "HELLO", "4").Err(), "NOPROTO unsupported protocol version")

			// strings
			eq(t, "SET", must(rdb.Set(ctx, k("s"), "v", 0).Result()), "OK")
			eq(t, "GET", must(rdb.Get(ctx, k("s")).Result()), "v")
			if _, err := rdb.Get(ctx, k("nope")).Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("GET missing: %v, want redis.Nil", err)
			}
			eq(t, "SET NX on existing", must(rdb.SetNX(ctx, k("s"), "w", 0).Result()), false)
			eq(t, "SET XX on existing", must(rdb.SetXX(ctx, k("s"), "w", 0).Result()), true)
			eq(t, "SET NX on new", must(rdb.SetNX(ctx, k("s2"), "x", 0).Result()), true)
			eq(t, "MSET", must(rdb.MSet(ctx, k("a"), "1", k("b"), "2").Result()), "OK")
			mget := must(rdb.MGet(ctx, k("a"), k("zz"), k("b")).Result())
			if len(mget) != 3 || mget[0] != "1" || mget[1] != nil || mget[2] != "2" {
				t.Errorf("MGET = %#v", mget)
			}
			eq(t, "INCR", must(rdb.Incr(ctx, k("a")).Result()), int64(2))
			eq(t, "INCRBY", must(rdb.IncrBy(ctx, k("a"), -5).Result()), int64(-3))
			eq(t, "TYPE", must(rdb.Type(ctx, k("a")).Result()), "string")
			eq(t, "TYPE none", must(rdb.Type(ctx, k("none")).Result()), "none")
			eq(t, "EXISTS", must(rdb.Exists(ctx, k("a"), k("a"), k("none")).Result()), int64(2))
			eq(t, "DEL", must(rdb.Del(ctx, k("a"), k("none")).Result()), int64(1))

			// hashes
			eq(t, "HSET", must(rdb.HSet(ctx, k("h"), "f1", "v1", "f2", "v2").Result()), int64(2))
			eq(t, "HGET", must(rdb.HGet(ctx, k("h"), "f1").Result()), "v1")
			if _, err := rdb.HGet(ctx, k("h"), "nope").Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("HGET missing: %v", err)
			}
			hm := must(rdb.HMGet(ctx, k("h"), "f2", "x").Result())
			if len(hm) != 2 || hm[0] != "v2" || hm[1] != nil {
				t.Errorf("HMGET = %#v", hm)
			}
			all := must(rdb.HGetAll(ctx, k("h")).Result())
			if len(all) != 2 || all["f1"] != "v1" || all["f2"] != "v2" {
				t.Errorf("HGETALL = %v", all)
			}
			eq(t, "HGETALL missing", len(must(rdb.HGetAll(ctx, k("nohash")).Result())), 0)
			eqs(t, "HKEYS", must(rdb.HKeys(ctx, k("h")).Result()), []string{"f1", "f2"})
			eqs(t, "HVALS", must(rdb.HVals(ctx, k("h")).Result()), []string{"v1", "v2"})
			eq(t, "HEXISTS", must(rdb.HExists(ctx, k("h"), "f1").Result()), true)
			eq(t, "HLEN", must(rdb.HLen(ctx, k("h")).Result()), int64(2))
			eq(t, "HINCRBY", must(rdb.HIncrBy(ctx, k("h"), "n", 7).Result()), int64(7))
			eq(t, "HDEL", must(rdb.HDel(ctx, k("h"), "f1", "nope").Result()), int64(1))

			// sets
			eq(t, "SADD", must(rdb.SAdd(ctx, k("set"), "b", "a", "b").Result()), int64(2))
			eqs(t, "SMEMBERS", sorted(must(rdb.SMembers(ctx, k("set")).Result())), []string{"a", "b"})
			eq(t, "SISMEMBER", must(rdb.SIsMember(ctx, k("set"), "a").Result()), true)
			eq(t, "SISMEMBER no", must(rdb.SIsMember(ctx, k("set"), "z").Result()), false)
			eq(t, "SCARD", must(rdb.SCard(ctx, k("set")).Result()), int64(2))
			eq(t, "SREM", must(rdb.SRem(ctx, k("set"), "a", "z").Result()), int64(1))

			// lists
			eq(t, "RPUSH", must(rdb.RPush(ctx, k("l"), "a", "b", "c").Result()), int64(3))
			eq(t, "LPUSH", must(rdb.LPush(ctx, k("l"), "z").Result()), int64(4))
			eqs(t, "LRANGE", must(rdb.LRange(ctx, k("l"), 0, -1).Result()), []string{"z", "a", "b", "c"})
			eqs(t, "LRANGE neg", must(rdb.LRange(ctx, k("l"), -2, -1).Result()), []string{"b", "c"})
			eqs(t, "LRANGE empty", must(rdb.LRange(ctx, k("l"), 5, 9).Result()), []string{})
			eq(t, "LPOP", must(rdb.LPop(ctx, k("l")).Result()), "z")
			eq(t, "RPOP", must(rdb.RPop(ctx, k("l")).Result()), "c")
			eqs(t, "LPOP count", must(rdb.LPopCount(ctx, k("l"), 5).Result()), []string{"a", "b"})
			if _, err := rdb.LPop(ctx, k("l")).Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("LPOP empty: %v", err)
			}
			eq(t, "RPUSH", must(rdb.RPush(ctx, k("l"), "1", "2", "3", "4").Result()), int64(4))
			eq(t, "LTRIM", must(rdb.LTrim(ctx, k("l"), -2, -1).Result()), "OK")
			eqs(t, "after LTRIM", must(rdb.LRange(ctx, k("l"), 0, -1).Result()), []string{"3", "4"})
			eq(t, "LLEN", must(rdb.LLen(ctx, k("l")).Result()), int64(2))

			// keyspace across shards
			ks := sorted(must(rdb.Keys(ctx, p+"*").Result()))
			eqs(t, "KEYS", ks, []string{k("b"), k("h"), k("l"), k("s"), k("s2"), k("set")})
			var scanned []string
			var cursor uint64
			for {
				page, next := must2(t)(rdb.Scan(ctx, cursor, p+"*", 2).Result())
				scanned = append(scanned, page...)
				if cursor = next; cursor == 0 {
					break
				}
			}
			eqs(t, "SCAN", sorted(scanned), ks)
			var hashes []string
			for cursor = 0; ; {
				page, next := must2(t)(rdb.ScanType(ctx, cursor, p+"*", 100, "hash").Result())
				hashes = append(hashes, page...)
				if cursor = next; cursor == 0 {
					break
				}
			}
			eqs(t, "SCAN TYPE hash", hashes, []string{k("h")})
		})
	}
}

// otherShardKey returns a key whose shard differs from namespace ns's.
func otherShardKey(tc *testCluster, ns string) string {
	smap := tc.nodes[0].smapNow()
	for i := 0; ; i++ {
		k := fmt.Sprintf("o%d:x", i)
		if smap.ShardOf(keys.RedisRoutingKey([]byte(k))) != smap.ShardOf([]byte(ns)) {
			return k
		}
	}
}

func must2(t *testing.T) func([]string, uint64, error) ([]string, uint64) {
	return func(a []string, b uint64, err error) ([]string, uint64) {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return a, b
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }

func contains(s, sub string) bool { return len(s) >= len(sub) && slices.Contains(splitLines(s), sub) }

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			line := s[start:i]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			out = append(out, line)
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func TestRedisErrors(t *testing.T) {
	tc := redisCluster(t, 1, 4)
	ctx := context.Background()
	rdb := redisClient(t, tc, 0, 2)
	must(rdb.Set(ctx, "e:str", "v", 0).Result())
	must(rdb.HSet(ctx, "e:hash", "f", "v").Result())
	const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	for _, c := range []struct {
		args []any
		msg  string
	}{
		{[]any{"FOO", "a", "b"}, "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "},
		{[]any{"swarmkv.versions", "a"}, "ERR unknown command 'swarmkv.versions', with args beginning with: 'a' "},
		{[]any{"GET"}, "ERR wrong number of arguments for 'get' command"},
		{[]any{"HSET", "e:h2", "f"}, "ERR wrong number of arguments for 'hset' command"},
		{[]any{"HGET", "e:str", "f"}, wrongType},
		{[]any{"LPUSH", "e:hash", "x"}, wrongType},
		{[]any{"SADD", "e:str", "x"}, wrongType},
		{[]any{"INCR", "e:str"}, "ERR value is not an integer or out of range"},
		{[]any{"LRANGE", "e:l", "x", "1"}, "ERR value is not an integer or out of range"},
		{[]any{"SET", "e:x", "v", "EX", "10"}, "ERR swarmkv does not support key expiry (EX, PX, EXAT, PXAT)"},
		{[]any{"MSET", "e:1", "1", otherShardKey(tc, "e"), "2"}, "CROSSSLOT Keys in request don't hash to the same slot"},
		{[]any{"EXEC"}, "ERR EXEC without MULTI"},
		{[]any{"DISCARD"}, "ERR DISCARD without MULTI"},
		{[]any{"SCAN", "x"}, "ERR invalid cursor"},
	} {
		wantRedisErr(t, fmt.Sprint(c.args), rdb.Do(ctx, c.args...).Err(), c.msg)
	}
	// MGET of keys sharing a hash tag is fine across namespaces.
	must(rdb.MSet(ctx, "a{t}", "1", "b{t}", "2").Result())

	// A transaction with a queuing error is discarded whole.
	conn := rdb.Conn()
	defer conn.Close()
	eq(t, "MULTI", must(conn.Do(ctx, "MULTI").Text()), "OK")
	wantRedisErr(t, "nested MULTI", conn.Do(ctx, "MULTI").Err(), "ERR MULTI calls can not be nested")
	eq(t, "queued", must(conn.Do(ctx, "SET", "e:q", "1").Text()), "QUEUED")
	wantRedisErr(t, "queued bad arity", conn.Do(ctx, "GET").Err(), "ERR wrong number of arguments for 'get' command")
	wantRedisErr(t, "queued other shard", conn.Do(ctx, "SET", otherShardKey(tc, "e"), "1").Err(), "CROSSSLOT Keys in request don't hash to the same slot")
	wantRedisErr(t, "WATCH in MULTI", conn.Do(ctx, "WATCH", "e:q").Err(), "ERR WATCH inside MULTI is not allowed")
	wantRedisErr(t, "EXEC", conn.Do(ctx, "EXEC").Err(), "EXECABORT Transaction discarded because of previous errors.")
	if _, err := rdb.Get(ctx, "e:q").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("discarded SET applied: %v", err)
	}
	// Runtime errors inside EXEC do not stop the other commands.
	eq(t, "MULTI", must(conn.Do(ctx, "MULTI").Text()), "OK")
	conn.Do(ctx, "SET", "e:q", "1")
	conn.Do(ctx, "HSET", "e:q", "f", "v")
	conn.Do(ctx, "INCR", "e:q")
	res, err := conn.Do(ctx, "EXEC").Slice()
	if err != nil || len(res) != 3 || res[0] != "OK" || res[2] != int64(2) {
		t.Fatalf("EXEC = %#v, %v", res, err)
	}
	if e, ok := res[1].(error); !ok || e.Error() != wrongType {
		t.Errorf("EXEC [1] = %#v, want WRONGTYPE", res[1])
	}
}

// TestRedisMultiExecAtomic: blocks from many clients interleave only as
// wholes: a reader never sees the two counters apart.
func TestRedisMultiExecAtomic(t *testing.T) {
	tc := redisCluster(t, 1, 2)
	ctx := context.Background()
	rdb := redisClient(t, tc, 0, 3)
	const writers, rounds = 4, 25
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, "acct:a")
					p.HIncrBy(ctx, "acct:h", "b", 1)
					p.RPush(ctx, "acct:log", "x")
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Get(ctx, "acct:a")
				p.HGet(ctx, "acct:h", "b")
				p.LLen(ctx, "acct:log")
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Error(err)
				return
			}
			a, _ := cmds[0].(*redis.StringCmd).Int64()
			b, _ := cmds[1].(*redis.StringCmd).Int64()
			n := cmds[2].(*redis.IntCmd).Val()
			if a != b || a != n {
				t.Errorf("torn read: a=%d b=%d len=%d", a, b, n)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-readerDone
	eq(t, "a", must(rdb.Get(ctx, "acct:a").Int64()), int64(writers*rounds))
	eq(t, "len", must(rdb.LLen(ctx, "acct:log").Result()), int64(writers*rounds))
}

// TestRedisWatch: a change to a watched key between WATCH and EXEC aborts
// the block (go-redis reports TxFailedErr) and nothing of it applies; the
// optimistic retry loop of the Redis docs then converges.
func TestRedisWatch(t *testing.T) {
	tc := redisCluster(t, 1, 2)
	ctx := context.Background()
	rdb := redisClient(t, tc, 0, 3)
	other := redisClient(t, tc, 0, 2)
	must(rdb.Set(ctx, "w:k", "1", 0).Result())
	err := rdb.Watch(ctx, func(tx *redis.Tx) error {
		must(tx.Get(ctx, "w:k").Result())
		must(other.Set(ctx, "w:k", "changed", 0).Result()) // concurrent change
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "w:k", "mine", 0)
			p.Set(ctx, "w:side", "effect", 0)
			return nil
		})
		return err
	}, "w:k")
	if !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("EXEC after a concurrent change: %v, want TxFailedErr", err)
	}
	eq(t, "w:k", must(rdb.Get(ctx, "w:k").Result()), "changed")
	eq(t, "w:side exists", must(rdb.Exists(ctx, "w:side").Result()), int64(0))

	// A watched key that is deleted (or was absent and appears) aborts too.
	err = rdb.Watch(ctx, func(tx *redis.Tx) error {
		must(other.Del(ctx, "w:k").Result())
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "w:side", "1", 0); return nil })
		return err
	}, "w:k")
	if !errors.Is(err, redis.TxFailedErr) {
		t.Fatalf("EXEC after DEL: %v, want TxFailedErr", err)
	}
	// UNWATCH and untouched keys let it through.
	err = rdb.Watch(ctx, func(tx *redis.Tx) error {
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "w:side", "2", 0); return nil })
		return err
	}, "w:k", "w:untouched")
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent optimistic increments all land exactly once.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				for {
					err := rdb.Watch(ctx, func(tx *redis.Tx) error {
						n, err := tx.Get(ctx, "w:ctr").Int()
						if err != nil && !errors.Is(err, redis.Nil) {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, "w:ctr", n+1, 0)
							return nil
						})
						return err
					}, "w:ctr")
					if err == nil {
						break
					}
					if !errors.Is(err, redis.TxFailedErr) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	eq(t, "w:ctr", must(rdb.Get(ctx, "w:ctr").Int()), 40)
	wantRedisErr(t, "WATCH across shards", rdb.Do(ctx, "WATCH", otherShardKey(tc, "w"), "w:x").Err(), "CROSSSLOT Keys in request don't hash to the same slot")
}

// TestRedisSeedLayout runs the seed's example commands (002) and checks
// the answers and the Pebble layout they leave.
func TestRedisSeedLayout(t *testing.T) {
	tc := redisCluster(t, 1, 4)
	ctx := context.Background()
	rdb := redisClient(t, tc, 0, 2)
	meta := []any{
		"id", "google_search", "version", "1.2.0", "category", "tool", "name", "Google 搜索",
		"description", "在 Google 上搜索内容",
		"config_schema", `[{"name":"query","label":"搜索词","type":"string","required":true}]`,
		"agent_specs", `{"function_name":"google_search","description":"...","parameters":{}}`,
		"runtime", `{"language":"python","entry":"main.py","handler":"run","dependencies":["requests"]}`,
		"github_path", "tools/search/google.yaml", "github_sha", "abc123def456...",
		"created_at", "1704067200", "updated_at", "1704153600",
	}
	eq(t, "HSET metadata", must(rdb.HSet(ctx, "asset:metadata:google_search", meta...).Result()), int64(12))
	eq(t, "SADD tool", must(rdb.SAdd(ctx, "asset:category:tool", "google_search", "bing_search", "weather_api").Result()), int64(3))
	must(rdb.SAdd(ctx, "asset:category:prompt", "summarizer", "translator", "code_reviewer").Result())
	must(rdb.SAdd(ctx, "asset:category:skill", "data_analysis", "report_generation").Result())
	eqs(t, "SMEMBERS tool", sorted(must(rdb.SMembers(ctx, "asset:category:tool").Result())), []string{"bing_search", "google_search", "weather_api"})
	idx := `{"id":"http_search","name":"HTTP 请求工具","category":"tool","version":"1.0.0","description":"发送 HTTP GET/POST 请求"}`
	must(rdb.HSet(ctx, "asset:index", "http_search", idx, "text_summarizer", `{"id":"text_summarizer"}`).Result())
	eq(t, "HGETALL index", must(rdb.HGetAll(ctx, "asset:index").Result())["http_search"], idx)
	must(rdb.HSet(ctx, "asset:sync:state", "last_sync_time", "1704153600", "last_commit_sha", "abc123def456...",
		"synced_count", "42", "sync_status", "idle").Result())
	eq(t, "RPUSH changed", must(rdb.RPush(ctx, "asset:sync:changed", "google_search", "weather_api").Result()), int64(2))
	eqs(t, "LRANGE -10 -1", must(rdb.LRange(ctx, "asset:sync:changed", -10, -1).Result()), []string{"google_search", "weather_api"})
	eq(t, "LTRIM", must(rdb.LTrim(ctx, "asset:sync:changed", -1000, -1).Result()), "OK")
	// The MULTI/EXEC write of §5.1, and the github_sha check of §5.2.
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, "asset:metadata:weather_api", "id", "weather_api", "category", "tool", "github_sha", "s1")
		p.SAdd(ctx, "asset:category:tool", "weather_api")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "github_sha", must(rdb.HGet(ctx, "asset:metadata:weather_api", "github_sha").Result()), "s1")

	// Every asset:* key is in the shard of "asset", in the seed's types.
	n := tc.nodes[0]
	id, r, err := n.replicaFor([]byte("asset"))
	if err != nil || r == nil {
		t.Fatalf("replica of asset: %v", err)
	}
	kvs, err := r.FSM().Dump()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]keys.RedisType{}
	fields := map[string]int{}
	for _, kv := range kvs {
		switch kv.Key[0] {
		case keys.TableRedisKeys:
			m, err := keys.DecodeRedisMeta(kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			types[string(kv.Key[1:])] = m.Type
		case keys.TableRedisHash:
			k, _, err := keys.DecodeRedisHashField(kv.Key)
			if err != nil {
				t.Fatal(err)
			}
			fields[string(k)]++
		}
	}
	want := map[string]keys.RedisType{
		"asset:metadata:google_search": keys.RedisHash, "asset:metadata:weather_api": keys.RedisHash,
		"asset:category:tool": keys.RedisSet, "asset:category:prompt": keys.RedisSet, "asset:category:skill": keys.RedisSet,
		"asset:index": keys.RedisHash, "asset:sync:state": keys.RedisHash, "asset:sync:changed": keys.RedisList,
	}
	for k, ty := range want {
		if types[k] != ty {
			t.Errorf("shard %d: %s has type %v, want %v", id, k, types[k], ty)
		}
	}
	eq(t, "fields of asset:metadata:google_search", fields["asset:metadata:google_search"], 12)
	eq(t, "fields of asset:sync:state", fields["asset:sync:state"], 4)
}

// TestRedisFollowerFront: a node that does not lead a shard forwards to
// the leader, and every front sees every write.
func TestRedisFollowerFront(t *testing.T) {
	tc := redisCluster(t, 3, 2)
	ctx := context.Background()
	for i := range 3 {
		rdb := redisClient(t, tc, i, 3)
		key := fmt.Sprintf("ns%d:k", i)
		must(rdb.Set(ctx, key, "v", 0).Result())
		for j := range 3 {
			eq(t, fmt.Sprintf("node %d reads %s", j, key), must(redisClient(t, tc, j, 2).Get(ctx, key).Result()), "v")
		}
	}
}

// TestRedisMultiSurvivesLeaderChange: while the shard's leadership moves
// around, MULTI/EXEC blocks sent to every node apply whole or not at all:
// on every replica the two counters and the list length stay equal, and
// each acknowledged block is counted.
func TestRedisMultiSurvivesLeaderChange(t *testing.T) {
	tc := redisCluster(t, 3, 1)
	ctx := context.Background()
	var acked sync.Map
	var nBlocks atomic.Int64 // acknowledged blocks so far
	// blocksAcked waits for more acknowledged blocks than now: writes run
	// between the leadership moves (a condition, not a sleep).
	blocksAcked := func(more int64) {
		t.Helper()
		want := nBlocks.Load() + more
		waitFor(t, 30*time.Second, fmt.Sprintf("%d more blocks", more), func() error {
			if n := nBlocks.Load(); n < want {
				return fmt.Errorf("%d of %d blocks acknowledged", n, want)
			}
			return nil
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		rdb := redisClient(t, tc, i, 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				tag := fmt.Sprintf("%d-%d", i, seq)
				_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, "lc:a")
					p.HIncrBy(ctx, "lc:h", "b", 1)
					p.RPush(ctx, "lc:log", tag)
					return nil
				})
				if err == nil {
					acked.Store(tag, true)
					nBlocks.Add(1)
				}
			}
		}()
	}
	moved := 0
	for round := range 3 {
		blocksAcked(10)
		li := tc.leaderOf(0)
		if li < 0 {
			continue
		}
		if err := tc.nodes[li].localReplica(0).Raft().LeadershipTransfer().Error(); err != nil {
			t.Logf("round %d: transfer: %v", round, err)
			continue
		}
		moved++
	}
	if moved == 0 {
		t.Fatal("leadership never moved")
	}
	blocksAcked(10)
	close(stop)
	wg.Wait()
	tc.waitReady()
	rdb := redisClient(t, tc, 0, 3)
	a := must(rdb.Get(ctx, "lc:a").Int64())
	b := must(rdb.HGet(ctx, "lc:h", "b").Int64())
	logged := must(rdb.LRange(ctx, "lc:log", 0, -1).Result())
	if a != b || a != int64(len(logged)) {
		t.Fatalf("torn blocks: a=%d b=%d log=%d", a, b, len(logged))
	}
	in := map[string]bool{}
	for _, tag := range logged {
		in[tag] = true
	}
	nAcked := 0
	acked.Range(func(k, _ any) bool {
		nAcked++
		if !in[k.(string)] {
			t.Errorf("acknowledged block %s is missing", k)
		}
		return true
	})
	if nAcked == 0 {
		t.Fatal("no block was acknowledged")
	}
	t.Logf("%d blocks applied, %d acknowledged", a, nAcked)
	// Every replica holds the same whole blocks once caught up.
	waitFor(t, 10*time.Second, "replicas agree", func() error {
		var ref string
		for _, n := range tc.nodes {
			r := n.localReplica(0)
			kvs, err := r.FSM().Dump()
			if err != nil {
				return err
			}
			s := fmt.Sprint(len(kvs))
			for _, kv := range kvs {
				s += string(kv.Key) + "=" + string(kv.Value) + ";"
			}
			if ref == "" {
				ref = s
			} else if s != ref {
				return fmt.Errorf("%s differs", n.ID())
			}
		}
		return nil
	})
}
