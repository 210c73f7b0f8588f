package keys

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Table prefixes. Every key starts with exactly one of these bytes; the
// rest of the key is the seed's column-family key, byte for byte. Offsets
// below each diagram are byte offsets into the full key.
const (
	// TableMeta holds replica-local state (applied index, shard map, ...).
	// It is never routed by a shard map.
	//
	//	+------+------------------+
	//	| 0x00 | name (any bytes) |
	//	+------+------------------+
	//	0      1
	TableMeta byte = 0x00

	// TableAgents holds agent records (seed CF "agents").
	//
	//	+------+---------------+----------------+
	//	| 0x01 | user_id (32)  | agent_id (32)  |
	//	+------+---------------+----------------+
	//	0      1               33               65
	TableAgents byte = 0x01

	// TableAgentsByStatus indexes agents by status (seed CF
	// "agents_by_status"). The value is empty.
	//
	//	+------+------------+--------------+---------------+
	//	| 0x02 | status (1) | user_id (32) | agent_id (32) |
	//	+------+------------+--------------+---------------+
	//	0      1            2              34              66
	TableAgentsByStatus byte = 0x02

	// TableSessions holds session records (seed CF "sessions").
	//
	//	+------+-----------------+
	//	| 0x03 | session_id (16) |
	//	+------+-----------------+
	//	0      1                 17
	TableSessions byte = 0x03

	// TableSessionsByAgent indexes sessions by agent (seed CF
	// "sessions_by_agent"). The value is empty.
	//
	//	+------+---------------+-----------------+
	//	| 0x04 | agent_id (32) | session_id (16) |
	//	+------+---------------+-----------------+
	//	0      1               33                49
	TableSessionsByAgent byte = 0x04

	// TableUsers caches user records (seed CF "users").
	//
	//	+------+--------------+
	//	| 0x05 | user_id (32) |
	//	+------+--------------+
	//	0      1              33
	TableUsers byte = 0x05

	// TableAgentOwners maps an agent id to the user that owns it, so that
	// a lookup by agent id alone is one point read instead of a scan of
	// the agents table. The value is the owner's user_id (32 bytes).
	// swarmkv's addition; the seed has no such column family.
	//
	//	+------+---------------+
	//	| 0x06 | agent_id (32) |
	//	+------+---------------+
	//	0      1               33
	TableAgentOwners byte = 0x06

	// TableAccounts holds billing accounts (seed CF "accounts"), keyed by
	// the billing user id, a 16-byte UUID.
	//
	//	+------+--------------+
	//	| 0x10 | user_id (16) |
	//	+------+--------------+
	//	0      1              17
	TableAccounts byte = 0x10

	// TableTransactions holds credit transactions (seed CF
	// "transactions"), keyed by a 16-byte ULID.
	//
	//	+------+---------------------+
	//	| 0x11 | transaction_id (16) |
	//	+------+---------------------+
	//	0      1                     17
	TableTransactions byte = 0x11

	// TableTransactionsByUser indexes transactions by billing user (seed
	// CF "transactions_by_user"). The value is empty. The ULID's leading
	// 48-bit big-endian millisecond timestamp orders one user's
	// transactions by time, newest last.
	//
	//	+------+--------------+---------------------+
	//	| 0x12 | user_id (16) | transaction_id (16) |
	//	+------+--------------+---------------------+
	//	0      1              17                    33
	TableTransactionsByUser byte = 0x12

	// TableUsageEvents records processed usage events for idempotency
	// (seed CF "usage_events"), keyed by the event id's string bytes.
	//
	//	+------+------------------------------------+
	//	| 0x13 | event_id (1..MaxEventIDLen bytes)  |
	//	+------+------------------------------------+
	//	0      1
	TableUsageEvents byte = 0x13

	// TableTxDirectory is the cluster-wide transaction-id directory
	// (swarmkv's own; the seed has no such column family): it names the
	// account that reserved a transaction id. Unlike the transactions
	// table, whose records live in their account's slot, it routes by the
	// transaction id itself (RoutingKeyOf: the 16 id bytes), so one id has
	// one entry in the whole cluster and the entry moves with the id's
	// slot in a split or merge. The value is the owner's user_id (16).
	//
	//	+------+---------------------+
	//	| 0x14 | transaction_id (16) |
	//	+------+---------------------+
	//	0      1                     17
	TableTxDirectory byte = 0x14

	// TableKV holds generic key/value pairs scoped by a routing key, the
	// unit a shard map places on a shard. The big-endian length before the
	// routing key keeps routing keys prefix-free: the keys of "ab" and the
	// keys of "a" never interleave.
	//
	//	+------+-------------+----------------------+----------------+
	//	| 0x20 | n (u16, BE) | routing_key (n)      | key (the rest) |
	//	+------+-------------+----------------------+----------------+
	//	0      1             3                      3+n
	TableKV byte = 0x20
)

