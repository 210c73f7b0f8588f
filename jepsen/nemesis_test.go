package jepsen

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeDriver records calls and supports what the docker driver supports.
type fakeDriver struct {
	mu    sync.Mutex
	calls []string
	down  map[string]bool
}

var _ Driver = (*fakeDriver)(nil)

func (f *fakeDriver) log(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeDriver) Name() string                             { return "fake" }
func (f *fakeDriver) Nodes() []string                          { return []string{"n1", "n2", "n3"} }
func (f *fakeDriver) Endpoints() []string                      { return nil }
func (f *fakeDriver) AdminAddrs() []string                     { return nil }
func (f *fakeDriver) Ready(context.Context, string) error      { return nil }
func (f *fakeDriver) Pause(_ context.Context, n string) error  { f.log("pause %s", n); return nil }
func (f *fakeDriver) Resume(_ context.Context, n string) error { f.log("resume %s", n); return nil }
func (f *fakeDriver) Heal(context.Context) error               { f.log("heal"); return nil }
func (f *fakeDriver) Close() error                             { return nil }

func (f *fakeDriver) Kill(_ context.Context, n string) error {
	f.log("kill %s", n)
	f.mu.Lock()
	f.down[n] = true
	f.mu.Unlock()
	return nil
}

func (f *fakeDriver) Start(_ context.Context, n string) error {
	f.log("start %s", n)
	f.mu.Lock()
	delete(f.down, n)
	f.mu.Unlock()
	return nil
}

func (f *fakeDriver) Partition(_ context.Context, g [][]string) error {
	f.log("partition %v", g)
	return nil
}

func (f *fakeDriver) Block(context.Context, string, string) error { return ErrUnsupported }

func (f *fakeDriver) SetDelay(_ context.Context, d time.Duration) error {
	if d == 0 {
		return nil
	}
	return ErrUnsupported
}

func (f *fakeDriver) SetDropRate(_ context.Context, p float64) error {
	if p == 0 {
		return nil
	}
	return ErrUnsupported
}

// The schedule injects every supported nemesis, skips the others, and the
// run heals and restarts everything before the final reads.
func TestScheduleSkipsUnsupportedAndHeals(t *testing.T) {
	drv := &fakeDriver{down: map[string]bool{}}
	nems, err := Nemeses("kill,kill-all,pause,partition-minority,bridge,delay,drop,leader-transfer,replace,remove-readd,split-merge,kill+split-merge")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Driver: drv, Connect: NewMemDB(MemBugs{}).Connect(),
		Workloads: allWorkloads(t, "fake"), Nemeses: nems, Duration: 400 * time.Millisecond,
		Interval: 10 * time.Millisecond, FaultDuration: 20 * time.Millisecond, WorkersPerWorkload: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	skipped := slices.Clone(res.Skipped)
	sort.Strings(skipped)
	if want := []string{"bridge", "delay", "drop", "kill+split-merge", "leader-transfer", "remove-readd", "replace", "split-merge"}; !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	seen := map[string]bool{}
	for _, f := range res.Faults {
		seen[f.Nemesis] = true
		if f.End < f.Start || f.Error != "" {
			t.Errorf("fault %+v", f)
		}
	}
	for _, n := range []string{"kill", "kill-all", "pause", "partition-minority"} {
		if !seen[n] {
			t.Errorf("nemesis %s never injected: %+v", n, res.Faults)
		}
	}
	if len(drv.down) != 0 {
		t.Errorf("nodes left down: %v", drv.down)
	}
	if !res.Valid {
		t.Errorf("invalid:\n%s", res.Summary())
	}
}

func TestNemesesByName(t *testing.T) {
	all, err := Nemeses("all")
	if err != nil || len(all) != len(NemesisNames()) {
		t.Fatalf("all: %d nemeses, %v", len(all), err)
	}
	if n, err := Nemeses("none"); err != nil || n != nil {
		t.Errorf("none: %v %v", n, err)
	}
	if _, err := Nemeses("kill,nope"); err == nil {
		t.Errorf("unknown nemesis accepted")
	}
}
