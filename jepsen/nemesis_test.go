package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
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
// run heals and restarts everything before the final reads. The four
// supported faults take about 150 ms at 10 + 20 ms each plus their stops;
// the run lasts 2 s so that a loaded host (a fault seen taking 270 ms at
// load average 30 with GOMAXPROCS=1) still fits one full round: at 400 ms
// it failed about once in 30 runs there.
func TestScheduleSkipsUnsupportedAndHeals(t *testing.T) {
	drv := &fakeDriver{down: map[string]bool{}}
	nems, err := Nemeses("kill,kill-all,pause,partition-minority,bridge,delay,drop,leader-transfer,replace,remove-readd,split-merge,kill+split-merge")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Driver: drv, Connect: NewMemDB(MemBugs{}).Connect(),
		Workloads: allWorkloads(t, "fake"), Nemeses: nems, Duration: 2 * time.Second,
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

// zoneDriver is a fakeDriver of six nodes in three zones that lists its
// members (the zone nemeses' zoneLister).
type zoneDriver struct {
	fakeDriver
	zones map[string]string
}

func (z *zoneDriver) Nodes() []string { return []string{"n1", "n2", "n3", "n4", "n5", "n6"} }

func (z *zoneDriver) adminMembers(context.Context, string) ([]cluster.MemberInfo, error) {
	var out []cluster.MemberInfo
	for _, n := range z.Nodes() {
		out = append(out, cluster.MemberInfo{ID: n, Zone: z.zones[n]})
	}
	return out, nil
}

// TestZoneNemeses: kill-zone kills every node of one zone and restarts
// them; partition-zone cuts one zone off and heals; both are unsupported
// with fewer than three labelled zones or a driver that lists no members.
func TestZoneNemeses(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "b", "n5": "c", "n6": "c"}
	for _, name := range []string{"kill-zone", "partition-zone"} {
		d := &zoneDriver{fakeDriver: fakeDriver{down: map[string]bool{}}, zones: labels}
		ns, err := Nemeses(name)
		if err != nil {
			t.Fatal(err)
		}
		env := &Env{Driver: d, Rng: rand.New(rand.NewPCG(1, 2))}
		desc, err := ns[0].Start(ctx, env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := ns[0].Stop(ctx, env); err != nil {
			t.Fatal(err)
		}
		calls := strings.Join(d.calls, "; ")
		var want string
		switch {
		case strings.Contains(desc, "zone a"):
			want = "n1 n2"
		case strings.Contains(desc, "zone b"):
			want = "n3 n4"
		default:
			want = "n5 n6"
		}
		a, b, _ := strings.Cut(want, " ")
		if name == "kill-zone" && calls != fmt.Sprintf("kill %s; kill %s; start %s; start %s", a, b, a, b) {
			t.Errorf("%s (%s): %s", name, desc, calls)
		}
		if name == "partition-zone" && !strings.HasPrefix(calls, fmt.Sprintf("partition [[%s %s] [", a, b)) || name == "partition-zone" && !strings.HasSuffix(calls, "; heal") {
			t.Errorf("%s (%s): %s", name, desc, calls)
		}
	}
	// The faults of a run take every zone in turn.
	d := &zoneDriver{fakeDriver: fakeDriver{down: map[string]bool{}}, zones: labels}
	ns, _ := Nemeses("kill-zone")
	env := &Env{Driver: d, Rng: rand.New(rand.NewPCG(1, 2))}
	seen := map[string]bool{}
	for range 3 {
		desc, err := ns[0].Start(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		seen[strings.Fields(desc)[2]] = true
		if err := ns[0].Stop(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 3 {
		t.Errorf("three kill-zone faults took zones %v, want a, b and c", seen)
	}

	two := map[string]string{"n1": "a", "n2": "a", "n3": "a", "n4": "b", "n5": "b", "n6": "b"}
	d = &zoneDriver{fakeDriver: fakeDriver{down: map[string]bool{}}, zones: two}
	ns, _ = Nemeses("kill-zone")
	if _, err := ns[0].Start(ctx, &Env{Driver: d, Rng: rand.New(rand.NewPCG(1, 2))}); !errors.Is(err, ErrUnsupported) || len(d.calls) != 0 {
		t.Errorf("two zones: %v, calls %v", err, d.calls)
	}
	if _, err := ns[0].Start(ctx, &Env{Driver: &fakeDriver{down: map[string]bool{}}, Rng: rand.New(rand.NewPCG(1, 2))}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a driver without members: %v", err)
	}
}

// The docker driver cuts a zone off (partition-zone) by disconnecting each
// of its nodes from the network, and reconnects them with their IPs on
// Heal; its ports follow PortBase when set (docker-compose.zones.yml).
func TestDockerPartitionsZone(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "docker")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\n" +
		"case \"$*\" in\n*State.Running*) echo true ;;\n*IPAddress*) echo 172.29.72.1${4#zk-n} ;;\nesac\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	d, err := NewDocker(context.Background(), DockerConfig{Nodes: nodes, Services: nodes, PortBase: 32000,
		ContainerPrefix: "zk-", Network: "zk-net", Docker: fake})
	if err != nil {
		t.Fatal(err)
	}
	if g, h := d.grpcAddr("n6"), d.httpAddr("n1"); g != "127.0.0.1:32600" || h != "127.0.0.1:32102" {
		t.Errorf("ports %s %s, want 127.0.0.1:32600 127.0.0.1:32102", g, h)
	}
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Partition(ctx, [][]string{{"n3", "n4"}, {"n1", "n2", "n5", "n6"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(got[2:]) // Heal reconnects in map order
	want := []string{"network disconnect zk-net zk-n3", "network disconnect zk-net zk-n4",
		"network connect --ip 172.29.72.13 zk-net zk-n3", "network connect --ip 172.29.72.14 zk-net zk-n4"}
	if !slices.Equal(got, want) {
		t.Errorf("docker calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
