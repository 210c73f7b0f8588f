package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.WriteString(string(p))
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRateLimitedLogger: one record per message and period passes; the
// next one that passes counts those dropped; derived loggers share the
// budget; other messages and levels have their own.
func TestRateLimitedLogger(t *testing.T) {
	var out syncBuffer
	l := New(slog.New(slog.NewTextHandler(&out, nil)), time.Second)
	h := l.With("a", 1).Handler()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	emit := func(at time.Duration, level slog.Level, msg string) {
		h.Handle(context.Background(), slog.NewRecord(t0.Add(at), level, msg, 0))
	}
	for i := range 10 {
		emit(time.Duration(i)*100*time.Millisecond, slog.LevelWarn, "refused") // 0..900ms: one line
	}
	emit(500*time.Millisecond, slog.LevelWarn, "other")
	emit(500*time.Millisecond, slog.LevelError, "refused")
	emit(1100*time.Millisecond, slog.LevelWarn, "refused") // passes, 9 dropped before
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 4 {
		t.Fatalf("lines:\n%s", out.String())
	}
	if !strings.Contains(got[3], "msg=refused a=1 suppressed=9") || strings.Contains(got[0], "suppressed") {
		t.Fatalf("lines:\n%s", out.String())
	}
	if k := HTTPKey("http: TLS handshake error from 192.0.2.1:4711: EOF"); k != "http: TLS handshake error" {
		t.Fatalf("HTTPKey = %q", k)
	}
}
