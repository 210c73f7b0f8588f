package shard_test

import (
	"fmt"

	"github.com/swarmkv/swarmkv/shard"
)

func Example() {
	m, err := shard.DefaultMap(4)
	if err != nil {
		panic(err)
	}
	key := []byte("user-1")
	fmt.Println("slot", shard.SlotOf(key), "shard", m.ShardOf(key))

	// Move the key's slot to shard 0 in a new version of the map.
	next := m.Clone()
	next.Slots[shard.SlotOf(key)] = 0
	next.Version++
	fmt.Println("valid:", next.Validate() == nil, "version", next.Version, "shard", next.ShardOf(key))

	// Output:
	// slot 157 shard 1
	// valid: true version 2 shard 0
}
