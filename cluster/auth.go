package cluster

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
)

// Callers' authentication is package auth/authn's: the node builds its
// Authenticator (New: TLS on?, Config.Auth, the cluster secret) and
// answers what only the cluster state knows (authState). The fronts reach
// it through Authn.
//
// Membership. A node identity (a node certificate, or a cluster-secret
// credential) counts only while the cluster state lists that node id as a
// member (active or leaving; isMemberNode): a removed node's certificate,
// or a removed node that kept the secret and claims its old id, is
// refused on the Raft port (raftPeerAllowed), on Admin and on the client
// API (Authenticator.Allows). A node that is in no cluster yet (no state:
// waiting to be admitted, or before bootstrap) accepts every valid node
// identity: it holds no data, and the meta leader that admits it must
// reach it before it is listed anywhere. Admin/MetaState is the one call
// a non-member node may still make: it is answered with that node's own
// membership record only (redactForNonMember), which is how a removed node
// learns it was removed and stops.

// Authn returns the node's authenticator: whether auth is on, who a
// caller is, what it may do, and the audit log.
func (n *Node) Authn() *authn.Authenticator { return n.authn }

// checkNodeStream is the node-to-node streams' own check (Admin.BackupShard,
// Admin.ExportSlots: they carry a shard's records), behind package api's
// stream guard, which authorizes every stream with the unary calls' table
// and rule and puts the caller in the stream's context (authn.WithCaller).
// Defence in depth: with auth on, the caller must be there and be a node
// the authenticator allows (a member), or the stream is refused, should
// the guard be missing or the table give the method a weaker permission.
func (n *Node) checkNodeStream(ctx context.Context, method string) error {
	a := n.authn
	if !a.On() {
		return nil
	}
	id := authn.CallerOf(ctx)
	if id == nil || !id.IsNode() {
		return status.Errorf(codes.PermissionDenied, "swarmkv: %s is node-to-node", method)
	}
	if ok, why := a.Allows(id, auth.Perm{Keyspace: auth.Node}); !ok {
		return status.Error(codes.PermissionDenied, why)
	}
	return nil
}

// newAuthn builds the node's authenticator (after n.tls, n.secret and n.log).
func (n *Node) newAuthn() *authn.Authenticator {
	return authn.New(authn.Config{TLS: n.tls != nil, Auth: n.cfg.Auth, Secret: n.secret, State: authState{n}, Log: n.log})
}

// loadClusterSecret returns the cluster secret of cfg (Auth without TLS),
// or nil when none is needed (authn.LoadClusterSecret).
func loadClusterSecret(cfg Config) ([]byte, error) {
	if !cfg.Auth || cfg.TLS.Enabled() {
		return nil, nil
	}
	return authn.LoadClusterSecret(cfg.ClusterSecretFile, cfg.DataDir, len(cfg.Join) > 0)
}

// authState answers the authenticator from the node's cluster state.
type authState struct{ n *Node }

func (s authState) IsMember(id string) bool { return s.n.isMemberNode(id) }

func (s authState) Token(id string) (authn.Token, bool) {
	n := s.n
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state == nil {
		return authn.Token{}, false
	}
	for i := range n.mu.state.Tokens {
		if t := &n.mu.state.Tokens[i]; t.ID == id {
			return authn.Token{ID: t.ID, Name: t.Name, Roles: t.Roles, Actor: t.Actor, Hash: t.Hash, Revoked: t.Revoked != nil}, true
		}
	}
	return authn.Token{}, false
}

// GRPCServerOptions are the transport options of a gRPC server of the
// node that clients reach (its gRPC API and the etcd front): TLS with the
// node certificate (a client certificate of the CA is verified if given),
// the bounds of one connection (calls at once, --max-concurrent-streams),
// keepalive enforcement (--grpc-keepalive-min-time: a client pinging
// faster is dropped), the server's own pings and the idle limit
// (docs/security.md). Each server adds its interceptors and message sizes.
func (n *Node) GRPCServerOptions() []grpc.ServerOption {
	cfg := n.cfg
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.GRPCKeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.GRPCMaxConnIdle,
			Time: cfg.GRPCKeepaliveTime, Timeout: cfg.GRPCKeepaliveTimeout}),
	}
	if n.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.tls.ServerConfig(false))))
	}
	return opts
}

// isMemberNode reports whether node id may act as a node: the cluster state
// this node knows lists it as active or leaving, or this node has no state
// yet (see the comment at the top of this file).
func (n *Node) isMemberNode(id string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state == nil {
		return true
	}
	return stateHasMember(n.mu.state, id)
}

// stateHasMember reports whether st lists node id as active or leaving.
func stateHasMember(st *State, id string) bool {
	s := st.Status(id)
	return s == StatusActive || s == StatusLeaving
}

// raftPeerAllowed is the Mux's check of a peer's node id (Raft port).
func (n *Node) raftPeerAllowed(id string) error {
	if !n.isMemberNode(id) {
		return errors.New(authn.MsgNotMember(id))
	}
	return nil
}

// redactForNonMember returns the state a non-member node is told: the
// cluster id, the epoch, the shard map (public: Cluster/ClusterMap) and
// its own membership record, if any. No other member, no placement, no
// token.
func redactForNonMember(st *State, id string) *State {
	out := &State{FormatVersion: st.FormatVersion, ClusterID: st.ClusterID, Epoch: st.Epoch,
		MapVersion: st.MapVersion, NumShards: st.NumShards, Slots: st.Slots}
	if m := st.Member(id); m != nil {
		out.Nodes = []NodeAddrs{*m}
	}
	return out
}
