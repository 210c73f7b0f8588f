// Package backup owns the swarmkv backup file: its format (the layout
// below), a writer, a reader that checks everything, taking a backup of a
// running cluster through the admin HTTP API of any member (Save, over a
// Source: HTTPSource) and seeding a data dir with a verified backup
// (Seed), which the node's first start consumes: Seeds reads the seed
// into a cluster/seed.Restore for package cluster (cluster.Config.Seed,
// set by package server), which reads no backup file itself.
//
// Usage:
//
//	keys, err := backup.LoadKeys("backup.key") // the operator's key file (MakeKeyFile)
//	src := &backup.HTTPSource{Client: http.DefaultClient, BaseURL: "http://127.0.0.1:7102"}
//	m, err := backup.Save(ctx, src, "cluster.swkvbak", backup.Options{Keys: keys})
//	m, err = backup.Verify(f, backup.ReadOptions{Keys: keys}) // no cluster needed
//	m, err = backup.Seed("cluster.swkvbak", "/var/lib/swarmkv", backup.ReadOptions{Keys: keys}) // then: swarmnode serve --data-dir ...
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
//	file      = header section* manifest signature
//	header    = "SWKVBKUP" | format version u32 (2)              (12 bytes)
//	section   = 'S' | shard u32 | index u64 | record* | 'E' | records u64 | sha256 [32]
//	record    = 'R' | key length uvarint | key | value length uvarint | value
//	manifest  = 'M' | length u32 | manifest JSON [length] | sha256 [32]
//	signature = 'G' | key id [8] | HMAC-SHA256(key, "swarmkv backup signature" 0 | format version u32 | manifest's sha256) [32]
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
// byte of the file before it (the whole-file checksum). The signature
// follows; nothing follows it. The reader checks all of it: magic,
// version (a newer one is ErrNewerFormat), framing, lengths, key order,
// each record, each checksum, the manifest against the sections, every
// token against the rules of token create (CheckToken; ErrBadToken), the
// signature, and the end of the file; any shortfall is ErrTruncated, a
// signature that does not verify ErrSignature, anything else ErrCorrupt.
//
// # Signature
//
// The checksums find damage, not forgery: anyone can recompute them (the
// attack of issue 37: a file rewritten with this package's writer, an
// admin token planted, verified and restored). So the writer signs the
// whole-file checksum, which covers every byte before it (the header,
// each section with its checksum, the manifest with each section's
// checksum and the tokens), with HMAC-SHA256 under the first key of the
// operator's backup key file (Keys: one key a line, at least 32 bytes,
// owner-only mode); the key id is the first 8 bytes of SHA-256("swarmkv
// backup key id" 0 key), so the reader picks the key among its own
// without the file revealing it. A key file with several keys verifies a
// file signed by any of them: rotation is putting the new key first. The
// command that writes the file signs it (not the nodes, which hold no
// backup key: the sections come from them over the authenticated admin
// API). A file of format version 1 (before signatures) is ErrUnsigned
// unless ReadOptions.TrustUnsigned; a signed file without a key or with
// another key is ErrSignature.
//
// Bot-token ciphertexts (seed 004) are records of their shard like any
// other: they come back as they were, sealed under the key ring the
// operator keeps (secrets), which is not in the file.
package backup
