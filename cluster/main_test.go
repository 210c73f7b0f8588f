package cluster

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/internal/leakcheck"
)

// TestMain fails the package's tests if a goroutine is still running after
// they end: Node.Close joins every goroutine the node started (doc.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
