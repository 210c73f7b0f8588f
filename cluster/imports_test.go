package cluster

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOneWay: the core (cluster, cluster/placement,
// cluster/gossip, cluster/replica, cluster/shardmove, cluster/reconcile, cluster/metrics and cluster/events), with everything it imports, imports none of the
// packages above it: the gRPC services (api), the fronts (redisfront,
// admin, console), their composition (server) and the Go client. `go list -deps` lists the transitive
// imports of the packages' code (tests excluded: they may use the
// client and the fronts).
func TestImportsOneWay(t *testing.T) {
	const module = "github.com/swarmkv/swarmkv/"
	above := []string{"api", "redisfront", "admin", "console", "server", "client", "cmd"}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".", "./placement", "./gossip", "./replica", "./shardmove", "./reconcile", "./metrics", "./events").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		for _, a := range above {
			if rel == a || strings.HasPrefix(rel, a+"/") {
				t.Errorf("the core imports %s (directly or through another package): cluster, cluster/placement, cluster/gossip, cluster/replica, cluster/shardmove, cluster/reconcile, cluster/metrics and cluster/events may not import %v", p, above)
			}
		}
	}
}
