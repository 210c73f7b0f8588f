package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

// Errors returned by the client; classify with errors.Is and errors.As.
var (
	// ErrNotFound: the key (or record) does not exist.
	ErrNotFound = errors.New("swarmkv: not found")
	// ErrInvalidArgument: the server rejected the request as malformed or
	// over a limit; nothing was changed. The wrapped message says why.
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
		}
		return err, classFatal, nil
	case codes.Unavailable:
		for _, d := range st.Details() {
			if _, ok := d.(*rpc.RetryInfo); ok {
				// The server says it did not execute the request.
				return fmt.Errorf("%w: %s", ErrUnavailable, st.Message()), classRetry, nil
			}
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
