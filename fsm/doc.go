// Package fsm is the Raft state machine of one swarmkv shard replica: it
// applies CBOR-encoded commands from a hashicorp/raft log to the replica's
// own Pebble DB, deterministically, and snapshots and restores that DB.
//
// # Usage
//
//	f, err := fsm.Open(fsm.Config{Shard: 7, Dir: dir, Cache: sharedCache, Logger: log})
//	if err != nil { ... }
//	defer f.Close() // after raft has shut down
//	r, err := raft.NewRaft(raftCfg, f, logStore, stableStore, snapStore, transport)
//
//	// propose a guarded batch: put k=v only if k is absent
//	data, err := fsm.EncodeCommand(&fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
//		Guards:    []fsm.Guard{{Kind: fsm.GuardAbsent, Key: k}},
//		Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: k, Value: v}},
//	}})
//	fut := r.Apply(data, timeout)
//	if err := fut.Error(); err != nil { ... } // not committed
//	res := fut.Response().(*fsm.Result)
//	switch {
//	case res.Err != nil: // rejected: malformed or invalid, nothing written
//	case !res.Succeeded: // guard res.FailedGuard did not hold, nothing written
//	}
//
//	// linearizable read on the leader, after VerifyLeader:
//	if err := f.WaitApplied(ctx, readIndex); err != nil { ... }
//	v, err := f.Get(k)
//
// # Keys
//
// Keys are opaque bytes, except that the table with prefix byte 0x00 (the
// meta table) holds the replica's own state and no command may write it:
//
//	0x00 "shard"     uint32 big-endian shard id, written on first Open
//	0x00 "applied"   uint64 big-endian index of the last applied log entry
//	0x00 "restoring" present while a Restore runs (value: snapshot index)
//
// # Durability
//
// ApplyBatch commits each run of entries, with the applied index, in one
// Pebble batch without sync; the Raft log is the durable record. After a
// crash the DB holds a prefix of the applied runs and raft replays its log
// from its last snapshot; entries at or below the recovered applied index
// are skipped. Snapshot syncs the WAL first, so a snapshot never holds state
// that is not durable in the DB.
//
// # Snapshot stream
//
// Persist writes, and Restore reads, this stream (uvarint = encoding/binary
// unsigned varint; CRC = CRC-32C Castagnoli, big-endian):
//
//	+----------+---------------+-----------------------+---------------+
//	| SWKVSNP1 | uvarint shard | uvarint applied index | CRC (4 bytes) |  header
//	+----------+---------------+-----------------------+---------------+
//	 8 bytes    the CRC covers the header bytes before it
//
//	then, once per key outside the meta table, in ascending key order:
//	+------+----------------+-----+------------------+-------+
//	| 0x00 | uvarint keylen | key | uvarint valuelen | value |      record
//	+------+----------------+-----+------------------+-------+
//	         keylen >= 1, key[0] != 0x00
//
//	then:
//	+------+----------------------+---------------+
//	| 0x01 | uvarint record count | CRC (4 bytes) |                 end
//	+------+----------------------+---------------+
//	         the CRC covers every byte of the stream before it
//
// The header CRC lets Restore trust the index it reads before deciding to
// skip a snapshot it already holds. Nothing may follow the final CRC.
package fsm
