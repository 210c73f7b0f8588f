package testlog

import (
	"fmt"
	"strings"
	"testing"
)

func TestRingKeepsTheLastLines(t *testing.T) {
	r := &ring{lines: make([]string, 3)}
	if r.String() != "" || r.count() != 0 {
		t.Fatalf("empty ring: %q", r.String())
	}
	fmt.Fprintf(r, "a\n")
	fmt.Fprintf(r, "b\nc\n")
	if got := r.String(); got != "a\nb\nc\n" || r.count() != 3 {
		t.Fatalf("full ring: %q", got)
	}
	fmt.Fprintf(r, "d\n")
	fmt.Fprintf(r, "e\n")
	if got := r.String(); got != "c\nd\ne\n" || r.count() != 3 {
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
	got := r.own.String()
	if !strings.Contains(got, "from a") || !strings.Contains(got, "from b") || strings.Contains(got, "not kept") || strings.Contains(got, "heartbeat") {
		t.Fatalf("kept lines:\n%s", got)
	}
	if got := r.raft.String(); !strings.Contains(got, "heartbeat") || r.raft.count() != 1 {
		t.Fatalf("raft's lines:\n%s", got)
	}
}
