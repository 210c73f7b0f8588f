package cluster

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/cluster/shardmove"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/secrets"
	"github.com/swarmkv/swarmkv/shard"
)

// ErrInvalidArgument is wrapped by every request validation error (the
// core's and package api's); the table below answers it with
// codes.InvalidArgument and the message. It is the replica's error of the
// same name (a bad ChangeConfig).
var ErrInvalidArgument = replica.ErrInvalidArgument

// Errors a replica returns (package cluster/replica defines them; these
// are the same values, so errors.Is matches either name).
var (
	// ErrNotLeader: this replica is not the shard leader.
	ErrNotLeader = replica.ErrNotLeader
	// ErrLeaderNotReady: this replica just became leader and has not yet
	// committed an entry of its term; linearizable reads must wait.
	ErrLeaderNotReady = replica.ErrLeaderNotReady
	// ErrOutcomeUnknown: a proposal was handed to Raft but leadership was
	// lost before it committed; it may or may not be applied.
	ErrOutcomeUnknown = replica.ErrOutcomeUnknown
	// ErrClosed: the node is shutting down.
	ErrClosed = replica.ErrClosed
)

// errKinds is the one table from a node's Go errors to their kinds
// (rpc.Kind gives each its gRPC code, detail, HTTP status and retry rule).
// The first row whose error the error wraps wins. msg, when set, replaces
// the error's text in the status.
var errKinds = []struct {
	err  error
	kind rpc.Kind
	msg  string
}{
	{fsm.ErrNotFound, rpc.KindNotFound, "not found"},
	{fsm.ErrLeaseNotFound, rpc.KindNotFound, ""},
	{replica.ErrLeaseLimit, rpc.KindFailedPrecondition, ""},
	// An attachment over the lease's key bound (Config.MaxKeysPerLease).
	{fsm.ErrLeaseFull, rpc.KindFailedPrecondition, ""},
	// A grant whose random id was taken, three times: send it again.
	{fsm.ErrLeaseIDTaken, rpc.KindUnavailable, ""},
	// A lease command of an earlier term: that leadership is over.
	{fsm.ErrStaleLeaseCommand, rpc.KindUnavailable, ""},
	{fsm.ErrPermissionDenied, rpc.KindPermissionDenied, ""},
	{fsm.ErrAlreadyExists, rpc.KindAlreadyExists, ""},
	{records.ErrInvalid, rpc.KindInvalidArgument, ""},
	{rpc.ErrBadID, rpc.KindInvalidArgument, ""},
	{keys.ErrMalformed, rpc.KindInvalidArgument, ""},
	{keys.ErrInvalidEventID, rpc.KindInvalidArgument, ""},
	{keys.ErrInvalidID, rpc.KindInvalidArgument, ""},
	{errNoTokenKeys, rpc.KindFailedPrecondition, errNoTokenKeys.Error()},
	{secrets.ErrNoRing, rpc.KindFailedPrecondition, errNoTokenKeys.Error()},
	// A token sealed under a key this node's ring lacks: a configuration
	// problem (every node needs the same ring).
	{secrets.ErrUnknownKey, rpc.KindFailedPrecondition, ""},
	{secrets.ErrDecrypt, rpc.KindUnknown, ""},
	{ErrInvalidArgument, rpc.KindInvalidArgument, ""},
	{authn.ErrInvalidArgument, rpc.KindInvalidArgument, ""}, // token requests
	{ErrTokenNotFound, rpc.KindNotFound, ""},
	// Slot moves: a plan the state refuses (unknown shard, already
	// moving, ...), a move step a state machine refuses.
	{placement.ErrMoveNotFound, rpc.KindNotFound, ""},
	{placement.ErrMoveRefused, rpc.KindFailedPrecondition, ""},
	{shardmove.ErrRefused, rpc.KindFailedPrecondition, ""},
	{fsm.ErrMoveConflict, rpc.KindFailedPrecondition, ""},
	{placement.ErrMoveInProgress, rpc.KindFailedPrecondition, ""}, // no backup during a move
	{fsm.ErrInvalidCommand, rpc.KindInvalidArgument, ""},
	// A command the cluster's protocol version does not allow yet
	// (version.go: CheckCommand).
	{ErrProtocolVersion, rpc.KindFailedPrecondition, ""},
	{ErrNotLeader, rpc.KindNotLeader, "not the leader of shard"},
	{errMetaNotLeader, rpc.KindNotLeader, ""},
	{ErrLeaderNotReady, rpc.KindUnavailable, ""},
	{errNotBootstrapped, rpc.KindUnavailable, ""},
	{errShardPending, rpc.KindUnavailable, ""}, // a map newer than the node's may name the shard
	{ErrClosed, rpc.KindUnavailable, ""},
	{ErrOutcomeUnknown, rpc.KindOutcomeUnknown, ""},
	{context.DeadlineExceeded, rpc.KindDeadlineExceeded, ""},
	{context.Canceled, rpc.KindCanceled, ""},
}

