package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/seed"
	"github.com/swarmkv/swarmkv/shard"
)

type noSeeds struct{}

func (noSeeds) Open(string) (*seed.Restore, error) { return nil, nil }
func (noSeeds) Remove(string) error                { return nil }

// TestWithSeeds: a composed node reads backup's seed file unless its
// config chose another Seeder.
func TestWithSeeds(t *testing.T) {
	if _, ok := withSeeds(cluster.Config{}).Seed.(backup.Seeds); !ok {
		t.Fatal("no backup.Seeds by default")
	}
	if _, ok := withSeeds(cluster.Config{Seed: noSeeds{}}).Seed.(noSeeds); !ok {
		t.Fatal("the config's Seeder was replaced")
	}
}

// TestServerRestoresSeed: a data dir backup.Seed seeded (as swarmnode
// restore does) starts, through New, a new cluster with the backup's
// tokens, and its seed is removed.
func TestServerRestoresSeed(t *testing.T) {
	keys, err := backup.ParseKeys([]byte("0123456789abcdef0123456789abcdef-server-tests"))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := shard.DefaultMap(1)
	tok := placement.Token{ID: "0123456789abcdef", Name: "ops", Roles: []string{"admin"},
		Hash: strings.Repeat("ab", 32), Created: time.Unix(1, 0).UTC()}
	st := &placement.State{FormatVersion: placement.StateFormat, ClusterID: "src", ReplicationFactor: 1,
		MapVersion: m.Version, NumShards: m.NumShards, Slots: m.Slots[:],
		Shards: []placement.Placement{{Shard: 0, Voters: []string{"n1"}}}, Tokens: []placement.Token{tok}}
	var b bytes.Buffer
	w, err := backup.NewWriter(&b, keys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Section(0, 5).Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(backup.ManifestOf(st, time.Unix(100, 0))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "b.swkvbak")
	os.WriteFile(file, b.Bytes(), 0o600)
	dir := filepath.Join(t.TempDir(), "n1")
	if _, err := backup.Seed(file, dir, backup.ReadOptions{Keys: keys}); err != nil {
		t.Fatal(err)
	}
	s, err := New(cluster.Config{ID: "n1", DataDir: dir, RaftAddr: addr(t), GRPCAddr: addr(t), GossipAddr: addr(t),
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, GossipProfile: "local",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _ := s.Node().LocalState()
	if got == nil || got.ClusterID == "src" || len(got.Tokens) != 1 || got.Tokens[0].ID != tok.ID {
		t.Fatalf("restored state %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, backup.SeedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the seed is still there: %v", err)
	}
}
