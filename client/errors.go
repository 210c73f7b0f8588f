package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/rpc"
)

// Errors returned by the client; classify with errors.Is and errors.As.
var (
	// ErrNotFound: the key (or record) does not exist (gRPC NotFound).
	ErrNotFound = errors.New("swarmkv: not found")
	// ErrInvalidArgument: the request is malformed or over a limit (found
	// by the server, gRPC InvalidArgument, or by a typed store before
	// sending); nothing was changed. The wrapped message says why.
	ErrInvalidArgument = errors.New("swarmkv: invalid argument")
	// ErrUnavailable: no replica of the shard could serve the request
	// before the context ended (no quorum, no leader, nodes down).
	ErrUnavailable = errors.New("swarmkv: unavailable")
	// ErrOutcomeUnknown: a write that is not safe to retry reached a
	// leader that lost leadership (or the connection broke) before it
	// answered; it may or may not have been applied.
	ErrOutcomeUnknown = errors.New("swarmkv: outcome unknown")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("swarmkv: client closed")
	// ErrPermissionDenied: the actor may not do this to the record (gRPC
	// PermissionDenied): another user's private pool, a pool or bot the
	// actor does not own. The record exists; nothing was changed.
	ErrPermissionDenied = errors.New("swarmkv: permission denied")
	// ErrAlreadyExists: a create found its record already there (gRPC
	// AlreadyExists): a taken pool id, an agent id registered in any
	// pool. Nothing was changed.
	ErrAlreadyExists = errors.New("swarmkv: already exists")
)

// NotLeaderError is returned when a request reached a replica that is not
// its shard's leader and no retry could reach the leader in time.
type NotLeaderError struct {
	Shard      uint32
	LeaderID   string // "" when unknown
	LeaderAddr string // gRPC address of the leader, "" when unknown
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return fmt.Sprintf("swarmkv: shard %d: not leader, leader unknown", e.Shard)
	}
	return fmt.Sprintf("swarmkv: shard %d: not leader, leader is %s at %s", e.Shard, e.LeaderID, e.LeaderAddr)
}

// InsufficientCreditsError is returned by Billing.ProcessUsage (and a
// negative Billing.UpdateBalance) when the account's balance cannot cover
// the charge; nothing was changed. It is seed 001's InsufficientCredits.
type InsufficientCreditsError struct {
	Balance  int64 // the account's balance when the charge was refused, in cents
	Required int64 // what the charge needed, in cents
}

func (e *InsufficientCreditsError) Error() string {
	return fmt.Sprintf("swarmkv: insufficient credits: balance %d, required %d", e.Balance, e.Required)
}

// DuplicateEventError is returned by Billing.ProcessUsage when the usage
// event was already processed: the event has been charged exactly once, by
// an earlier call or by an earlier attempt of this call whose answer was
// lost. It is seed 001's DuplicateEvent.
type DuplicateEventError struct {
	EventID string
}

func (e *DuplicateEventError) Error() string {
	return fmt.Sprintf("swarmkv: usage event %q already processed", e.EventID)
}

// PoolNotEmptyError is returned by Pools.DeletePool without cascade when
// the pool still has bots; nothing was changed.
type PoolNotEmptyError struct {
	PoolID string
	Bots   int // how many bots the pool had
}

func (e *PoolNotEmptyError) Error() string {
	return fmt.Sprintf("swarmkv: pool %q has %d bots", e.PoolID, e.Bots)
}

// MovedError is returned when a request named a slot its shard no longer
// owns (the slot moved, or is moving, to another shard) and the client's
// shard map did not reach MapVersion before the context ended, so the
// request could not be sent to the new owner. The request was not
// executed. The client retries moved requests itself (refreshing its map
// until it names the new owner); a caller sees this error only when the
// move did not complete in time.
type MovedError struct {
	Slot        uint32
	TargetShard uint32 // the shard the slot moves to, when MapVersion > 0
	// MapVersion is the shard map version that gives the slot to
	// TargetShard; 0 when the answering shard knew no move of the slot.
	MapVersion uint64
}

