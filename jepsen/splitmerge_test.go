package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// fakeShards is a driver with a cluster state whose moves advance one
// phase each time the state is read, as the mover would; its flags script
// faults of the cluster.
type fakeShards struct {
	fakeDriver
	mu sync.Mutex
	st placement.State
	// abort: every move aborts after its freeze. corrupt: a publish gives
	// the target only half the slots. stuck: moves never leave frozen.
	abort, corrupt, stuck bool
	// lose: the first lose submissions commit but answer Unavailable.
	lose int
	// noRoutes: submissions fail as on a node without the shard routes.
	noRoutes bool
	// atOnce: a move runs to its end as it is submitted.
	atOnce bool

	submits int
}

var _ Resharding = (*fakeShards)(nil)

func newFakeShards(shards int) *fakeShards {
	f := &fakeShards{fakeDriver: fakeDriver{down: map[string]bool{}}}
	f.st.Slots = make([]shard.ID, shard.NumSlots)
	for x := range f.st.Slots {
		f.st.Slots[x] = shard.ID(x % shards)
	}
	for id := range shards {
		f.st.Shards = append(f.st.Shards, placement.Placement{Shard: shard.ID(id), Voters: []string{"n1", "n2", "n3"}})
	}
	f.st.NumShards = shards
	return f
}

func (f *fakeShards) adminVia(except string) []string {
	f.fakeDriver.mu.Lock()
	defer f.fakeDriver.mu.Unlock()
	var out []string
	for _, n := range f.Nodes() {
		if n != except && !f.down[n] {
			out = append(out, n)
		}
	}
	return out
}

func (f *fakeShards) plan(plan func(s *placement.State) (placement.Move, error)) (placement.Move, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits++
	if f.noRoutes {
		return placement.Move{}, moveRefusal(&adminHTTPError{HTTP: http.StatusNotFound, err: status.Error(codes.NotFound, "404 page not found")})
	}
	m, err := plan(&f.st)
	if err != nil {
		return m, status.Error(codes.FailedPrecondition, err.Error())
	}
	for f.atOnce && len(f.st.Moves) > 0 {
		f.mu.Unlock()
		f.adminState(context.Background(), "")
		f.mu.Lock()
	}
	if f.lose > 0 {
		f.lose--
		return placement.Move{}, status.Error(codes.Unavailable, "answer lost")
	}
	return m, nil
}

func (f *fakeShards) adminSplit(_ context.Context, _ string, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	return f.plan(func(s *placement.State) (placement.Move, error) { return placement.PlanSplit(s, id, slots, time.Now()) })
}

func (f *fakeShards) adminMerge(_ context.Context, _ string, into, from shard.ID) (placement.Move, error) {
	return f.plan(func(s *placement.State) (placement.Move, error) {
		return placement.PlanMerge(s, into, from, time.Now())
	})
}

// adminState advances every move one step, then returns a copy.
func (f *fakeShards) adminState(context.Context, string) (*cluster.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for _, m := range append([]placement.Move(nil), f.st.Moves...) {
		s := &f.st
		switch m.Phase {
		case placement.PhasePlanned:
			_ = placement.SetPhase(s, m.ID, m.Phase, placement.PhaseCreated, now)
		case placement.PhaseCreated:
			_ = placement.Frozen(s, m.ID, 1, now)
		case placement.PhaseFrozen:
			switch {
			case f.stuck:
			case f.abort:
				_ = placement.Abort(s, m.ID, "scripted abort", now)
			default:
				_ = placement.SetPhase(s, m.ID, m.Phase, placement.PhaseAdopted, now)
			}
		case placement.PhaseAdopted:
			_ = placement.Publish(s, m.ID, now)
			if f.corrupt {
				for _, x := range m.Slots.Slots()[:m.Slots.Len()/2] {
					s.Slots[x] = m.Source
				}
			}
		case placement.PhasePublished, placement.PhaseAborting:
			_ = placement.Finish(s, m.ID)
		}
	}
	b, err := json.Marshal(f.st)
	if err != nil {
		return nil, err
	}
	var out cluster.State
	return &out, json.Unmarshal(b, &out)
}

