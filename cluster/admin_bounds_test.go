package cluster

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

// TestReplicaStatusesBounded: a ReplicaStatuses call naming more groups
// than a node can hold is refused before any lookup (a node certificate's
// holder could otherwise make a node walk millions of groups per call).
func TestReplicaStatusesBounded(t *testing.T) {
	s := &adminServer{} // no node: the bound is checked first
	req := &rpc.ReplicaStatusesRequest{Groups: make([]*rpc.ReplicaStatusRequest, maxStatusGroups+1)}
	_, err := s.ReplicaStatuses(t.Context(), req)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ReplicaStatuses of %d groups: %v, want InvalidArgument", len(req.Groups), err)
	}
}
