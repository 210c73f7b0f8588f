package rpc

import (
	"testing"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestMovedReadByAnOlderClient: the moved status (as MovedDetails builds
// it) is KindMoved to a client that knows the kind, and to a client whose
// table predates it (no KindMoved row) a kind that retries the request
// whatever it is (not executed), never one that fails it for good or calls
// its outcome unknown.
func TestMovedReadByAnOlderClient(t *testing.T) {
	m := &Moved{Slot: 200, TargetShard: 3, MapVersion: 12}
	err := KindMoved.Status("fsm: slot 200 moved to shard 3 (map version 12)", MovedDetails(m, 1)...)
	wire := status.Convert(status.ErrorProto(status.Convert(err).Proto()))

	k, d := KindOf(wire)
	if k != KindMoved || !proto.Equal(d, m) {
		t.Fatalf("KindOf = %s, %v; want moved, %v", k, d, m)
	}
	if k.Retry() != RetryMoved {
		t.Errorf("moved retries %d, want RetryMoved", k.Retry())
	}

	var older []KindSpec
	for _, s := range kinds {
		if s.Kind != KindMoved {
			older = append(older, s)
		}
	}
	ok, _ := kindOf(older, wire)
	if ok != KindUnavailable || ok.Retry() != RetrySafe {
		t.Errorf("an older client reads the moved status as %s (retry %d), want unavailable (RetrySafe)", ok, ok.Retry())
	}

	// Without the RetryInfo an older client would only retry idempotent
	// calls: the second detail is what makes it safe.
	bare := status.Convert(KindMoved.Status("moved", m))
	if k, _ := kindOf(older, bare); k.Retry() == RetrySafe {
		t.Errorf("without RetryInfo an older client reads %s: the test's premise is wrong", k)
	}
}
