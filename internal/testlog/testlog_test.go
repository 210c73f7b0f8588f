package testlog

import (
	"fmt"
	"strings"
	"testing"
)

func TestRingKeepsTheLastLines(t *testing.T) {
	r := &ring{lines: make([]string, 3)}
	if got, n := r.lastLines(); got != "" || n != 0 {
		t.Fatalf("empty ring: %q", got)
	}
	fmt.Fprintf(r, "a\n")
	fmt.Fprintf(r, "b\nc\n")
	if got, n := r.lastLines(); got != "a\nb\nc\n" || n != 3 {
		t.Fatalf("full ring: %q", got)
	}
	fmt.Fprintf(r, "d\n")
	fmt.Fprintf(r, "e\n")
	if got, n := r.lastLines(); got != "c\nd\ne\n" || n != 3 {
		t.Fatalf("wrapped ring: %q, want the last three, oldest first", got)
	}
}

func TestLoggersOfOneTestShareTheirLines(t *testing.T) {
	t.Setenv("SWARM_TEST_LOG", "")
	a, b := New(t), New(t)
	a.Info("from a")
	b.Debug("not kept")
	b.Warn("from b")
	b.Error("raft: failed to heartbeat to: peer=x")
	mu.Lock()
	r := rings[t]
	mu.Unlock()
	got, _ := r.own.lastLines()
	if !strings.Contains(got, "from a") || !strings.Contains(got, "from b") || strings.Contains(got, "not kept") || strings.Contains(got, "heartbeat") {
		t.Fatalf("kept lines:\n%s", got)
	}
	if got, n := r.raft.lastLines(); !strings.Contains(got, "heartbeat") || n != 1 {
		t.Fatalf("raft's lines:\n%s", got)
	}
}
