// Package shardmove runs the cluster half of elastic shards: the mover,
// which carries a planned split or merge (placement.PlanSplit, PlanMerge)
// through its phases from the meta leader (mover.go); the pull a target
// shard's leader runs (the source's export stream, the ingest and the
// adoption) and the export a source's replica serves, with the other
// Admin calls of a move (admin.go); and the automatic shard policy, which
// plans the next split or merge (policy.go).
//
// It is part of the core: package cluster makes one Mover per node (New,
// with a Host that gives it what it needs of the node: the committed
// cluster state, a guarded meta update, the local replicas, Admin clients,
// its settings and test hooks), starts its loops (RunMover, RunPolicy)
// and delegates the Admin gRPC handlers and its Node methods (SplitShard,
// MergeShards, CancelMove, Moves, ShardPolicy, SetShardPolicy) to it. It
// may import cluster/placement, cluster/replica, fsm, shard and rpc;
// never cluster or anything above it (cluster's TestImportsOneWay).
//
// Threads: RunMover and RunPolicy run until their context ends (package
// cluster joins them on Close); the Admin handlers run on the gRPC
// server's goroutines.
package shardmove
