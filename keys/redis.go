package keys

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Redis tables (seed 002, the asset catalogue, served over RESP). A Redis
// key k owns one record in TableRedisKeys (its type, version and counters;
// a string's value rides in the record) and, for hashes, sets and lists,
// one Pebble key per field, member or element, so that a field, member or
// list index is one O(log n) point lookup and a write never rewrites a
// whole value. k is any byte string of 0..MaxRedisKeyLen bytes.
const (
	// TableRedisKeys holds one RedisMeta record per Redis key.
	//
	//	+------+-----------------+
	//	| 0x40 | key (0..1024)   |
	//	+------+-----------------+
	//	0      1
	TableRedisKeys byte = 0x40

	// TableRedisScan orders a shard's Redis keys by creation for SCAN:
	// created is the log index of the command that created the key, so a
	// SCAN cursor (a created index) resumes where it stopped and a key
	// that exists for a whole SCAN is returned. The value is empty.
	//
	//	+------+-------------------+-----+
	//	| 0x41 | created (u64, BE) | key |
	//	+------+-------------------+-----+
	//	0      1                   9
	TableRedisScan byte = 0x41

	// TableRedisHash holds one hash field per Pebble key; the value is the
	// field's value. The key's length keeps keys prefix-free, as in kv.
	//
	//	+------+-------------+---------+------------------+
	//	| 0x42 | n (u16, BE) | key (n) | field (the rest) |
	//	+------+-------------+---------+------------------+
	//	0      1             3         3+n
	TableRedisHash byte = 0x42

	// TableRedisSet holds one set member per Pebble key. The value is
	// empty.
	//
	//	+------+-------------+---------+-------------------+
	//	| 0x43 | n (u16, BE) | key (n) | member (the rest) |
	//	+------+-------------+---------+-------------------+
	//	0      1             3         3+n
	TableRedisSet byte = 0x43

	// TableRedisList holds one list element per Pebble key; the value is
	// the element. pos is the element's int64 position with its sign bit
	// flipped (bytewise order = numeric order); a list occupies the
	// positions [Head, Tail) of its RedisMeta, so index i is position
	// Head+i. LPUSH takes Head-1, RPUSH takes Tail.
	//
	//	+------+-------------+---------+-------------------------+
	//	| 0x44 | n (u16, BE) | key (n) | pos (u64 BE, int64^2^63)|
	//	+------+-------------+---------+-------------------------+
	//	0      1             3         3+n                      11+n
	TableRedisList byte = 0x44
)

// MaxRedisKeyLen is the longest Redis key, and MaxRedisFieldLen the longest
// hash field or set member, in bytes, that swarmkv stores (both become
// part of a Pebble key).
const (
	MaxRedisKeyLen   = 1024
	MaxRedisFieldLen = 2048
)

// RedisType is the type of a Redis key, as TYPE names it.
type RedisType uint8

const (
	RedisString RedisType = 1
	RedisHash   RedisType = 2
	RedisSet    RedisType = 3
	RedisList   RedisType = 4
)

