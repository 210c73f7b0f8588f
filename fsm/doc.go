// Package fsm is the Raft state machine of one swarmkv shard replica: it
// applies CBOR-encoded commands from a hashicorp/raft log to the replica's
// own Pebble DB, deterministically, and snapshots and restores that DB
// (ExportState streams the same records for a backup, SnapshotWriter
// writes a snapshot stream a restore of a backup hands to Restore).
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
//	// charge a usage event, once, against the user's credits:
//	data, err = fsm.EncodeCommand(&fsm.Command{Op: fsm.OpProcessUsage,
//		Event: ev, Tx: charge, Time: nowMs}) // Time: the proposer's clock
//	res = r.Apply(data, timeout).Response().(*fsm.Result)
//	var short *fsm.InsufficientCreditsError
//	switch {
//	case errors.As(res.Err, &short): // short.Balance < short.Required
//	case res.Err != nil:             // DuplicateEventError, ErrNotFound, ...
//	default:                         // res.Balance is the new balance
//	}
//
//	// linearizable read on the leader, after VerifyLeader:
//	if err := f.WaitApplied(ctx, readIndex); err != nil { ... }
//	v, err := f.Get(k)
//	page, err := f.ScanReverse(prefix, keys.PrefixEnd(prefix), 20, 0) // newest first
//
// # Commands
//
// A command is one op (the Op constants) with exactly the fields that op
// takes. OpBatch is a guarded write of opaque keys (in practice the generic
// kv table); OpNoop marks a new leader's term; OpMulti carries several
// encoded commands proposed as one log entry, each applied as if it were an
// entry of its own (its response is a []*Result). The registry ops (10-16),
// billing ops (20-27) and agent pool ops (30-38) implement the seed stores'
// operations, compound ones included, inside the state machine, on the
// tables of package keys; the lease ops (60-63, lease.go) keep leases and
// end what is attached to them (an OpBatch put, a runner or agent
// heartbeat may attach a key to a lease: they read and write key_lease and
// lease_keys too):
//
//	op                         reads                               writes
//	put_agent              10  agent_owners, agents                agents, agents_by_status, agent_owners
//	delete_agent           11  agents, agent_owners                the same (deletes)
//	update_agent_status    12  agents                              agents, agents_by_status
//	put_session            13  sessions                            sessions, sessions_by_agent
//	update_session_status  14  sessions                            sessions
//	put_user               15  -                                   users
//	agent_heartbeat        16  agents, leases                      agents, lease_keys, key_lease
//	put_account            20  -                                   accounts
//	delete_account         21  accounts                            accounts (delete)
//	update_balance         22  accounts, transactions              accounts, transactions, transactions_by_user
//	put_transaction        23  transactions                        transactions, transactions_by_user
//	put_usage_event        24  -                                   usage_events
//	process_usage          25  usage_events, accounts, transactions accounts, transactions, transactions_by_user, usage_events
//	add_credits            26  transactions, accounts              accounts, transactions, transactions_by_user
//	ensure_default_pool    30  pools                               pools
//	create_pool            31  pools                               pools
//	update_pool            32  pools                               pools
//	delete_pool            33  pools, bots_by_pool, bots           pools, bots, bots_by_pool (deletes)
//	register_bot           34  pools, bots                         bots, bots_by_pool
//	update_bot             35  bots, pools                         bots, bots_by_pool
//	remove_bot             36  bots, pools                         bots, bots_by_pool (deletes)
//	runner_heartbeat       37  leases, key_lease                   runners, lease_keys, key_lease
//	set_guild_pool         38  pools                               guild_settings
//	freeze_slots           50  meta (ownership)                    meta
//	unfreeze_slots         51  meta                                meta
//	ingest_slots           52  meta, the pairs' keys               meta, any table (the pairs)
//	adopt_slots            53  meta                                meta
//	drop_slots             54  meta, every table                   meta, any table (deletes)
//	restrict_slots         55  meta                                meta
//	sync_slots             56  meta, the pairs' and deletes' keys  meta, any table (the pairs; deletes)
//	lease_grant            60  lease_seq                           lease_seq, leases
//	lease_revoke           61  leases, lease_keys, key_lease,      leases, lease_keys, key_lease, kv, runners
//	                           the attached keys                   (deletes), agents, agents_by_status
//	lease_expire           62  as lease_revoke, for many leases    as lease_revoke
//	lease_checkpoint       63  leases                              leases
//	compact_history        70  meta (history)                      meta (history)
//
// # One command per file
//
// Each op is one file, cmd_<name>.go (cmd_batch.go, cmd_put_agent.go,
// cmd_lease_grant.go, ...), whose init registers the op's commandSpec in
// the dispatch table commands (commands.go), indexed by Op: its name, the
// fields it requires and allows, the protocol version that brought it,
// whether an OpMulti may carry it, its validation, its slot derivation
// (the routing key its fields name), its apply and its history record.
// Validate, Since, Coalescable, String and the apply of every entry look
// the op up there; no code switches on an op. The registry, billing and
// pool ops give only their body (run, in a change) and their own rule:
// applyRecord and validateRecordCmd do the rest for all of them, as
// CockroachDB's batcheval registers one command per file
// (batcheval/cmd_put.go). To add an operation: its Op constant and its
// fields on Command (with their bits in validate.go), and its file;
// TestEveryOpRegistered fails for an Op constant without its file, and
// register panics at init on a duplicate op or a spec it cannot dispatch.
//
// Each command is atomic: it makes every check against the state (as left
// by earlier entries, including earlier entries of the same run) before it
// writes anything, and a rejected command writes nothing. Rejections are
// deterministic Result.Err values, the same on every replica: ErrNotFound,
// *InsufficientCreditsError, *DuplicateEventError, ErrInvalidCommand (an
// agent id owned by another user, an int64 overflow), ErrPermissionDenied,
// ErrAlreadyExists, *PoolNotEmptyError, ErrCorruptRecord, *MovedError (a
// slot the shard does not own), ErrMoveConflict (a slot move op that does
// not fit the move records), ErrLeaseNotFound (an attachment to, or a
// revoke of, a lease that does not exist), ErrStaleLeaseCommand (an expiry
// or checkpoint applied in an entry of another term than it was decided
// in).
// The state machine keeps these invariants, which the tests check after
// long random sequences: every agent has exactly one agents_by_status entry
// (its status) and an agent_owners entry, and every index entry has its
// record; likewise sessions_by_agent and transactions_by_user; an account's
// balance moves only by the amounts of the commands that succeeded, and a
// transaction, once recorded by a balance op, stays as recorded (a
// transaction id is never reused by another operation); every
// bot has exactly one bots_by_pool entry, under its pool, which exists, and
// every bots_by_pool entry has its bot.
//
// The state machine reads no clock and draws no randomness: timestamps come
// in Command.Time, fixed by the proposer before the command enters the log.
// OpAddCredits and OpUpdateBalance are idempotent in their transaction id,
// so a client may retry them; OpProcessUsage is idempotent in its event id
// (the exact retry, with its transaction id, gets the recorded balance;
// another charge of the event *DuplicateEventError). A transaction id
// recorded by one operation is refused to any other (ErrAlreadyExists).
// Across shards, OpReserveTx reserves an id for its account in the
// tx_directory table, in the slot of the id itself; an op carrying TxID
// reserves it in the same change (both from VersionHardening).
//
// # Slots
//
// A shard owns a set of slots (shard.SlotSet), recorded in the meta table
// (Config.InitialSlots when the DB has none: nil means all 256, the
// behaviour of every shard before elastic shards). Every key belongs to
// the slot of its routing key (SlotOfKey). Unless the shard owns every
// slot, each command is checked in the apply that runs it: the slot its
// fields name (user or account id, keys.PoolsRoutingKey, the Redis keys'
// routing keys, the slot of every OpBatch key) and the slot of every key a
// registry, billing or pool op writes (as written and as stored, so a
// write by session, transaction or event id alone is checked too); a slot
// not owned is refused with *MovedError and nothing is written. Reads call
// CheckSlot or CheckRoutingKey (RedisRead checks its keys itself, and its
// listings leave other slots' keys out). An OpBatch whose keys' routing
// keys fall in two slots is invalid. The slot move ops (move.go) freeze,
// export (ExportSlots; ExportLive before the freeze), ingest, sync
// (OpSyncSlots: the difference a pre-copy left, SyncPass), adopt, drop and
// unfreeze slots: the state machine's half of online split and merge; OpRestrictSlots narrows a
// shard that owns every slot (made at bootstrap) to its map's slots once,
// before its first move. Ownership changes are
// published with the commit of the batch that makes them, never before the
// data.
//
// # Keys
//
// To OpBatch keys are opaque bytes, except that the table with prefix byte
// 0x00 (the meta table) holds the replica's own state and no command may
// write it:
//
//	0x00 "shard"     uint32 big-endian shard id, written on first Open
//	0x00 "applied"   uint64 big-endian index of the last applied log entry
//	0x00 "restoring" present while a Restore runs (value: snapshot index)
//	0x00 "slots"     the owned SlotSet, 32 bytes (replicated)
//	0x00 "move/" id  a MoveRecord (CBOR), id u64 big-endian (replicated)
//	0x00 "hist/" rev the events of revision rev (u64 BE; history.go), local
//	0x00 "histfloor" u64 BE: every event after it is retained, local
//	0x00 "histmark/" index u64 BE: the proposer's time (ms) of an OpCompactHistory, local
//
// # History
//
// Every applied entry that changed user data leaves a history record of
// its events, derived from the Pebble batch records its commands wrote
// (history.go): ReadHistory serves watches. OpCompactHistory, proposed by
// the leader with its clock and retention, drops old records
// deterministically. History is not in snapshots: a restored replica's
// history starts at the snapshot's index.
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
//	then, once per replicated meta key ("move/..." then "slots") and once
//	per key outside the meta table, in ascending key order:
//	+------+----------------+-----+------------------+-------+
//	| 0x00 | uvarint keylen | key | uvarint valuelen | value |      record
//	+------+----------------+-----+------------------+-------+
//	         keylen >= 1, key[0] != 0x00 unless a replicated meta key
//
//	then:
//	+------+----------------------+---------------+
//	| 0x01 | uvarint record count | CRC (4 bytes) |                 end
//	+------+----------------------+---------------+
//	         the CRC covers every byte of the stream before it
//
// The header CRC lets Restore trust the index it reads before deciding to
// skip a snapshot it already holds. Nothing may follow the final CRC. A
// stream without a "slots" record (written before ownership was recorded)
// restores as owning every slot.
package fsm
