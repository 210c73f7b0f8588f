package cluster_test

import (
	"net/http"

	"github.com/swarmkv/swarmkv/admin"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/redisfront"
	"github.com/swarmkv/swarmkv/server"
)

// The harness (harness_test.go) starts a node's gRPC services through
// cluster.APIServices and its fronts through cluster.StartRedisFront and
// cluster.StartAdmin: set here, outside package cluster, because the core
// never imports them.
func init() {
	cluster.APIServices = server.Services
	cluster.StartAdmin = func(n *cluster.Node) func() { return admin.Start(n).Close }
	cluster.AdminAuth = func(n *cluster.Node, next http.Handler) http.Handler { return admin.Authorize(n, next) }
	cluster.StartRedisFront = func(n *cluster.Node, addr string) (string, func(), error) {
		f, err := redisfront.Start(n, addr)
		if err != nil {
			return "", nil, err
		}
		return f.Addr(), f.Close, nil
	}
}
