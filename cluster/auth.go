package cluster

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/pki"
	"github.com/swarmkv/swarmkv/rpc"
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
// and every call needs the permission grpcPerms (or the HTTP rules of
// package admin) gives it. Pools calls name an actor (the user they act for);
// bindActor ties it to the credential: a credential bound to an actor acts
// only as that actor, an unbound one needs pools:impersonate (or admin, or
// a node certificate) to name any. A caller without credentials, or with an unknown or
// revoked token, or without the role, gets PermissionDenied (HTTP 401/403,
// RESP NOAUTH/NOPERM) before anything runs. Admin calls and every denial
// are audit-logged (slog attribute audit=true: who, what, allowed; never a
// secret). Without auth every caller may do everything (the loopback
// default).

// grpcPerms maps every gRPC method to the permission it needs. A method
// missing here is refused (TestGRPCPermsCoverEveryMethod keeps it whole).
// Redis/Exec is decided per request (redisPerm).
var grpcPerms = map[string]auth.Perm{
	"/swarmkv.v1.Cluster/ClusterMap": {Keyspace: auth.Public},

	"/swarmkv.v1.KV/Get":    {Keyspace: auth.KV},
	"/swarmkv.v1.KV/Scan":   {Keyspace: auth.KV},
	"/swarmkv.v1.KV/Put":    {Keyspace: auth.KV, Write: true},
	"/swarmkv.v1.KV/Delete": {Keyspace: auth.KV, Write: true},
	"/swarmkv.v1.KV/Batch":  {Keyspace: auth.KV, Write: true},

	"/swarmkv.v1.Registry/GetAgent":            {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/ListAgentsByUser":    {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/CountAgentsByUser":   {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/ListShardAgents":     {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/GetSession":          {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/ListSessionsByAgent": {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/GetUser":             {Keyspace: auth.Registry},
	"/swarmkv.v1.Registry/PutAgent":            {Keyspace: auth.Registry, Write: true},
	"/swarmkv.v1.Registry/DeleteAgent":         {Keyspace: auth.Registry, Write: true},
	"/swarmkv.v1.Registry/UpdateAgentStatus":   {Keyspace: auth.Registry, Write: true},
	"/swarmkv.v1.Registry/PutSession":          {Keyspace: auth.Registry, Write: true},
	"/swarmkv.v1.Registry/UpdateSessionStatus": {Keyspace: auth.Registry, Write: true},
	"/swarmkv.v1.Registry/PutUser":             {Keyspace: auth.Registry, Write: true},

	"/swarmkv.v1.Billing/GetAccount":             {Keyspace: auth.Billing},
	"/swarmkv.v1.Billing/GetTransaction":         {Keyspace: auth.Billing},
	"/swarmkv.v1.Billing/ListTransactionsByUser": {Keyspace: auth.Billing},
	"/swarmkv.v1.Billing/HasUsageEvent":          {Keyspace: auth.Billing},
	"/swarmkv.v1.Billing/GetUsageEvent":          {Keyspace: auth.Billing},
	"/swarmkv.v1.Billing/PutAccount":             {Keyspace: auth.Billing, Write: true},
	"/swarmkv.v1.Billing/DeleteAccount":          {Keyspace: auth.Billing, Write: true},
	"/swarmkv.v1.Billing/UpdateBalance":          {Keyspace: auth.Billing, Write: true},
	"/swarmkv.v1.Billing/PutTransaction":         {Keyspace: auth.Billing, Write: true},
	"/swarmkv.v1.Billing/PutUsageEvent":          {Keyspace: auth.Billing, Write: true},
	"/swarmkv.v1.Billing/ProcessUsage":           {Keyspace: auth.Billing, Write: true},
	"/swarmkv.v1.Billing/AddCredits":             {Keyspace: auth.Billing, Write: true},

	"/swarmkv.v1.Pools/GetPool":      {Keyspace: auth.Pools},
	"/swarmkv.v1.Pools/ListPools":    {Keyspace: auth.Pools},
	"/swarmkv.v1.Pools/GetBot":       {Keyspace: auth.Pools},
	"/swarmkv.v1.Pools/ListBots":     {Keyspace: auth.Pools},
	"/swarmkv.v1.Pools/ListRunners":  {Keyspace: auth.Pools},
	"/swarmkv.v1.Pools/GetGuildPool": {Keyspace: auth.Pools},
	"/swarmkv.v1.Pools/CreatePool":   {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/UpdatePool":   {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/DeletePool":   {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/RegisterBot":  {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/UpdateBot":    {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/RemoveBot":    {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/GetBotToken":  {Keyspace: auth.PoolsSecrets}, // a decrypted secret
	"/swarmkv.v1.Pools/Heartbeat":    {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/SetGuildPool": {Keyspace: auth.Pools, Write: true},
	"/swarmkv.v1.Pools/PlanDeploy":   {Keyspace: auth.Pools, Write: true},

	"/swarmkv.v1.Redis/Exec": {Keyspace: auth.Assets, Write: true}, // reads: redisPerm

	"/swarmkv.v1.Admin/MetaState":      {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/JoinNode":       {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/RemoveNode":     {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ReplicaStatus":  {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ChangeReplica":  {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/TransferLeader": {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/Snapshot":       {Keyspace: auth.Node},
}

// metaStateMethod is the one Admin call a non-member node may make.
const metaStateMethod = rpc.Admin_MetaState_FullMethodName

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

// identifyGRPC returns the caller of a gRPC call of method (nil and a
// message without credentials or with bad ones).
func (n *Node) identifyGRPC(ctx context.Context, method string) (*Identity, string) {
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

// authUnary guards every unary gRPC call (see grpcPerms).
func (n *Node) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !n.AuthOn() {
		return handler(ctx, req)
	}
	perm, ok := grpcPerms[info.FullMethod]
	if r, isRedis := req.(*rpc.RedisExecRequest); isRedis {
		perm = redisPerm(r)
	}
	id, msg := n.identifyGRPC(ctx, info.FullMethod)
	if !ok {
		n.Audit("grpc", id, info.FullMethod, false, "method not in the permission table")
		return nil, status.Error(codes.PermissionDenied, "swarmkv: method not allowed")
	}
	if id == nil {
		n.Audit("grpc", id, info.FullMethod, false, msg)
		return nil, status.Error(codes.PermissionDenied, msg)
	}
	if allowed, why := n.Allows(id, perm); !allowed {
		if id.node && info.FullMethod == metaStateMethod {
			// A node that is not (or no longer) a member learns its own
			// membership record only (adminServer.MetaState).
			return handler(withCaller(ctx, id), req)
		}
		n.Audit("grpc", id, info.FullMethod, false, why)
		if id.node {
			return nil, status.Error(codes.PermissionDenied, why)
		}
		return nil, status.Errorf(codes.PermissionDenied, "swarmkv: %s may not call %s (needs %s)", id.name, info.FullMethod, perm)
	}
	if info.FullMethod == metaStateMethod {
		ctx = withCaller(ctx, id) // adminServer.MetaState tells non-members less
	}
	if strings.HasPrefix(info.FullMethod, poolsMethodPrefix) {
		if err := bindActor(id, req); err != nil {
			n.Audit("grpc", id, info.FullMethod, false, "actor not bound to the credential")
			return nil, err
		}
	}
	return handler(ctx, req)
}

// poolsMethodPrefix is the prefix of the Pools service's methods, whose
// requests carry an actor (bindActor).
var poolsMethodPrefix = "/" + rpc.Pools_ServiceDesc.ServiceName + "/"

// actorField returns the string field "actor" of req's message, or nil.
func actorField(req any) (protoreflect.Message, protoreflect.FieldDescriptor) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, nil
	}
	pm := m.ProtoReflect()
	fd := pm.Descriptor().Fields().ByName("actor")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
		return nil, nil
	}
	return pm, fd
}

// bindActor ties the actor a Pools request names to the caller id (already
// allowed the method), before the request runs:
//
//	id bound to U (a token with an actor)   the request acts as U: an empty
//	                                        actor becomes U, any other is
//	                                        PermissionDenied
//	id unbound, with pools:impersonate,     the request's actor is used as
//	admin, or a node certificate            given (a trusted front end)
//	id unbound, otherwise                   a request naming an actor is
//	                                        PermissionDenied; one without
//	                                        (Heartbeat, ListRunners,
//	                                        GetGuildPool) runs
//
// A request without an actor field is left alone. Without auth (no
// identities) every request runs as given.
func bindActor(id *Identity, req any) error {
	m, fd := actorField(req)
	if fd == nil {
		return nil
	}
	claimed := m.Get(fd).String()
	switch {
	case id.actor != "":
		if claimed == "" {
			m.Set(fd, protoreflect.ValueOfString(id.actor))
			return nil
		}
		if claimed != id.actor {
			return status.Errorf(codes.PermissionDenied, "swarmkv: %s acts for the user %s and may not act as another user", id.name, id.actor)
		}
		return nil
	case id.node || auth.Allows(id.roles, auth.Perm{Keyspace: auth.PoolsImpersonate}):
		// id.node: the caller passed Node.allows, so it is a member
		return nil
	case claimed == "":
		return nil // nothing to act as: the handler refuses the empty actor
	}
	return status.Errorf(codes.PermissionDenied, "swarmkv: %s is not bound to an actor and may not act as a user (bind the token to one: swarmnode token create --actor, or grant %s)", id.name, auth.RolePoolsImpersonate)
}

// redisPerm: a single read-only command needs assets:read, anything else
// assets:write.
func redisPerm(r *rpc.RedisExecRequest) auth.Perm {
	if !r.GetMulti() && len(r.GetCmds()) == 1 && len(r.GetCmds()[0].GetArgs()) > 0 {
		if c := fsm.LookupRedis(r.GetCmds()[0].GetArgs()[0]); c != nil && !c.Write {
			return auth.Perm{Keyspace: auth.Assets}
		}
	}
	return auth.Perm{Keyspace: auth.Assets, Write: true}
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

// IsNode reports whether id is a node (a node certificate or a
// cluster-secret node credential), not an operator or a client.
func (id *Identity) IsNode() bool { return id.node }
