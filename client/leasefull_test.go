package client

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/fsm"
)

// TestLeaseFullError: a node's refusal of an attachment over a lease's
// bound (fsm.ErrLeaseFull, FailedPrecondition) is ErrLeaseFull, fatal,
// with the node's message.
func TestLeaseFullError(t *testing.T) {
	if !strings.Contains(fsm.ErrLeaseFull.Error(), leaseFullText) {
		t.Fatalf("fsm.ErrLeaseFull %q does not say %q", fsm.ErrLeaseFull, leaseFullText)
	}
	msg := fsm.ErrLeaseFull.Error() + ": lease 2a5c0f3e9b17d482 holds 3 keys, its bound 3 (mutation 0)"
	err, class, _ := classify(status.Error(codes.FailedPrecondition, msg))
	if !errors.Is(err, ErrLeaseFull) || class != classFatal || !strings.Contains(err.Error(), "2a5c0f3e9b17d482") {
		t.Fatalf("classify: %v (class %d)", err, class)
	}
	if err, _, _ := classify(status.Error(codes.FailedPrecondition, "something else")); errors.Is(err, ErrLeaseFull) {
		t.Fatal("another FailedPrecondition is ErrLeaseFull")
	}
}
