package cluster

import (
	"os/exec"
	"strings"
	"testing"
)

// coreDeps are the module's packages the core (cluster and every package
// under it), with everything it imports, imports: `go list -deps` lists
// the transitive imports of the packages' code (tests excluded: they may
// use the client, the fronts and backup files).
func coreDeps(t *testing.T) []string {
	t.Helper()
	const module = "github.com/swarmkv/swarmkv/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(p, module); ok {
			deps = append(deps, rel)
		}
	}
	return deps
}

// TestImportsOneWay: the core imports none of the packages above it: the
// gRPC services (api), the fronts (redisfront, etcdfront, admin, console), their
// composition (server), the Go client and the commands; nor package
// backup, the backup file: a node's restore comes to it as a seed.Restore
// (Config.Seed, which server sets to backup.Seeds).
func TestImportsOneWay(t *testing.T) {
	forbidden := []string{"api", "redisfront", "etcdfront", "admin", "console", "server", "client", "cmd", "backup"}
	for _, p := range coreDeps(t) {
		for _, a := range forbidden {
			if p == a || strings.HasPrefix(p, a+"/") {
				t.Errorf("the core imports %s (directly or through another package): cluster and its sub-packages may not import %v", p, forbidden)
			}
		}
	}
}
