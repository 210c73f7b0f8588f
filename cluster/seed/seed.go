// Package seed is what a restore hands the node core: the facts of the
// cluster a backup holds (Restore) and a stream of its shards' states.
// Package backup reads its seed file into one (backup.Seeds); package
// cluster consumes it at a node's first start (cluster.Config.Seed), so
// the core reads no backup file and imports no backup code. It holds
// types only and imports shard and cluster/placement.
//
// Usage (the consumer's side):
//
//	r, err := seeds.Open(dataDir) // nil, nil: no restore
//	err = r.Read(func(s seed.Shard, next func() (k, v []byte, err error)) error {
//		for { k, v, err := next(); if err == io.EOF { return nil } ... }
//	})
package seed

import (
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// Restore is a checked backup to start a new cluster from: the source
// cluster's facts a new cluster keeps, its groups, and Read, which
// streams the shards' states.
type Restore struct {
	// Source names where the restore is read from (the seed file's
	// path), for messages.
	Source string
	// ClusterID is the source cluster's id; Created is when the backup
	// was made. The new cluster's id is derived from both.
	ClusterID string
	Created   time.Time
	// ReplicationFactor, Map, NextMoveID, Policy (nil: none) and Tokens
	// (with their secrets' SHA-256) are the source's cluster state
	// (placement.State's fields of those names).
	ReplicationFactor int
	Map               *shard.Map
	NextMoveID        uint64
	Policy            *placement.ShardPolicy
	Tokens            []placement.Token
	// Shards are the groups, in ascending shard order.
	Shards []Shard
	// Read streams the shards' states in the order of Shards, checking
	// them again as it reads: it calls fn with each shard (Index: the
	// committed log index its state is exact at) and next, which returns
	// its records in key order (valid until the following call), then
	// io.EOF. It returns fn's first error, or an error if the source
	// changed since it was checked.
	Read func(fn func(s Shard, next func() (key, value []byte, err error)) error) error
}

// Shard is one group of a Restore.
type Shard struct {
	ID shard.ID
	// Incarnation and StartsEmpty are the group's (placement.Placement).
	Incarnation uint64
	StartsEmpty bool
	// Index is the committed log index the shard's state is exact at;
	// Records is how many records it holds.
	Index   uint64
	Records uint64
}

// Records returns the records of every shard.
func (r *Restore) Records() uint64 {
	var n uint64
	for _, s := range r.Shards {
		n += s.Records
	}
	return n
}
