package server

import (
	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster"
)

// The node core reads no backup file: a data dir `swarmnode restore`
// seeded comes to it as a seed.Restore through cluster.Config.Seed, which
// the composition sets to package backup's reader of the seed file.
var _ cluster.Seeder = backup.Seeds{}

// withSeeds returns cfg with Seed set to backup.Seeds, unless the caller
// chose one.
func withSeeds(cfg cluster.Config) cluster.Config {
	if cfg.Seed == nil {
		cfg.Seed = backup.Seeds{}
	}
	return cfg
}
