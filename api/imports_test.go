package api

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsBelow: the gRPC services, with everything they import, import
// none of the packages above them: the fronts (redisfront, etcdfront, admin), their
// composition (server), the Go client and the commands. `go list -deps`
// lists the transitive imports of the package's code (tests excluded:
// they may use the client).
func TestImportsBelow(t *testing.T) {
	const module = "github.com/swarmkv/swarmkv/"
	above := []string{"redisfront", "etcdfront", "admin", "server", "client", "cmd"}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
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
				t.Errorf("api imports %s (directly or through another package): it may not import %v", p, above)
			}
		}
	}
}
