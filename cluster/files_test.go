package cluster

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/swarmkv/swarmkv/shard"
)

// TestDataDirPermissions: a node makes its data dir owner-only (an existing
// one too), and the dirs it creates in it (raft log store, meta and shard
// replicas) are 0700 and its state files 0600, so no other user reaches the
// cluster state, the Raft logs or the stores.
func TestDataDirPermissions(t *testing.T) {
	tc := newTestCluster(t, 1, 2, func(c *Config) {
		if err := os.MkdirAll(c.DataDir, 0o755); err != nil { // as an operator may have made it
			t.Fatal(err)
		}
	})
	n := tc.nodes[0]
	dir := tc.cfgs[0].DataDir
	want := map[string]fs.FileMode{
		dir:                                 0o700 | fs.ModeDir,
		filepath.Join(dir, "raftlog"):       0o700 | fs.ModeDir,
		n.metaDir():                         0o700 | fs.ModeDir,
		n.shardDir(shard.ID(0)):             0o700 | fs.ModeDir,
		filepath.Join(dir, stateFile):       0o600,
		filepath.Join(dir, incarnationFile): 0o600,
	}
	for path, m := range want {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != m {
			t.Errorf("%s: mode %v, want %v", path, st.Mode(), m)
		}
	}
}
