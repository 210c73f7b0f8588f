// Package etcdfront serves etcd's v3 gRPC API (the services generated in
// go.etcd.io/etcd/api/v3/etcdserverpb, no copied protos) on its own
// listener, so etcdctl and the official Go client (go.etcd.io/etcd/client/v3)
// work against a swarmkv node unchanged (issue 40; docs/etcd.md has the
// compatibility table).
//
// An etcd keyspace is a namespace stored under one routing key,
// keys.EtcdRoutingKey(ns) = "etcd/"+ns (one slot, one shard, one revision
// sequence; fsm/etcd.go). A request's namespace is the front's
// Config.Namespace, or the one its gRPC metadata names (MetadataNamespace).
// Writes (Put, DeleteRange, Txn, Compact) are proposed to the namespace's
// shard on this node as fsm.OpEtcdTxn and fsm.OpEtcdCompact; Range reads
// the shard's state through the read seam (replica.Read, fenced on the
// namespace's slot) after the linearizable read barrier, or without it for
// a serializable Range. A node that does not lead the namespace's shard
// answers codes.Unavailable, naming the leader: the official client
// retries a Range on its next endpoint and does not retry a write (etcd's
// own rule for Unavailable), so point clients at every node's etcd
// address; forwarding writes to the leader is a later slice. A txn may
// nest txns in its branches (etcd semantics, fsm/cmd_etcd_txn.go).
//
// Every method goes through the node's one authorization table
// (api.Guard, api/auth.go's grpcPerms: keyspace "etcd", read or write);
// Auth/Authenticate takes a swarmkv token as the password and returns it
// as the etcd token, which the client then sends on every call (metadata
// "token", read as a bearer token). Methods not served yet (Lease, the
// cluster and auth administration) answer codes.Unimplemented after the
// guard.
//
// Watch (watch.go) is served by the local replica of the namespace's
// shard, leader or follower, from the namespace's history, woken by the
// state machine after each commit that gives the namespace a revision
// (fsm.FSM.EtcdChanged); the stream ends with codes.Unavailable when the
// namespace moves or the replica stops, and the official client resumes
// its watchers from their last revisions.
//
// Threads: grpc-go's serving goroutines; per Watch stream a receiving and
// a sending goroutine and one per watcher (watch.go); Close stops the
// server (in-flight calls are cancelled) and returns after they have
// exited.
//
// Usage (package server does this with serve --etcd-addr):
//
//	f, err := etcdfront.Start(node, etcdfront.Config{Addr: "127.0.0.1:2379"})
//	if err != nil { ... }
//	defer f.Close()
package etcdfront