// activate runs one activation of n (Start, then Stop).
func activate(t *testing.T, n Nemesis, env *Env) error {
	t.Helper()
	if _, err := n.Start(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.Stop(ctx, env)
}

func newEnv(d Driver) *Env {
	return &Env{Driver: d, Rng: rand.New(rand.NewPCG(1, 2)), Rec: NewRecorder()}
}

// Splits while the cluster has its first shard count, merges while it has
// more; each move is followed to its end and recorded in the book and the
// history.
func TestSplitMergeAlternates(t *testing.T) {
	f := newFakeShards(4)
	env := newEnv(f)
	n := &splitMergeNemesis{}
	for range 4 {
		if err := activate(t, n, env); err != nil {
			t.Fatal(err)
		}
	}
	ms := env.moves.records()
	if len(ms) != 4 {
		t.Fatalf("moves %v", ms)
	}
	for i, m := range ms {
		want := []string{placement.MoveSplit, placement.MoveMerge}[i%2]
		if m.Kind != want || m.Outcome != MoveDone || m.ID != uint64(i+1) || m.NSlots == 0 {
			t.Errorf("move %d: %+v, want a %s done", i, m, want)
		}
		if len(m.Phases) < 2 || m.Phases[0] != placement.PhasePlanned {
			t.Errorf("move %d phases %v", i, m.Phases)
		}
	}
	if c := countMoves(ms); c.Splits != 2 || c.Merges != 2 || c.String() != "2 splits, 2 merges, 0 aborted" {
		t.Errorf("counts %s", c)
	}
	h := env.Rec.History().Of("nemesis")
	if len(h) != 4 {
		t.Fatalf("history %v", h)
	}
	for _, op := range h {
		if op.Outcome != OK || op.Output.(MoveRecord).Outcome != MoveDone || op.Complete <= op.Invoke {
			t.Errorf("op %+v", op)
		}
	}
	if v := checkMoves(ms, nil, nil); !v.Valid || v.Stats["splits"] != 2 || v.Stats["merges"] != 2 {
		t.Errorf("verdict %v", v)
	}
	if len(f.st.Moves) != 0 || len(ownedSlots(&f.st)) != 4 {
		t.Errorf("state after two splits and two merges: %d shards, moves %v", len(ownedSlots(&f.st)), f.st.Moves)
	}
}

// An aborted move is legitimate (counted apart, a failed op); a move that
// leaves its slots split between shards is an anomaly.
func TestSplitMergeOutcomes(t *testing.T) {
	f := newFakeShards(4)
	f.abort = true
	env := newEnv(f)
	n := &splitMergeNemesis{}
	for range 2 {
		if err := activate(t, n, env); err != nil {
			t.Fatal(err)
		}
	}
	ms := env.moves.records()
	for _, m := range ms {
		// Both split: an aborted split leaves the shard count as it was.
		if m.Kind != placement.MoveSplit || m.Outcome != MoveAborted || m.Error != "scripted abort" {
			t.Errorf("move %+v, want an aborted split", m)
		}
	}
	for _, op := range env.Rec.History().Of("nemesis") {
		if op.Outcome != Fail {
			t.Errorf("aborted move recorded %s", op.Outcome)
		}
	}
	if v := checkMoves(ms, nil, nil); !v.Valid || v.Stats["aborted"] != 2 {
		t.Errorf("verdict %v", v)
	}

	f.abort, f.corrupt = false, true
	err := activate(t, n, env)
	if err == nil || !strings.Contains(err.Error(), "split between shards") {
		t.Fatalf("inconsistent move: Stop said %v", err)
	}
	ms = env.moves.records()
	last := ms[len(ms)-1]
	if last.Outcome != MoveInconsistent || !strings.Contains(last.Error, "slot map: shard") {
		t.Errorf("move %+v", last)
	}
	v := checkMoves(ms, nil, nil)
	if v.Valid || !strings.Contains(strings.Join(v.Anomalies, "\n"), "inconsistent") {
		t.Errorf("verdict %v", v)
	}

	// A shard with one slot cannot be split: refused, nothing submitted.
	f = newFakeShards(shard.NumSlots)
	env = newEnv(f)
	if err := activate(t, &splitMergeNemesis{}, env); err != nil {
		t.Fatal(err)
	}
	if ms := env.moves.records(); len(ms) != 1 || ms[0].Outcome != MoveRefused || f.submits != 0 {
		t.Errorf("moves %+v, %d submits", ms, f.submits)
	}
}

// A submission whose answer is lost may have committed the move: the
// retry is refused (the shard is in a move) and the nemesis follows the
// move it made instead of reporting a refusal or making a second one.
func TestSplitMergeLostAnswer(t *testing.T) {
	f := newFakeShards(4)
	f.lose = 1
	env := newEnv(f)
	if err := activate(t, &splitMergeNemesis{}, env); err != nil {
		t.Fatal(err)
	}
	ms := env.moves.records()
	if len(ms) != 1 || ms[0].Outcome != MoveDone || ms[0].ID != 1 || f.st.NextMoveID != 2 {
		t.Errorf("moves %+v, next move id %d", ms, f.st.NextMoveID)
	}

	// The move ended before the nemesis could see it in the state: it is
	// judged from the map (the split's target read from it), once.
	f = newFakeShards(4)
	f.lose, f.atOnce = 1, true
	env = newEnv(f)
	if err := activate(t, &splitMergeNemesis{}, env); err != nil {
		t.Fatal(err)
	}
	ms = env.moves.records()
	if len(ms) != 1 || ms[0].Outcome != MoveDone || ms[0].ID != 1 || ms[0].Target != 4 || f.st.NextMoveID != 2 ||
		len(ownedSlots(&f.st)) != 5 || ms[0].Phases[0] != "ended" {
		t.Errorf("moves %+v, next move id %d, %d shards", ms, f.st.NextMoveID, len(ownedSlots(&f.st)))
	}
}

// A move still in the state once the cluster is healed is an anomaly, and
// a move the nemesis stops waiting for is unfinished.
func TestSplitMergeStuckMove(t *testing.T) {
	old := moveTimeout
	moveTimeout = 2 * time.Second
	defer func() { moveTimeout = old }()
	f := newFakeShards(4)
	f.stuck = true
	res, err := Run(context.Background(), Config{Driver: f, Connect: NewMemDB(MemBugs{}).Connect(),
		Workloads: allWorkloads(t, "stuck"), Nemeses: must(Nemeses("split-merge")), Duration: 300 * time.Millisecond,
		Interval: 10 * time.Millisecond, FaultDuration: 10 * time.Millisecond, WorkersPerWorkload: 1,
		RecoveryTimeout: time.Second, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid {
		t.Fatalf("a stuck move passed:\n%s", res.Summary())
	}
	v := verdictOf(t, res, "moves")
	if !strings.Contains(strings.Join(v.Anomalies, "\n"), "still frozen after healing") || v.Stats["unfinished"] != 1 {
		t.Errorf("verdict %v", v)
	}
	if !strings.Contains(res.Summary(), "Moves: 0 splits, 0 merges, 0 aborted, 1 unfinished") {
		t.Errorf("summary:\n%s", res.Summary())
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// "a+b" injects a and b together: started in order, stopped in reverse;
// an unsupported part makes the whole combination unsupported, after the
// parts already started are stopped.
func TestComboNemesis(t *testing.T) {
	ns, err := Nemeses("kill+partition-minority,pause")
	if err != nil || len(ns) != 2 || ns[0].Name() != "kill+partition-minority" || ns[1].Name() != "pause" {
		t.Fatalf("%v %v", ns, err)
	}
	drv := &fakeDriver{down: map[string]bool{}}
	env := &Env{Driver: drv, Rng: rand.New(rand.NewPCG(1, 1))}
	desc, err := ns[0].Start(context.Background(), env)
	if err != nil || !strings.Contains(desc, "killed") || !strings.Contains(desc, " + partition") {
		t.Fatalf("start: %q %v", desc, err)
	}
	if err := ns[0].Stop(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if len(drv.calls) != 4 || !strings.HasPrefix(drv.calls[0], "kill ") || !strings.HasPrefix(drv.calls[1], "partition ") ||
		drv.calls[2] != "heal" || !strings.HasPrefix(drv.calls[3], "start ") {
		t.Errorf("calls %v", drv.calls)
	}

	drv.calls = nil
	c := must(Nemeses("kill+delay"))[0]
	if _, err := c.Start(context.Background(), env); err == nil || !strings.Contains(err.Error(), ErrUnsupported.Error()) {
		t.Fatalf("kill+delay on a driver without delays: %v", err)
	}
	if len(drv.calls) != 2 || !strings.HasPrefix(drv.calls[1], "start ") || len(drv.down) != 0 {
		t.Errorf("the killed node was not restarted: %v", drv.calls)
	}
	if _, err := Nemeses("kill+nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown part: %v", err)
	}
	// The split-merge nemesis needs a driver that can move slots.
	if _, err := must(Nemeses("split-merge"))[0].Start(context.Background(), env); !errorsIsUnsupported(err) {
		t.Errorf("split-merge on the fake driver: %v", err)
	}
}

func errorsIsUnsupported(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrUnsupported.Error())
}

// The docker driver's move calls: their routes and queries, the move
// decoded from the answer, a 409 refusal as FailedPrecondition (the
// nemesis does not retry it) and other errors as retryable.
func TestDockerMoveRoutes(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/shards/3/split":
			json.NewEncoder(w).Encode(placement.Move{ID: 7, Kind: placement.MoveSplit, Source: 3, Target: 8, Slots: shard.SlotSetOf(3, 11), Phase: placement.PhasePlanned})
		case r.URL.Path == "/v1/shards/merge" && r.URL.Query().Get("from") == "2":
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]string{"error": "move refused: shard 2 is already in move 7"})
		case r.URL.Path == "/v1/shards/merge":
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]string{"error": "no meta leader"})
		case r.URL.Path == "/v1/state":
			json.NewEncoder(w).Encode(cluster.State{Moves: []placement.Move{{ID: 7, Phase: placement.PhaseFrozen}}, Slots: []shard.ID{0, 1}})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	d := &dockerVia{addr: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	slots := shard.SlotSetOf(3, 11)
	m, err := d.split(ctx, 3, &slots)
	if err != nil || m.ID != 7 || m.Target != 8 || m.Slots != slots {
		t.Fatalf("split: %+v %v", m, err)
	}
	if _, err := d.split(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.merge(ctx, 1, 2); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already in move 7") {
		t.Errorf("refused merge: %v (code %v)", err, status.Code(err))
	}
	if _, err := d.merge(ctx, 1, 4); status.Code(err) != codes.Unavailable {
		t.Errorf("unavailable merge: %v (code %v)", err, status.Code(err))
	}
	if _, err := d.split(ctx, 9, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a node without the route: %v, want ErrUnsupported", err)
	}
	st, err := d.state(ctx)
	if err != nil || len(st.Moves) != 1 || st.Moves[0].Phase != placement.PhaseFrozen || len(st.Slots) != 2 {
		t.Fatalf("state: %+v %v", st, err)
	}
	want := []string{"POST /v1/shards/3/split?slots=3%2C11", "POST /v1/shards/3/split", "POST /v1/shards/merge?into=1&from=2",
		"POST /v1/shards/merge?into=1&from=4", "POST /v1/shards/9/split", "GET /v1/state"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A driver whose nodes lack the shard routes leaves split-merge out of the
// schedule: no move, no nemesis op, no moves verdict.
func TestSplitMergeWithoutRoutes(t *testing.T) {
	f := newFakeShards(4)
	f.noRoutes = true
	res, err := Run(context.Background(), Config{Driver: f, Connect: NewMemDB(MemBugs{}).Connect(),
		Workloads: allWorkloads(t, "noroutes"), Nemeses: must(Nemeses("split-merge,kill")), Duration: 300 * time.Millisecond,
		Interval: 10 * time.Millisecond, FaultDuration: 10 * time.Millisecond, WorkersPerWorkload: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Skipped, []string{"split-merge"}) || len(res.Moves) != 0 || f.submits != 1 {
		t.Errorf("skipped %v, moves %v, %d submits", res.Skipped, res.Moves, f.submits)
	}
	for _, v := range res.Verdicts {
		if v.Checker == "moves" {
			t.Errorf("moves verdict without moves: %v", v)
		}
	}
	for _, op := range res.History.Of("nemesis") {
		if op.Outcome != Fail {
			t.Errorf("op %+v", op)
		}
	}
}

// A plan refused by the state is final; a node that lost the meta group's
// leadership meanwhile answers not leader (also FailedPrecondition), which
// is retried.
func TestMoveRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.FailedPrecondition, "move refused: shard 2 is already in move 7"), true},
		{rpc.KindNotLeader.Status("not the leader of shard", &rpc.NotLeader{}), false},
		{moveRefusal(&adminHTTPError{HTTP: http.StatusConflict, err: status.Error(codes.Unavailable, "POST /v1/shards/merge: 409 Conflict: not the leader of shard")}), false},
		{moveRefusal(&adminHTTPError{HTTP: http.StatusConflict, err: status.Error(codes.Unavailable, "POST /v1/shards/merge: 409 Conflict: move refused: unknown shard 9")}), true},
		{status.Error(codes.Unavailable, "no meta leader"), false},
	} {
		if got := refusal(tc.err); got != tc.want {
			t.Errorf("refusal(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// neverReady is a cluster that does not recover after healing.
type neverReady struct{ *fakeShards }

func (neverReady) Ready(context.Context, string) error { return errors.New("no leader") }

// A run that cannot recover still reports what happened (operations,
// faults, moves), as INCOMPLETE, in its result and its report.
func TestRunIncompleteReport(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(context.Background(), Config{Driver: neverReady{newFakeShards(4)}, Connect: NewMemDB(MemBugs{}).Connect(),
		Workloads: allWorkloads(t, "incomplete"), Nemeses: must(Nemeses("split-merge")), Duration: 300 * time.Millisecond,
		Interval: 10 * time.Millisecond, FaultDuration: 10 * time.Millisecond, WorkersPerWorkload: 1,
		RecoveryTimeout: 300 * time.Millisecond, Seed: 3, OutDir: dir})
	if err == nil || !strings.Contains(err.Error(), "recovery") {
		t.Fatalf("err %v", err)
	}
	if res == nil || res.Valid || !strings.Contains(res.Error, "no leader") || len(res.Faults) == 0 || len(res.Moves) == 0 ||
		res.Counts["register write"][OK] == 0 || len(res.Verdicts) != 0 {
		t.Fatalf("result %+v", res)
	}
	if s := res.Summary(); !strings.Contains(s, "INCOMPLETE: jepsen: recovery") || !strings.Contains(s, "Moves: ") {
		t.Errorf("summary:\n%s", s)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.txt"))
	if err != nil || !strings.Contains(string(b), "INCOMPLETE") {
		t.Errorf("report: %v\n%s", err, b)
	}
}
