package transport

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Group ids as the node uses them (cluster.MetaGroup, cluster.ReadCheckGroup):
// the mux treats every uint32 alike, the tests use the node's.
const (
	metaGroup      uint32 = 0xFFFFFFFF
	readCheckGroup uint32 = 0xFFFFFFFE
)

// testLogger discards logs unless SWARM_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SWARM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// ctxT returns a context that ends after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
