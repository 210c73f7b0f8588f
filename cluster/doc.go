// Package cluster runs a swarmkv node: gossip discovery (memberlist),
// bootstrap and replica placement, one hashicorp/raft group replica per
// local shard and for the meta group (package cluster/replica runs each;
// all share one TCP port through Mux), the gRPC server
// (the node-to-node Admin service; package api's client services are
// registered on it through New's services argument, services.go) and the
// admin operations (admin.go, tokens.go). The reconciler (on the meta
// leader: observing every group and acting on package placement's
// decisions) is package cluster/reconcile's: the node starts and joins
// its loop, and Status and TransferLeader use its observations
// (reconcile.go). Elastic shards (the slot mover, the pull and
// export of a move's data, the automatic shard policy) are package
// cluster/shardmove's: the node starts its loops and delegates its Admin
// calls and Node methods to it (moves.go). It binds the admin HTTP
// listener, which package admin serves.
//
// It is the core: the gRPC services (api, which also runs the RESP
// front's Redis requests on a local leader) and the fronts above it
// (redisfront, admin; package server composes them with a node) use its
// narrow API (services.go, front.go, admin.go, tokens.go, moves.go, and
// Authn, the authenticator of package auth/authn it builds in auth.go)
// and it never imports them or the Go client (TestImportsOneWay). It may
// import cluster/placement, cluster/gossip, cluster/replica,
// cluster/shardmove, cluster/reconcile, cluster/metrics (its Prometheus registry),
// transport, internal/..., fsm, raftlog, shard, keys, records, rpc, auth,
// auth/authn, secrets and resp.
//
// Usage (package server composes a node with the gRPC services of package
// api and its fronts; cmd/swarmnode is the real composition root):
//
//	node, err := cluster.New(cluster.Config{
//		ID:              "n1",
//		DataDir:         "/var/lib/swarmkv",
//		Join:            []string{"10.0.0.2:7103", "10.0.0.3:7103"},
//		BootstrapExpect: 3, // Shards 0: automatic, one shard per 3 nodes (cluster/shardmove)
//	}, api.Services)
//	if err != nil { ... }
//	defer node.Close()
//	// node.Ready() is nil once every local shard has a leader.
//
// Threads: see docs/architecture.md ("Threads"). Every goroutine a Node
// starts is joined by Close.
package cluster