// MaxEventIDLen is the longest usage event id, in bytes, that UsageEvent
// accepts. Event ids come from clients; the bound keeps index keys small.
const MaxEventIDLen = 256

// MaxRoutingKeyLen is the longest routing key, in bytes, a kv key may carry.
// It is well below the 65535 the u16 length field could express, so every
// routing key's keys stay short enough to be cheap to compare and route.
const MaxRoutingKeyLen = 1024

// UserID is a registry user id (32 bytes).
type UserID [32]byte

// AgentID is a registry agent id (32 bytes).
type AgentID [32]byte

// SessionID is a registry session id (16 bytes).
type SessionID [16]byte

// AccountID is a billing user id: a 16-byte UUID.
type AccountID [16]byte

// TransactionID is a billing transaction id: the 16 bytes of a ULID.
type TransactionID [16]byte

// Key lengths of the fixed-width layouts, table byte included.
const (
	agentKeyLen             = 1 + 32 + 32
	agentByStatusKeyLen     = 1 + 1 + 32 + 32
	sessionKeyLen           = 1 + 16
	sessionByAgentKeyLen    = 1 + 32 + 16
	userKeyLen              = 1 + 32
	agentOwnerKeyLen        = 1 + 32
	accountKeyLen           = 1 + 16
	transactionKeyLen       = 1 + 16
	transactionByUserKeyLen = 1 + 16 + 16
	txDirectoryKeyLen       = 1 + 16
	kvHeaderLen             = 1 + 2
)

var (
	// ErrMalformed is returned, wrapped with detail, by every decoder when
	// a key belongs to another table or has the wrong length.
	ErrMalformed = errors.New("keys: malformed key")

	// ErrInvalidEventID is returned, wrapped with detail, by UsageEvent
	// for an empty event id or one longer than MaxEventIDLen.
	ErrInvalidEventID = errors.New("keys: invalid event id")

	// ErrRoutingKeyTooLong is returned, wrapped with detail, by
	// ValidateRoutingKey for a routing key longer than MaxRoutingKeyLen.
	ErrRoutingKeyTooLong = errors.New("keys: routing key too long")
)

// TableName returns the seed column-family name of table t ("agents",
// "transactions_by_user", "kv", "meta", "bots_by_pool", ...), for logs and
// docs. Unknown
// tables are named "unknown(0xNN)".
func TableName(t byte) string {
	switch t {
	case TableMeta:
		return "meta"
	case TableAgents:
		return "agents"
	case TableAgentsByStatus:
		return "agents_by_status"
	case TableSessions:
		return "sessions"
	case TableSessionsByAgent:
		return "sessions_by_agent"
	case TableUsers:
		return "users"
	case TableAgentOwners:
		return "agent_owners"
	case TableAccounts:
		return "accounts"
	case TableTransactions:
		return "transactions"
	case TableTransactionsByUser:
		return "transactions_by_user"
	case TableUsageEvents:
		return "usage_events"
	case TableTxDirectory:
		return "tx_directory"
	case TableKV:
		return "kv"
	case TablePools:
		return "pools"
	case TableBots:
		return "bots"
	case TableBotsByPool:
		return "bots_by_pool"
	case TableRunners:
		return "runners"
	case TableGuildSettings:
		return "guild_settings"
	case TableLeases:
		return "leases"
	case TableLeaseKeys:
		return "lease_keys"
	case TableKeyLease:
		return "key_lease"
	case TableLeaseSeq:
		return "lease_seq"
	default:
		if n := redisTableName(t); n != "" {
			return n
		}
		if n := etcdTableName(t); n != "" {
			return n
		}
		return fmt.Sprintf("unknown(0x%02x)", t)
	}
}

