// Package replica runs one hashicorp/raft group's replica on this node:
// its Raft instance, log and stable store (a group of the node's shared
// raftlog.Store, or a raft-boltdb file of its own), snapshot store and
// Pebble state machine (fsm), and what the node does with it: proposals
// (coalesced into Raft entries, propose.go), linearizable reads (a read
// barrier batched under one leadership check, the node's
// transport.LeaderChecker), the Raft admin operations (admin.go) and the
// pools shard's default pool (defaultpool.go).
//
// It is part of the core: package cluster opens one Replica per group the
// node holds (Open, with a Config cluster fills from its own) and the
// layers above (api, redisfront) use the Replica's exported methods. It
// may import transport, internal/..., fsm, raftlog, shard, keys, records
// and rpc; never cluster or anything above it (cluster's
// TestImportsOneWay).
//
// Threads: raft runs its own goroutines; a Replica adds a leadership
// watcher, a read loop, a proposal loop and one waiter per Raft future it
// waits on. Close joins them all.
package replica
