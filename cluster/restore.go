package cluster

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"lukechampine.com/blake3"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
)

// Restores: `swarmnode restore` (backup.Seed) leaves a checked copy of a
// backup in an empty data dir as backup.SeedFile. The node's first start
// on that dir (New, finding no cluster.json) consumes it: restoreSeed
// checks the backup all over, writes each shard's replica folder holding
// only a Raft snapshot of the shard's state at its backed-up index, whose
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
// the seed.

// seedRead is how a node reads its seed: everything is checked again (the
// checksums, the records, every token against the rules of token create)
// but the signature, which swarmnode restore (backup.Seed) checked with
// the operator's backup key before it wrote the seed into this owner-only
// data dir: the node holds no backup key, and whoever can write its data
// dir can write its cluster state as well.
var seedRead = backup.ReadOptions{SkipSignature: true, TrustUnsigned: true}

// restoreSeed consumes the data dir's seed, if any (nil, nil without
// one); the caller found no cluster state there.
func (n *Node) restoreSeed() (*State, error) {
	path := filepath.Join(n.cfg.DataDir, backup.SeedFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: restore: %w", err)
	}
	defer f.Close()
	start := time.Now()
	m, err := backup.Verify(f, seedRead)
	if err != nil {
		return nil, fmt.Errorf("cluster: restore from %s: %w (nothing was restored; seed the data dir again with swarmnode restore)", path, err)
	}
	// Replica folders of an interrupted restore.
	for _, dir := range []string{filepath.Join(n.cfg.DataDir, "shards"), n.metaDir()} {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("cluster: restore: %w", err)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := n.seedShards(f, m); err != nil {
		return nil, fmt.Errorf("cluster: restore from %s: %w", path, err)
	}
	st, err := restoredState(m, NodeAddrs{ID: n.cfg.ID, RaftAddr: n.addrs.RaftAddr, GRPCAddr: n.addrs.GRPCAddr,
		HTTPAddr: n.addrs.HTTPAddr, Incarnation: n.inc, Status: StatusActive})
	if err != nil {
		return nil, fmt.Errorf("cluster: restore from %s: %w", path, err)
	}
	if err := saveState(n.cfg.DataDir, st); err != nil {
		return nil, err
	}
	n.removeSeed()
	n.log.Info("restored a backup: this node starts a new cluster alone; join the others with `swarmnode join`",
		"cluster", st.ClusterID, "from_cluster", m.ClusterID, "backup_created", m.Created, "shards", len(m.Shards),
		"records", m.Records(), "map_version", m.MapVersion, "tokens", len(m.Tokens), "took", time.Since(start).Round(time.Millisecond))
	return st, nil
}

// removeSeed deletes a consumed seed (its cluster state is recorded).
func (n *Node) removeSeed() {
	path := filepath.Join(n.cfg.DataDir, backup.SeedFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.log.Warn("restore: cannot remove the consumed seed", "path", path, "err", err)
	}
}

// seedShards writes every section of the backup in r (checked again as it
// is read) as a replica folder with its snapshot.
func (n *Node) seedShards(r io.Reader, m *backup.Manifest) error {
	br, err := backup.NewReader(r, seedRead)
	if err != nil {
		return err
	}
	self := raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.ID), Address: raft.ServerAddress(n.addrs.RaftAddr)}
	for i := 0; ; i++ {
		s, err := br.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if i >= len(m.Shards) || m.Shards[i].Shard != s.Shard {
			return fmt.Errorf("%w: the file changed since it was checked", backup.ErrCorrupt)
		}
		if err := n.seedShard(s, m.Shards[i].Incarnation, self); err != nil {
			return fmt.Errorf("shard %d: %w", s.Shard, err)
		}
	}
}

func (n *Node) seedShard(s *backup.Section, incarnation uint64, self raft.Server) error {
	index := max(s.Index, 1) // a Raft snapshot has an index
	sink, err := replica.Seed(n.shardDir(s.Shard), s.Shard, incarnation, self, index)
	if err != nil {
		return err
	}
	w := fsm.NewSnapshotWriter(sink, uint32(s.Shard), index)
	for {
		k, v, err := s.Next()
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

// restoredState is the state of a new cluster of node self alone with the
// backup's shard map, groups, tokens and settings. Its id is new: derived
// from the source's, the backup's time and self's data dir incarnation,
// so it differs from the source's and from any other restore's.
func restoredState(m *backup.Manifest, self NodeAddrs) (*State, error) {
	smap, err := m.Map()
	if err != nil {
		return nil, err
	}
	h := blake3.Sum256(fmt.Appendf(nil, "restore/%s/%s/%s/%s", m.ClusterID, m.Created.Format(time.RFC3339Nano), self.ID, self.Incarnation))
	st := &State{
		FormatVersion:     stateFormat,
		ClusterID:         hex.EncodeToString(h[:8]),
		ReplicationFactor: m.ReplicationFactor,
		MetaVoters:        []string{self.ID},
		MapVersion:        smap.Version,
		NumShards:         smap.NumShards,
		Slots:             smap.Slots[:],
		Nodes:             []NodeAddrs{self},
		Tokens:            m.Tokens,
		NextMoveID:        m.NextMoveID,
		Policy:            m.Policy,
	}
	for _, s := range m.Shards {
		st.Shards = append(st.Shards, placement.Placement{Shard: s.Shard, Voters: []string{self.ID},
			Incarnation: s.Incarnation, StartsEmpty: s.StartsEmpty})
	}
	for _, id := range smap.Shards() {
		if st.Placement(id) == nil {
			return nil, fmt.Errorf("%w: shard %d owns slots but has no section", backup.ErrCorrupt, id)
		}
	}
	if st.ReplicationFactor < 1 {
		st.ReplicationFactor = 1
	}
	return st, nil
}
