package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// errClass says what the retry loop does with an error.
type errClass int

const (
	classFatal     errClass = iota // return as is
	classNotLeader                 // definite: not executed; follow the hint
	classRetry                     // definite: not executed; try another replica
	classAmbiguous                 // may have executed; retry only idempotent calls
)

// classify turns a gRPC error into a client error and its retry class.
func classify(err error) (error, errClass, *rpc.NotLeader) {
	st, ok := status.FromError(err)
	if !ok {
		return err, classFatal, nil
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrInvalidArgument, st.Message()), classFatal, nil
	case codes.NotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, st.Message()), classFatal, nil
	case codes.FailedPrecondition:
		for _, d := range st.Details() {
			if nl, ok := d.(*rpc.NotLeader); ok {
				return &NotLeaderError{Shard: nl.GetShard(), LeaderID: nl.GetLeaderId(), LeaderAddr: nl.GetLeaderAddr()}, classNotLeader, nl
			}
			if ic, ok := d.(*rpc.InsufficientCredits); ok {
				return &InsufficientCreditsError{Balance: ic.GetBalance(), Required: ic.GetRequired()}, classFatal, nil
			}
			if pn, ok := d.(*rpc.PoolNotEmpty); ok {
				return &PoolNotEmptyError{PoolID: pn.GetPoolId(), Bots: int(pn.GetBots())}, classFatal, nil
			}
		}
		return err, classFatal, nil
	case codes.AlreadyExists:
		for _, d := range st.Details() {
			if de, ok := d.(*rpc.DuplicateEvent); ok {
				return &DuplicateEventError{EventID: de.GetEventId()}, classFatal, nil
			}
		}
		return fmt.Errorf("%w: %s", ErrAlreadyExists, st.Message()), classFatal, nil
	case codes.PermissionDenied:
		return fmt.Errorf("%w: %s", ErrPermissionDenied, st.Message()), classFatal, nil
	case codes.Unavailable:
		for _, d := range st.Details() {
			if _, ok := d.(*rpc.RetryInfo); ok {
				// The server says it did not execute the request.
				return fmt.Errorf("%w: %s", ErrUnavailable, st.Message()), classRetry, nil
			}
		}
		if strings.Contains(st.Message(), "Error while dialing") {
			// No connection to the node: the request never left, so it
			// is safe to send elsewhere (as to a node that is not leader).
			return fmt.Errorf("%w: %s", ErrUnavailable, st.Message()), classNotLeader, nil
		}
		// A transport failure: the request may have been sent.
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Message()), classAmbiguous, nil
	case codes.Aborted:
		return fmt.Errorf("%w: %s", ErrOutcomeUnknown, st.Message()), classAmbiguous, nil
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %w: %s", ErrOutcomeUnknown, context.DeadlineExceeded, st.Message()), classAmbiguous, nil
	case codes.Canceled:
		return fmt.Errorf("%w: %s", context.Canceled, st.Message()), classFatal, nil
	}
	return err, classFatal, nil
}
