// Package backup owns the swarmkv backup file: its format (the layout
// below), a writer, a reader that checks everything, taking a backup of a
// running cluster through the admin HTTP API of any member (Save, over a
// Source: HTTPSource) and seeding a data dir with a verified backup
// (Seed), which package cluster consumes on the node's first start.
//
// Usage:
//
//	src := &backup.HTTPSource{Client: http.DefaultClient, BaseURL: "http://127.0.0.1:7102"}
//	m, err := backup.Save(ctx, src, "cluster.swkvbak", backup.Options{})
//	m, err = backup.Verify(f)                           // no cluster needed
//	m, err = backup.Seed("cluster.swkvbak", "/var/lib/swarmkv") // then: swarmnode serve --data-dir ...
//
// # Consistency
//
// Each shard is copied from its leader, after a read barrier, from one
// Pebble snapshot: its records are exactly the shard's state at one
// committed log index (its section's index), a prefix of its log. Shards
// are copied one after another, so their indexes are not one point in
// time across the cluster: a write acknowledged by a shard already copied
// is missing while a later write to a shard copied after it is present.
// Since no command spans two shards (every command of a store touches the
// keys of one routing key, hence one slot, hence one shard), every shard
// holds only whole commands, and what one user's data looks like is
// exactly what it was at that shard's index. The only operations that
// span shards are slot moves (split, merge): Save refuses to start while
// one is in progress and fails if one was planned, or the shard map
// changed, while it ran.
//
// # File layout
//
// All integers are big-endian; uvarints are encoding/binary's, in their
// shortest form.
//
//	file     = header section* manifest
//	header   = "SWKVBKUP" | format version u32                  (12 bytes)
//	section  = 'S' | shard u32 | index u64 | record* | 'E' | records u64 | sha256 [32]
//	record   = 'R' | key length uvarint | key | value length uvarint | value
//	manifest = 'M' | length u32 | manifest JSON [length] | sha256 [32]
//
// A section holds one shard's state at its index: every record a
// snapshot of the shard's state machine holds (package fsm: its
// replicated meta records, then every table), keys strictly ascending,
// keys of 1 B to 1 MiB, values up to 64 MiB (fsm.CheckSnapshotRecord);
// its sha256 is over the section's bytes from 'S' through the record
// count. Sections come in ascending shard order, one per shard of the
// cluster state (the groups in its placement). The manifest (Manifest)
// names the format version, the source cluster, its shard map (version,
// slots), what a restore needs of the cluster state (replication factor,
// tokens with their secrets' hashes, the shard policy, the next move id,
// each shard's incarnation) and, per shard, the index, record count, key
// and value bytes and the section's sha256; its own sha256 is over every
// byte of the file before it (the whole-file checksum). Nothing follows
// it. The reader checks all of it: magic, version (a newer one is
// ErrNewerFormat), framing, lengths, key order, each record, each
// checksum, the manifest against the sections, and the end of the file;
// any shortfall is ErrTruncated, anything else ErrCorrupt.
//
// Bot-token ciphertexts (seed 004) are records of their shard like any
// other: they come back as they were, sealed under the key ring the
// operator keeps (secrets), which is not in the file.
package backup
