package api

import (
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/rpc"
)

// TestGRPCPermsCoverEveryMethod: every method of every service a node
// registers (these and the core's Admin service) has a permission, so a new RPC cannot be left open or
// forgotten.
func TestGRPCPermsCoverEveryMethod(t *testing.T) {
	s := grpc.NewServer()
	srv := &server{}
	rpc.RegisterKVServer(s, srv)
	rpc.RegisterClusterServer(s, srv)
	rpc.RegisterRegistryServer(s, &registryServer{server: srv})
	rpc.RegisterBillingServer(s, &billingServer{server: srv})
	rpc.RegisterPoolsServer(s, &poolsServer{server: srv})
	rpc.RegisterAdminServer(s, rpc.UnimplementedAdminServer{}) // the core's node-to-node services
	rpc.RegisterConsoleServer(s, rpc.UnimplementedConsoleServer{})
	rpc.RegisterRedisServer(s, &redisServer{server: srv})
	rpc.RegisterWatchServer(s, &watchServer{server: srv})
	rpc.RegisterLeaseServer(s, &leaseServer{server: srv})
	seen := 0
	for name, info := range s.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + name + "/" + m.Name
			if _, ok := grpcPerms[full]; !ok {
				t.Errorf("%s has no entry in grpcPerms", full)
			}
			seen++
		}
	}
	if seen != len(grpcPerms) {
		t.Errorf("grpcPerms has %d entries, the server %d methods", len(grpcPerms), seen)
	}
	for m, p := range grpcPerms {
		nodeToNode := strings.HasPrefix(m, "/swarmkv.v1.Admin/") || strings.HasPrefix(m, "/swarmkv.v1.Console/")
		if nodeToNode != (p.Keyspace == auth.Node) {
			t.Errorf("%s: %v; the Admin and Console services and only they are node-to-node", m, p)
		}
	}
}
