package shard

import (
	"errors"
	"fmt"

	"lukechampine.com/blake3"
)

// NumSlots is the number of slots routing keys hash to. It is fixed: the
// slot of a key is one byte of its hash, and changing NumSlots would move
// almost every key.
const NumSlots = 256

// MaxShards bounds a Map's NumShards (the shard id bound): shard ids are
// below it.
const MaxShards = NumSlots

// ID identifies a shard, below its map's NumShards. Ids need not be dense:
// after a merge an id below NumShards may own no slot (Map.Shards lists
// the ones that own some).
type ID uint32

// Slot is a hash bucket of routing keys, 0..NumSlots-1.
type Slot uint8

// ErrInvalidMap is returned, wrapped with detail, by DefaultMap for a bad
// shard count and by Map.Validate for an inconsistent map.
var ErrInvalidMap = errors.New("shard: invalid map")

// SlotOf returns the slot of routingKey: the first byte of its 32-byte
// BLAKE3 digest, the value the seed's shard_for_user reduces modulo the
// shard count. It does not allocate.
func SlotOf(routingKey []byte) Slot {
	h := blake3.Sum256(routingKey)
	return Slot(h[0])
}

// Map assigns every slot to a shard. The zero Map is invalid; build one with
// DefaultMap, and check hand-made or decoded maps with Validate before use.
// Methods other than Validate assume a valid map.
type Map struct {
	// Version orders maps: every change to NumShards or Slots produces a
	// map with a larger Version. Valid maps have Version >= 1.
	Version uint64
	// NumShards is the shard id bound, 1..MaxShards: every slot's shard
	// is below it (1 + the highest id a split or the bootstrap made). An
	// id below it may own no slot (merged away, or not yet published); use
	// Shards to iterate the shards that own slots.
	NumShards int
	// Slots[s] is the shard that owns slot s.
	Slots [NumSlots]ID
}

// DefaultMap returns the version-1 map for numShards shards in which slot s
// belongs to shard s % numShards, so ShardOf(k) == blake3(k)[0] % numShards,
// the seed's placement. It returns an error wrapping ErrInvalidMap unless
// 1 <= numShards <= MaxShards.
func DefaultMap(numShards int) (*Map, error) {
	if numShards < 1 || numShards > MaxShards {
		return nil, fmt.Errorf("%w: %d shards, want 1..%d", ErrInvalidMap, numShards, MaxShards)
	}
	m := &Map{Version: 1, NumShards: numShards}
	for s := range m.Slots {
		m.Slots[s] = ID(s % numShards)
	}
	return m, nil
}

// Validate returns an error wrapping ErrInvalidMap, naming the first
// problem, unless Version >= 1, 1 <= NumShards <= MaxShards and every slot
// maps to a shard below NumShards. A shard id below NumShards may own no
// slot (elastic shards: ids have holes after merges).
func (m *Map) Validate() error {
	if m == nil {
		return fmt.Errorf("%w: nil", ErrInvalidMap)
	}
	if m.Version < 1 {
		return fmt.Errorf("%w: version %d, want >= 1", ErrInvalidMap, m.Version)
	}
	if m.NumShards < 1 || m.NumShards > MaxShards {
		return fmt.Errorf("%w: %d shards, want 1..%d", ErrInvalidMap, m.NumShards, MaxShards)
	}
	for s, id := range m.Slots {
		if int64(id) >= int64(m.NumShards) {
			return fmt.Errorf("%w: slot %d maps to shard %d, want < %d", ErrInvalidMap, s, id, m.NumShards)
		}
	}
	return nil
}

// Shards returns the distinct shards that own at least one slot, in
// increasing order: the shards a query spanning every shard visits.
func (m *Map) Shards() []ID {
	var owns [MaxShards]bool
	n := 0
	for _, id := range m.Slots {
		if int(id) < MaxShards && !owns[id] {
			owns[id] = true
			n++
		}
	}
	out := make([]ID, 0, n)
	for id, ok := range owns {
		if ok {
			out = append(out, ID(id))
		}
	}
	return out
}

// ShardOf returns the shard that owns routingKey.
func (m *Map) ShardOf(routingKey []byte) ID {
	return m.Slots[SlotOf(routingKey)]
}

// ShardOfSlot returns the shard that owns slot s.
func (m *Map) ShardOfSlot(s Slot) ID {
	return m.Slots[s]
}

// SlotsOf returns the slots shard id owns, in increasing order; it returns
// nil for a shard that owns none.
func (m *Map) SlotsOf(id ID) []Slot {
	var slots []Slot
	for s, owner := range m.Slots {
		if owner == id {
			slots = append(slots, Slot(s))
		}
	}
	return slots
}

// Clone returns a copy of m that shares nothing with it. Clone of nil is nil.
func (m *Map) Clone() *Map {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}
