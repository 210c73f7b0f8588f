// Package keys defines the byte layout of every key swarmkv stores in Pebble.
//
// Pebble has one flat, bytewise-ordered keyspace and no column families, so
// each column family of the seed designs (the agent registry's RocksDB store
// and the billing store) becomes a table: a one-byte table prefix followed by
// exactly the key bytes the seed writes into that column family. Fixed-width
// ids are copied verbatim; integers are big-endian so that bytewise order is
// numeric order. Because every table owns one distinct leading byte, the
// tables are disjoint, contiguous key ranges, and a table's range is
// [TablePrefix(t), PrefixEnd(TablePrefix(t))).
//
// # Layouts
//
//	table                  prefix  layout after the prefix                    value
//	---------------------  ------  -----------------------------------------  -----------------
//	meta                   0x00    name (any bytes)                           replica-local
//	agents                 0x01    user_id(32) agent_id(32)                   Agent (CBOR)
//	agents_by_status       0x02    status(1) user_id(32) agent_id(32)         empty (index)
//	sessions               0x03    session_id(16)                             Session (CBOR)
//	sessions_by_agent      0x04    agent_id(32) session_id(16)                empty (index)
//	users                  0x05    user_id(32)                                User (CBOR)
//	agent_owners           0x06    agent_id(32)                               owner user_id(32)
//	accounts               0x10    user_id(16, UUID)                          Account (CBOR)
//	transactions           0x11    transaction_id(16, ULID)                   Transaction (CBOR)
//	transactions_by_user   0x12    user_id(16) transaction_id(16)             empty (index)
//	usage_events           0x13    event_id (1..MaxEventIDLen bytes)          UsageEvent (CBOR)
//	tx_directory           0x14    transaction_id(16, ULID)                   owner user_id(16)
//	kv                     0x20    len(routing_key) u16 BE, routing_key, key  user value
//	pools                  0x30    pool_id (1..64)                            Pool (CBOR)
//	bots                   0x31    agent_id (1..128)                          Bot (CBOR)
//	bots_by_pool           0x32    len(pool_id) u8, pool_id, agent_id         empty (index)
//	runners                0x33    runner_id (1..128)                         Runner (CBOR)
//	guild_settings         0x34    guild_id (1..128)                          GuildSettings (CBOR)
//	redis_keys             0x40    key (0..1024)                              RedisMeta (binary)
//	redis_scan             0x41    created u64 BE, key                        empty (index)
//	redis_hash             0x42    len(key) u16 BE, key, field                field value
//	redis_set              0x43    len(key) u16 BE, key, member               empty
//	redis_list             0x44    len(key) u16 BE, key, pos u64 (int64^2^63) element
//	leases                 0x50    lease_id(8)                                LeaseRecord (fsm)
//	lease_keys             0x51    lease_id(8), attached key                  empty
//	key_lease              0x52    attached key                               lease_id u64 BE
//	lease_seq              0x53    slot(1)                                    last seq u64 BE
//	etcd_keys              0x60    len(rk) u8, rk = "etcd/"+ns, etcd key      EtcdKeyValue (fsm)
//	etcd_history           0x61    len(rk) u8, rk, rev u64 BE, sub u32 BE     EtcdEvent (fsm)
//	etcd_revs              0x62    len(rk) u8, rk                             current, compacted u64 BE
//
// Total key lengths: agents 65, agents_by_status 66, sessions 17,
// sessions_by_agent 49, users 33, agent_owners 33, accounts 17, transactions 17,
// transactions_by_user 33, usage_events 2..257, tx_directory 17, kv 3+len(routing_key)+len(key),
// pools 2..65, bots, runners and guild_settings 2..129, bots_by_pool
// 2+len(pool_id)+len(agent_id). The agent pool tables (seed 004) are keyed by
// string ids of printable ASCII (ValidateStringID).
//
// The seed layouts are what make the scans they rely on work:
//
//   - All agents of one user share the prefix AgentPrefix(u) and therefore
//     form one contiguous range (the seed's list_agents_by_user).
//   - All sessions of one agent share SessionByAgentPrefix(a).
//   - agent_owners (swarmkv's own table) answers "whose agent is this?" with
//     one point read, so a lookup by agent id alone never scans agents.
//   - tx_directory (swarmkv's own table) answers "which account recorded
//     this transaction id?" for the whole cluster: it routes by the id
//     itself, so each id has one entry in one slot, while its transaction
//     record lives in its account's slot (docs/architecture.md, "The
//     transaction-id directory").
//   - Transaction ids are ULIDs whose first 48 bits are a big-endian
//     millisecond timestamp, so inside TransactionByUserPrefix(u) bytewise
//     order is time order: newest last, and a reverse scan lists newest first.
//   - The bots of one pool share BotsByPoolPrefix(pool); the pool id's
//     length byte keeps pool "a" and pool "ab" apart, as in kv keys.
//   - A kv key carries the length of its routing key before the routing key,
//     so the keys of routing key "ab" never interleave with those of routing
//     key "a" (whose user keys may start with "b"): the encoded prefixes differ
//     in the length field.
//
// The Redis tables (seed 002, served over RESP) keep one Pebble key per
// hash field, set member and list element, under the Redis key's
// length-prefixed name, so HGET, SISMEMBER and LINDEX are point lookups and
// HSET of one field writes one key plus the key's RedisMeta record (type,
// version = log index of the last change, creation index, count or list
// head/tail; a string's value rides in the record). A Redis key routes by
// RedisRoutingKey: the bytes inside its first non-empty "{...}", else the
// text before its first ':' (the whole key without one), so every asset:*
// key of the seed lives in the shard of "asset" (AssetRoutingKey).
//
// The etcd tables (etcd.go) keep one etcd keyspace, a namespace, under one
// routing key EtcdRoutingKey(ns) = "etcd/"+ns: its live keys in key order
// (a Range is one scan), its events in revision order (a Range at a past
// revision undoes the events after it; a watch reads them in order) and
// its current and compacted revisions.
//
// # Routing keys
//
// Every key but the meta table's belongs to the slot of a routing key.
// RoutingKeyOf returns it for the layouts that carry it: the user id of
// agents, agents_by_status and users, the billing user id of accounts and
// transactions_by_user, the transaction id of tx_directory, a kv key's
// routing key, PoolsRoutingKey for the
// pool tables and RedisRoutingKey of the Redis key for the Redis tables.
// For sessions, transactions, usage_events and agent_owners it answers
// RouteValue (the user id is in the stored value), for sessions_by_agent
// RouteLookup (through its session record); package fsm resolves those.
//
// Decoders check the table byte and the exact length and return an error
// wrapping ErrMalformed otherwise. Whatever a decoder accepts re-encodes to
// the same bytes.
//
// # Example
//
// Listing the agents of one user with a Pebble iterator:
//
//	lower := keys.AgentPrefix(user)
//	iter, err := db.NewIter(&pebble.IterOptions{
//		LowerBound: lower,
//		UpperBound: keys.PrefixEnd(lower),
//	})
//	if err != nil {
//		return err
//	}
//	defer iter.Close()
//	for iter.First(); iter.Valid(); iter.Next() {
//		_, agent, err := keys.DecodeAgent(iter.Key())
//		if err != nil {
//			return err
//		}
//		// use agent and iter.Value()
//	}
package keys
