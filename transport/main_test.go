package transport

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine is still running after
// they end: a closed Mux, Peers or LeaderChecker has joined what it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
