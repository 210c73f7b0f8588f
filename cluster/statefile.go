package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/internal/fsutil"
)

// The cluster state's types are package placement's (pure data and
// decisions); the names stay here for the code of this package.
type (
	State     = placement.State
	NodeAddrs = placement.NodeAddrs
	Placement = placement.Placement
	Token     = placement.Token
)

// Membership statuses of a node in the cluster state.
const (
	StatusActive  = placement.StatusActive
	StatusLeaving = placement.StatusLeaving
	StatusRemoved = placement.StatusRemoved
)

const (
	stateFile   = "cluster.json"
	stateFormat = placement.StateFormat
)

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
	if s.FormatVersion != stateFormat {
		return nil, fmt.Errorf("cluster: %s: unsupported format version %d (this swarmnode reads %d; the data dir was made by another release)", stateFile, s.FormatVersion, stateFormat)
	}
	if _, err := s.Map(); err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", stateFile, err)
	}
	return &s, nil
}

// saveState writes s to dir/cluster.json atomically and durably.
func saveState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileDurable(dir, stateFile, append(b, '\n'))
}
