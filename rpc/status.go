package rpc

import (
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Kind is a class of error as it travels between a node and a client: the
// one table (kinds, below) gives each its gRPC code, the typed detail of
// errors.proto it carries, its HTTP status on the admin API and whether the
// caller may send the request again. The server maps its Go errors to a
// Kind (cluster.ErrorKind), the client maps a status back to a Kind (KindOf)
// and from there to its Go errors, so both sides read the same rows.
type Kind uint8

// The kinds. KindUnknown (the zero value) is every error the table does not
// name: codes.Internal from a node, any other code from elsewhere.
const (
	KindUnknown             Kind = iota
	KindInvalidArgument          // malformed request or over a limit; nothing changed
	KindNotFound                 // the key or record does not exist
	KindAlreadyExists            // a create found its record there
	KindDuplicateEvent           // the usage event was already charged
	KindPermissionDenied         // the actor may not do this
	KindFailedPrecondition       // a rule of the cluster refuses it (no token key ring, node not admissible)
	KindNotLeader                // not the shard's leader, or the shard is not here: follow the hint
	KindInsufficientCredits      // the balance cannot cover the charge
	KindPoolNotEmpty             // a pool with bots deleted without cascade
	KindUnavailable              // not executed (no leader yet, leader not ready, closing): send again
	KindUnreachable              // the transport failed (no RetryInfo): the request may have been sent
	KindOutcomeUnknown           // leadership lost after proposing: may have been applied
	KindDeadlineExceeded         // the deadline passed: may have been applied
	KindCanceled                 // the caller canceled
	KindMoved                    // the slot moved to another shard: not executed; refresh the map, send to the new owner
)

// Retry says what a caller may do with an error of a kind.
type Retry uint8

const (
	// RetryNever: a definite answer; sending the request again gives it again.
	RetryNever Retry = iota
	// RetryLeader: not executed; send it to the leader the NotLeader detail
	// names (or refresh the shard map).
	RetryLeader
	// RetrySafe: not executed; back off and send it again.
	RetrySafe
	// RetryIfIdempotent: may have been executed; send it again only when
	// executing it twice is the same as once.
	RetryIfIdempotent
	// RetryMoved: not executed; the slot is (being) moved to another
	// shard: refresh the shard map to at least the Moved detail's
	// map_version and send it to the slot's owner under that map.
	RetryMoved
)

// KindSpec is one row of the table.
type KindSpec struct {
	Kind   Kind
	Name   string
	Code   codes.Code
	Detail proto.Message // a zero message of the detail type the kind carries; nil for none
	HTTP   int           // the admin API's HTTP status
	Retry  Retry
}

// kinds is the table, indexed by Kind. A code with several kinds tells
// them apart by the detail; the kind without a detail is the one a status
// without a known detail gets.
var kinds = [...]KindSpec{
	KindUnknown:             {Name: "unknown", Code: codes.Internal, HTTP: http.StatusInternalServerError, Retry: RetryNever},
	KindInvalidArgument:     {Name: "invalid argument", Code: codes.InvalidArgument, HTTP: http.StatusBadRequest, Retry: RetryNever},
	KindNotFound:            {Name: "not found", Code: codes.NotFound, HTTP: http.StatusNotFound, Retry: RetryNever},
	KindAlreadyExists:       {Name: "already exists", Code: codes.AlreadyExists, HTTP: http.StatusConflict, Retry: RetryNever},
	KindDuplicateEvent:      {Name: "duplicate event", Code: codes.AlreadyExists, Detail: &DuplicateEvent{}, HTTP: http.StatusConflict, Retry: RetryNever},
	KindPermissionDenied:    {Name: "permission denied", Code: codes.PermissionDenied, HTTP: http.StatusForbidden, Retry: RetryNever},
	KindFailedPrecondition:  {Name: "failed precondition", Code: codes.FailedPrecondition, HTTP: http.StatusConflict, Retry: RetryNever},
	KindNotLeader:           {Name: "not leader", Code: codes.FailedPrecondition, Detail: &NotLeader{}, HTTP: http.StatusConflict, Retry: RetryLeader},
	KindInsufficientCredits: {Name: "insufficient credits", Code: codes.FailedPrecondition, Detail: &InsufficientCredits{}, HTTP: http.StatusConflict, Retry: RetryNever},
	KindPoolNotEmpty:        {Name: "pool not empty", Code: codes.FailedPrecondition, Detail: &PoolNotEmpty{}, HTTP: http.StatusConflict, Retry: RetryNever},
	KindUnavailable:         {Name: "unavailable", Code: codes.Unavailable, Detail: &RetryInfo{}, HTTP: http.StatusServiceUnavailable, Retry: RetrySafe},
	KindUnreachable:         {Name: "unreachable", Code: codes.Unavailable, HTTP: http.StatusServiceUnavailable, Retry: RetryIfIdempotent},
	KindOutcomeUnknown:      {Name: "outcome unknown", Code: codes.Aborted, HTTP: http.StatusServiceUnavailable, Retry: RetryIfIdempotent},
	KindDeadlineExceeded:    {Name: "deadline exceeded", Code: codes.DeadlineExceeded, HTTP: http.StatusServiceUnavailable, Retry: RetryIfIdempotent},
	KindCanceled:            {Name: "canceled", Code: codes.Canceled, HTTP: http.StatusInternalServerError, Retry: RetryNever},
	// Moved travels as Unavailable, with a RetryInfo detail after the
	// Moved one (MovedDetails): a client that predates the kind does not
	// know the Moved detail, so it reads the status as KindUnavailable
	// (RetryInfo: not executed, back off and send again) and retries any
	// call, never failing it for good nor calling its outcome unknown;
	// FailedPrecondition would have been final for it. A client that knows
	// the kind finds the Moved detail first (KindOf takes the first detail
	// of a kind of the code).
	KindMoved: {Name: "moved", Code: codes.Unavailable, Detail: &Moved{}, HTTP: http.StatusServiceUnavailable, Retry: RetryMoved},
}

func init() {
	for i := range kinds {
		kinds[i].Kind = Kind(i)
	}
}

// Kinds returns the table, one row per kind in Kind order.
func Kinds() []KindSpec { return append([]KindSpec(nil), kinds[:]...) }

func (k Kind) spec() KindSpec {
	if int(k) < len(kinds) {
		return kinds[k]
	}
	return kinds[KindUnknown]
}

func (k Kind) String() string { return k.spec().Name }

// Code is the kind's gRPC code.
func (k Kind) Code() codes.Code { return k.spec().Code }

// HTTPStatus is the kind's HTTP status on the admin API.
func (k Kind) HTTPStatus() int { return k.spec().HTTP }

// Retry says whether a request that failed with the kind may be sent again.
func (k Kind) Retry() Retry { return k.spec().Retry }

// Status builds the status error of the kind with message msg and the
// typed details that are not nil, in order (the first should be of the
// kind's Detail type; KindMoved's are MovedDetails).
func (k Kind) Status(msg string, details ...proto.Message) error {
	st := status.New(k.Code(), msg)
	for _, detail := range details {
		if detail == nil {
			continue
		}
		if d, err := st.WithDetails(protoadapt.MessageV1Of(detail)); err == nil {
			st = d
		}
	}
	return st.Err()
}

// MovedDetails are the details of a KindMoved status: m, then a RetryInfo
// for shard (the one that answered) so that a client without the Moved
// kind retries (see the table).
func MovedDetails(m *Moved, shard uint32) []proto.Message {
	return []proto.Message{m, &RetryInfo{Shard: shard, RetryAfterMs: 50}}
}

// KindOf is the table read backwards: the kind of a status and the detail
// that decided it (nil when none did). The first detail that is the Detail
// of a kind with the status's code wins; without one the status gets the
// kind of its code that carries no detail, and KindUnknown when the table
// has none.
func KindOf(st *status.Status) (Kind, proto.Message) { return kindOf(kinds[:], st) }

// kindOf is KindOf with the table table (a test reads statuses with the
// table of an older client).
func kindOf(table []KindSpec, st *status.Status) (Kind, proto.Message) {
	c := st.Code()
	for _, d := range st.Details() {
		m, ok := d.(proto.Message)
		if !ok {
			continue
		}
		name := proto.MessageName(m)
		for _, s := range table {
			if s.Code == c && s.Detail != nil && proto.MessageName(s.Detail) == name {
				return s.Kind, m
			}
		}
	}
	for _, s := range table {
		if s.Code == c && s.Detail == nil {
			return s.Kind, nil
		}
	}
	return KindUnknown, nil
}
