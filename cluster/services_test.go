package cluster

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

// TestAuthWithoutServicesRefuses: the auth interceptors are package api's;
// a node with auth started without services (New's services argument)
// fails closed: its Admin service refuses every call rather than serving
// it unguarded.
func TestAuthWithoutServicesRefuses(t *testing.T) {
	cfg := Config{ID: "n1", DataDir: t.TempDir(), Auth: true,
		ClusterSecretFile: writeSecret(t, "0123456789abcdef0123456789abcdef-test-secret"),
		RaftAddr:          freePort(t), GRPCAddr: freePort(t), GossipAddr: freePort(t), GossipProfile: "local", Logger: testLogger(t)}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	conn, err := grpc.NewClient(n.Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := ctxT(t, 10*time.Second)
	if _, err := rpc.NewAdminClient(conn).MetaState(ctx, &rpc.MetaStateRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("MetaState on a node with auth and no services: %v, want PermissionDenied", err)
	}
}
