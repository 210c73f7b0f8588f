package main

import (
	"strings"
	"testing"
	"time"
)

// TestRunIDDiffersPerRun: two runs with one seed name their keys apart, so
// the second, on a cluster that kept the first one's data, does not read
// the first one's values as its own (every checker reported anomalies when
// the run id was the seed alone).
func TestRunIDDiffersPerRun(t *testing.T) {
	start := time.Date(2026, 12, 6, 5, 42, 8, 0, time.UTC)
	a, b := runIDOf(44, start), runIDOf(44, start.Add(time.Millisecond))
	if a == b {
		t.Fatalf("two runs of seed 44 share run id %q", a)
	}
	if !strings.HasPrefix(a, "2c-") {
		t.Fatalf("run id %q does not start with the seed (2c)", a)
	}
}
