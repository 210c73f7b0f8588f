// Package api holds the client-facing gRPC services of a swarmkv node:
// KV and Cluster (server.go), Registry, Billing, Pools, Lease (lease.go),
// the internal Redis service (redis_service.go) and the Pipeline that carries their unary
// calls on one stream (pipeline.go); request validation (validate.go,
// paging.go); the execution of Redis requests on a shard leader
// (redis.go: RedisRequest, CheckRedis, RedisOn, and RedisLocal, which the
// RESP front, package redisfront, also uses); and the auth interceptors
// (auth.go: the method -> permission table, the actor binding of Pools
// calls). Errors become gRPC statuses through the core's one table
// (cluster.StatusError).
//
// Reads are fenced by slot inside the state machine (route.go: every read
// goes through fsm.FSM.Read or ReadKey, by way of replica.Replica.Read): a
// routed read of a slot the shard does not own answers the moved status,
// checked after the read barrier and again after the read, and all the
// reads of one handler see one state of the shard; shard-wide listings leave such slots' records
// out, and fan-out lookups that find a record in one answer moved.
//
// It owns no state: every handler routes through the interfaces it
// declares (Node, Replicas: node.go), which *cluster.Node satisfies, and
// replica.Replica (its ID, FSM, Leader, IsLeader, ReadBarrier and
// Propose; package cluster/replica). It may import cluster,
// cluster/replica, fsm, records, keys, shard, resp, rpc, auth and
// auth/authn; the core never imports it (cluster's TestImportsOneWay).
// Package server registers it on a node's gRPC server; redisfront uses
// its Redis execution.
//
// Usage:
//
//	n, err := cluster.New(cfg, server.Services) // api.Services for a *cluster.Node
package api

import (
	"context"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/rpc"
)

// Services returns node n's client-facing gRPC services and their auth
// interceptors for cluster.New, which registers them before its gRPC
// server serves and stops the Pipeline's streams (Stop) and joins its
// goroutines (Close) when the node closes.
func Services(n Node) cluster.Services {
	srv := &server{node: n, cfg: n.Config()}
	srv.watchersOf = newIdentityLimit("watchers", "max-watchers-per-identity", srv.cfg.MaxWatchersPerIdentity)
	srv.watchMem = newWatchMemory(srv.cfg.MaxWatchMemory)
	srv.keepAlivesOf = newIdentityLimit("lease keep-alive streams", "max-keepalive-streams-per-identity", srv.cfg.MaxKeepAliveStreamsPerIdentity)
	registry, billing, pools, redis := &registryServer{server: srv}, &billingServer{server: srv}, &poolsServer{server: srv}, &redisServer{server: srv}
	lease := &leaseServer{server: srv}
	// The client library sends its calls as items of a Pipeline stream
	// (rpc/pipeline.proto); they run through the same handlers and
	// interceptors (given to Register). Admin and Cluster calls stay unary.
	pipe := newPipelineServer(nil, int(srv.cfg.MaxConcurrentStreams),
		pipelineService{&rpc.KV_ServiceDesc, srv},
		pipelineService{&rpc.Registry_ServiceDesc, registry},
		pipelineService{&rpc.Billing_ServiceDesc, billing},
		pipelineService{&rpc.Pools_ServiceDesc, pools},
		pipelineService{&rpc.Redis_ServiceDesc, redis},
		pipelineService{&rpc.Lease_ServiceDesc, lease})
	pipe.counted = n.CountPipeline
	return cluster.Services{
		Unary: func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return authUnary(n.Authn(), ctx, req, info, handler)
		},
		Stream: func(s any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return authStream(n.Authn(), s, ss, info, handler)
		},
		Register: func(gs *grpc.Server, unary grpc.UnaryServerInterceptor) {
			pipe.intercept = unary
			rpc.RegisterKVServer(gs, srv)
			rpc.RegisterClusterServer(gs, srv)
			rpc.RegisterRegistryServer(gs, registry)
			rpc.RegisterBillingServer(gs, billing)
			rpc.RegisterPoolsServer(gs, pools)
			rpc.RegisterRedisServer(gs, redis)
			rpc.RegisterLeaseServer(gs, lease)
			rpc.RegisterPipelineServer(gs, pipe)
			rpc.RegisterWatchServer(gs, newWatchServer(srv))
		},
		Stop:  pipe.stop,  // pipeline streams end once their calls are answered
		Close: pipe.close, // after the gRPC server stopped
	}
}
