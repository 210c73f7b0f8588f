// Package testlog gives tests a log/slog logger whose output is kept, not
// printed: the last lines (INFO and above) of one test, shared by every
// logger made for it, are printed only if the test fails. A failure in CI
// then comes with what the nodes were doing (the mover's last "waiting"
// status, elections), at no cost to a test that passes. SWARM_TEST_LOG=1
// prints everything, DEBUG included, to stderr as it happens instead.
package testlog

import (
	"bytes"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A failure prints the test's last Lines log lines of its own packages
// and, apart, the last RaftLines of hashicorp/raft's (msg="raft: ...":
// a leader whose peer is down logs a failed heartbeat many times a
// second, which would push everything else out of one ring).
const (
	Lines     = 300
	RaftLines = 100
)

var (
	mu    sync.Mutex
	rings = map[testing.TB]*split{}
)

// split keeps a test's lines, hashicorp/raft's apart.
type split struct{ own, raft *ring }

func (s *split) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`msg="raft: `)) {
		return s.raft.Write(p)
	}
	return s.own.Write(p)
}

// New returns a logger for test t (one ring of lines per test, however many
// loggers it makes).
func New(t testing.TB) *slog.Logger {
	if os.Getenv("SWARM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	mu.Lock()
	r := rings[t]
	if r == nil {
		r = &split{own: &ring{lines: make([]string, Lines)}, raft: &ring{lines: make([]string, RaftLines)}}
		rings[t] = r
		t.Cleanup(func() {
			mu.Lock()
			delete(rings, t)
			mu.Unlock()
			if t.Failed() {
				if out, n := r.raft.lastLines(); n > 0 {
					t.Logf("hashicorp/raft's last %d log lines (INFO and above) in this test:\n%s", n, out)
				}
				if out, n := r.own.lastLines(); n > 0 {
					t.Logf("the last %d other log lines (INFO and above) of this test's nodes:\n%s", n, out)
				}
			}
		})
	}
	mu.Unlock()
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// ring keeps the last len(lines) lines written to it.
type ring struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

// Write keeps p's lines (a slog handler writes one record per call).
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		r.lines[r.next] = string(l)
		r.next++
		if r.next == len(r.lines) {
			r.next, r.full = 0, true
		}
	}
	return len(p), nil
}

// lastLines is the kept lines, oldest first, and how many there are.
func (r *ring) lastLines() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.lines[:r.next]
	if r.full {
		kept = append(slices.Clone(r.lines[r.next:]), kept...)
	}
	var b strings.Builder
	for _, l := range kept {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String(), len(kept)
}
