package admin

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/console"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// Node is what the admin HTTP API uses of its node, declared here where it
// is used: the listener and identity it serves with, the console's
// source, and the operator's actions (membership, slot moves and policy,
// leadership, snapshots and backups, tokens), each a method of the core
// returning typed errors (cluster.HTTPStatus maps them). *cluster.Node
// satisfies it; package server passes one.
type Node interface {
	console.Source // ID, Status, NodeStats, Events
	Config() cluster.Config
	Logger() *slog.Logger
	Ready() error
	Addrs() cluster.NodeAddrs
	HTTPListener() net.Listener
	ServerTLS() *tls.Config
	PeerTLS() *tls.Config
	Authn() *authn.Authenticator
	MetricsHandler() http.Handler

	// The cluster state and membership.
	ClusterState(ctx context.Context) (*cluster.State, error)
	MetaLeader(ctx context.Context) (cluster.NodeAddrs, bool)
	JoinNode(ctx context.Context, id string) (*cluster.State, error)
	RemoveNode(ctx context.Context, id string) (*cluster.State, error)

	// Shards: slot moves, the shard policy, leadership, snapshots.
	SplitShard(ctx context.Context, id shard.ID, slots *shard.SlotSet) (placement.Move, error)
	MergeShards(ctx context.Context, into, from shard.ID) (placement.Move, error)
	CancelMove(ctx context.Context, id uint64) (placement.Move, error)
	Moves(ctx context.Context) ([]placement.Move, error)
	ShardPolicy(ctx context.Context) (p placement.ShardPolicy, ok bool, err error)
	SetShardPolicy(ctx context.Context, patch placement.PolicyPatch) (placement.ShardPolicy, error)
	TransferLeader(ctx context.Context, name, to string) (string, error)
	Snapshot(ctx context.Context, name string) ([]cluster.SnapshotResult, error)

	// Backups.
	BackupState(ctx context.Context) (*cluster.State, error)
	BackupShard(ctx context.Context, id shard.ID, begin func(index uint64) error, chunk func([]fsm.Pair) error) error

	// Tokens.
	Tokens(ctx context.Context) ([]authn.TokenInfo, error)
	CreateToken(ctx context.Context, name string, roles []string, actor string) (*authn.TokenInfo, error)
	RevokeToken(ctx context.Context, id string) (*authn.TokenInfo, error)
}
