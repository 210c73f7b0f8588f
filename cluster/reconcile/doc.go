// Package reconcile runs the reconciler: a loop on the meta group's leader
// (Reconciler.Run) that each round observes every group (the meta group
// and each shard: its holders' ReplicaStatus, the confirmed leader and its
// Raft configuration; Observe), keeps the loop's memory of gossip (when
// this leader first saw each node down, the liveness of a round), marks
// finished decommissions removed, and carries out the step package
// placement decides for each group (placement.Step: placement updates,
// adding a learner, promoting, removing, moving a leadership off a
// replica to remove) and, when every group is settled, one balancing move
// (placement.BalanceReplicas, BalanceLeaders). The decisions are pure in
// package placement; this package observes and acts (reconcile.go).
//
// It is part of the core: package cluster makes one Reconciler per node
// (New, with a Host that gives it what it needs of the node: the
// committed cluster state, a guarded meta update, the gossip members, the
// local replicas, Admin clients and Raft addresses of peers, its settings
// and logger), starts its loop and joins it on Close; its Status and
// TransferLeader use Observe and Transfer. It may import
// cluster/placement, cluster/gossip, cluster/replica, shard and rpc;
// never cluster or anything above it (cluster's TestImportsOneWay).
//
// Threads: Run runs until its context ends (package cluster joins it on
// Close); Observe and Transfer run on their caller's goroutine (Observe
// asks a group's holders in parallel and waits for them).
package reconcile
