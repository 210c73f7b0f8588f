package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/swarmkv/swarmkv/rpc"
)

// statusErr builds a gRPC status error with details, as the server does,
// and passes it through its wire form (the proto) like a real call.
func statusErr(t *testing.T, c codes.Code, msg string, details ...proto.Message) error {
	t.Helper()
	st := status.New(c, msg)
	for _, d := range details {
		var err error
		if st, err = st.WithDetails(protoadapt.MessageV1Of(d)); err != nil {
			t.Fatalf("WithDetails: %v", err)
		}
	}
	return status.ErrorProto(st.Proto())
}

func TestClassify(t *testing.T) {
	sentinels := map[string]error{
		"ErrNotFound":         ErrNotFound,
		"ErrInvalidArgument":  ErrInvalidArgument,
		"ErrUnavailable":      ErrUnavailable,
		"ErrOutcomeUnknown":   ErrOutcomeUnknown,
		"ErrClosed":           ErrClosed,
		"ErrPermissionDenied": ErrPermissionDenied,
		"ErrAlreadyExists":    ErrAlreadyExists,
	}
	notLeader := &rpc.NotLeader{Shard: 3, LeaderId: "n2", LeaderAddr: "127.0.0.1:27100"}
	retry := &rpc.RetryInfo{Shard: 3, RetryAfterMs: 50}
	plain := errors.New("dial tcp: connection refused")
	for _, tc := range []struct {
		name     string
		err      func(t *testing.T) error
		sentinel string // the one sentinel the result wraps; "" = none
		same     bool   // the result is the input error itself
		ctxErr   error  // the result also wraps this context error
		class    errClass
		msg      string         // in the result's message
		hint     *rpc.NotLeader // the hint returned, and the NotLeaderError's fields
		credits  *InsufficientCreditsError
		dup      *DuplicateEventError
		notEmpty *PoolNotEmptyError
	}{
		{name: "invalid argument", sentinel: "ErrInvalidArgument", class: classFatal, msg: "key is empty",
			err: func(t *testing.T) error { return statusErr(t, codes.InvalidArgument, "invalid argument: key is empty") }},
		{name: "not found", sentinel: "ErrNotFound", class: classFatal, msg: "no such key",
			err: func(t *testing.T) error { return statusErr(t, codes.NotFound, "no such key") }},
		{name: "not leader with hint", class: classNotLeader, hint: notLeader,
			msg: "swarmkv: shard 3: not leader, leader is n2 at 127.0.0.1:27100",
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "not the leader of shard", notLeader)
			}},
		{name: "not leader, leader unknown", class: classNotLeader, hint: &rpc.NotLeader{Shard: 7},
			msg: "swarmkv: shard 7: not leader, leader unknown",
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "not the leader of shard", &rpc.NotLeader{Shard: 7})
			}},
		{name: "not leader after another detail", class: classNotLeader, hint: notLeader,
			msg: "leader is n2",
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "not the leader of shard", retry, notLeader)
			}},
		{name: "failed precondition without details", same: true, class: classFatal, msg: "code = FailedPrecondition",
			err: func(t *testing.T) error { return statusErr(t, codes.FailedPrecondition, "not the leader of shard") }},
		{name: "failed precondition with another detail", same: true, class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "not the leader of shard", retry)
			}},
		{name: "insufficient credits", class: classFatal, credits: &InsufficientCreditsError{Balance: 40, Required: 250},
			msg: "swarmkv: insufficient credits: balance 40, required 250",
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "fsm: insufficient credits", &rpc.InsufficientCredits{Balance: 40, Required: 250})
			}},
		{name: "insufficient credits after another detail", class: classFatal, credits: &InsufficientCreditsError{Balance: 0, Required: 1},
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "fsm: insufficient credits", retry, &rpc.InsufficientCredits{Balance: 0, Required: 1})
			}},
		{name: "insufficient credits with a zero detail", class: classFatal, credits: &InsufficientCreditsError{},
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "fsm: insufficient credits", &rpc.InsufficientCredits{})
			}},
		{name: "duplicate event", class: classFatal, dup: &DuplicateEventError{EventID: "evt-7"},
			msg: `swarmkv: usage event "evt-7" already processed`,
			err: func(t *testing.T) error {
				return statusErr(t, codes.AlreadyExists, "fsm: duplicate event", &rpc.DuplicateEvent{EventId: "evt-7"})
			}},
		{name: "duplicate event after another detail", class: classFatal, dup: &DuplicateEventError{EventID: "e"},
			err: func(t *testing.T) error {
				return statusErr(t, codes.AlreadyExists, "fsm: duplicate event", notLeader, &rpc.DuplicateEvent{EventId: "e"})
			}},
		{name: "already exists without details", sentinel: "ErrAlreadyExists", class: classFatal, msg: "swarmkv: already exists: fsm: agent_id taken",
			err: func(t *testing.T) error { return statusErr(t, codes.AlreadyExists, "fsm: agent_id taken") }},
		{name: "already exists with an insufficient-credits detail", sentinel: "ErrAlreadyExists", class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.AlreadyExists, "exists", &rpc.InsufficientCredits{Balance: 1, Required: 2})
			}},
		{name: "already exists with a pool-not-empty detail", sentinel: "ErrAlreadyExists", class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.AlreadyExists, "exists", &rpc.PoolNotEmpty{PoolId: "p", Bots: 1})
			}},
		{name: "wrapped already exists", sentinel: "ErrAlreadyExists", class: classFatal, msg: "attempt 1",
			err: func(t *testing.T) error {
				return fmt.Errorf("attempt 1: %w", statusErr(t, codes.AlreadyExists, "pool_id taken"))
			}},
		{name: "permission denied", sentinel: "ErrPermissionDenied", class: classFatal, msg: "swarmkv: permission denied: fsm: pool is private",
			err: func(t *testing.T) error { return statusErr(t, codes.PermissionDenied, "fsm: pool is private") }},
		{name: "permission denied with a not-leader detail", sentinel: "ErrPermissionDenied", class: classFatal,
			err: func(t *testing.T) error { return statusErr(t, codes.PermissionDenied, "not owner", notLeader) }},
		{name: "permission denied with a pool-not-empty detail", sentinel: "ErrPermissionDenied", class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.PermissionDenied, "not owner", &rpc.PoolNotEmpty{PoolId: "p", Bots: 3})
			}},
		{name: "unauthenticated", same: true, class: classFatal,
			err: func(t *testing.T) error { return statusErr(t, codes.Unauthenticated, "who are you") }},
		{name: "pool not empty", class: classFatal, notEmpty: &PoolNotEmptyError{PoolID: "pool_alpha", Bots: 3},
			msg: `swarmkv: pool "pool_alpha" has 3 bots`,
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "fsm: pool not empty", &rpc.PoolNotEmpty{PoolId: "pool_alpha", Bots: 3})
			}},
		{name: "pool not empty after another detail", class: classFatal, notEmpty: &PoolNotEmptyError{PoolID: "p", Bots: 1},
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "fsm: pool not empty", retry, &rpc.PoolNotEmpty{PoolId: "p", Bots: 1})
			}},
		{name: "pool not empty with a zero detail", class: classFatal, notEmpty: &PoolNotEmptyError{},
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "fsm: pool not empty", &rpc.PoolNotEmpty{})
			}},
		{name: "wrapped pool not empty", class: classFatal, notEmpty: &PoolNotEmptyError{PoolID: "q", Bots: 70000},
			err: func(t *testing.T) error {
				return fmt.Errorf("attempt 3: %w", statusErr(t, codes.FailedPrecondition, "pool not empty", &rpc.PoolNotEmpty{PoolId: "q", Bots: 70000}))
			}},
		{name: "not leader before pool not empty", class: classNotLeader, hint: notLeader,
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "not the leader of shard", notLeader, &rpc.PoolNotEmpty{PoolId: "p", Bots: 1})
			}},
		{name: "failed precondition without a ring", same: true, class: classFatal, msg: "no token key ring",
			err: func(t *testing.T) error {
				return statusErr(t, codes.FailedPrecondition, "no token key ring configured")
			}},
		{name: "not found with a pool-not-empty detail", sentinel: "ErrNotFound", class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.NotFound, "no pool", &rpc.PoolNotEmpty{PoolId: "p", Bots: 1})
			}},
		{name: "invalid argument with a duplicate-event detail", sentinel: "ErrInvalidArgument", class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.InvalidArgument, "event_id is empty", &rpc.DuplicateEvent{EventId: "x"})
			}},
		{name: "not found with an insufficient-credits detail", sentinel: "ErrNotFound", class: classFatal,
			err: func(t *testing.T) error {
				return statusErr(t, codes.NotFound, "no account", &rpc.InsufficientCredits{Balance: 1, Required: 2})
			}},
		{name: "wrapped insufficient credits", class: classFatal, credits: &InsufficientCreditsError{Balance: 5, Required: 6},
			err: func(t *testing.T) error {
				return fmt.Errorf("attempt 1: %w", statusErr(t, codes.FailedPrecondition, "insufficient", &rpc.InsufficientCredits{Balance: 5, Required: 6}))
			}},
		{name: "unavailable with retry info", sentinel: "ErrUnavailable", class: classRetry, msg: "leader not ready",
			err: func(t *testing.T) error { return statusErr(t, codes.Unavailable, "leader not ready", retry) }},
		{name: "unavailable with retry info after another detail", sentinel: "ErrUnavailable", class: classRetry,
			err: func(t *testing.T) error { return statusErr(t, codes.Unavailable, "no leader", notLeader, retry) }},
		{name: "unavailable from the transport", sentinel: "ErrUnavailable", class: classAmbiguous, msg: "connection reset",
			err: func(t *testing.T) error { return statusErr(t, codes.Unavailable, "connection reset") }},
		{name: "unavailable: dial failed, never sent", sentinel: "ErrUnavailable", class: classNotLeader, msg: "connection refused",
			err: func(t *testing.T) error {
				return statusErr(t, codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)
			}},
		{name: "unavailable with a not-leader detail", sentinel: "ErrUnavailable", class: classAmbiguous,
			err: func(t *testing.T) error { return statusErr(t, codes.Unavailable, "closing", notLeader) }},
		{name: "aborted", sentinel: "ErrOutcomeUnknown", class: classAmbiguous, msg: "leadership lost",
			err: func(t *testing.T) error { return statusErr(t, codes.Aborted, "leadership lost") }},
		{name: "deadline exceeded", sentinel: "ErrOutcomeUnknown", class: classAmbiguous, msg: "deadline", ctxErr: context.DeadlineExceeded,
			err: func(t *testing.T) error { return status.FromContextError(context.DeadlineExceeded).Err() }},
		{name: "canceled", class: classFatal, ctxErr: context.Canceled,
			err: func(t *testing.T) error { return status.FromContextError(context.Canceled).Err() }},
		{name: "internal", same: true, class: classFatal,
			err: func(t *testing.T) error { return statusErr(t, codes.Internal, "pebble: disk full") }},
		{name: "resource exhausted", same: true, class: classFatal,
			err: func(t *testing.T) error { return statusErr(t, codes.ResourceExhausted, "message too large") }},
		{name: "unimplemented", same: true, class: classFatal,
			err: func(t *testing.T) error { return statusErr(t, codes.Unimplemented, "unknown method") }},
		{name: "unknown code", same: true, class: classFatal,
			err: func(t *testing.T) error { return statusErr(t, codes.Code(99), "from the future") }},
		{name: "not a status", same: true, class: classFatal,
			err: func(*testing.T) error { return plain }},
		{name: "wrapped status", sentinel: "ErrInvalidArgument", class: classFatal, msg: "attempt 2",
			err: func(t *testing.T) error {
				return fmt.Errorf("attempt 2: %w", statusErr(t, codes.InvalidArgument, "key is empty"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.err(t)
			got, class, hint := classify(in)
			if got == nil {
				t.Fatalf("classify(%v) returned a nil error", in)
			}
			if class != tc.class {
				t.Errorf("class %d, want %d", class, tc.class)
			}
			if tc.ctxErr != nil && !errors.Is(got, tc.ctxErr) {
				t.Errorf("errors.Is(%v, %v) = false", got, tc.ctxErr)
			}
			if tc.same && got != in {
				t.Errorf("returned %v, want the input error %v", got, in)
			}
			for name, s := range sentinels {
				if is := errors.Is(got, s); is != (name == tc.sentinel) {
					t.Errorf("errors.Is(%v, %s) = %t", got, name, is)
				}
			}
			if !strings.Contains(got.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", got, tc.msg)
			}
			var ice *InsufficientCreditsError
			if isIC := errors.As(got, &ice); isIC != (tc.credits != nil) {
				t.Errorf("errors.As(%v, *InsufficientCreditsError) = %t", got, isIC)
			} else if isIC && *ice != *tc.credits {
				t.Errorf("InsufficientCreditsError %+v, want %+v", *ice, *tc.credits)
			}
			var dee *DuplicateEventError
			if isDup := errors.As(got, &dee); isDup != (tc.dup != nil) {
				t.Errorf("errors.As(%v, *DuplicateEventError) = %t", got, isDup)
			} else if isDup && *dee != *tc.dup {
				t.Errorf("DuplicateEventError %+v, want %+v", *dee, *tc.dup)
			}
			var pne *PoolNotEmptyError
			if isPNE := errors.As(got, &pne); isPNE != (tc.notEmpty != nil) {
				t.Errorf("errors.As(%v, *PoolNotEmptyError) = %t", got, isPNE)
			} else if isPNE && *pne != *tc.notEmpty {
				t.Errorf("PoolNotEmptyError %+v, want %+v", *pne, *tc.notEmpty)
			}
			var nle *NotLeaderError
			isNL := errors.As(got, &nle)
			if tc.hint == nil {
				if isNL || hint != nil {
					t.Fatalf("got a NotLeaderError %v and hint %v, want neither", nle, hint)
				}
				return
			}
			if !isNL {
				t.Fatalf("%v is not a *NotLeaderError", got)
			}
			want := NotLeaderError{Shard: tc.hint.GetShard(), LeaderID: tc.hint.GetLeaderId(), LeaderAddr: tc.hint.GetLeaderAddr()}
			if *nle != want {
				t.Errorf("NotLeaderError %+v, want %+v", *nle, want)
			}
			if !proto.Equal(hint, tc.hint) {
				t.Errorf("hint %v, want %v", hint, tc.hint)
			}
		})
	}
}

func TestNotLeaderErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  NotLeaderError
		want string
	}{
		{NotLeaderError{Shard: 0}, "swarmkv: shard 0: not leader, leader unknown"},
		{NotLeaderError{Shard: 4, LeaderAddr: "a:1"}, "swarmkv: shard 4: not leader, leader unknown"},
		{NotLeaderError{Shard: 4, LeaderID: "n3", LeaderAddr: "10.0.0.3:7100"}, "swarmkv: shard 4: not leader, leader is n3 at 10.0.0.3:7100"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestDomainErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&InsufficientCreditsError{}, "swarmkv: insufficient credits: balance 0, required 0"},
		{&InsufficientCreditsError{Balance: -3, Required: 9}, "swarmkv: insufficient credits: balance -3, required 9"},
		{&DuplicateEventError{}, `swarmkv: usage event "" already processed`},
		{&DuplicateEventError{EventID: "a\"b"}, `swarmkv: usage event "a\"b" already processed`},
		{&PoolNotEmptyError{}, `swarmkv: pool "" has 0 bots`},
		{&PoolNotEmptyError{PoolID: "pool_goot27", Bots: 49}, `swarmkv: pool "pool_goot27" has 49 bots`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.err, got, tc.want)
		}
	}
}
