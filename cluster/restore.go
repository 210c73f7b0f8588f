package cluster

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"lukechampine.com/blake3"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/cluster/seed"
	"github.com/swarmkv/swarmkv/fsm"
)

// Restores: `swarmnode restore` (backup.Seed) leaves a checked copy of a
// backup in an empty data dir. The node's first start on that dir (New,
// finding no cluster.json) consumes it through Config.Seed (server sets
// backup.Seeds, which reads the file: the core reads no backup file and
// imports no backup code): restoreSeed gets the restore, checked all over
// (seed.Restore), writes each shard's replica folder holding only a Raft
// snapshot of the shard's state at its backed-up index, whose
// configuration is this node alone (replica.Seed), and records the state
// of a new cluster (cluster.json): a new cluster id, this node its only
// member and meta voter, the backup's shard map, groups (incarnations
// kept), replication factor, tokens, shard policy and next move id. Then
// New adopts it as a bootstrap: the meta group is bootstrapped and
// commits that state; each shard's Raft restores its snapshot into the
// state machine and elects this node. Other nodes join with `swarmnode
// join` as in any cluster, and the reconciler gives them replicas, which
// receive the snapshot. Writing cluster.json is the commit point: an
// interrupted restore (no cluster.json) is started over at the next start
// (the replica folders it left are deleted first), a finished one removes
// the seed (Seeder.Remove).

// Seeder finds the restore a data dir was seeded with (Config.Seed):
// package backup's Seeds reads `swarmnode restore`'s seed file.
type Seeder interface {
	// Open returns dataDir's restore, checked all over (nil, nil when
	// dataDir holds none). Its errors name the seed.
	Open(dataDir string) (*seed.Restore, error)
	// Remove deletes dataDir's consumed seed (its cluster state is
	// recorded); no seed is not an error.
	Remove(dataDir string) error
}

// restoreSeed consumes the data dir's seed, if any (nil, nil without
// one, or without Config.Seed); the caller found no cluster state there.
func (n *Node) restoreSeed() (*State, error) {
	if n.cfg.Seed == nil {
		return nil, nil
	}
	start := time.Now()
	r, err := n.cfg.Seed.Open(n.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("cluster: restore: %w (nothing was restored; seed the data dir again with swarmnode restore)", err)
	}
	if r == nil {
		return nil, nil
	}
	// Replica folders of an interrupted restore.
	for _, dir := range []string{filepath.Join(n.cfg.DataDir, "shards"), n.metaDir()} {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("cluster: restore: %w", err)
		}
	}
	if err := n.seedShards(r); err != nil {
		return nil, fmt.Errorf("cluster: restore from %s: %w", r.Source, err)
	}
	st, err := restoredState(r, NodeAddrs{ID: n.cfg.ID, RaftAddr: n.addrs.RaftAddr, GRPCAddr: n.addrs.GRPCAddr,
		HTTPAddr: n.addrs.HTTPAddr, Incarnation: n.inc, Status: StatusActive})
	if err != nil {
		return nil, fmt.Errorf("cluster: restore from %s: %w", r.Source, err)
	}
	if err := saveState(n.cfg.DataDir, st); err != nil {
		return nil, err
	}
	n.removeSeed()
	n.log.Info("restored a backup: this node starts a new cluster alone; join the others with `swarmnode join`",
		"cluster", st.ClusterID, "from_cluster", r.ClusterID, "backup_created", r.Created, "shards", len(r.Shards),
		"records", r.Records(), "map_version", r.Map.Version, "tokens", len(r.Tokens), "took", time.Since(start).Round(time.Millisecond))
	return st, nil
}

// removeSeed deletes a consumed seed (its cluster state is recorded).
func (n *Node) removeSeed() {
	if n.cfg.Seed == nil {
		return
	}
	if err := n.cfg.Seed.Remove(n.cfg.DataDir); err != nil {
		n.log.Warn("restore: cannot remove the consumed seed", "err", err)
	}
}

// seedShards writes every shard of r (checked again as it is read) as a
// replica folder with its snapshot.
func (n *Node) seedShards(r *seed.Restore) error {
	self := raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.ID), Address: raft.ServerAddress(n.addrs.RaftAddr)}
	i := 0
	err := r.Read(func(s seed.Shard, next func() ([]byte, []byte, error)) error {
		if i >= len(r.Shards) || r.Shards[i].ID != s.ID {
			return fmt.Errorf("shard %d: not the restore's shard %d", s.ID, i)
		}
		i++
		if err := n.seedShard(s, next, self); err != nil {
			return fmt.Errorf("shard %d: %w", s.ID, err)
		}
		return nil
	})
	if err == nil && i != len(r.Shards) {
		err = fmt.Errorf("%d shards read of %d", i, len(r.Shards))
	}
	return err
}

func (n *Node) seedShard(s seed.Shard, next func() ([]byte, []byte, error), self raft.Server) error {
	index := max(s.Index, 1) // a Raft snapshot has an index
	sink, err := replica.Seed(n.shardDir(s.ID), s.ID, s.Incarnation, self, index)
	if err != nil {
		return err
	}
	w := fsm.NewSnapshotWriter(sink, uint32(s.ID), index)
	for {
		k, v, err := next()
		if err == io.EOF {
			break
		}
		if err == nil {
			err = w.Record(k, v)
		}
		if err != nil {
			_ = sink.Cancel()
			return err
		}
	}
	if err := w.Finish(); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// errBadRestore is a restore whose facts the node refuses (a Seeder
// checked them; the node checks again what it relies on).
var errBadRestore = errors.New("invalid restore")

// restoredState is the state of a new cluster of node self alone with the
// restore's shard map, groups, tokens and settings. Its id is new: derived
// from the source's, the backup's time and self's data dir incarnation,
// so it differs from the source's and from any other restore's.
func restoredState(r *seed.Restore, self NodeAddrs) (*State, error) {
	if r.Map == nil {
		return nil, fmt.Errorf("%w: no shard map", errBadRestore)
	}
	if err := r.Map.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRestore, err)
	}
	smap := r.Map
	h := blake3.Sum256(fmt.Appendf(nil, "restore/%s/%s/%s/%s", r.ClusterID, r.Created.Format(time.RFC3339Nano), self.ID, self.Incarnation))
	st := &State{
		FormatVersion:     stateFormat,
		ClusterID:         hex.EncodeToString(h[:8]),
		ReplicationFactor: r.ReplicationFactor,
		MetaVoters:        []string{self.ID},
		MapVersion:        smap.Version,
		NumShards:         smap.NumShards,
		Slots:             smap.Slots[:],
		Nodes:             []NodeAddrs{self},
		Tokens:            r.Tokens,
		NextMoveID:        r.NextMoveID,
		Policy:            r.Policy,
	}
	for _, s := range r.Shards {
		st.Shards = append(st.Shards, placement.Placement{Shard: s.ID, Voters: []string{self.ID},
			Incarnation: s.Incarnation, StartsEmpty: s.StartsEmpty})
	}
	for _, id := range smap.Shards() {
		if st.Placement(id) == nil {
			return nil, fmt.Errorf("%w: shard %d owns slots but has no group", errBadRestore, id)
		}
	}
	if st.ReplicationFactor < 1 {
		st.ReplicationFactor = 1
	}
	return st, nil
}
