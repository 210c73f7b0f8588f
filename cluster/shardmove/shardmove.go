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
	// AfterIngest, AfterPrecopy, PullChunk).
	AfterMovePhase func(moveID uint64, phase string) (halt bool)
	BeforeAdopt    func(moveID uint64) error
	AfterIngest    func(moveID uint64, pairs uint64) error
	AfterPrecopy   func(moveID uint64)
	PullChunk      func(moveID uint64, pairs int)
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
	// Leaders, if set, is Leader of many groups at once, in their order,
	// each node asked once (the policy's round); nil: Leader per group.
	Leaders func(context.Context, []placement.Group) []*rpc.ReplicaStatusResponse
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
	passes    map[passKey]*savedPass
}

// passKey names a pull by difference that this node, leading the target
// shard, may resume: a move's pre-copy or its sync pass.
type passKey struct {
	move uint64
	sync bool
}

// savedPass is a pull by difference cut off in a chunk (the mover's round
// ended, the source's leader changed): the next pull of the same pass in
// the same term of the target's leader resumes after its cursor. In
// another term it starts over (another leader may have written the move's
// keys since).
type savedPass struct {
	term uint64
	at   time.Time
	pass *fsm.SyncPass
}

// savedPassTTL is how long a cut-off pass is kept for its next pull.
const savedPassTTL = 10 * time.Minute

// takePass returns the saved pass of k in term (forgetting it, so two
// pulls of a pass never share one), or nil; it forgets passes older than
// savedPassTTL.
func (mr *Mover) takePass(k passKey, term uint64, now time.Time) *fsm.SyncPass {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	for key, sp := range mr.passes {
		if now.Sub(sp.at) >= savedPassTTL {
			delete(mr.passes, key)
		}
	}
	sp := mr.passes[k]
	delete(mr.passes, k)
	if sp == nil || sp.term != term {
		return nil
	}
	return sp.pass
}

// savePass keeps pass p of k, cut off in term, for the next pull.
func (mr *Mover) savePass(k passKey, term uint64, p *fsm.SyncPass, now time.Time) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	mr.passes[k] = &savedPass{term: term, at: now, pass: p}
}

// New returns the Mover of the node h describes.
func New(h Host) *Mover {
	return &Mover{h: h, kick: make(chan struct{}, 1), precopied: map[uint64]time.Time{}, passes: map[passKey]*savedPass{}}
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
