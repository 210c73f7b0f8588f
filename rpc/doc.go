// Package rpc holds swarmkv's gRPC API: the .proto definitions in this
// directory and the Go code generated from them (run `make proto` after
// editing a .proto file; the generated files are committed).
//
// Services:
//   - KV (kvapi.proto): Get, Put, Delete, Scan and guarded Batch, scoped by a
//     routing key.
//   - Cluster (cluster.proto): the shard map with replicas and leader hints.
//   - Registry (registry.proto) and Billing (billing.proto): the typed
//     stores of seeds 000 and 001; convert.go maps their messages to and
//     from package records.
//   - Pipeline (pipeline.proto): the unary calls of the services above as
//     items of one long-lived stream; package client uses it by default.
//
// Errors travel as gRPC status codes; errors.proto defines the typed details
// (NotLeader, RetryInfo, ...) attached to them. status.go is the one table
// of error kinds: code, detail, admin HTTP status and retry rule. A node maps
// its Go errors to a kind (cluster.ErrorKind), package client reads a
// status back to a kind (KindOf) and from it to its Go errors.
//
// May import records, keys, resp, the standard library, gRPC and protobuf.
package rpc
