package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/secrets"
)

// TestErrorRoundTrip sends every server error through the one table
// (cluster.StatusError, rpc/status.go), the wire form of its status and the
// client's classification, and checks the client error and retry class of
// its kind. It enumerates the table: a kind without a client expectation
// here, or without a server error that maps to it, fails.
func TestErrorRoundTrip(t *testing.T) {
	sentinels := map[string]error{
		"ErrNotFound":         client.ErrNotFound,
		"ErrInvalidArgument":  client.ErrInvalidArgument,
		"ErrUnavailable":      client.ErrUnavailable,
		"ErrOutcomeUnknown":   client.ErrOutcomeUnknown,
		"ErrClosed":           client.ErrClosed,
		"ErrPermissionDenied": client.ErrPermissionDenied,
		"ErrAlreadyExists":    client.ErrAlreadyExists,
		"DeadlineExceeded":    context.DeadlineExceeded,
		"Canceled":            context.Canceled,
	}
	type want struct {
		sentinels []string         // the sentinels the client error wraps (errors.Is); no others
		typed     func(error) bool // the typed error it is (errors.As), nil for none
		same      bool             // the client error is the status error itself
		class     string           // the retry loop's class
	}
	wants := map[rpc.Kind]want{
		rpc.KindUnknown:             {same: true, class: "fatal"},
		rpc.KindInvalidArgument:     {sentinels: []string{"ErrInvalidArgument"}, class: "fatal"},
		rpc.KindNotFound:            {sentinels: []string{"ErrNotFound"}, class: "fatal"},
		rpc.KindAlreadyExists:       {sentinels: []string{"ErrAlreadyExists"}, class: "fatal"},
		rpc.KindDuplicateEvent:      {typed: typed(client.DuplicateEventError{EventID: "evt-1"}), class: "fatal"},
		rpc.KindPermissionDenied:    {sentinels: []string{"ErrPermissionDenied"}, class: "fatal"},
		rpc.KindFailedPrecondition:  {same: true, class: "fatal"},
		rpc.KindNotLeader:           {typed: typed(client.NotLeaderError{Shard: 3, LeaderID: "n2", LeaderAddr: "10.0.0.2:7100"}), class: "not leader"},
		rpc.KindInsufficientCredits: {typed: typed(client.InsufficientCreditsError{Balance: 40, Required: 250}), class: "fatal"},
		rpc.KindPoolNotEmpty:        {typed: typed(client.PoolNotEmptyError{PoolID: "pool_a", Bots: 3}), class: "fatal"},
		rpc.KindUnavailable:         {sentinels: []string{"ErrUnavailable"}, class: "retry"},
		rpc.KindUnreachable:         {sentinels: []string{"ErrUnavailable"}, class: "ambiguous"},
		rpc.KindOutcomeUnknown:      {sentinels: []string{"ErrOutcomeUnknown"}, class: "ambiguous"},
		rpc.KindDeadlineExceeded:    {sentinels: []string{"ErrOutcomeUnknown", "DeadlineExceeded"}, class: "ambiguous"},
		rpc.KindCanceled:            {sentinels: []string{"Canceled"}, class: "fatal"},
		rpc.KindMoved:               {typed: typed(client.MovedError{Slot: 17, TargetShard: 2, MapVersion: 9}), class: "moved"},
	}
	// Every error a node answers with, and its kind. The transport's own
	// failures (KindUnreachable) come as status errors, which pass through.
	serverErrs := []struct {
		err  error
		kind rpc.Kind
	}{
		{fsm.ErrNotFound, rpc.KindNotFound},
		{fmt.Errorf("get: %w", fsm.ErrNotFound), rpc.KindNotFound},
		{fsm.ErrPermissionDenied, rpc.KindPermissionDenied},
		{fsm.ErrAlreadyExists, rpc.KindAlreadyExists},
		{&fsm.DuplicateEventError{EventID: "evt-1"}, rpc.KindDuplicateEvent},
		{&fsm.InsufficientCreditsError{Balance: 40, Required: 250}, rpc.KindInsufficientCredits},
		{fmt.Errorf("apply: %w", &fsm.PoolNotEmptyError{PoolID: "pool_a", Bots: 3}), rpc.KindPoolNotEmpty},
		{cluster.ErrInvalidArgument, rpc.KindInvalidArgument},
		{fsm.ErrInvalidCommand, rpc.KindInvalidArgument},
		{records.ErrInvalid, rpc.KindInvalidArgument},
		{rpc.ErrBadID, rpc.KindInvalidArgument},
		{keys.ErrMalformed, rpc.KindInvalidArgument},
		{keys.ErrInvalidEventID, rpc.KindInvalidArgument},
		{keys.ErrInvalidID, rpc.KindInvalidArgument},
		{secrets.ErrNoRing, rpc.KindFailedPrecondition},
		{secrets.ErrUnknownKey, rpc.KindFailedPrecondition},
		{secrets.ErrDecrypt, rpc.KindUnknown},
		{errors.New("pebble: disk full"), rpc.KindUnknown},
		{cluster.ErrNotLeader, rpc.KindNotLeader},
		{cluster.ErrLeaderNotReady, rpc.KindUnavailable},
		{cluster.ErrClosed, rpc.KindUnavailable},
		{cluster.ErrOutcomeUnknown, rpc.KindOutcomeUnknown},
		{fmt.Errorf("propose: %w", cluster.ErrOutcomeUnknown), rpc.KindOutcomeUnknown},
		{context.DeadlineExceeded, rpc.KindDeadlineExceeded},
		{context.Canceled, rpc.KindCanceled},
		{status.Error(codes.Unavailable, "connection reset by peer"), rpc.KindUnreachable},
		{&fsm.MovedError{Slot: 17, Target: 2, MapVersion: 9}, rpc.KindMoved},
		{fmt.Errorf("apply: %w", &fsm.MovedError{Slot: 17, Target: 2, MapVersion: 9}), rpc.KindMoved},
	}
	hint := func() (string, string) { return "n2", "10.0.0.2:7100" }
	covered := map[rpc.Kind]bool{}
	for _, se := range serverErrs {
		t.Run(fmt.Sprintf("%s/%v", se.kind, se.err), func(t *testing.T) {
			if k := cluster.ErrorKind(se.err); k != se.kind {
				t.Fatalf("cluster.ErrorKind(%v) = %s, want %s", se.err, k, se.kind)
			}
			covered[se.kind] = true
			w, ok := wants[se.kind]
			if !ok {
				t.Fatalf("kind %s has no client expectation", se.kind)
			}
			serr := cluster.StatusError(se.err, 3, hint)
			st := status.Convert(serr)
			if st.Code() != se.kind.Code() {
				t.Errorf("code %s, want %s", st.Code(), se.kind.Code())
			}
			if got := cluster.HTTPStatus(se.err); got != se.kind.HTTPStatus() || cluster.HTTPStatus(serr) != got {
				t.Errorf("HTTP status %d for the error, %d for its status, want %d", got, cluster.HTTPStatus(serr), se.kind.HTTPStatus())
			}
			wire := status.ErrorProto(st.Proto()) // as the client receives it
			if k, _ := rpc.KindOf(status.Convert(wire)); k != se.kind {
				t.Errorf("rpc.KindOf the received status = %s, want %s", k, se.kind)
			}
			got, class := client.ClassifyForTest(wire)
			if class != w.class {
				t.Errorf("class %s, want %s", class, w.class)
			}
			if w.same && got != wire {
				t.Errorf("client error %v, want the status error itself", got)
			}
			for name, s := range sentinels {
				if is, want := errors.Is(got, s), slices.Contains(w.sentinels, name); is != want {
					t.Errorf("errors.Is(%v, %s) = %t, want %t", got, name, is, want)
				}
			}
			if w.typed != nil && !w.typed(got) {
				t.Errorf("client error %#v is not the typed error of its kind", got)
			}
		})
	}
	for _, ks := range rpc.Kinds() {
		if _, ok := wants[ks.Kind]; !ok {
			t.Errorf("kind %s has no client expectation", ks.Kind)
		}
		if !covered[ks.Kind] {
			t.Errorf("kind %s: no server error maps to it", ks.Kind)
		}
	}
}

// typed reports whether an error is (errors.As) a *T equal to want.
func typed[T comparable, P interface {
	*T
	error
}](want T) func(error) bool {
	return func(err error) bool {
		var e P
		return errors.As(err, &e) && *e == want
	}
}