// TablePrefix returns the one-byte prefix shared by every key of table t.
// The table's keys are exactly [TablePrefix(t), PrefixEnd(TablePrefix(t))).
func TablePrefix(t byte) []byte {
	return []byte{t}
}

// PrefixEnd returns the smallest key greater than every key that starts
// with prefix, for use as an exclusive upper bound. It returns nil when no
// such key exists (prefix is empty or all 0xff), meaning "no upper bound".
// The result never aliases prefix.
func PrefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			end := make([]byte, i+1)
			copy(end, prefix[:i+1])
			end[i]++
			return end
		}
	}
	return nil
}

// Meta returns the key of replica-local state name: 0x00 | name.
func Meta(name string) []byte {
	k := make([]byte, 0, 1+len(name))
	k = append(k, TableMeta)
	return append(k, name...)
}

// Agent returns the agents key 0x01 | user_id | agent_id.
func Agent(u UserID, a AgentID) []byte {
	k := make([]byte, 0, agentKeyLen)
	k = append(k, TableAgents)
	k = append(k, u[:]...)
	return append(k, a[:]...)
}

// AgentPrefix returns 0x01 | user_id, the prefix of all agents of user u.
func AgentPrefix(u UserID) []byte {
	k := make([]byte, 0, 1+len(u))
	k = append(k, TableAgents)
	return append(k, u[:]...)
}

// AgentByStatus returns the status index key
// 0x02 | status | user_id | agent_id.
func AgentByStatus(status byte, u UserID, a AgentID) []byte {
	k := make([]byte, 0, agentByStatusKeyLen)
	k = append(k, TableAgentsByStatus, status)
	k = append(k, u[:]...)
	return append(k, a[:]...)
}

// AgentByStatusPrefix returns 0x02 | status, the prefix of the index
// entries of every agent in that status.
func AgentByStatusPrefix(status byte) []byte {
	return []byte{TableAgentsByStatus, status}
}

// Session returns the sessions key 0x03 | session_id.
func Session(id SessionID) []byte {
	k := make([]byte, 0, sessionKeyLen)
	k = append(k, TableSessions)
	return append(k, id[:]...)
}

// SessionByAgent returns the index key 0x04 | agent_id | session_id.
func SessionByAgent(a AgentID, s SessionID) []byte {
	k := make([]byte, 0, sessionByAgentKeyLen)
	k = append(k, TableSessionsByAgent)
	k = append(k, a[:]...)
	return append(k, s[:]...)
}

// SessionByAgentPrefix returns 0x04 | agent_id, the prefix of the index
// entries of all sessions of agent a.
func SessionByAgentPrefix(a AgentID) []byte {
	k := make([]byte, 0, 1+len(a))
	k = append(k, TableSessionsByAgent)
	return append(k, a[:]...)
}

// User returns the users key 0x05 | user_id.
func User(u UserID) []byte {
	k := make([]byte, 0, userKeyLen)
	k = append(k, TableUsers)
	return append(k, u[:]...)
}

// AgentOwner returns the agent_owners key 0x06 | agent_id. Its value is
// the owner's 32-byte user id.
func AgentOwner(a AgentID) []byte {
	k := make([]byte, 0, agentOwnerKeyLen)
	k = append(k, TableAgentOwners)
	return append(k, a[:]...)
}

// Account returns the accounts key 0x10 | user_id.
func Account(u AccountID) []byte {
	k := make([]byte, 0, accountKeyLen)
	k = append(k, TableAccounts)
	return append(k, u[:]...)
}