// String returns the name TYPE answers: "string", "hash", "set", "list".
func (t RedisType) String() string {
	switch t {
	case RedisString:
		return "string"
	case RedisHash:
		return "hash"
	case RedisSet:
		return "set"
	case RedisList:
		return "list"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// RedisMeta is the TableRedisKeys record of one Redis key.
//
// Value layout (u64 and i64 big-endian):
//
//	string:      | 0x01 | version u64 | created u64 | value (the rest)  |
//	hash, set:   | type | version u64 | created u64 | count u64         |
//	list:        | 0x04 | version u64 | created u64 | head i64 | tail i64 |
//
// version is the log index of the last command that changed the key (WATCH
// compares it), created the log index of the command that created it (its
// TableRedisScan entry). count is the number of fields or members; a list's
// length is tail-head. Every stored hash, set and list has at least one
// element: the last removal deletes the key.
type RedisMeta struct {
	Type    RedisType
	Version uint64
	Created uint64
	Count   uint64 // hash, set
	Head    int64  // list
	Tail    int64  // list
	Value   []byte // string
}

const redisMetaHeader = 1 + 8 + 8

// ErrMalformedRecord is returned, wrapped with detail, by DecodeRedisMeta.
var ErrMalformedRecord = errors.New("keys: malformed record")

// Len returns the number of elements of a hash, set or list (0 for a
// string).
func (m *RedisMeta) Len() int64 {
	switch m.Type {
	case RedisHash, RedisSet:
		return int64(m.Count)
	case RedisList:
		return m.Tail - m.Head
	}
	return 0
}

// AppendRedisMeta appends the encoding of m to b.
func AppendRedisMeta(b []byte, m *RedisMeta) []byte {
	b = append(b, byte(m.Type))
	b = binary.BigEndian.AppendUint64(b, m.Version)
	b = binary.BigEndian.AppendUint64(b, m.Created)
	switch m.Type {
	case RedisString:
		b = append(b, m.Value...)
	case RedisHash, RedisSet:
		b = binary.BigEndian.AppendUint64(b, m.Count)
	case RedisList:
		b = binary.BigEndian.AppendUint64(b, uint64(m.Head))
		b = binary.BigEndian.AppendUint64(b, uint64(m.Tail))
	}
	return b
}

// DecodeRedisMeta parses a record made by AppendRedisMeta. A string's Value
// aliases v. The error wraps ErrMalformedRecord: an unknown type, a wrong
// length, an empty hash or set, or a list with tail <= head.
func DecodeRedisMeta(v []byte) (RedisMeta, error) {
	var m RedisMeta
	if len(v) < redisMetaHeader {
		return m, fmt.Errorf("%w: redis meta of %d bytes, want at least %d", ErrMalformedRecord, len(v), redisMetaHeader)
	}
	m.Type = RedisType(v[0])
	m.Version = binary.BigEndian.Uint64(v[1:9])
	m.Created = binary.BigEndian.Uint64(v[9:17])
	rest := v[redisMetaHeader:]
	switch m.Type {
	case RedisString:
		m.Value = rest
		return m, nil
	case RedisHash, RedisSet:
		if len(rest) != 8 {
			return m, fmt.Errorf("%w: %s meta has %d bytes after the header, want 8", ErrMalformedRecord, m.Type, len(rest))
		}
		m.Count = binary.BigEndian.Uint64(rest)
		if m.Count == 0 {
			return m, fmt.Errorf("%w: empty %s", ErrMalformedRecord, m.Type)
		}
	case RedisList:
		if len(rest) != 16 {
			return m, fmt.Errorf("%w: list meta has %d bytes after the header, want 16", ErrMalformedRecord, len(rest))
		}
		m.Head = int64(binary.BigEndian.Uint64(rest[:8]))
		m.Tail = int64(binary.BigEndian.Uint64(rest[8:]))
		if m.Tail <= m.Head {
			return m, fmt.Errorf("%w: list with head %d, tail %d", ErrMalformedRecord, m.Head, m.Tail)
		}
	default:
		return m, fmt.Errorf("%w: unknown redis type %d", ErrMalformedRecord, v[0])
	}
	return m, nil
}

// RedisKey returns the TableRedisKeys key 0x40 | key.
func RedisKey(key []byte) []byte {
	k := make([]byte, 0, 1+len(key))
	k = append(k, TableRedisKeys)
	return append(k, key...)
}

// DecodeRedisKey returns the Redis key of a TableRedisKeys key.
func DecodeRedisKey(k []byte) ([]byte, error) {
	if err := checkTable(k, TableRedisKeys); err != nil {
		return nil, err
	}
	if len(k)-1 > MaxRedisKeyLen {
		return nil, malformed(TableRedisKeys, "redis key of %d bytes, max %d", len(k)-1, MaxRedisKeyLen)
	}
	return k[1:], nil
}

// RedisScan returns the TableRedisScan key 0x41 | created | key.
func RedisScan(created uint64, key []byte) []byte {
	k := make([]byte, 9, 9+len(key))
	k[0] = TableRedisScan
	binary.BigEndian.PutUint64(k[1:9], created)
	return append(k, key...)
}

// RedisScanFrom returns the first TableRedisScan key of keys created at
// or after created.
func RedisScanFrom(created uint64) []byte { return RedisScan(created, nil) }

// DecodeRedisScan returns the parts of a TableRedisScan key.
func DecodeRedisScan(k []byte) (created uint64, key []byte, err error) {
	if err := checkTable(k, TableRedisScan); err != nil {
		return 0, nil, err
	}
	if len(k) < 9 {
		return 0, nil, malformed(TableRedisScan, "key has %d bytes, want at least 9", len(k))
	}
	if len(k)-9 > MaxRedisKeyLen {
		return 0, nil, malformed(TableRedisScan, "redis key of %d bytes, max %d", len(k)-9, MaxRedisKeyLen)
	}
	return binary.BigEndian.Uint64(k[1:9]), k[9:], nil
}

// RedisElemPrefix returns t | len(key) u16 | key, the prefix of every
// element key of Redis key key in table t (TableRedisHash, TableRedisSet
// or TableRedisList). It panics if key is longer than MaxRedisKeyLen, which
// callers check first.
func RedisElemPrefix(t byte, key []byte) []byte {
	if len(key) > MaxRedisKeyLen {
		panic(fmt.Sprintf("keys: redis key of %d bytes, max %d", len(key), MaxRedisKeyLen))
	}
	k := make([]byte, 3, 3+len(key)+16)
	k[0] = t
	binary.BigEndian.PutUint16(k[1:3], uint16(len(key)))
	return append(k, key...)
}

// RedisHashField returns the TableRedisHash key of field of hash key.
func RedisHashField(key, field []byte) []byte {
	return append(RedisElemPrefix(TableRedisHash, key), field...)
}

// RedisSetMember returns the TableRedisSet key of member of set key.
func RedisSetMember(key, member []byte) []byte {
	return append(RedisElemPrefix(TableRedisSet, key), member...)
}

// RedisListElem returns the TableRedisList key of position pos of list key.
func RedisListElem(key []byte, pos int64) []byte {
	return binary.BigEndian.AppendUint64(RedisElemPrefix(TableRedisList, key), uint64(pos)^(1<<63))
}

// decodeRedisElem splits t | n | key | rest.
func decodeRedisElem(k []byte, t byte) (key, rest []byte, err error) {
	if err := checkTable(k, t); err != nil {
		return nil, nil, err
	}
	if len(k) < 3 {
		return nil, nil, malformed(t, "key has %d bytes, want at least 3", len(k))
	}
	n := int(binary.BigEndian.Uint16(k[1:3]))
	if n > MaxRedisKeyLen {
		return nil, nil, malformed(t, "redis key of %d bytes, max %d", n, MaxRedisKeyLen)
	}
	if len(k) < 3+n {
		return nil, nil, malformed(t, "redis key length %d exceeds the %d bytes left", n, len(k)-3)
	}
	return k[3 : 3+n], k[3+n:], nil
}

// DecodeRedisHashField returns the key and field of a TableRedisHash key.
func DecodeRedisHashField(k []byte) (key, field []byte, err error) {
	key, field, err = decodeRedisElem(k, TableRedisHash)
	if err == nil && len(field) > MaxRedisFieldLen {
		return nil, nil, malformed(TableRedisHash, "field of %d bytes, max %d", len(field), MaxRedisFieldLen)
	}
	return key, field, err
}

// DecodeRedisSetMember returns the key and member of a TableRedisSet key.
func DecodeRedisSetMember(k []byte) (key, member []byte, err error) {
	key, member, err = decodeRedisElem(k, TableRedisSet)
	if err == nil && len(member) > MaxRedisFieldLen {
		return nil, nil, malformed(TableRedisSet, "member of %d bytes, max %d", len(member), MaxRedisFieldLen)
	}
	return key, member, err
}

// DecodeRedisListElem returns the key and position of a TableRedisList key.
func DecodeRedisListElem(k []byte) (key []byte, pos int64, err error) {
	key, rest, err := decodeRedisElem(k, TableRedisList)
	if err != nil {
		return nil, 0, err
	}
	if len(rest) != 8 {
		return nil, 0, malformed(TableRedisList, "position of %d bytes, want 8", len(rest))
	}
	return key, int64(binary.BigEndian.Uint64(rest) ^ (1 << 63)), nil
}

// RedisRoutingKey returns the routing key of a Redis key: the bytes inside
// its first "{...}" when that part is non-empty (Redis Cluster's hash tag),
// otherwise its namespace, the bytes before its first ':' (the whole key
// when it has none). So every "asset:*" key routes by "asset" and lives in
// one shard, and "{user42}:cart" and "{user42}:orders" share a shard.
//
//	RedisRoutingKey("asset:metadata:google_search") = "asset"
//	RedisRoutingKey("{u1}:cart")                    = "u1"
//	RedisRoutingKey("x{}y:z")                       = "x{}y"
//	RedisRoutingKey("counter")                      = "counter"
//
// The result aliases key.
func RedisRoutingKey(key []byte) []byte {
	if open := bytes.IndexByte(key, '{'); open >= 0 {
		if n := bytes.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n]
		}
	}
	if i := bytes.IndexByte(key, ':'); i >= 0 {
		return key[:i]
	}
	return key
}

// redisTableName names the Redis tables for TableName ("" for others).
func redisTableName(t byte) string {
	switch t {
	case TableRedisKeys:
		return "redis_keys"
	case TableRedisScan:
		return "redis_scan"
	case TableRedisHash:
		return "redis_hash"
	case TableRedisSet:
		return "redis_set"
	case TableRedisList:
		return "redis_list"
	}
	return ""
}
