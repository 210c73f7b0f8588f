package authn

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/internal/pki"
	"github.com/swarmkv/swarmkv/transport"
)

// Client authentication and roles (package auth for the formats).
//
// Auth is on with TLS (or Config.Auth). A caller is then one of:
//
//	a node       a node certificate of the cluster CA, or (Config.Auth
//	             without TLS) a cluster-secret credential (secret.go):
//	             everything, while the cluster state lists it as a member
//	a client     a client certificate of the CA: roles from its OU values
//	             (auth.ParseRole; unknown ones ignored)
//	a token      "authorization: Bearer swk_..." (gRPC metadata, HTTP
//	             header; RESP: AUTH <user> <token>) matching an unrevoked
//	             token of the cluster state: that token's roles, and the
//	             actor it is bound to (Token.Actor), if any
//	an operator  (admin HTTP API, Config.Auth without TLS) a request
//	             signed with the cluster secret (secret.go,
//	             adminSecretScheme): the admin role
//
// and every call needs the permission package api's grpcPerms (or the HTTP
// rules of package admin) gives it. Pools calls name an actor (the user they
// act for); api's bindActor ties it to the credential: a credential bound to an actor acts
// only as that actor, an unbound one needs pools:impersonate (or admin, or
// a node certificate) to name any. A caller without credentials, or with an unknown or
// revoked token, or without the role, gets PermissionDenied (HTTP 401/403,
// RESP NOAUTH/NOPERM) before anything runs. Admin calls, every denial and
// every grant of a node-to-node stream are audit-logged (slog attribute audit=true: who, what, allowed; never a
// secret). Without auth every caller may do everything (the loopback
// default).

// State is what the authenticator asks of the cluster state (package
// cluster's Node implements it). Both answer from the state the node
// knows now.
type State interface {
	// IsMember reports whether node id may act as a node: the cluster
	// state lists it as active or leaving, or the node has no state yet
	// (see secret.go).
	IsMember(id string) bool
	// Token returns the token record with this id; false when there is
	// none, or no state yet.
	Token(id string) (Token, bool)
}

// Token is a token record of the cluster state, as the authenticator
// needs it.
type Token struct {
	ID      string
	Name    string
	Roles   []string // canonical
	Actor   string   // the user id a bound token acts for ("": unbound)
	Hash    string   // auth.HashSecret of the secret
	Revoked bool
}

// Config is what a node builds its Authenticator from.
type Config struct {
	// TLS: the node serves TLS (certificates identify callers; auth on).
	TLS bool
	// Auth: authenticate callers even without TLS (the node's Config.Auth).
	Auth bool
	// Secret is the cluster secret of Auth without TLS (LoadClusterSecret),
	// nil otherwise: it signs node credentials and admin requests.
	Secret []byte
	// State answers membership and token lookups.
	State State
	// Log receives the audit records.
	Log *slog.Logger
}

// Authenticator identifies a node's callers and decides what they may do.
// It is safe for concurrent use.
type Authenticator struct {
	on     bool
	secret []byte
	state  State
	log    *slog.Logger
}

// New returns the authenticator of cfg.
func New(cfg Config) *Authenticator {
	return &Authenticator{on: cfg.TLS || cfg.Auth, secret: cfg.Secret, state: cfg.State, log: cfg.Log}
}

// Identity is an authenticated caller (opaque to the fronts: Name for
// messages, IsNode for the wording of a refusal, Authenticator.Allows for
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

// Actor is the user id a credential bound to an actor acts for ("":
// unbound).
func (id *Identity) Actor() string { return id.actor }

// Roles are the caller's canonical roles (none for a node).
func (id *Identity) Roles() []string { return id.roles }

// IsNode reports whether id is a node (a node certificate or a
// cluster-secret node credential), not an operator or a client.
func (id *Identity) IsNode() bool { return id.node }

// NodeID is the node's id of a node identity ("" for any other).
func (id *Identity) NodeID() string { return id.nodeID }

// What a refused caller is told.
const (
	// MsgNoCredentials: no credential at all.
	MsgNoCredentials = "swarmkv: authentication required (a client certificate or a bearer token)"
	// MsgBadToken is what a caller with an unknown, revoked or malformed
	// token is told (and what the audit log records); it never quotes the
	// token.
	MsgBadToken = "swarmkv: unknown, revoked or malformed token"
	// The admin HTTP API of a node with Auth and without TLS (a cluster
	// secret; secret.go, adminSecretScheme).
	msgNoCredentialsSecret = "swarmkv: authentication required: a bearer token, or sign with the cluster secret: swarmnode ... --cluster-secret-file <data-dir>/cluster-secret (or the file the node's own --cluster-secret-file names)"
	msgBadSecretAuth       = "swarmkv: bad cluster-secret signature (another secret, another request, or a clock more than 2m off)"
	msgSecretAuthWithTLS   = "swarmkv: cluster-secret signatures are accepted only with --auth without TLS; with TLS use a client certificate"
)

// MsgNotMember is why a node identity that is not a member is refused.
func MsgNotMember(id string) string {
	return "swarmkv: node " + id + " is not a member of the cluster (removed or never admitted)"
}

// On reports whether clients must authenticate: with TLS, or with
// Config.Auth.
func (a *Authenticator) On() bool { return a.on }

