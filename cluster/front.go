package cluster

import (
	"crypto/tls"
	"log/slog"
	"net"

	"github.com/swarmkv/swarmkv/shard"
)

// The API the fronts above the core use (redisfront, admin, and the
// composition in package server): the node's settings and identity, its
// shard map, the admin HTTP listener and metrics, and the checks of
// callers (Authn: package auth/authn's Authenticator, built in auth.go).
// The admin operations are in admin.go and tokens.go. The fronts never
// reach into a Node's fields.

// Config returns the node's configuration, defaults applied. A front
// reads it once when it starts.
func (n *Node) Config() Config { return n.cfg }

// Logger returns the node's logger (with its "node" attribute).
func (n *Node) Logger() *slog.Logger { return n.log }

// ShardMap returns the current shard map, nil before the cluster is
// bootstrapped. The map is never changed once published: the sync loop
// replaces it.
func (n *Node) ShardMap() *shard.Map {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.smap
}

// ServerTLS returns the TLS configuration of the node's client-facing
// listeners (any client certificate of the cluster CA is verified if
// given), nil without TLS.
func (n *Node) ServerTLS() *tls.Config {
	if n.tls == nil {
		return nil
	}
	return n.tls.ServerConfig(false)
}

// PeerTLS returns the TLS configuration with which the node dials other
// nodes (its own node certificate: full access), nil without TLS.
func (n *Node) PeerTLS() *tls.Config {
	if n.tls == nil {
		return nil
	}
	return n.tls.PeerConfig()
}

// HTTPListener hands over the admin HTTP listener (Config.HTTPAddr), bound
// by New (its address is gossiped; connection caps applied), to the one
// who serves and closes it (package admin). It returns nil without
// Config.HTTPAddr and on every call after the first. A listener never
// taken is closed by Close.
func (n *Node) HTTPListener() net.Listener {
	return n.takeHTTPListener()
}

func (n *Node) takeHTTPListener() net.Listener {
	n.httpLn.Lock()
	defer n.httpLn.Unlock()
	ln := n.httpLn.ln
	n.httpLn.ln = nil
	return ln
}

// ErrMetaNotLeader is returned by the meta group's changes (CreateToken,
// RevokeToken) on a node that does not lead the meta group: the caller
// runs them on the leader (MetaLeader).
var ErrMetaNotLeader = errMetaNotLeader

// ErrNotBootstrapped is returned by calls that need the shard map before
// the cluster has one.
var ErrNotBootstrapped = errNotBootstrapped
