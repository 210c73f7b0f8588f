package api

import (
	"context"
	"strings"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// grpcPerms maps every gRPC method, unary or stream, to the permission it
// needs (authorize, used by authUnary and authStream). A method missing
// here is refused (TestGRPCPermsCoverEveryMethod walks the services a node
// registers and keeps it whole). Redis/Exec is decided per request
// (redisPerm).
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
	"/swarmkv.v1.Registry/AgentHeartbeat":      {Keyspace: auth.Registry, Write: true},

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

	// Streams that carry calls of other permissions: any authenticated
	// caller (a member, for a node) opens them; the Pipeline authorizes
	// each call it carries (authUnary), Watch the keyspace of the table
	// its request names (ValidateWatch, watchServer.Watch).
	"/swarmkv.v1.Pipeline/Calls": {Keyspace: auth.Public},
	"/swarmkv.v1.Watch/Watch":    {Keyspace: auth.Public},

	"/swarmkv.v1.Lease/TimeToLive":      {Keyspace: auth.Leases},
	"/swarmkv.v1.Lease/List":            {Keyspace: auth.Leases},
	"/swarmkv.v1.Lease/Grant":           {Keyspace: auth.Leases, Write: true},
	"/swarmkv.v1.Lease/Revoke":          {Keyspace: auth.Leases, Write: true},
	"/swarmkv.v1.Lease/KeepAlive":       {Keyspace: auth.Leases, Write: true},
	"/swarmkv.v1.Lease/KeepAliveStream": {Keyspace: auth.Leases, Write: true}, // a stream

	"/swarmkv.v1.Admin/MetaState":       {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/JoinNode":        {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/RemoveNode":      {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ReplicaStatus":   {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ReplicaStatuses": {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ChangeReplica":   {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/TransferLeader":  {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/Snapshot":        {Keyspace: auth.Node},
	// Elastic shards (cluster/shardmove). ExportSlots is a stream.
	"/swarmkv.v1.Admin/SlotCommand": {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/SlotStatus":  {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ExportSlots": {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/PullSlots":   {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/MoveAdmin":   {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/ShardPolicy": {Keyspace: auth.Node},
	// The console's counters (cluster/console.go).
	"/swarmkv.v1.Console/NodeStats": {Keyspace: auth.Node},
	"/swarmkv.v1.Admin/BackupShard": {Keyspace: auth.Node}, // a stream
	// The ledger's reservation of a transaction id on the id's shard,
	// sent by the front of the op that records it (cluster/txdir.go).
	"/swarmkv.v1.Admin/ReserveTransaction": {Keyspace: auth.Node},

	// The etcd v3 API front (package etcdfront, its own listener, guarded
	// by Guard with this table; TestEtcdFrontMethodsCovered walks its
	// server). Methods it does not serve yet answer Unimplemented after
	// the guard.
	"/etcdserverpb.KV/Range":       {Keyspace: auth.Etcd},
	"/etcdserverpb.KV/Put":         {Keyspace: auth.Etcd, Write: true},
	"/etcdserverpb.KV/DeleteRange": {Keyspace: auth.Etcd, Write: true},
	"/etcdserverpb.KV/Txn":         {Keyspace: auth.Etcd, Write: true}, // a read-only txn too: what it does is known after the compares
	"/etcdserverpb.KV/Compact":     {Keyspace: auth.Etcd, Write: true},
	"/etcdserverpb.Watch/Watch":    {Keyspace: auth.Etcd}, // a stream

	"/etcdserverpb.Lease/LeaseGrant":      {Keyspace: auth.Etcd, Write: true},
	"/etcdserverpb.Lease/LeaseRevoke":     {Keyspace: auth.Etcd, Write: true},
	"/etcdserverpb.Lease/LeaseKeepAlive":  {Keyspace: auth.Etcd, Write: true}, // a stream
	"/etcdserverpb.Lease/LeaseTimeToLive": {Keyspace: auth.Etcd},
	"/etcdserverpb.Lease/LeaseLeases":     {Keyspace: auth.Etcd},

	"/etcdserverpb.Cluster/MemberList":    {Keyspace: auth.Public},
	"/etcdserverpb.Cluster/MemberAdd":     {Keyspace: auth.Admin},
	"/etcdserverpb.Cluster/MemberRemove":  {Keyspace: auth.Admin},
	"/etcdserverpb.Cluster/MemberUpdate":  {Keyspace: auth.Admin},
	"/etcdserverpb.Cluster/MemberPromote": {Keyspace: auth.Admin},

	"/etcdserverpb.Maintenance/Status":     {Keyspace: auth.Public},
	"/etcdserverpb.Maintenance/Alarm":      {Keyspace: auth.Public},
	"/etcdserverpb.Maintenance/Defragment": {Keyspace: auth.Admin},
	"/etcdserverpb.Maintenance/Hash":       {Keyspace: auth.Admin},
	"/etcdserverpb.Maintenance/HashKV":     {Keyspace: auth.Admin},
	"/etcdserverpb.Maintenance/MoveLeader": {Keyspace: auth.Admin},
	"/etcdserverpb.Maintenance/Downgrade":  {Keyspace: auth.Admin},
	"/etcdserverpb.Maintenance/Snapshot":   {Keyspace: auth.Admin}, // a stream

	// Authenticate checks its password (a swarmkv token) itself: it is
	// how an etcd client without a credential gets one.
	"/etcdserverpb.Auth/Authenticate":         {Keyspace: auth.Anonymous},
	"/etcdserverpb.Auth/AuthStatus":           {Keyspace: auth.Public},
	"/etcdserverpb.Auth/AuthEnable":           {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/AuthDisable":          {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserAdd":              {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserGet":              {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserList":             {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserDelete":           {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserChangePassword":   {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserGrantRole":        {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/UserRevokeRole":       {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/RoleAdd":              {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/RoleGet":              {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/RoleList":             {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/RoleDelete":           {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/RoleGrantPermission":  {Keyspace: auth.Admin},
	"/etcdserverpb.Auth/RoleRevokePermission": {Keyspace: auth.Admin},
}

// etcdMethodPrefix starts the methods of the etcd front (grpcPerms' etcd
// entries), which the node's own gRPC server does not register.
const etcdMethodPrefix = "/etcdserverpb."

// PermOf returns the permission method needs, false for a method missing
// from the table (which the guard refuses).
func PermOf(method string) (auth.Perm, bool) {
	p, ok := grpcPerms[method]
	return p, ok
}

// Guard returns the authorization interceptors of a front that serves its
// own gRPC server (the etcd front): every call, unary or stream, is
// authorized as the node's own API's are (authorize: its method's entry of
// grpcPerms, refused when missing; the membership rule of node
// identities), before its handler runs; the handler finds the caller with
// authn.CallerOf. authOf is called on each call (nil or off: no checks).
func Guard(authOf func() *authn.Authenticator) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return authUnary(authOf(), ctx, req, info, handler)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return authStream(authOf(), srv, ss, info, handler)
	}
	return unary, stream
}

// authorize is the one authorization of a gRPC call, unary or stream
// (authUnary, authStream): it identifies the caller of method
// (Authenticator.IdentifyGRPC) and checks it against perm, the method's
// entry of grpcPerms (known: there is one; a method missing from the table
// is refused), with the membership rule of node identities
// (Authenticator.Allows: a node certificate or cluster-secret credential
// counts only while the node is a member). The one exception: a node that
// is not (or no longer) a member may call Admin/MetaState, which tells it
// its own membership record only (adminServer.MetaState). A refusal is
// audit-logged and answered PermissionDenied; nothing runs. Call it only
// with auth on.
func authorize(a *authn.Authenticator, ctx context.Context, method string, perm auth.Perm, known bool) (*authn.Identity, error) {
	id, msg := a.IdentifyGRPC(ctx, method)
	if !known {
		a.Audit("grpc", id, method, false, "method not in the permission table")
		return nil, status.Error(codes.PermissionDenied, "swarmkv: method not allowed")
	}
	if id == nil && perm.Keyspace == auth.Anonymous {
		return nil, nil // the handler checks its own credential
	}
	if id == nil {
		a.Audit("grpc", id, method, false, msg)
		return nil, status.Error(codes.PermissionDenied, msg)
	}
	if allowed, why := a.Allows(id, perm); !allowed {
		if id.IsNode() && method == rpc.Admin_MetaState_FullMethodName {
			return id, nil
		}
		a.Audit("grpc", id, method, false, why)
		if id.IsNode() {
			return nil, status.Error(codes.PermissionDenied, why)
		}
		return nil, status.Errorf(codes.PermissionDenied, "swarmkv: %s may not call %s (needs %s)", id.Name(), method, perm)
	}
	return id, nil
}

// authUnary guards every unary gRPC call (authorize; a Redis Exec's
// permission is its request's, redisPerm), and binds a Pools call's actor
// to the caller (bindActor).
func authUnary(a *authn.Authenticator, ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if a == nil || !a.On() {
		return handler(ctx, req)
	}
	perm, ok := grpcPerms[info.FullMethod]
	if r, isRedis := req.(*rpc.RedisExecRequest); isRedis {
		perm = redisPerm(r)
	}
	id, err := authorize(a, ctx, info.FullMethod, perm, ok)
	if err != nil {
		return nil, err
	}
	// adminServer.MetaState tells non-members less; the Lease service and
	// the heartbeats that keep a lease alive check its owner
	// (leaseauth.go).
	ctx = authn.WithCaller(ctx, id)
	if strings.HasPrefix(info.FullMethod, poolsMethodPrefix) {
		if err := bindActor(callerOf(id), req); err != nil {
			a.Audit("grpc", id, info.FullMethod, false, "actor not bound to the credential")
			return nil, err
		}
	}
	return handler(ctx, req)
}

// authStream guards every stream when it opens, as authUnary guards a
// unary call: the same table and rule (authorize), so a caller without
// the method's permission, and a node that is not a member, is refused
// before the handler runs. A node stream granted (a method of keyspace
// auth.Node: Admin.BackupShard, Admin.ExportSlots, which carry a shard's
// records) is audit-logged as well. The handler finds the caller in its
// stream's context (authn.CallerOf). Streams whose permission depends on
// what they carry check that themselves besides: the Pipeline authorizes
// each call with authUnary, Watch its request's table (watchServer.Watch).
func authStream(a *authn.Authenticator, srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if a == nil || !a.On() {
		return handler(srv, ss)
	}
	perm, ok := grpcPerms[info.FullMethod]
	id, err := authorize(a, ss.Context(), info.FullMethod, perm, ok)
	if err != nil {
		return err
	}
	if perm.Keyspace == auth.Node {
		a.Audit("grpc", id, info.FullMethod, true, "")
	}
	return handler(srv, &callerStream{ServerStream: ss, ctx: authn.WithCaller(ss.Context(), id)})
}

// callerStream is a stream whose context carries its caller (authStream).
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

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

// caller is what bindActor needs of a caller's identity.
type caller struct {
	name  string
	node  bool
	roles []string
	actor string
}

func callerOf(id *authn.Identity) caller {
	return caller{name: id.Name(), node: id.IsNode(), roles: id.Roles(), actor: id.Actor()}
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
func bindActor(id caller, req any) error {
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
		// id.node: the caller passed Authenticator.Allows, so it is a member
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