// Allows reports whether id may use p, and if not why: a node identity
// needs to be a member of the cluster (State.IsMember), anyone else a role.
func (a *Authenticator) Allows(id *Identity, p auth.Perm) (bool, string) {
	switch {
	case id == nil:
		return false, MsgNoCredentials
	case id.node && !a.state.IsMember(id.nodeID):
		return false, MsgNotMember(id.nodeID)
	case id.node:
		return true, ""
	case !auth.Allows(id.roles, p):
		return false, "needs " + p.String()
	}
	return true, ""
}

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

// IdentifyToken checks a bearer token against the cluster state (no
// message: a caller is told MsgBadToken, never the token).
func (a *Authenticator) IdentifyToken(tok string) (*Identity, bool) {
	id, secret, err := auth.ParseToken(tok)
	if err != nil {
		return nil, false
	}
	t, ok := a.state.Token(id)
	if !ok || t.Revoked || !auth.CheckSecret(secret, t.Hash) {
		return nil, false
	}
	return &Identity{name: "token:" + t.ID + "(" + t.Name + ")", roles: t.Roles, actor: t.Actor}, true
}

// TokenLive reports whether the token with this id is still in the
// cluster state and not revoked: the per-command check of a RESP
// connection that authenticated with it (an id lookup, no hashing).
func (a *Authenticator) TokenLive(id string) bool {
	t, ok := a.state.Token(id)
	return ok && !t.Revoked
}

// IdentifyGRPC returns the caller of a gRPC call of method (nil and a
// message without credentials or with bad ones). Call it only with On.
func (a *Authenticator) IdentifyGRPC(ctx context.Context, method string) (*Identity, string) {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if id := IdentifyCert(&ti.State); id != nil {
				return id, ""
			}
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if id := a.identifySecret(md, method); id != nil {
		return id, ""
	}
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return nil, MsgNoCredentials
	}
	tok, err := auth.ParseBearer(vals[0])
	if err != nil {
		return nil, MsgBadToken
	}
	id, ok := a.IdentifyToken(tok)
	if !ok {
		return nil, MsgBadToken
	}
	return id, ""
}

// identifySecret returns the node identity of a call that carries a valid
// cluster-secret credential for method, or nil.
func (a *Authenticator) identifySecret(md metadata.MD, method string) *Identity {
	if a.secret == nil {
		return nil
	}
	id, ok := transport.CheckNodeCred(md, a.secret, method, time.Now())
	if !ok {
		return nil
	}
	return &Identity{name: "node:" + id, node: true, nodeID: id}
}

// IdentifyHTTP identifies the caller of an admin HTTP request (package
// admin guards /v1 and /debug with it): a client or node certificate, a
// bearer token, or, with Auth without TLS, a request signed with the
// cluster secret (identifyAdminSecret). It returns nil and what the
// caller is told (never a secret) when none is given or none is good.
// Call it only with On.
func (a *Authenticator) IdentifyHTTP(r *http.Request) (*Identity, string) {
	if id := IdentifyCert(r.TLS); id != nil {
		return id, ""
	}
	h := r.Header.Get("Authorization")
	switch {
	case h == "":
		if a.secret != nil {
			return nil, msgNoCredentialsSecret
		}
		return nil, MsgNoCredentials
	case isAdminSecretAuth(h):
		if id := a.identifyAdminSecret(r, h); id != nil {
			return id, ""
		}
		if a.secret == nil {
			return nil, msgSecretAuthWithTLS
		}
		return nil, msgBadSecretAuth
	}
	tok, err := auth.ParseBearer(h)
	if err != nil {
		return nil, MsgBadToken
	}
	if id, _ := a.IdentifyToken(tok); id != nil {
		return id, ""
	}
	return nil, MsgBadToken
}

// identifyAdminSecret returns the operator identity of an admin HTTP
// request signed with the cluster secret (h: its Authorization value), or
// nil. Only a node with a cluster secret (Auth without TLS) accepts one.
func (a *Authenticator) identifyAdminSecret(r *http.Request, h string) *Identity {
	if a.secret == nil || !checkAdminSecretAuth(a.secret, r.Method, r.URL.Path, r.URL.RawQuery, h, time.Now()) {
		return nil
	}
	return &Identity{name: adminSecretIdentity, roles: []string{auth.RoleAdmin}}
}

// Audit logs an authorization decision: who (never a secret), what, when
// (the record's time), allowed.
func (a *Authenticator) Audit(via string, id *Identity, what string, allowed bool, why string) {
	who := "anonymous"
	if id != nil {
		who = id.name
	}
	level := slog.LevelInfo
	if !allowed {
		level = slog.LevelWarn
	}
	a.log.Log(context.Background(), level, "audit", "audit", true, "via", via, "who", who, "what", what, "allowed", allowed, "why", why, "at", time.Now().UTC())
}

// callerKey carries the caller's identity in a call's context (package
// api's auth interceptor, through WithCaller).
type callerKey struct{}

// WithCaller returns ctx carrying the caller's identity, for the Admin
// service's MetaState (it tells a non-member node less): the auth
// interceptor sets it.
func WithCaller(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// CallerOf returns the identity the auth interceptor found for the call
// (WithCaller), or nil.
func CallerOf(ctx context.Context) *Identity {
	id, _ := ctx.Value(callerKey{}).(*Identity)
	return id
}
