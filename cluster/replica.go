package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/fsutil"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/raftlog"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// The node's side of its replicas (package cluster/replica runs each):
// the Raft log store they share, and the settings each is opened with.

// historyRetention is the retention the shard leaders propose.
func (c Config) historyRetention() fsm.HistoryRetention {
	var r fsm.HistoryRetention
	if c.HistoryRevisions > 0 {
		r.MaxRevisions = uint64(c.HistoryRevisions)
	}
	if c.HistoryAge > 0 {
		r.MaxAgeMs = c.HistoryAge.Milliseconds()
	}
	return r
}

// replicaConfig is the part of replica id's configuration (a shard, or
// metaShardID) that comes from the node's Config: the caller adds the
// folder, the stream layer, the block cache, the bootstrap voters, the
// OnReady hook and the leadership checker.
func (c Config) replicaConfig(id shard.ID) replica.Config {
	commit := c.CommitTimeout
	if id == metaShardID {
		commit = min(commit, metaCommitTimeout)
	}
	return replica.Config{
		ID:       id,
		LocalID:  c.ID,
		LogStore: c.logStore,
		Raft: replica.RaftSettings{
			HeartbeatTimeout:   c.HeartbeatTimeout,
			ElectionTimeout:    c.ElectionTimeout,
			LeaderLeaseTimeout: c.LeaderLeaseTimeout,
			CommitTimeout:      commit,
			SnapshotThreshold:  c.SnapshotThreshold,
			SnapshotInterval:   c.SnapshotInterval,
			TrailingLogs:       c.TrailingLogs,
		},
		MemTableSize: c.MemTableSize,
		History:      c.historyRetention(),
		HistoryEvery: c.HistoryCompactEvery,
		Limits:       applyLimits,
		Reply:        c.ReplyLimits(),
		Logger:       c.Logger,
		Quiet:        c.quietConfig(id),
	}
}

// quietConfig is replica id's quiet groups setting (nil when off); the
// node adds Notify (its transport.Noticer).
func (c Config) quietConfig(id shard.ID) *replica.QuietConfig {
	if c.QuietAfter <= 0 {
		return nil
	}
	return &replica.QuietConfig{After: c.QuietAfter, Timeout: c.QuietTimeout, Meta: id == metaShardID}
}

// notice answers a peer's quiet notice with the local replica of its
// group (transport.Noticer); a node without one refuses it.
func (n *Node) notice(no transport.Notice) transport.NoticeReply {
	n.mu.RLock()
	r := n.mu.replicas[shard.ID(no.Group)]
	if no.Group == MetaGroup {
		r = n.mu.meta
	}
	n.mu.RUnlock()
	if r == nil {
		return transport.NoticeReply{}
	}
	return r.Notice(no)
}

// openLogStore opens the node's shared Raft log store in
// <data-dir>/raftlog when c.LogStore is "pebble" (nil, nil with "bolt"). A
// data dir written with the other store is refused: a replica that came up
// with an empty log would have lost the entries it acknowledged.
func openLogStore(c Config, cache *pebble.Cache) (*raftlog.Store, error) {
	dir := filepath.Join(c.DataDir, "raftlog")
	if c.LogStore == LogStoreBolt {
		if _, err := os.Stat(dir); err == nil {
			return nil, fmt.Errorf("cluster: %s holds a pebble Raft log store; start with log store %q", dir, LogStorePebble)
		}
		return nil, nil
	}
	if err := fsutil.PrivateDir(dir); err != nil {
		return nil, fmt.Errorf("cluster: raft log store: %w", err)
	}
	s, err := raftlog.Open(raftlog.Options{Dir: dir, Cache: cache, Logger: c.Logger, MinSyncInterval: c.WALMinSyncInterval})
	if err != nil {
		return nil, fmt.Errorf("cluster: raft log store: %w (is another swarmnode using this data dir?)", err)
	}
	return s, nil
}

// dropReplicaLog deletes the Raft log and stable state of shard id's
// replica from the node's shared log store (nothing with LogStore "bolt",
// whose raft.db lives in the replica's folder). The sync loop calls it
// when a replica moves off this node, after closing the replica and
// deleting its folder (a folder missing at open drops the group's stale
// state, so a crash between the two steps is safe).
func (n *Node) dropReplicaLog(id shard.ID) error {
	if n.cfg.logStore == nil {
		return nil
	}
	return n.cfg.logStore.DropGroup(uint32(id))
}

// ApplyLimits are the state machine's apply-time limits (applyLimits):
// every command a validated request becomes passes them.
func ApplyLimits() fsm.Limits { return applyLimits }

// applyLimits are the state machine's apply-time limits. They are the same
// on every node, whatever its configuration (a command accepted by one
// replica and rejected by another would make replicas diverge), and at or
// above anything the API edge accepts (Config.Validate keeps the
// configurable request limits below them). Every replica is opened with
// them (replica.Config.Limits).
var applyLimits = fsm.Limits{
	MaxKeySize:   3 + keys.MaxRoutingKeyLen + maxKeySizeLimit,
	MaxValueSize: maxValueSizeLimit,
	MaxBatchOps:  maxBatchOpsLimit,
}

// shardReady is every shard replica's OnReady hook: the leader of the
// shard that owns the pools namespace in this node's current map ensures
// the default pool (seed 004). The pool record moves with its slot's data;
// a shard that stops owning it gets the state machine's MovedError and
// stops (replica.EnsureDefaultPool).
func (n *Node) shardReady(r *replica.Replica) {
	n.mu.RLock()
	smap := n.mu.smap
	n.mu.RUnlock()
	if smap != nil && smap.ShardOf(poolsRoutingKey) == r.ID() {
		replica.EnsureDefaultPool(r)
	}
}