// ErrorKind is the kind of err: the state machine's typed errors, then the
// first row of errKinds err wraps; a gRPC status error is read back with
// rpc.KindOf. Anything else is rpc.KindUnknown (codes.Internal).
func ErrorKind(err error) rpc.Kind {
	k, _, _ := errorKind(err)
	return k
}

// errorKind is ErrorKind with the status text and the detail taken from
// the error (the state machine's typed errors).
func errorKind(err error) (rpc.Kind, string, proto.Message) {
	if st, ok := status.FromError(err); ok {
		k, d := rpc.KindOf(st)
		return k, st.Message(), d
	}
	var ic *fsm.InsufficientCreditsError
	var de *fsm.DuplicateEventError
	var pne *fsm.PoolNotEmptyError
	var me *fsm.MovedError
	switch {
	case errors.Is(err, fsm.ErrNotFound):
		// Not found wins over the typed errors: errKinds' first row.
	case errors.As(err, &ic):
		return rpc.KindInsufficientCredits, err.Error(), &rpc.InsufficientCredits{Balance: ic.Balance, Required: ic.Required}
	case errors.As(err, &de):
		return rpc.KindDuplicateEvent, err.Error(), &rpc.DuplicateEvent{EventId: de.EventID}
	case errors.As(err, &pne):
		return rpc.KindPoolNotEmpty, err.Error(), &rpc.PoolNotEmpty{PoolId: pne.PoolID, Bots: uint32(pne.Bots)}
	case errors.As(err, &me):
		return rpc.KindMoved, err.Error(), &rpc.Moved{Slot: uint32(me.Slot), TargetShard: uint32(me.Target), MapVersion: me.MapVersion}
	}
	for _, r := range errKinds {
		if errors.Is(err, r.err) {
			if r.msg != "" {
				return r.kind, r.msg, nil
			}
			return r.kind, err.Error(), nil
		}
	}
	return rpc.KindUnknown, err.Error(), nil
}

// StatusError turns err into a gRPC status error through errKinds: its
// kind's code and, where the kind carries one, its typed detail (NotLeader
// and RetryInfo name shard id; hint, when not nil, fills NotLeader's
// leader; a *fsm.MovedError gets the Moved detail, then a RetryInfo). A status error passes through unchanged; nil stays nil.
func StatusError(err error, id shard.ID, hint func() (leaderID, leaderAddr string)) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	k, msg, d := errorKind(err)
	switch k {
	case rpc.KindNotLeader:
		nl := &rpc.NotLeader{Shard: uint32(id)}
		if hint != nil {
			nl.LeaderId, nl.LeaderAddr = hint()
		}
		d = nl
	case rpc.KindUnavailable:
		d = &rpc.RetryInfo{Shard: uint32(id), RetryAfterMs: 50}
	case rpc.KindMoved:
		return k.Status(msg, rpc.MovedDetails(d.(*rpc.Moved), uint32(id))...)
	}
	return k.Status(msg, d)
}

// HTTPStatus is the admin API's HTTP status for err (a Go error of a node
// or a gRPC status error), from the same table.
func HTTPStatus(err error) int { return ErrorKind(err).HTTPStatus() }