// Transaction returns the transactions key 0x11 | transaction_id.
func Transaction(id TransactionID) []byte {
	k := make([]byte, 0, transactionKeyLen)
	k = append(k, TableTransactions)
	return append(k, id[:]...)
}

// TransactionByUser returns the index key 0x12 | user_id | transaction_id.
func TransactionByUser(u AccountID, id TransactionID) []byte {
	k := make([]byte, 0, transactionByUserKeyLen)
	k = append(k, TableTransactionsByUser)
	k = append(k, u[:]...)
	return append(k, id[:]...)
}

// TransactionByUserPrefix returns 0x12 | user_id, the prefix of the index
// entries of all transactions of user u, which sort oldest first.
func TransactionByUserPrefix(u AccountID) []byte {
	k := make([]byte, 0, 1+len(u))
	k = append(k, TableTransactionsByUser)
	return append(k, u[:]...)
}

// TxDirectory returns the tx_directory key 0x14 | transaction_id. Its
// value is the owner's 16-byte account id (TxOwnerValue).
func TxDirectory(id TransactionID) []byte {
	k := make([]byte, 0, txDirectoryKeyLen)
	k = append(k, TableTxDirectory)
	return append(k, id[:]...)
}

// UsageEvent returns the usage_events key 0x13 | event_id. It returns an
// error wrapping ErrInvalidEventID if eventID is empty or longer than
// MaxEventIDLen bytes. The id's bytes are used as they are; they need not
// be valid UTF-8.
func UsageEvent(eventID string) ([]byte, error) {
	if len(eventID) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidEventID)
	}
	if len(eventID) > MaxEventIDLen {
		return nil, fmt.Errorf("%w: %d bytes, max %d", ErrInvalidEventID, len(eventID), MaxEventIDLen)
	}
	k := make([]byte, 0, 1+len(eventID))
	k = append(k, TableUsageEvents)
	return append(k, eventID...), nil
}

// ValidateRoutingKey returns an error wrapping ErrRoutingKeyTooLong if
// routingKey is longer than MaxRoutingKeyLen bytes. The empty routing key
// is valid. Callers that accept routing keys from clients check them here
// before calling KV or KVPrefix.
func ValidateRoutingKey(routingKey []byte) error {
	if len(routingKey) > MaxRoutingKeyLen {
		return fmt.Errorf("%w: %d bytes, max %d", ErrRoutingKeyTooLong, len(routingKey), MaxRoutingKeyLen)
	}
	return nil
}

// KV returns the kv key 0x20 | len(routingKey) u16 BE | routingKey | key.
//
// KV panics if routingKey is longer than MaxRoutingKeyLen: that is a
// programming error, since routing keys from outside are checked with
// ValidateRoutingKey first.
func KV(routingKey, key []byte) []byte {
	if err := ValidateRoutingKey(routingKey); err != nil {
		panic(err)
	}
	k := make([]byte, kvHeaderLen, kvHeaderLen+len(routingKey)+len(key))
	k[0] = TableKV
	binary.BigEndian.PutUint16(k[1:kvHeaderLen], uint16(len(routingKey)))
	k = append(k, routingKey...)
	return append(k, key...)
}

// KVPrefix returns the prefix shared by every kv key of routingKey whose
// key starts with keyPrefix. KVPrefix(rk, nil) bounds all keys of routing
// key rk and no key of any other routing key. Like KV, it panics if
// routingKey is longer than MaxRoutingKeyLen.
//
// Across routing keys the order is by routing key length first, then by
// routing key bytes; only the order inside one routing key is meaningful.
func KVPrefix(routingKey, keyPrefix []byte) []byte {
	return KV(routingKey, keyPrefix)
}

// malformed reports why k is not a key of table t.
func malformed(t byte, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, TableName(t), fmt.Sprintf(format, args...))
}

