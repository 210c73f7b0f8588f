package keys

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// etcd tables (the etcd v3 API front, package etcdfront). An etcd keyspace
// is a namespace ns stored under ONE routing key, EtcdRoutingKey(ns) =
// "etcd/" + ns: one slot, so one shard, one linearizable order and one
// revision sequence, and the namespace moves as a unit in a split or
// merge. Every key of the three tables carries that routing key after its
// length byte (so RoutingKeyOf returns it without a copy, and the keys of
// namespace "a" never interleave with those of "ab").
const (
	// TableEtcdKeys holds the current state of each live etcd key: the
	// value is the key's record (the state machine's encoding:
	// create_revision, mod_revision, version, lease, value). A deleted key
	// has no entry.
	//
	//	+------+-----------+------------------+-------------------+
	//	| 0x60 | n (u8)    | routing_key (n)  | etcd key (rest)   |
	//	+------+-----------+------------------+-------------------+
	//	0      1           2                  2+n
	TableEtcdKeys byte = 0x60

	// TableEtcdHistory holds the namespace's events, one per key written:
	// rev is the namespace revision of the write, sub its position among
	// the writes of that revision (a txn writes several keys at one
	// revision). The value is the event (key, kind, the record after and
	// the record before). Events at or below the compacted revision are
	// deleted by a compaction.
	//
	//	+------+--------+-----------------+---------------+---------------+
	//	| 0x61 | n (u8) | routing_key (n) | rev (u64, BE) | sub (u32, BE) |
	//	+------+--------+-----------------+---------------+---------------+
	//	0      1        2                 2+n             10+n            14+n
	TableEtcdHistory byte = 0x61

	// TableEtcdRevs holds the namespace's revisions: the value is the
	// current revision and the compacted revision (u64 BE each).
	//
	//	+------+--------+-----------------+
	//	| 0x62 | n (u8) | routing_key (n) |
	//	+------+--------+-----------------+
	//	0      1        2                 2+n
	TableEtcdRevs byte = 0x62
)

// EtcdRoutingKeyPrefix starts the routing key of every etcd namespace.
const EtcdRoutingKeyPrefix = "etcd/"

// MaxEtcdNamespaceLen is the longest etcd namespace name, in bytes.
const MaxEtcdNamespaceLen = 64

// ErrEtcdNamespace is wrapped by ValidateEtcdNamespace's errors.
var ErrEtcdNamespace = errors.New("keys: invalid etcd namespace")

// ValidateEtcdNamespace checks an etcd namespace name: 1..64 bytes of
// [A-Za-z0-9._-].
func ValidateEtcdNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > MaxEtcdNamespaceLen {
		return fmt.Errorf("%w: %d bytes, want 1..%d", ErrEtcdNamespace, len(ns), MaxEtcdNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: byte %d (0x%02x) is not one of [A-Za-z0-9._-]", ErrEtcdNamespace, ns, i, c)
		}
	}
	return nil
}

// EtcdRoutingKey is the routing key of namespace ns: "etcd/" + ns.
func EtcdRoutingKey(ns string) []byte { return []byte(EtcdRoutingKeyPrefix + ns) }

// EtcdNamespaceOf returns the namespace of an etcd routing key, false if
// rk is not one (no "etcd/" prefix or an invalid name).
func EtcdNamespaceOf(rk []byte) (string, bool) {
	ns, ok := strings.CutPrefix(string(rk), EtcdRoutingKeyPrefix)
	if !ok || ValidateEtcdNamespace(ns) != nil {
		return "", false
	}
	return ns, true
}

// etcdHeader returns t | n | rk with room for extra more bytes. rk must
// be an etcd routing key (at most 255 bytes); a longer one panics (a
// programming error: namespaces are validated first).
func etcdHeader(t byte, rk []byte, extra int) []byte {
	if len(rk) > 255 {
		panic(fmt.Sprintf("keys: etcd routing key of %d bytes", len(rk)))
	}
	k := make([]byte, 0, 2+len(rk)+extra)
	k = append(k, t, byte(len(rk)))
	return append(k, rk...)
}

// EtcdKey returns the etcd_keys key of etcd key key in the namespace of
// routing key rk: 0x60 | len(rk) | rk | key.
func EtcdKey(rk, key []byte) []byte {
	return append(etcdHeader(TableEtcdKeys, rk, len(key)), key...)
}

