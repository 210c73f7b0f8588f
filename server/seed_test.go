package server

import (
	"testing"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/seed"
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
