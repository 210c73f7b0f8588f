package keys

import "fmt"

// Namespace routing keys: data that belongs to no user routes by a fixed
// key, so that it lives in one shard.
const (
	// PoolsRoutingKey is the routing key of every agent-pool entity: the
	// pools, bots, bots_by_pool, runners and guild_settings tables.
	PoolsRoutingKey = "pools"
	// AssetRoutingKey is the routing key of the asset catalogue: every
	// "asset:*" Redis key (RedisRoutingKey("asset:...") == "asset").
	AssetRoutingKey = "asset"
)

// Route says where the routing key of a stored key is found.
type Route uint8

const (
	// RouteNone: the key belongs to no slot (the meta table).
	RouteNone Route = iota
	// RouteKey: the routing key is part of the key (RoutingKeyOf returns it).
	RouteKey
	// RouteValue: the routing key is in the record stored under the key:
	// the user_id of a sessions, transactions or usage_events record, the
	// owner user_id that is the value of agent_owners.
	RouteValue
	// RouteLookup: the routing key is in another record, found through the
	// key: a sessions_by_agent entry routes by the user of its session.
	RouteLookup
	// RouteSlot: the key carries its slot itself, not a routing key (the
	// lease tables: LeaseSlotOf returns it).
	RouteSlot
)

// RoutingKeyOf returns the routing key of stored key k when its layout
// carries it (Route RouteKey), aliasing k: the user id of agents,
// agents_by_status and users (32 bytes), the billing user id of accounts
// and transactions_by_user (16 bytes), the transaction id of tx_directory
// (16 bytes: the directory routes by the id itself), the routing key of a kv key,
// PoolsRoutingKey for the pool tables, RedisRoutingKey of the Redis key
// for the Redis tables, the namespace's EtcdRoutingKey for the etcd tables, and for key_lease the routing key of the attached
// key it names (kv, runners and agents: all RouteKey). For the other tables it returns nil and the Route
// that says where to look (RouteValue, RouteLookup, RouteSlot for the
// lease tables that carry their slot), or RouteNone for the meta table. A key that is malformed for its table, or of an unknown
// table, is an error wrapping ErrMalformed.
func RoutingKeyOf(k []byte) ([]byte, Route, error) {
	if len(k) == 0 {
		return nil, RouteNone, fmt.Errorf("%w: empty key", ErrMalformed)
	}
	switch t := k[0]; t {
	case TableMeta:
		return nil, RouteNone, nil
	case TableAgents:
		if err := checkFixed(k, t, agentKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return k[1:33:33], RouteKey, nil
	case TableAgentsByStatus:
		if err := checkFixed(k, t, agentByStatusKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return k[2:34:34], RouteKey, nil
	case TableUsers:
		if err := checkFixed(k, t, userKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return k[1:33:33], RouteKey, nil
	case TableAccounts:
		if err := checkFixed(k, t, accountKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return k[1:17:17], RouteKey, nil
	case TableTransactionsByUser:
		if err := checkFixed(k, t, transactionByUserKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return k[1:17:17], RouteKey, nil
	case TableTxDirectory:
		if err := checkFixed(k, t, txDirectoryKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return k[1:17:17], RouteKey, nil
	case TableSessions:
		if err := checkFixed(k, t, sessionKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return nil, RouteValue, nil
	case TableTransactions:
		if err := checkFixed(k, t, transactionKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return nil, RouteValue, nil
	case TableAgentOwners:
		if err := checkFixed(k, t, agentOwnerKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return nil, RouteValue, nil
	case TableUsageEvents:
		if n := len(k) - 1; n < 1 || n > MaxEventIDLen {
			return nil, RouteNone, malformed(t, "event id has %d bytes, want 1..%d", n, MaxEventIDLen)
		}
		return nil, RouteValue, nil
	case TableSessionsByAgent:
		if err := checkFixed(k, t, sessionByAgentKeyLen); err != nil {
			return nil, RouteNone, err
		}
		return nil, RouteLookup, nil
	case TableKV:
		rk, _, err := DecodeKV(k)
		if err != nil {
			return nil, RouteNone, err
		}
		return rk, RouteKey, nil
	case TablePools, TableBots, TableBotsByPool, TableRunners, TableGuildSettings:
		if len(k) < 2 {
			return nil, RouteNone, malformed(t, "key has %d bytes, want at least 2", len(k))
		}
		return []byte(PoolsRoutingKey), RouteKey, nil
	case TableLeases, TableLeaseKeys, TableLeaseSeq:
		if _, err := LeaseSlotOf(k); err != nil {
			return nil, RouteNone, err
		}
		return nil, RouteSlot, nil
	case TableKeyLease:
		attached, err := DecodeKeyLease(k)
		if err != nil {
			return nil, RouteNone, err
		}
		return RoutingKeyOf(attached)
	case TableRedisKeys:
		key, err := DecodeRedisKey(k)
		if err != nil {
			return nil, RouteNone, err
		}
		return RedisRoutingKey(key), RouteKey, nil
	case TableRedisScan:
		_, key, err := DecodeRedisScan(k)
		if err != nil {
			return nil, RouteNone, err
		}
		return RedisRoutingKey(key), RouteKey, nil
	case TableRedisHash, TableRedisSet, TableRedisList:
		key, _, err := decodeRedisElem(k, t)
		if err != nil {
			return nil, RouteNone, err
		}
		return RedisRoutingKey(key), RouteKey, nil
	case TableEtcdKeys, TableEtcdHistory, TableEtcdRevs:
		return etcdRoutingKeyOf(k)
	default:
		return nil, RouteNone, fmt.Errorf("%w: key in unknown table 0x%02x", ErrMalformed, t)
	}
}

// TxOwnerValue returns the owner account id stored as the value of a
// tx_directory key.
func TxOwnerValue(v []byte) (AccountID, error) {
	var u AccountID
	if len(v) != len(u) {
		return u, fmt.Errorf("%w: tx_directory value of %d bytes, want %d", ErrMalformedRecord, len(v), len(u))
	}
	copy(u[:], v)
	return u, nil
}

// AgentOwnerValue returns the owner user id stored as the value of an
// agent_owners key.
func AgentOwnerValue(v []byte) (UserID, error) {
	var u UserID
	if len(v) != len(u) {
		return u, fmt.Errorf("%w: agent_owners value of %d bytes, want %d", ErrMalformedRecord, len(v), len(u))
	}
	copy(u[:], v)
	return u, nil
}
