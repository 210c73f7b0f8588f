package pebblelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestLevelsAndFatal(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Infof("flushed %d", 1)
	l.Errorf("failed %s", "x")
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="flushed 1"`) || !strings.Contains(out, `level=ERROR msg="failed x"`) {
		t.Fatalf("log = %q", out)
	}
	defer func() {
		if r := recover(); r != "pebble fatal: disk gone" {
			t.Fatalf("Fatalf panicked with %v, want pebble fatal: disk gone", r)
		}
	}()
	l.Fatalf("disk %s", "gone")
	t.Fatalf("Fatalf returned")
}
