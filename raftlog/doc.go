// Package raftlog is a Raft log and stable store for many Raft groups over
// one Pebble database per node.
//
// A node that hosts replicas of many shards would otherwise run one log
// store (and one fsync stream) per replica; here every group appends to the
// same Pebble WAL, and Pebble's commit pipeline turns concurrent synced
// commits of different groups into one WAL fsync. Each append is a single
// Pebble batch committed with pebble.Sync (an append over MaxBatchBytes, a
// run of very large entries, is several, committed in index order, so that
// no batch nears Pebble's 4 GiB limit; see Group.StoreLogs), so a StoreLogs
// that returned nil survives a process kill and a power loss, as with
// raft-boltdb.
//
// Usage:
//
//	s, err := raftlog.Open(raftlog.Options{Dir: filepath.Join(dataDir, "raftlog")})
//	...
//	g, err := s.Group(7) // a raft.LogStore and raft.StableStore for group 7
//	r, err := raft.NewRaft(conf, fsm, g, g, snaps, trans)
//	...
//	r.Shutdown().Error()
//	s.DropGroup(7) // only once the group's Raft instance is shut down
//	s.Close()      // after every group's Raft instance is shut down
//
// # Key layout
//
// Every key starts with the group id, so a group's state is one contiguous
// key range (DropGroup is one range deletion):
//
//	log entry:   group u32 BE | 0x01 | index u64 BE        (13 bytes)
//	stable key:  group u32 BE | 0x02 | key (raft's own keys: "CurrentTerm", ...)
//
// # Log entry value layout (version 1)
//
//	+---------+------+-------+-------------+------------------+-------------+------+------------+-----+
//	| version | type | flags | term        | appended_at      | data_len    | data | ext_len    | ext |
//	| 0x01 u8 | u8   | u8    | uvarint     | varint unix-nano | uvarint     |      | uvarint    |     |
//	|         |      |       |             | (if flags&0x01)  |             |      |            |     |
//	+---------+------+-------+-------------+------------------+-------------+------+------------+-----+
//
// The index is the key's; flags bit 0 says AppendedAt is set (a zero
// time.Time is not stored); other flag bits are invalid. Decoding is strict:
// a value is accepted only in this canonical form, with no trailing bytes.
//
// # Semantics
//
// The semantics follow raft-boltdb: FirstIndex and LastIndex are the lowest
// and highest stored index (0 when empty; kept in memory); the log may have
// gaps; GetLog of a missing index returns raft.ErrLogNotFound; Get and
// GetUint64 of a missing stable key return ErrKeyNotFound, whose message is
// exactly "not found" because hashicorp/raft compares error strings.
//
// # Concurrency
//
// A Group is safe for concurrent use (Raft reads the log from its
// replication goroutines while its main goroutine appends). Different
// groups are independent. DropGroup and Close must not run while a Raft
// instance still uses the group(s).
package raftlog
