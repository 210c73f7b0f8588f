// Package shard maps routing keys to shards through a fixed set of slots.
//
// A routing key (a registry user id, a billing account id, or the routing
// key of a generic kv pair) hashes to one of NumSlots slots: the first byte
// of its 32-byte BLAKE3 digest. A Map assigns every slot to a shard. The
// default map for n shards sends slot s to shard s % n, which is exactly the
// seed's future-sharding formula
//
//	hash = blake3(user_id); shard = hash[0] % num_shards
//
// so a cluster started with DefaultMap places every key where the seed's
// ShardedStore would. Because routing goes through slots, a later map can
// move single slots between shards (rebalancing) without rehashing keys; each
// change bumps Map.Version so replicas can tell which map is newer.
//
// A SlotSet is a set of slots (256 bits), the unit of ownership a shard's
// state machine records and a split or merge moves; it encodes as 32 bytes
// (MarshalBinary, a CBOR byte string) and as text ranges ("0-15,32").
//
// The package is pure: no I/O, no global state. A *Map is a value; treat a
// published map as immutable and Clone it before changing it.
//
// # Example
//
//	m, err := shard.DefaultMap(4)
//	if err != nil {
//		return err
//	}
//	id := m.ShardOf(userID[:]) // shard that owns every key of this user
//
//	next := m.Clone()
//	next.Slots[17] = 3 // move slot 17 to shard 3
//	next.Version++
//	if err := next.Validate(); err != nil {
//		return err
//	}
package shard
