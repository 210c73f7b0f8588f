package api

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/internal/leakcheck"
)

// TestMain fails the package's tests if a goroutine is still running after
// they end: the Pipeline's close joins every goroutine it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
