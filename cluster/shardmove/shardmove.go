package shardmove

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Host is what a Mover needs of the node that runs it (package cluster
// fills it in).
type Host struct {
	ID     string       // the node's id
	Log    *slog.Logger // the node's logger
	Limits fsm.Limits   // the state machine's apply-time limits
	// PolicyInterval and PolicyCooldown: cluster.Config's.
	PolicyInterval, PolicyCooldown time.Duration
	// The test hooks (cluster.Testing's AfterMovePhase, BeforeAdopt,
	// AfterIngest, AfterPrecopy).
	AfterMovePhase func(moveID uint64, phase string) (halt bool)
	BeforeAdopt    func(moveID uint64) error
	AfterIngest    func(moveID uint64, pairs uint64) error
	AfterPrecopy   func(moveID uint64)
	// Unavailable records a move's unavailability window (the
	// swarmkv_move_unavailable_seconds metric).
	Unavailable func(time.Duration)

	// MetaTerm is the term of this node's meta replica if it leads the
	// meta group and committed an entry of its term, else 0.
	MetaTerm func() uint64
	// Read returns the committed state, read linearizably on the local
	// meta replica (the meta leader's).
	Read func(context.Context) (*placement.State, error)
	// Update is the guarded meta update: fn changes a copy of the
	// committed state (placement.ErrNoChange: leave it).
	Update func(ctx context.Context, fn func(*placement.State) error) error
	// OnMetaLeader runs local on the meta leader, or remote with an Admin
	// client of the meta leader.
	OnMetaLeader func(ctx context.Context, local func() error, remote func(context.Context, rpc.AdminClient) error) error
	// Committed fetches the committed state for an admin call (from any
	// node); Local is this node's copy of it (nil before bootstrap).
	Committed func(context.Context) (*placement.State, error)
	Local     func() *placement.State
	// Replica is the local replica of a shard (nil: none).
	Replica func(shard.ID) *replica.Replica
	// Leader is the status of a group's confirmed leader, as its holders
	// report it (nil: none).
	Leader func(context.Context, placement.Group) *rpc.ReplicaStatusResponse
	// Admin returns an Admin client of a node.
	Admin func(nodeID string) (rpc.AdminClient, error)
	// Hint names a shard's leader for a NotLeader answer.
	Hint func(shard.ID) (leaderID, leaderAddr string)
	// Status turns an error into a gRPC status (cluster.StatusError); Kind
	// is an error's kind (cluster.ErrorKind).
	Status func(err error, id shard.ID, hint func() (leaderID, leaderAddr string)) error
	Kind   func(error) rpc.Kind
}

// Mover runs a node's slot moves and shard policy.
type Mover struct {
	h    Host
	kick chan struct{} // wakes the mover
	halt atomic.Bool   // stops it for good (Host.AfterMovePhase)

	mu        sync.Mutex
	precopied map[uint64]time.Time // move id: when its pre-copy last finished here
}

// New returns the Mover of the node h describes.
func New(h Host) *Mover {
	return &Mover{h: h, kick: make(chan struct{}, 1), precopied: map[uint64]time.Time{}}
}

// The errors of the node's error table (package cluster).
var (
	// ErrRefused is wrapped by a move step a state machine refused for
	// good (a key that collides in a merge, a move aborted on the
	// target): the mover aborts the move. Its kind is FailedPrecondition.
	ErrRefused = errors.New("cluster: slot move refused")

	errInvalidArgument = replica.ErrInvalidArgument
	errNotLeader       = replica.ErrNotLeader
	errLeaderNotReady  = replica.ErrLeaderNotReady
	errNoChange        = placement.ErrNoChange
)
