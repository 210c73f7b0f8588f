package jepsen

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// memWatchLease runs the watch and lease workloads against connect
// without faults, with leases short enough for a MemDB run.
func memWatchLease(t *testing.T, connect Connect) *Result {
	t.Helper()
	opts := WorkloadOptions{WatchKeys: 2, Watchers: 2, LeaseTTL: 300 * time.Millisecond, LeaseBound: 300 * time.Millisecond}
	res, err := Run(context.Background(), Config{Connect: connect,
		Workloads: []Workload{NewWatch("mem", opts), NewLease("mem", opts)},
		Duration:  time.Second, WorkersPerWorkload: 3, Seed: 1, OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The watch and lease checkers accept a correct store.
func TestWatchLeaseAcceptCorrectStore(t *testing.T) {
	res := memWatchLease(t, NewMemDB(MemBugs{}).Connect())
	t.Logf("\n%s", res.Summary())
	if !res.Valid {
		t.Fatalf("correct store judged invalid:\n%s", res.Summary())
	}
	w, l := verdictOf(t, res, "watch"), verdictOf(t, res, "lease")
	if w.Unknown || l.Unknown {
		t.Errorf("undecided:\n%s", res.Summary())
	}
	for _, s := range []string{"events", "writes-acked"} {
		if w.Stats[s] == 0 {
			t.Errorf("watch: no %s:\n%s", s, res.Summary())
		}
	}
	for _, s := range []string{"leases", "keepalives-acked", "reads-absent"} {
		if l.Stats[s] == 0 {
			t.Errorf("lease: no %s:\n%s", s, res.Summary())
		}
	}
	if c := res.Counts["watch delete"]; c[OK] == 0 {
		t.Errorf("no acknowledged deletes: %v", c)
	}
}

// Each broken store makes its checker report the fault it targets.
func TestWatchLeaseCatchBrokenStores(t *testing.T) {
	defer func(d time.Duration) { watchCatchUp = d }(watchCatchUp)
	watchCatchUp = 2 * time.Second // a dropped fence is waited for
	for _, tc := range []struct {
		name    string
		bugs    MemBugs
		checker string
		want    string
	}{
		{"dropped events", MemBugs{WatchDropsEvents: true}, "watch", "gap: acknowledged"},
		{"duplicated events", MemBugs{WatchDuplicatesEvents: true}, "watch", "duplicate event"},
		{"early lease expiry", MemBugs{LeaseEarlyExpiry: true}, "lease", "early expiry"},
		{"leases never expire", MemBugs{LeaseNeverExpires: true}, "lease", "still present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := memWatchLease(t, NewMemDB(tc.bugs).Connect())
			v := verdictOf(t, res, tc.checker)
			t.Logf("%s", v)
			if v.Valid {
				t.Fatalf("%s not detected by %s:\n%s", tc.name, tc.checker, res.Summary())
			}
			if !strings.Contains(strings.Join(v.Anomalies, "\n"), tc.want) {
				t.Errorf("anomalies do not mention %q:\n%s", tc.want, v)
			}
			// The other checker is not fooled into blaming the wrong thing.
			other := "lease"
			if tc.checker == "lease" {
				other = "watch"
			}
			if o := verdictOf(t, res, other); !o.Valid {
				t.Errorf("%s reports anomalies for %s:\n%s", other, tc.name, o)
			}
		})
	}
}

func wop(i int, f string, in WatchIn, o Outcome, inv, comp int64) Op {
	return Op{Index: i, Workload: "watch", F: f, Input: in, Outcome: o, Invoke: inv, Complete: comp}
}

func put(key, value string) WatchEv { return WatchEv{Key: key, Value: value} }
func del(key string) WatchEv        { return WatchEv{Key: key, Delete: true} }

// msgs makes one message per event, revisions from rev on, shard 1.
func msgs(rev uint64, evs ...WatchEv) []WatchMsg {
	var out []WatchMsg
	for i, e := range evs {
		out = append(out, WatchMsg{Shard: 1, Revision: rev + uint64(i), Events: []WatchEv{e}})
	}
	return out
}

// Hand-written watch histories: each anomaly the checker looks for, and
// what it must accept (indeterminate writes seen or not, moves).
func TestWatchChecker(t *testing.T) {
	h := History{
		wop(0, "put", WatchIn{Key: "k0.0", Value: "1"}, OK, 0, 10),
		wop(1, "put", WatchIn{Key: "k1.0", Value: "2"}, OK, 5, 15),
		wop(2, "delete", WatchIn{Key: "k0.0"}, OK, 20, 30),
		wop(3, "put", WatchIn{Key: "k0.0", Value: "3"}, OK, 40, 50),
		wop(4, "put", WatchIn{Key: "k1.0", Value: "4"}, Info, 40, 60),
		wop(5, "put", WatchIn{Key: "u0", Value: "5"}, OK, 60, 70),
		wop(6, "put", WatchIn{Key: "k0.0", Value: "6"}, Fail, 70, 80),
	}
	all := []WatchEv{put("k0.0", "1"), put("k1.0", "2"), del("k0.0"), put("k0.0", "3")}
	stream := func(m []WatchMsg) []WatchStream { return []WatchStream{{Watcher: 0, RK: 0, Msgs: m}} }
	for _, tc := range []struct {
		name    string
		streams []WatchStream
		want    string // "" for valid
	}{
		{"exact", stream(msgs(10, all...)), ""},
		{"info write seen", stream(msgs(10, append(all, put("k1.0", "4"))...)), ""},
		{"two events in one revision", stream(append(msgs(10, all[:2]...), WatchMsg{Shard: 1, Revision: 20, Events: all[2:]})), ""},
		{"moved to another shard", stream(append(msgs(10, all[:2]...), WatchMsg{Shard: 2, Revision: 3, Events: all[2:3]}, WatchMsg{Shard: 2, Revision: 4, Events: all[3:]})), ""},
		{"back to a shard id a merge removed", stream(append(msgs(10, all[:2]...), WatchMsg{Shard: 2, Revision: 50, Events: all[2:3]}, WatchMsg{Shard: 1, Revision: 3, Events: all[3:]})), ""},
		{"progress then events", stream(append([]WatchMsg{{Shard: 1, Revision: 9, Progress: true}}, msgs(10, all...)...)), ""},
		{"dropped put", stream(msgs(10, all[0], all[2], all[3])), "gap: acknowledged put k1.0=2"},
		{"dropped delete", stream(msgs(10, all[0], all[1], all[3])), "gap: acknowledged delete k0.0"},
		{"dropped last", stream(msgs(10, all[:3]...)), "gap: acknowledged put k0.0=3"},
		{"duplicated message", stream(append(msgs(10, all[:2]...), msgs(11, all[1:]...)...)), "duplicate event"},
		{"duplicated delete", stream(msgs(10, all[0], all[1], all[2], all[2], all[3])), "deleted twice in a row"},
		{"reordered within a key", stream(msgs(10, all[1], all[3], all[2], all[0])), "out of its writer's order"},
		{"revision repeated", stream(append(msgs(10, all[:2]...), msgs(11, all[2:]...)...)), "repeated or out of order"},
		{"event below a progress", stream(append(msgs(10, all[:2]...), WatchMsg{Shard: 1, Revision: 30, Progress: true}, WatchMsg{Shard: 1, Revision: 25, Events: all[2:]})), "after a progress notification"},
		{"commit order across keys", stream(msgs(10, all[0], all[2], all[3], all[1])), "invoked later"},
		{"failed write seen", stream(msgs(10, append(all, put("k0.0", "6"))...)), "the write failed"},
		{"unwatched key seen", stream(msgs(10, append(all, put("u0", "5"))...)), "outside the watched prefix"},
		{"value never written", stream(msgs(10, append(all, put("k1.0", "99"))...)), "never written"},
		{"watch ended", []WatchStream{{Msgs: msgs(10, all...), Err: "compacted"}}, "ended with an error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckWatch(h, tc.streams)
			if v.Valid != (tc.want == "") {
				t.Fatalf("valid = %v, want %v:\n%s", v.Valid, tc.want == "", v)
			}
			if tc.want != "" && !strings.Contains(strings.Join(v.Anomalies, "\n"), tc.want) {
				t.Errorf("anomalies do not mention %q:\n%s", tc.want, v)
			}
		})
	}
}

func lop(i int, f string, in LeaseIn, out LeaseOut, o Outcome, inv, comp int64) Op {
	return Op{Index: i, Workload: "lease", F: f, Input: in, Output: out, Outcome: o, Invoke: inv, Complete: comp}
}

// Hand-written lease histories (times in ms): reads and keep-alives
// against the cover of grants and acknowledged keep-alives, and the final
// reads against the liveness deadline.
func TestLeaseChecker(t *testing.T) {
	ms := int64(time.Millisecond)
	const ttl = 2000
	in := LeaseIn{Lease: 1, TTLms: ttl}
	ka := LeaseIn{Lease: 1}
	key := LeaseIn{Lease: 1, Key: "a0"}
	base := History{
		lop(0, "grant", in, LeaseOut{ID: 7}, OK, 0, 10*ms),
		lop(1, "attach", key, LeaseOut{}, OK, 10*ms, 20*ms),
		lop(2, "keepalive", ka, LeaseOut{TTLms: ttl}, OK, 600*ms, 610*ms),
		lop(3, "keepalive", ka, LeaseOut{TTLms: ttl}, Info, 1200*ms, 4000*ms),
	}
	bound := time.Second
	for _, tc := range []struct {
		name string
		ops  History
		want string
	}{
		// Covered until 2600 ms; renewed last at 4000 ms (the
		// indeterminate keep-alive): deadline max(4000, 5000) + 3000.
		{"expired after its cover, gone at the end", History{
			lop(4, "read", key, LeaseOut{Present: true}, OK, 2000*ms, 2010*ms),
			lop(5, "read", key, LeaseOut{}, OK, 2590*ms, 2700*ms),
			lop(6, "final-read", key, LeaseOut{}, OK, 5000*ms, 5010*ms),
		}, ""},
		{"read absent within the cover", History{
			lop(4, "read", key, LeaseOut{}, OK, 2500*ms, 2590*ms),
			lop(5, "final-read", key, LeaseOut{}, OK, 5000*ms, 5010*ms),
		}, "early expiry: key a0"},
		{"keep-alive not found within the cover", History{
			lop(4, "keepalive", ka, LeaseOut{NotFound: true}, Fail, 2000*ms, 2010*ms),
			lop(5, "final-read", key, LeaseOut{}, OK, 5000*ms, 5010*ms),
		}, "answered not found"},
		{"failed read does not count", History{
			lop(4, "read", key, LeaseOut{}, Fail, 2500*ms, 2590*ms),
			lop(5, "final-read", key, LeaseOut{}, OK, 5000*ms, 5010*ms),
		}, ""},
		{"present until its deadline", History{
			lop(4, "final-read", key, LeaseOut{Present: true}, OK, 5000*ms, 5010*ms),
			lop(5, "final-read", key, LeaseOut{Present: true}, OK, 7900*ms, 7910*ms),
			lop(6, "final-read", key, LeaseOut{}, OK, 8000*ms, 8010*ms),
		}, ""},
		{"present past its deadline", History{
			lop(4, "final-read", key, LeaseOut{Present: true}, OK, 5000*ms, 5010*ms),
			lop(5, "final-read", key, LeaseOut{Present: true}, OK, 8100*ms, 8110*ms),
		}, "still present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := append(append(History(nil), base...), tc.ops...)
			v := CheckLease(h, bound)
			if v.Valid != (tc.want == "") {
				t.Fatalf("valid = %v, want %v:\n%s", v.Valid, tc.want == "", v)
			}
			if tc.want != "" && !strings.Contains(strings.Join(v.Anomalies, "\n"), tc.want) {
				t.Errorf("anomalies do not mention %q:\n%s", tc.want, v)
			}
			if tc.want == "" && v.Unknown {
				t.Errorf("undecided: %s", v)
			}
		})
	}
}

