package cluster

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/internal/pki"
)

// Client authentication and roles (package auth for the formats).
//
// Auth is on with TLS (or Config.Auth). A caller is then one of:
//
//	a node       a node certificate of the cluster CA, or (Config.Auth
//	             without TLS) a cluster-secret credential (nodeauth.go):
//	             everything, while the cluster state lists it as a member
//	a client     a client certificate of the CA: roles from its OU values
//	             (auth.ParseRole; unknown ones ignored)
//	a token      "authorization: Bearer swk_..." (gRPC metadata, HTTP
//	             header; RESP: AUTH <user> <token>) matching an unrevoked
//	             token of the cluster state: that token's roles, and the
//	             actor it is bound to (Token.Actor), if any
//	an operator  (admin HTTP API, Config.Auth without TLS) a request
//	             signed with the cluster secret (nodeauth.go,
//	             adminSecretScheme): the admin role
//
// and every call needs the permission package api's grpcPerms (or the HTTP
// rules of package admin) gives it. Pools calls name an actor (the user they
// act for); api's bindActor ties it to the credential: a credential bound to an actor acts
// only as that actor, an unbound one needs pools:impersonate (or admin, or
// a node certificate) to name any. A caller without credentials, or with an unknown or
// revoked token, or without the role, gets PermissionDenied (HTTP 401/403,
// RESP NOAUTH/NOPERM) before anything runs. Admin calls and every denial
// are audit-logged (slog attribute audit=true: who, what, allowed; never a
// secret). Without auth every caller may do everything (the loopback
// default).

// Identity is an authenticated caller (opaque to the fronts: Name for
// messages, IsNode for the wording of a refusal, Node.Allows for
// decisions).
type Identity struct {
	name   string   // for logs: "node:n1", "cert:alice", "token:<id>(<name>)"
	node   bool     // a node certificate or cluster-secret credential
	nodeID string   // the node's id when node is set
	roles  []string // canonical roles
	actor  string   // the user id a bound credential acts for ("": unbound)
}

// Name names the caller for logs and error replies ("node:n1",
// "cert:alice", "token:<id>(<name>)"; never a secret).
func (id *Identity) Name() string { return id.name }

// Allows reports whether id may use p, and if not why: a node identity
// needs to be a member of the cluster (isMemberNode), anyone else a role.
func (n *Node) Allows(id *Identity, p auth.Perm) (bool, string) {
	switch {
	case id == nil:
		return false, msgNoCredentials
	case id.node && !n.isMemberNode(id.nodeID):
		return false, errNotMember(id.nodeID)
	case id.node:
		return true, ""
	case !auth.Allows(id.roles, p):
		return false, "needs " + p.String()
	}
	return true, ""
}

// errNoCredentials and errBadToken are what a refused caller is told.
const (
	msgNoCredentials = "swarmkv: authentication required (a client certificate or a bearer token)"
	msgBadToken      = "swarmkv: unknown, revoked or malformed token"
	// The admin HTTP API of a node with Auth and without TLS (a cluster
	// secret; nodeauth.go, adminSecretScheme).
	msgNoCredentialsSecret = "swarmkv: authentication required: a bearer token, or sign with the cluster secret: swarmnode ... --cluster-secret-file <data-dir>/cluster-secret (or the file the node's own --cluster-secret-file names)"
	msgBadSecretAuth       = "swarmkv: bad cluster-secret signature (another secret, another request, or a clock more than 2m off)"
	msgSecretAuthWithTLS   = "swarmkv: cluster-secret signatures are accepted only with --auth without TLS; with TLS use a client certificate"
)

// identifyAdminSecret returns the operator identity of an admin HTTP
// request signed with the cluster secret (h: its Authorization value), or
// nil. Only a node with a cluster secret (Auth without TLS) accepts one.
func (n *Node) identifyAdminSecret(r *http.Request, h string) *Identity {
	if n.secret == nil || !checkAdminSecretAuth(n.secret, r.Method, r.URL.Path, r.URL.RawQuery, h, time.Now()) {
		return nil
	}
	return &Identity{name: adminSecretIdentity, roles: []string{auth.RoleAdmin}}
}

// grpcServerOptions are the gRPC server's transport options: TLS with the
// node certificate (a client certificate of the CA is verified if given).
func (n *Node) grpcServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if n.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.tls.ServerConfig(false))))
	}
	return opts
}

// AuthOn reports whether clients must authenticate: with TLS, or with
// Config.Auth.
func (n *Node) AuthOn() bool { return n.tls != nil || n.cfg.Auth }

