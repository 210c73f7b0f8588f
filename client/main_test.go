package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine is still running after
// they end: whatever the package starts is joined when it is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
