// Package redisfront is a node's RESP (Redis protocol) front, the asset
// catalogue's interface (seed 002): the listener and its connections
// (conn.go: bounds on every command as its headers arrive), the commands
// the front answers itself, MULTI/EXEC and WATCH, the routing of a
// command to its shard's leader (the local replica, or the leader's
// internal Redis gRPC service through the Go client) and the front's
// authentication (auth.go: AUTH, client certificates, roles per command).
//
// It owns no state of the cluster: it uses its node through the Node
// interface it declares (node.go: ShardMap, Config, the identity checks
// of its authenticator, Authn, the local replicas) and runs a request on a local leader with
// package api's RedisLocal. It may import cluster, api, client, rpc,
// resp, fsm, keys, shard, auth, auth/authn and internal/retry; the core
// never imports it. A request refused because a slot moved is sent again
// to the new owner once the node's map names it (Front.follow).
// Package server composes it with a node.
//
// Usage:
//
//	f, err := redisfront.Start(node, "127.0.0.1:7104")
//	if err != nil { ... }
//	defer f.Close() // before node.Close
package redisfront