// The watch and lease workloads on the in-process cluster under kills,
// partitions, leader transfers and splits and merges: watchers reconnect
// and see every acknowledged write exactly once, in order; no lease ends
// early, and every abandoned one ends.
func TestInProcWatchLease(t *testing.T) {
	ctx := context.Background()
	drv, err := NewInProc(ctx, InProcConfig{Dir: t.TempDir(), Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	nems, err := Nemeses("kill,isolate-leader,leader-transfer,split-merge")
	if err != nil {
		t.Fatal(err)
	}
	opts := WorkloadOptions{}
	res, err := Run(ctx, Config{Driver: drv, Connect: DriverConnect(drv, time.Second),
		Workloads: []Workload{NewWatch("inproc", opts), NewLease("inproc", opts)}, Nemeses: nems,
		Duration: 10 * time.Second, Interval: 500 * time.Millisecond, FaultDuration: 1500 * time.Millisecond,
		WorkersPerWorkload: 3, OpTimeout: 3 * time.Second, Seed: 14, OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res.Summary())
	if !res.Valid {
		t.Fatalf("anomalies")
	}
	// Progress (on a loaded machine under the race detector a run may
	// get little done; the checkers' verdicts are what counts).
	w, l := verdictOf(t, res, "watch"), verdictOf(t, res, "lease")
	if w.Stats["events"] == 0 || w.Stats["writes-acked"] == 0 {
		t.Errorf("watch: no acknowledged write, or no event: %v", w.Stats)
	}
	if l.Stats["leases"] == 0 || l.Stats["reads"] == 0 {
		t.Errorf("lease: no lease granted, or no read: %v", l.Stats)
	}
	if len(res.Faults) == 0 {
		t.Errorf("no faults injected")
	}
	// Every node serves its admin API (the leader-transfer nemesis needs
	// it; without it each call waited 5 s for an answer and none moved a
	// leader).
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, a := range drv.AdminAddrs() {
		resp, err := hc.Get("http://" + a + "/v1/status")
		if err != nil {
			t.Errorf("admin API of %s: %v", a, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("admin API of %s: %s", a, resp.Status)
		}
	}
}