// EtcdKeyPrefix returns 0x60 | len(rk) | rk: the prefix of every live key
// of the namespace (EtcdKey(rk, k) for any k has it).
func EtcdKeyPrefix(rk []byte) []byte { return etcdHeader(TableEtcdKeys, rk, 0) }

// EtcdHistory returns the etcd_history key of the sub-th write at
// revision rev: 0x61 | len(rk) | rk | rev | sub.
func EtcdHistory(rk []byte, rev uint64, sub uint32) []byte {
	k := etcdHeader(TableEtcdHistory, rk, 12)
	k = binary.BigEndian.AppendUint64(k, rev)
	return binary.BigEndian.AppendUint32(k, sub)
}

// EtcdHistoryFrom returns the first etcd_history key of revision rev
// (sub 0): [EtcdHistoryFrom(rk, a), EtcdHistoryFrom(rk, b)) bounds the
// events of revisions a..b-1.
func EtcdHistoryFrom(rk []byte, rev uint64) []byte { return EtcdHistory(rk, rev, 0) }

// EtcdHistoryPrefix returns 0x61 | len(rk) | rk: the prefix of every
// event of the namespace.
func EtcdHistoryPrefix(rk []byte) []byte { return etcdHeader(TableEtcdHistory, rk, 0) }

// EtcdRevs returns the etcd_revs key of the namespace: 0x62 | len(rk) | rk.
func EtcdRevs(rk []byte) []byte { return etcdHeader(TableEtcdRevs, rk, 0) }

// decodeEtcdHeader splits a key of etcd table t into its routing key and
// the rest.
func decodeEtcdHeader(k []byte, t byte) (rk, rest []byte, err error) {
	if err := checkTable(k, t); err != nil {
		return nil, nil, err
	}
	if len(k) < 2 {
		return nil, nil, malformed(t, "key has %d bytes, want at least 2", len(k))
	}
	n := int(k[1])
	if len(k) < 2+n {
		return nil, nil, malformed(t, "routing key length %d exceeds the %d bytes left", n, len(k)-2)
	}
	rk = k[2 : 2+n : 2+n]
	if _, ok := EtcdNamespaceOf(rk); !ok {
		return nil, nil, malformed(t, "routing key %q is not etcd/<namespace>", rk)
	}
	return rk, k[2+n : len(k) : len(k)], nil
}

// DecodeEtcdKey splits an etcd_keys key into its routing key and etcd key
// (aliasing k).
func DecodeEtcdKey(k []byte) (rk, key []byte, err error) {
	return decodeEtcdHeader(k, TableEtcdKeys)
}

// DecodeEtcdHistory splits an etcd_history key into its routing key,
// revision and sub index.
func DecodeEtcdHistory(k []byte) (rk []byte, rev uint64, sub uint32, err error) {
	rk, rest, err := decodeEtcdHeader(k, TableEtcdHistory)
	if err != nil {
		return nil, 0, 0, err
	}
	if len(rest) != 12 {
		return nil, 0, 0, malformed(TableEtcdHistory, "%d bytes after the routing key, want 12", len(rest))
	}
	return rk, binary.BigEndian.Uint64(rest), binary.BigEndian.Uint32(rest[8:]), nil
}

// DecodeEtcdRevs returns the routing key of an etcd_revs key.
func DecodeEtcdRevs(k []byte) (rk []byte, err error) {
	rk, rest, err := decodeEtcdHeader(k, TableEtcdRevs)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, malformed(TableEtcdRevs, "%d bytes after the routing key, want 0", len(rest))
	}
	return rk, nil
}

// etcdTableName names the etcd tables, "" for another table.
func etcdTableName(t byte) string {
	switch t {
	case TableEtcdKeys:
		return "etcd_keys"
	case TableEtcdHistory:
		return "etcd_history"
	case TableEtcdRevs:
		return "etcd_revs"
	}
	return ""
}

// etcdRoutingKeyOf is RoutingKeyOf for the etcd tables.
func etcdRoutingKeyOf(k []byte) ([]byte, Route, error) {
	var rk []byte
	var err error
	switch k[0] {
	case TableEtcdKeys:
		rk, _, err = DecodeEtcdKey(k)
	case TableEtcdHistory:
		rk, _, _, err = DecodeEtcdHistory(k)
	default:
		rk, err = DecodeEtcdRevs(k)
	}
	if err != nil {
		return nil, RouteNone, err
	}
	return rk, RouteKey, nil
}
