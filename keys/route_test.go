package keys

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoutingKeyOf(t *testing.T) {
	u := UserID{1, 2, 3}
	a := AgentID{9}
	acc := AccountID{7, 7}
	ev, _ := UsageEvent("evt-1")
	for _, tc := range []struct {
		name  string
		key   []byte
		rk    []byte
		route Route
	}{
		{"meta", Meta("applied"), nil, RouteNone},
		{"agents", Agent(u, a), u[:], RouteKey},
		{"agents_by_status", AgentByStatus(3, u, a), u[:], RouteKey},
		{"sessions", Session(SessionID{1}), nil, RouteValue},
		{"sessions_by_agent", SessionByAgent(a, SessionID{1}), nil, RouteLookup},
		{"users", User(u), u[:], RouteKey},
		{"agent_owners", AgentOwner(a), nil, RouteValue},
		{"accounts", Account(acc), acc[:], RouteKey},
		{"transactions", Transaction(TransactionID{4}), nil, RouteValue},
		{"transactions_by_user", TransactionByUser(acc, TransactionID{4}), acc[:], RouteKey},
		{"usage_events", ev, nil, RouteValue},
		{"tx_directory", TxDirectory(TransactionID{4, 5}), []byte{4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, RouteKey},
		{"kv", KV([]byte("rk"), []byte("k")), []byte("rk"), RouteKey},
		{"kv empty routing key", KV(nil, []byte("k")), []byte{}, RouteKey},
		{"pools", Pool("p1"), []byte(PoolsRoutingKey), RouteKey},
		{"bots", Bot("a1"), []byte(PoolsRoutingKey), RouteKey},
		{"bots_by_pool", BotByPool("p1", "a1"), []byte(PoolsRoutingKey), RouteKey},
		{"runners", Runner("r1"), []byte(PoolsRoutingKey), RouteKey},
		{"guild_settings", GuildSettings("g1"), []byte(PoolsRoutingKey), RouteKey},
		{"redis_keys", RedisKey([]byte("asset:x:y")), []byte(AssetRoutingKey), RouteKey},
		{"redis_scan", RedisScan(7, []byte("{u1}:cart")), []byte("u1"), RouteKey},
		{"redis_hash", RedisHashField([]byte("asset:h"), []byte("f")), []byte(AssetRoutingKey), RouteKey},
		{"redis_set", RedisSetMember([]byte("s"), []byte("m")), []byte("s"), RouteKey},
		{"redis_list", RedisListElem([]byte("asset:l"), -3), []byte(AssetRoutingKey), RouteKey},
	} {
		rk, route, err := RoutingKeyOf(tc.key)
		if err != nil || route != tc.route || !bytes.Equal(rk, tc.rk) || (tc.rk != nil) != (rk != nil) {
			t.Errorf("%s: RoutingKeyOf(%x) = %q, %d, %v; want %q, %d", tc.name, tc.key, rk, route, err, tc.rk, tc.route)
		}
	}
	for _, bad := range [][]byte{
		nil, {TableAgents, 1}, {TableAgentsByStatus}, {TableSessions, 1}, {TableSessionsByAgent},
		{TableUsers}, {TableAgentOwners}, {TableAccounts, 1}, {TableTransactions}, {TableTransactionsByUser},
		{TableUsageEvents}, {TableTxDirectory, 1}, {TableKV, 0}, {TableKV, 0, 5, 'a'}, {TablePools}, {TableRedisScan, 1},
		{TableRedisHash, 0}, {0x50, 1}, {0xff},
	} {
		if _, _, err := RoutingKeyOf(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("RoutingKeyOf(%x): %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := AgentOwnerValue(make([]byte, 31)); !errors.Is(err, ErrMalformedRecord) {
		t.Errorf("AgentOwnerValue of 31 bytes: %v", err)
	}
	if v, err := AgentOwnerValue(u[:]); err != nil || v != u {
		t.Errorf("AgentOwnerValue: %v %v", v, err)
	}
	if _, err := TxOwnerValue(make([]byte, 17)); !errors.Is(err, ErrMalformedRecord) {
		t.Errorf("TxOwnerValue of 17 bytes: %v", err)
	}
	if v, err := TxOwnerValue(acc[:]); err != nil || v != acc {
		t.Errorf("TxOwnerValue: %v %v", v, err)
	}
}

// FuzzRoutingKeyOf: never panics; a routing key found in the key is a part
// of it (or a namespace constant).
func FuzzRoutingKeyOf(f *testing.F) {
	f.Add(KV([]byte("rk"), []byte("k")))
	f.Add(Agent(UserID{1}, AgentID{2}))
	f.Add(RedisHashField([]byte("asset:h"), []byte("f")))
	f.Fuzz(func(t *testing.T, k []byte) {
		rk, route, err := RoutingKeyOf(k)
		if err != nil {
			if route != RouteNone || rk != nil {
				t.Fatalf("error with route %d, rk %q", route, rk)
			}
			return
		}
		if route == RouteKey && !bytes.Contains(k, rk) && string(rk) != PoolsRoutingKey {
			t.Fatalf("routing key %q is not in key %x", rk, k)
		}
		if route != RouteKey && rk != nil {
			t.Fatalf("route %d with routing key %q", route, rk)
		}
	})
}
