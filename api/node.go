package api

import (
	"context"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// The seam between this package's services and the node core: what they
// use of their node, declared here where it is used (etcd's api/v3rpc
// reaches its server through RaftKV the same way). A *cluster.Node
// satisfies both; package server passes one (and is the only package
// that names it). Reads go through a replica's state machine with
// fsm.FSM.Read, which does the slot fencing (route.go).

// Replicas routes to this node's replicas: Route resolves a routing key to
// its shard and the local replica (nil when this node holds none);
// LocalReplica is the replica of a shard by id (a fan-out, a Redis
// request), nil when none.
type Replicas interface {
	Route(routingKey []byte) (shard.ID, *replica.Replica, error)
	LocalReplica(id shard.ID) *replica.Replica
}

// Node is what the gRPC services use of their node: its replicas, its
// view of the cluster (map, membership, leader hints), its settings,
// authentication and the few core operations that are not one shard's
// command (ReserveTx).
type Node interface {
	Replicas
	// Config is the node's configuration (read once by Services).
	Config() cluster.Config
	// Ready is nil once the node serves (bootstrapped, shards open).
	Ready() error
	// ShardMap is the node's current shard map; nil before bootstrap.
	ShardMap() *shard.Map
	// LocalState is the node's copy of the cluster state and its map.
	LocalState() (*cluster.State, *shard.Map)
	// NodeAddrs are the addresses a member announced.
	NodeAddrs(id string) (cluster.NodeAddrs, bool)
	// LeaderHint names the leader of shard id as this node knows it.
	LeaderHint(id shard.ID) (leaderID, leaderAddr string)
	// UnknownShard is the error for a shard id the node's map lacks.
	UnknownShard(id shard.ID) error
	// ActiveVersion is the protocol version the whole cluster runs.
	ActiveVersion() int
	// ReserveTx reserves a transaction id in its directory shard.
	ReserveTx(ctx context.Context, acct keys.AccountID, txID keys.TransactionID) error
	// Authn is the node's authenticator (tokens, audit, on or off).
	Authn() *authn.Authenticator
	// ObserveApply and CountPipeline feed the node's metrics.
	ObserveApply(id shard.ID, d time.Duration)
	CountPipeline(dir string, items int)
}