// checkTable verifies that k is non-empty and belongs to table t.
func checkTable(k []byte, t byte) error {
	if len(k) == 0 {
		return malformed(t, "empty key")
	}
	if k[0] != t {
		return malformed(t, "key is in table %s (0x%02x), want 0x%02x", TableName(k[0]), k[0], t)
	}
	return nil
}

// checkFixed verifies that k belongs to table t and is exactly n bytes.
func checkFixed(k []byte, t byte, n int) error {
	if err := checkTable(k, t); err != nil {
		return err
	}
	if len(k) != n {
		return malformed(t, "key has %d bytes, want %d", len(k), n)
	}
	return nil
}

// DecodeMeta returns the name of a meta key produced by Meta.
func DecodeMeta(k []byte) (string, error) {
	if err := checkTable(k, TableMeta); err != nil {
		return "", err
	}
	return string(k[1:]), nil
}

// DecodeAgent returns the ids of an agents key produced by Agent.
func DecodeAgent(k []byte) (UserID, AgentID, error) {
	var u UserID
	var a AgentID
	if err := checkFixed(k, TableAgents, agentKeyLen); err != nil {
		return u, a, err
	}
	copy(u[:], k[1:33])
	copy(a[:], k[33:65])
	return u, a, nil
}

// DecodeAgentByStatus returns the fields of a status index key produced by
// AgentByStatus.
func DecodeAgentByStatus(k []byte) (byte, UserID, AgentID, error) {
	var u UserID
	var a AgentID
	if err := checkFixed(k, TableAgentsByStatus, agentByStatusKeyLen); err != nil {
		return 0, u, a, err
	}
	copy(u[:], k[2:34])
	copy(a[:], k[34:66])
	return k[1], u, a, nil
}

// DecodeSession returns the id of a sessions key produced by Session.
func DecodeSession(k []byte) (SessionID, error) {
	var s SessionID
	if err := checkFixed(k, TableSessions, sessionKeyLen); err != nil {
		return s, err
	}
	copy(s[:], k[1:17])
	return s, nil
}

// DecodeSessionByAgent returns the ids of an index key produced by
// SessionByAgent.
func DecodeSessionByAgent(k []byte) (AgentID, SessionID, error) {
	var a AgentID
	var s SessionID
	if err := checkFixed(k, TableSessionsByAgent, sessionByAgentKeyLen); err != nil {
		return a, s, err
	}
	copy(a[:], k[1:33])
	copy(s[:], k[33:49])
	return a, s, nil
}

// DecodeUser returns the id of a users key produced by User.
func DecodeUser(k []byte) (UserID, error) {
	var u UserID
	if err := checkFixed(k, TableUsers, userKeyLen); err != nil {
		return u, err
	}
	copy(u[:], k[1:33])
	return u, nil
}

// DecodeAgentOwner returns the agent id of an agent_owners key produced by
// AgentOwner.
func DecodeAgentOwner(k []byte) (AgentID, error) {
	var a AgentID
	if err := checkFixed(k, TableAgentOwners, agentOwnerKeyLen); err != nil {
		return a, err
	}
	copy(a[:], k[1:33])
	return a, nil
}

// DecodeAccount returns the id of an accounts key produced by Account.
func DecodeAccount(k []byte) (AccountID, error) {
	var u AccountID
	if err := checkFixed(k, TableAccounts, accountKeyLen); err != nil {
		return u, err
	}
	copy(u[:], k[1:17])
	return u, nil
}

// DecodeTransaction returns the id of a transactions key produced by
// Transaction.
func DecodeTransaction(k []byte) (TransactionID, error) {
	var id TransactionID
	if err := checkFixed(k, TableTransactions, transactionKeyLen); err != nil {
		return id, err
	}
	copy(id[:], k[1:17])
	return id, nil
}

// DecodeTransactionByUser returns the ids of an index key produced by
// TransactionByUser.
func DecodeTransactionByUser(k []byte) (AccountID, TransactionID, error) {
	var u AccountID
	var id TransactionID
	if err := checkFixed(k, TableTransactionsByUser, transactionByUserKeyLen); err != nil {
		return u, id, err
	}
	copy(u[:], k[1:17])
	copy(id[:], k[17:33])
	return u, id, nil
}

