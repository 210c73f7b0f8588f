package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/swarmkv/swarmkv/shard"
)

// NodeAddrs are the addresses a node announces, keyed by its stable id.
type NodeAddrs struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	GRPCAddr   string `json:"grpc_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
	GossipAddr string `json:"gossip_addr,omitempty"`
}

// Placement lists the voters of one shard, by node id.
type Placement struct {
	Shard  shard.ID `json:"shard"`
	Voters []string `json:"voters"`
}

// State is the node's persisted view of the cluster, written to
// <data-dir>/cluster.json when the cluster is bootstrapped and read back on
// restart so that a node never bootstraps twice.
type State struct {
	// FormatVersion of this file; currently 1.
	FormatVersion int `json:"format_version"`
	// ClusterID is derived from the bootstrap members and shard count.
	ClusterID string `json:"cluster_id"`
	// MapVersion and Slots are the shard map (Slots[s] = shard of slot s).
	MapVersion uint64      `json:"map_version"`
	NumShards  int         `json:"num_shards"`
	Slots      []shard.ID  `json:"slots"`
	Shards     []Placement `json:"shards"`
	Nodes      []NodeAddrs `json:"nodes"`
	// Bootstrapped is set once every local replica has been bootstrapped;
	// after that a replica with empty Raft state is never bootstrapped
	// again (it waits for its leader to send it the log).
	Bootstrapped bool `json:"bootstrapped"`
}

const stateFile = "cluster.json"

// Map returns the shard map recorded in s.
func (s *State) Map() (*shard.Map, error) {
	if len(s.Slots) != shard.NumSlots {
		return nil, fmt.Errorf("%w: %d slots in %s", shard.ErrInvalidMap, len(s.Slots), stateFile)
	}
	m := &shard.Map{Version: s.MapVersion, NumShards: s.NumShards}
	copy(m.Slots[:], s.Slots)
	return m, m.Validate()
}

// Voters returns the voters of shard id, or nil.
func (s *State) Voters(id shard.ID) []string {
	for _, p := range s.Shards {
		if p.Shard == id {
			return p.Voters
		}
	}
	return nil
}

// Node returns the recorded addresses of a node.
func (s *State) Node(id string) (NodeAddrs, bool) {
	for _, a := range s.Nodes {
		if a.ID == id {
			return a, true
		}
	}
	return NodeAddrs{}, false
}

// Place assigns each of numShards shards k = min(rf, len(nodes)) voters,
// dealt round-robin over the nodes sorted by id: replica j of shard s goes
// to node (s*k + j) mod n. The shards*k replicas form one continuous
// round-robin, so every node holds the same number of replicas (±1), and
// the k replicas of a shard are k consecutive nodes, so no node holds two
// replicas of one shard. With fewer than rf nodes every node holds
// every shard. Deterministic: every node computes the same placement.
func Place(nodeIDs []string, numShards, rf int) []Placement {
	ids := slices.Clone(nodeIDs)
	slices.Sort(ids)
	n := len(ids)
	k := min(rf, n)
	out := make([]Placement, numShards)
	for s := range numShards {
		v := make([]string, k)
		for i := range k {
			v[i] = ids[(s*k+i)%n]
		}
		out[s] = Placement{Shard: shard.ID(s), Voters: v}
	}
	return out
}

// loadState reads dir/cluster.json; it returns (nil, nil) when absent.
func loadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", stateFile, err)
	}
	if s.FormatVersion != 1 {
		return nil, fmt.Errorf("cluster: %s: unsupported format version %d", stateFile, s.FormatVersion)
	}
	if _, err := s.Map(); err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", stateFile, err)
	}
	return &s, nil
}

// saveState writes s atomically and durably: temp file, fsync, rename,
// fsync of the directory.
func saveState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
