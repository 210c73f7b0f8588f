package replica

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine is still running after
// they end: Close joins every goroutine a replica started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
