// Package authn authenticates the callers of a swarmkv node: it turns a
// call's credentials (a certificate of the cluster CA, a bearer token, a
// cluster-secret node credential or signed admin request) into an
// Identity, decides whether an identity may use a permission, and writes
// the audit log. It also owns the node's secret files (the cluster
// secret of Auth without TLS, and the admin requests signed with it; the
// gossip keyring is package cluster/gossip's) and the admin API's token requests (CheckTokenRequest,
// TokenInfo; the tokens themselves are cluster state, changed by package
// cluster through the meta group).
//
// Package auth holds the vocabulary (token format, roles, permissions,
// the Authorization header): pure functions a client or the CLI uses too.
// This package is the node side that applies it to live calls, so it
// knows gRPC peers and metadata, HTTP requests, files and the log.
//
// What only the cluster state knows (is node X a member? the token record
// of id Y) is asked through the State interface, which package cluster's
// Node implements; the authenticator holds no cluster state of its own.
// It imports auth, keys, internal/pki, transport (the node credential and
// timed-MAC wire formats), gRPC's credentials, metadata and peer, and the
// standard library; never cluster or anything above it.
//
// Usage, as a node wires it:
//
//	secret, err := authn.LoadClusterSecret(file, dataDir, joins) // Auth without TLS
//	a := authn.New(authn.Config{TLS: tlsOn, Auth: cfg.Auth, Secret: secret, State: st, Log: log})
//	if a.On() {
//		id, msg := a.IdentifyGRPC(ctx, method) // nil, msg: refuse with msg
//		ok, why := a.Allows(id, auth.Perm{Keyspace: auth.KV})
//		a.Audit("grpc", id, method, ok, why)
//	}
package authn
