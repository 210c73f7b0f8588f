package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
)

// checkShardsCLI runs `swarmnode shards` against the one-node cluster of
// TestServeAndKV (2 shards, explicit: the count rule off): the table,
// split and merge with --wait, moves, cancel, the policy, and the
// refusals (exit 1 from the node, 2 for a bad command line).
func checkShardsCLI(ctx context.Context, t *testing.T, httpAddr string) {
	t.Helper()
	sh := func(args ...string) (string, error) {
		out, _, err := runCmd(ctx, append(append([]string{"shards"}, args...), "--admin", httpAddr)...)
		return out, err
	}
	out, err := sh()
	if err != nil || !regexp.MustCompile(`SHARD\s+SLOTS\s+SIZE\s+LOAD\s+LEADER\s+REPLICAS\s+SURVIVES`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^0\s+128 \(0,2,4,6,8,10,12,14,16,…\)\s+[0-9.]+ [KMG]?i?B\s+[0-9.]+/s\s+t1\s+t1\s+none$`).MatchString(out) ||
		!strings.Contains(out, "policy: count rule off (explicit shard count); split above 1GiB (size), off (load)") {
		t.Fatalf("shards = %v\n%s", err, out)
	}
	out, err = sh("split", "0", "--wait")
	if err != nil || !regexp.MustCompile(`(?m)^move 1: split 0 -> 2, slots 128,130,.*,254: `).MatchString(out) ||
		!regexp.MustCompile(`move 1: done \(map version \d+\)\n$`).MatchString(out) {
		t.Fatalf("shards split 0 --wait = %v\n%s", err, out)
	}
	if out, err = sh(); err != nil || !regexp.MustCompile(`(?m)^2\s+64 \(128,130,132,`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^0\s+64 \(0,2,4,6,8,10,12,14,16,…\)\s`).MatchString(out) {
		t.Fatalf("shards after the split = %v\n%s", err, out)
	}
	if out, err = sh("moves"); err != nil || strings.TrimSpace(out) != strings.TrimSpace("MOVE  KIND  SOURCE  TARGET  SLOTS  PHASE  AGE  ERROR") {
		t.Fatalf("shards moves = %v\n%s", err, out)
	}
	if out, err = sh("merge", "0", "2", "--wait", "--json"); err != nil {
		t.Fatalf("shards merge --wait --json = %v\n%s", err, out)
	}
	var m placement.Move
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.ID != 2 || m.Kind != placement.MoveMerge || m.Phase != "done" {
		t.Fatalf("merge --json: %v %+v", err, m)
	}
	// A split with --slots, not waited for, then a cancel: either it is
	// still early (aborting), or it got too far, or it is already done.
	out, err = sh("split", "1", "--slots", "129,131")
	if err != nil || !strings.HasPrefix(out, "move 3: split 1 -> 2, slots 129,131: planned") {
		t.Fatalf("shards split --slots = %v\n%s", err, out)
	}
	out, err = sh("cancel", "3")
	if err != nil && !strings.Contains(err.Error(), "can no longer be cancelled") && !strings.Contains(err.Error(), "unknown move 3") {
		t.Fatalf("shards cancel 3 = %v\n%s", err, out)
	}
	if err == nil && out != "move 3: aborting (cancelled by the operator)\n" {
		t.Fatalf("shards cancel 3 printed %q", out)
	}
	pollUntil(t, 30*time.Second, "no move left", func() error {
		out, err := sh("moves", "--json")
		if err == nil && strings.TrimSpace(out) != "[]" {
			return &adminError{msg: out}
		}
		return err
	})

	out, err = sh("policy", "--max-shard-size", "2GiB", "--max-shard-load", "500")
	if err != nil || out != "policy: count rule off (explicit shard count); split above 2GiB (size), 500 ops/s (load)\n" {
		t.Fatalf("shards policy set = %v %q", err, out)
	}
	var p placement.ShardPolicy
	if out, err = sh("policy", "--json"); err != nil || json.Unmarshal([]byte(out), &p) != nil ||
		p != (placement.ShardPolicy{NodesPerShard: 3, MaxShardBytes: 2 << 30, MaxShardLoad: 500}) {
		t.Fatalf("shards policy --json = %v %s", err, out)
	}
	if out, err = sh("policy", "--max-shard-size", "0", "--max-shard-load", "0", "--nodes-per-shard", "2"); err != nil ||
		out != "policy: count rule off (explicit shard count); split above off (size), off (load)\n" {
		t.Fatalf("shards policy off = %v %q", err, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"split", "9"}, 1, "unknown shard 9"},
		{[]string{"split", "0", "--slots", "1-3"}, 1, "does not own slots 1,3"},
		{[]string{"merge", "0", "0"}, 1, "into itself"},
		{[]string{"cancel", "99"}, 1, "no such move: 99"},
		{[]string{"split", "x"}, 2, `shard "x"`},
		{[]string{"split", "0", "--slots", "5-1"}, 2, "--slots"},
		{[]string{"merge", "0"}, 2, "got 1 arguments, want 2"},
		{[]string{"cancel", "0"}, 2, "want a positive number"},
		{[]string{"policy", "--nodes-per-shard", "0"}, 2, "--nodes-per-shard 0"},
		{[]string{"policy", "--max-shard-size", "1XB"}, 2, `unknown unit "xb"`},
		{[]string{"frob"}, 2, `unknown command "frob"`},
	} {
		out, err := sh(tc.args...)
		if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("shards %q = %v (exit %d), %q; want exit %d and %q", tc.args, err, exitCode(err), out, tc.code, tc.want)
		}
	}
	// The refusals changed nothing: shards 0 and 1, 128 slots each, and
	// the policy as last set.
	if out, err = sh(); err != nil || !regexp.MustCompile(`(?m)^0\s+128 \(0,2,4,`).MatchString(out) ||
		strings.Count(out, "\n") < 3 || strings.Contains(out, "\n2 ") ||
		!strings.Contains(out, "split above off (size), off (load)") {
		t.Fatalf("shards after the refusals = %v\n%s", err, out)
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]uint64{"0": 0, "1024": 1024, "1GiB": 1 << 30, "512mib": 512 << 20, " 2 G ": 2 << 30, "3KB": 3 << 10, "1TiB": 1 << 40, "7b": 7} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GiB", "-1", "1.5GiB", "1XB", "99999999999TiB", "18446744073709551616"} {
		if got, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, got)
		}
	}
	for n, want := range map[uint64]string{0: "0", 1 << 30: "1GiB", 1536 << 20: "1536MiB", 1500: "1500", 3 << 40: "3TiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// FuzzParseSize: a size parses or is refused, never panics, and what
// parses formats back to the same number.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1GiB", "512 MiB", "1XB", "", "18446744073709551615", "16777216TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		back, err := parseSize(formatSize(n))
		if err != nil || back != n {
			t.Fatalf("%q = %d formats as %q, which parses as %d, %v", s, n, formatSize(n), back, err)
		}
	})
}