func (e *MovedError) Error() string {
	if e.MapVersion == 0 {
		return fmt.Sprintf("swarmkv: slot %d is not owned by the shard that was asked (moving)", e.Slot)
	}
	return fmt.Sprintf("swarmkv: slot %d moved to shard %d (map version %d)", e.Slot, e.TargetShard, e.MapVersion)
}

// errClass says what the retry loop does with an error.
type errClass int

const (
	classFatal     errClass = iota // return as is
	classNotLeader                 // definite: not executed; follow the hint
	classRetry                     // definite: not executed; try another replica
	classAmbiguous                 // may have executed; retry only idempotent calls
	classMoved                     // definite: not executed; refresh the map, send to the new owner
)

// retryClass is the loop's class of each retry rule of the kinds' table
// (rpc/status.go).
var retryClass = map[rpc.Retry]errClass{
	rpc.RetryNever:        classFatal,
	rpc.RetryLeader:       classNotLeader,
	rpc.RetrySafe:         classRetry,
	rpc.RetryIfIdempotent: classAmbiguous,
	rpc.RetryMoved:        classMoved,
}

// kindErrors is the client error of each kind that answers with a sentinel
// (wrapped with the status message); kindError builds the typed ones, and
// the other kinds return the status error as is.
var kindErrors = map[rpc.Kind]error{
	rpc.KindInvalidArgument:  ErrInvalidArgument,
	rpc.KindNotFound:         ErrNotFound,
	rpc.KindAlreadyExists:    ErrAlreadyExists,
	rpc.KindPermissionDenied: ErrPermissionDenied,
	rpc.KindUnavailable:      ErrUnavailable,
	rpc.KindUnreachable:      ErrUnavailable,
	rpc.KindOutcomeUnknown:   ErrOutcomeUnknown,
}

// kindError is the client error of kind k for the status error err (with
// status st and the detail that decided the kind).
func kindError(err error, st *status.Status, k rpc.Kind, detail proto.Message) error {
	switch d := detail.(type) {
	case *rpc.NotLeader:
		return &NotLeaderError{Shard: d.GetShard(), LeaderID: d.GetLeaderId(), LeaderAddr: d.GetLeaderAddr()}
	case *rpc.InsufficientCredits:
		return &InsufficientCreditsError{Balance: d.GetBalance(), Required: d.GetRequired()}
	case *rpc.DuplicateEvent:
		return &DuplicateEventError{EventID: d.GetEventId()}
	case *rpc.PoolNotEmpty:
		return &PoolNotEmptyError{PoolID: d.GetPoolId(), Bots: int(d.GetBots())}
	case *rpc.Moved:
		return &MovedError{Slot: d.GetSlot(), TargetShard: d.GetTargetShard(), MapVersion: d.GetMapVersion()}
	}
	switch k {
	case rpc.KindDeadlineExceeded:
		return fmt.Errorf("%w: %w: %s", ErrOutcomeUnknown, context.DeadlineExceeded, st.Message())
	case rpc.KindCanceled:
		return fmt.Errorf("%w: %s", context.Canceled, st.Message())
	}
	if s := kindErrors[k]; s != nil {
		return fmt.Errorf("%w: %s", s, st.Message())
	}
	if k == rpc.KindFailedPrecondition && strings.Contains(st.Message(), leaseFullText) {
		return fmt.Errorf("%w: %s", ErrLeaseFull, st.Message())
	}
	return err
}

// classify turns a gRPC error into a client error and its retry class,
// through the kinds' table (rpc.KindOf).
func classify(err error) (error, errClass, *rpc.NotLeader) {
	st, ok := status.FromError(err)
	if !ok {
		return err, classFatal, nil
	}
	k, detail := rpc.KindOf(st)
	class := retryClass[k.Retry()]
	if k == rpc.KindUnreachable && strings.Contains(st.Message(), "Error while dialing") {
		// No connection to the node: the request never left, so it is
		// safe to send elsewhere (as to a node that is not leader).
		class = classNotLeader
	}
	hint, _ := detail.(*rpc.NotLeader)
	return kindError(err, st, k, detail), class, hint
}