// IdentifyCert returns the identity of a verified certificate, or nil.
func IdentifyCert(cs *tls.ConnectionState) *Identity {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil
	}
	c := cs.PeerCertificates[0]
	if id := pki.NodeID(c); id != "" {
		return &Identity{name: "node:" + id, node: true, nodeID: id}
	}
	var roles []string
	for _, ou := range c.Subject.OrganizationalUnit {
		if r, err := auth.ParseRole(ou); err == nil {
			roles = append(roles, r)
		}
	}
	return &Identity{name: "cert:" + pki.ClientName(c), roles: roles}
}

// IdentifyToken checks a bearer token against the cluster state. The
// message of the error never holds the token.
func (n *Node) IdentifyToken(tok string) (*Identity, bool) {
	id, secret, err := auth.ParseToken(tok)
	if err != nil {
		return nil, false
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state == nil {
		return nil, false
	}
	for _, t := range n.mu.state.Tokens {
		if t.ID == id && t.Revoked == nil && auth.CheckSecret(secret, t.Hash) {
			return &Identity{name: "token:" + t.ID + "(" + t.Name + ")", roles: t.Roles, actor: t.Actor}, true
		}
	}
	return nil, false
}

// TokenLive reports whether the token with this id is still in the
// cluster state and not revoked: the per-command check of a RESP
// connection that authenticated with it (an id lookup, no hashing).
func (n *Node) TokenLive(id string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state == nil {
		return false
	}
	for i := range n.mu.state.Tokens {
		if t := &n.mu.state.Tokens[i]; t.ID == id {
			return t.Revoked == nil
		}
	}
	return false
}

// IdentifyGRPC returns the caller of a gRPC call of method (nil and a
// message without credentials or with bad ones). Call it only with AuthOn.
func (n *Node) IdentifyGRPC(ctx context.Context, method string) (*Identity, string) {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if id := IdentifyCert(&ti.State); id != nil {
				return id, ""
			}
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if id := n.identifySecret(md, method); id != nil {
		return id, ""
	}
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return nil, msgNoCredentials
	}
	tok, err := auth.ParseBearer(vals[0])
	if err != nil {
		return nil, msgBadToken
	}
	id, ok := n.IdentifyToken(tok)
	if !ok {
		return nil, msgBadToken
	}
	return id, ""
}

// peerNodeID returns the node id of a call made with a node certificate of
// the cluster CA, or "".
func peerNodeID(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return ""
	}
	return pki.NodeID(ti.State.PeerCertificates[0])
}

// Audit logs an authorization decision: who (never a secret), what, when
// (the record's time), allowed.
func (n *Node) Audit(via string, id *Identity, what string, allowed bool, why string) {
	who := "anonymous"
	if id != nil {
		who = id.name
	}
	level := slog.LevelInfo
	if !allowed {
		level = slog.LevelWarn
	}
	n.log.Log(context.Background(), level, "audit", "audit", true, "via", via, "who", who, "what", what, "allowed", allowed, "why", why, "at", time.Now().UTC())
}

// IdentifyHTTP identifies the caller of an admin HTTP request (package
// admin guards /v1 and /debug with it): a client or node certificate, a
// bearer token, or, with Auth without TLS, a request signed with the
// cluster secret (identifyAdminSecret). It returns nil and what the
// caller is told (never a secret) when none is given or none is good.
// Call it only with AuthOn.
func (n *Node) IdentifyHTTP(r *http.Request) (*Identity, string) {
	if id := IdentifyCert(r.TLS); id != nil {
		return id, ""
	}
	h := r.Header.Get("Authorization")
	switch {
	case h == "":
		if n.secret != nil {
			return nil, msgNoCredentialsSecret
		}
		return nil, msgNoCredentials
	case isAdminSecretAuth(h):
		if id := n.identifyAdminSecret(r, h); id != nil {
			return id, ""
		}
		if n.secret == nil {
			return nil, msgSecretAuthWithTLS
		}
		return nil, msgBadSecretAuth
	}
	tok, err := auth.ParseBearer(h)
	if err != nil {
		return nil, msgBadToken
	}
	if id, _ := n.IdentifyToken(tok); id != nil {
		return id, ""
	}
	return nil, msgBadToken
}

// Actor is the user id a credential bound to an actor acts for ("":
// unbound).
func (id *Identity) Actor() string { return id.actor }

// Roles are the caller's canonical roles (none for a node).
func (id *Identity) Roles() []string { return id.roles }

// IsNode reports whether id is a node (a node certificate or a
// cluster-secret node credential), not an operator or a client.
func (id *Identity) IsNode() bool { return id.node }