// DecodeTxDirectory returns the transaction id of a tx_directory key
// produced by TxDirectory.
func DecodeTxDirectory(k []byte) (TransactionID, error) {
	var id TransactionID
	if err := checkFixed(k, TableTxDirectory, txDirectoryKeyLen); err != nil {
		return id, err
	}
	copy(id[:], k[1:17])
	return id, nil
}

// DecodeUsageEvent returns the event id of a usage_events key produced by
// UsageEvent.
func DecodeUsageEvent(k []byte) (string, error) {
	if err := checkTable(k, TableUsageEvents); err != nil {
		return "", err
	}
	if n := len(k) - 1; n < 1 || n > MaxEventIDLen {
		return "", malformed(TableUsageEvents, "event id has %d bytes, want 1..%d", n, MaxEventIDLen)
	}
	return string(k[1:]), nil
}

// DecodeKV splits a kv key produced by KV into its routing key and key.
// The returned slices alias k (with their capacity clipped, so appending
// to them never writes into k); copy them if k is reused, as Pebble
// iterator keys are.
func DecodeKV(k []byte) (routingKey, key []byte, err error) {
	if err = checkTable(k, TableKV); err != nil {
		return nil, nil, err
	}
	if len(k) < kvHeaderLen {
		return nil, nil, malformed(TableKV, "key has %d bytes, want at least %d", len(k), kvHeaderLen)
	}
	n := int(binary.BigEndian.Uint16(k[1:kvHeaderLen]))
	if n > MaxRoutingKeyLen {
		return nil, nil, malformed(TableKV, "routing key length %d exceeds %d", n, MaxRoutingKeyLen)
	}
	end := kvHeaderLen + n
	if len(k) < end {
		return nil, nil, malformed(TableKV, "routing key length %d exceeds the %d bytes left", n, len(k)-kvHeaderLen)
	}
	return k[kvHeaderLen:end:end], k[end:len(k):len(k)], nil
}

// Text forms: ids print and parse as lowercase hex (JSON output of the CLI
// and logs). The binary layouts above are unaffected.

func marshalHex(b []byte) ([]byte, error) { return []byte(hex.EncodeToString(b)), nil }

func unmarshalHex(dst, text []byte, what string) error {
	if hex.DecodedLen(len(text)) != len(dst) {
		return fmt.Errorf("%w: %s %q: want %d hex digits", ErrMalformed, what, text, 2*len(dst))
	}
	_, err := hex.Decode(dst, text)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
	}
	return nil
}

// MarshalText returns the id as hex.
func (id UserID) MarshalText() ([]byte, error) { return marshalHex(id[:]) }

// UnmarshalText parses hex.
func (id *UserID) UnmarshalText(t []byte) error { return unmarshalHex(id[:], t, "user id") }

// MarshalText returns the id as hex.
func (id AgentID) MarshalText() ([]byte, error) { return marshalHex(id[:]) }

// UnmarshalText parses hex.
func (id *AgentID) UnmarshalText(t []byte) error { return unmarshalHex(id[:], t, "agent id") }

// MarshalText returns the id as hex.
func (id SessionID) MarshalText() ([]byte, error) { return marshalHex(id[:]) }

// UnmarshalText parses hex.
func (id *SessionID) UnmarshalText(t []byte) error { return unmarshalHex(id[:], t, "session id") }

// MarshalText returns the id as hex.
func (id AccountID) MarshalText() ([]byte, error) { return marshalHex(id[:]) }

// UnmarshalText parses hex.
func (id *AccountID) UnmarshalText(t []byte) error { return unmarshalHex(id[:], t, "account id") }

// MarshalText returns the id as hex.
func (id TransactionID) MarshalText() ([]byte, error) { return marshalHex(id[:]) }

// UnmarshalText parses hex.
func (id *TransactionID) UnmarshalText(t []byte) error {
	return unmarshalHex(id[:], t, "transaction id")
}
