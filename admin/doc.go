// Package admin serves a node's admin HTTP API on the listener the node
// bound (cluster.Node.HTTPListener): health (/healthz, /readyz), the
// Prometheus metrics (/metrics), the cluster admin routes (/v1/status,
// members, shards, state, tokens), Go profiles (/debug/pprof/) and, with
// Config.Faults, the injected faults (/debug/faults). It owns the routes,
// their JSON, the HTTP server and its timeouts, the Host check of a
// loopback listener (DNS rebinding) and the HTTP auth rules (who may call
// what); the operations themselves and the identification of callers are
// the node's (the Node interface of node.go: Status, JoinNode, CreateToken...; its
// authenticator, Node.Authn: IdentifyHTTP, Allows, Audit).
//
// It may import cluster, auth, auth/authn (and internal helpers); cluster
// never imports it.
// Package server starts it with the node.
//
// Usage:
//
//	n, err := cluster.New(cfg, server.Services)
//	...
//	a := admin.Start(n) // nil without Config.HTTPAddr
//	defer n.Close()
//	defer a.Close()     // before the node
package admin
