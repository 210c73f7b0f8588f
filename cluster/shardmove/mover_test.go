package shardmove

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// fakeNode is a Host over an in-memory committed state: Update applies
// its function to a copy and commits it, as the meta group's guarded
// update does. Everything that would reach another node fails the test.
type fakeNode struct {
	t       *testing.T
	st      *placement.State
	updates int
	phases  []string // AfterMovePhase's calls
	halt    bool     // AfterMovePhase's answer
}

func (f *fakeNode) host() Host {
	return Host{
		ID: "a", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), PolicyInterval: time.Second, PolicyCooldown: time.Minute,
		AfterMovePhase: func(id uint64, phase string) bool { f.phases = append(f.phases, phase); return f.halt },
		MetaTerm:       func() uint64 { return 1 },
		Read:           func(context.Context) (*placement.State, error) { return f.st.Clone(), nil },
		Update: func(_ context.Context, fn func(*placement.State) error) error {
			next := f.st.Clone()
			if err := fn(next); errors.Is(err, placement.ErrNoChange) {
				return nil
			} else if err != nil {
				return err
			}
			f.st, f.updates = next, f.updates+1
			return nil
		},
		Local: func() *placement.State { return f.st },
		Replica: func(id shard.ID) *replica.Replica {
			f.t.Errorf("local replica of shard %d asked for", id)
			return nil
		},
		Leader: func(_ context.Context, g placement.Group) *rpc.ReplicaStatusResponse {
			f.t.Errorf("leader of shard %d asked for", g.Shard)
			return nil
		},
		Admin: func(id string) (rpc.AdminClient, error) {
			f.t.Errorf("Admin client of node %s asked for", id)
			return nil, errors.New("no network in this test")
		},
		Status: func(err error, _ shard.ID, _ func() (string, string)) error { return err },
		Kind:   func(error) rpc.Kind { return rpc.KindUnknown },
	}
}

// splitState is a 3-node state of two shards with split 0 -> 2 planned.
func splitState(t *testing.T) (*placement.State, placement.Move) {
	t.Helper()
	m, err := shard.DefaultMap(2)
	if err != nil {
		t.Fatal(err)
	}
	st := &placement.State{FormatVersion: placement.StateFormat, ClusterID: "c", Epoch: 1, ReplicationFactor: 3,
		MapVersion: m.Version, NumShards: m.NumShards, Slots: m.Slots[:], Shards: placement.Place([]string{"a", "b", "c"}, 2, 3)}
	mv, err := placement.PlanSplit(st, 0, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st, mv
}

// TestStepMoveAbortsSplitWithoutPlacement: a planned split whose new
// shard lost its placement is recorded as aborting (one meta update, the
// phase hook called, the mover kicked) without asking any node, and a
// hook that answers halt stops the mover.
func TestStepMoveAbortsSplitWithoutPlacement(t *testing.T) {
	st, mv := splitState(t)
	st.Shards = st.Shards[:2] // the target's placement is gone
	f := &fakeNode{t: t, st: st, halt: true}
	mr := New(f.host())
	if err := mr.stepMove(context.Background(), st.Clone(), mv); err != nil {
		t.Fatalf("stepMove: %v", err)
	}
	got := f.st.Move(mv.ID)
	if got == nil || got.Phase != placement.PhaseAborting || !strings.Contains(got.Error, "the new shard has no placement") || f.updates != 1 {
		t.Fatalf("move after the step: %+v (%d updates), want aborting: the new shard has no placement", got, f.updates)
	}
	if len(f.phases) != 1 || f.phases[0] != placement.PhaseAborting || !mr.halt.Load() {
		t.Fatalf("phase hook calls %v, halted %v; want [aborting], halted", f.phases, mr.halt.Load())
	}
	select {
	case <-mr.kick:
	default:
		t.Fatal("the committed phase did not kick the mover")
	}
}

// TestPullRefusesBadRequest: a pull without a move id, slots or two
// distinct shards is InvalidArgument before any replica is touched.
func TestPullRefusesBadRequest(t *testing.T) {
	f := &fakeNode{t: t}
	mr := New(f.host())
	for _, req := range []*rpc.PullSlotsRequest{
		{MoveId: 0, Source: 0, Target: 1, Slots: "0-3"},
		{MoveId: 1, Source: 0, Target: 1, Slots: ""},
		{MoveId: 1, Source: 1, Target: 1, Slots: "0-3"},
		{MoveId: 1, Source: 0, Target: 1, Slots: "not slots"},
	} {
		resp, err := mr.Pull(context.Background(), req)
		if resp != nil || !errors.Is(err, replica.ErrInvalidArgument) {
			t.Errorf("Pull(%v) = %v, %v; want InvalidArgument", req, resp, err)
		}
	}
}

// TestPolicyWaitsForMove: while a move is in progress the policy plans
// nothing, changes nothing and records the move as last seen.
func TestPolicyWaitsForMove(t *testing.T) {
	st, _ := splitState(t)
	auto := placement.ShardPolicy{Auto: true, NodesPerShard: 1}
	st.Policy = &auto
	f := &fakeNode{t: t, st: st}
	mr := New(f.host())
	var last time.Time
	d, err := mr.policyStep(context.Background(), &last)
	if err != nil || d.Kind != "" || d.Reason != "a move is in progress" || last.IsZero() || f.updates != 0 {
		t.Fatalf("policyStep = %+v, %v (last %v, %d updates); want no move while one is in progress", d, err, last, f.updates)
	}
}

// moveAdmin is the Admin service of every node in a mover test: shards
// own their map's slots, pulls succeed, and the first freezes fail
// (a leader change).
type moveAdmin struct {
	rpc.AdminClient
	st          *placement.State
	statuses    int
	pulls       []bool // each pull's precopy flag
	freezes     int
	failFreezes int
}

func (a *moveAdmin) SlotStatus(_ context.Context, req *rpc.SlotStatusRequest, _ ...grpc.CallOption) (*rpc.SlotStatusResponse, error) {
	a.statuses++
	return &rpc.SlotStatusResponse{Owned: a.st.SlotsOf(shard.ID(req.Shard)).String()}, nil
}

func (a *moveAdmin) PullSlots(_ context.Context, req *rpc.PullSlotsRequest, _ ...grpc.CallOption) (*rpc.PullSlotsResponse, error) {
	a.pulls = append(a.pulls, req.Precopy)
	return &rpc.PullSlotsResponse{}, nil
}

func (a *moveAdmin) SlotCommand(_ context.Context, req *rpc.SlotCommandRequest, _ ...grpc.CallOption) (*rpc.SlotCommandResponse, error) {
	a.freezes++
	if a.freezes <= a.failFreezes {
		return nil, status.Error(codes.Aborted, "leadership lost, outcome unknown")
	}
	return &rpc.SlotCommandResponse{MoveIndex: 42}, nil
}

// TestFreezeRetriedWithoutPrecopy: a freeze that fails right after the
// pre-copy is retried alone in the next rounds (no second narrowing, no
// second pre-copy: the sync pass after the freeze brings what was
// written since), and the move is frozen once it succeeds. Once the
// pre-copy is older than precopyFresh, a round pre-copies again.
func TestFreezeRetriedWithoutPrecopy(t *testing.T) {
	st, mv := splitState(t)
	st.ProtocolVersion = fsm.VersionPrecopy
	if err := placement.SetPhase(st, mv.ID, placement.PhasePlanned, placement.PhaseCreated, time.Now()); err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{t: t, st: st}
	admin := &moveAdmin{st: st, failFreezes: 2}
	h := f.host()
	h.Replica = func(shard.ID) *replica.Replica { return nil }
	h.Leader = func(context.Context, placement.Group) *rpc.ReplicaStatusResponse {
		return &rpc.ReplicaStatusResponse{NodeId: "a"}
	}
	h.Admin = func(string) (rpc.AdminClient, error) { return admin, nil }
	h.Kind = func(err error) rpc.Kind {
		if status.Code(err) == codes.Aborted {
			return rpc.KindUnavailable
		}
		return rpc.KindUnknown
	}
	mr := New(h)
	step := func() error { return mr.stepMove(context.Background(), f.st.Clone(), *f.st.Move(mv.ID)) }
	for round := range 2 {
		if err := step(); err == nil || !strings.Contains(err.Error(), "freeze on shard 0") {
			t.Fatalf("round %d: %v, want the freeze's failure", round, err)
		}
	}
	if len(admin.pulls) != 1 || !admin.pulls[0] || admin.statuses != 2 || admin.freezes != 2 {
		t.Fatalf("after two failed freezes: pulls %v, %d slot statuses, %d freezes; want one pre-copy, two statuses (narrowing once), two freezes",
			admin.pulls, admin.statuses, admin.freezes)
	}
	if err := step(); err != nil {
		t.Fatalf("third round: %v", err)
	}
	if got := f.st.Move(mv.ID); got == nil || got.Phase != placement.PhaseFrozen || got.FreezeIndex != 42 || !got.Precopy {
		t.Fatalf("move after the freeze: %+v", got)
	}
	if len(admin.pulls) != 1 {
		t.Fatalf("pulls %v, want the one pre-copy", admin.pulls)
	}

	// A pre-copy older than precopyFresh is done again.
	st2, mv2 := splitState(t)
	st2.ProtocolVersion = fsm.VersionPrecopy
	if err := placement.SetPhase(st2, mv2.ID, placement.PhasePlanned, placement.PhaseCreated, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.st = st2
	admin.st, admin.pulls, admin.freezes, admin.failFreezes = st2, nil, 0, 1
	if err := step(); err == nil {
		t.Fatal("the first freeze should fail")
	}
	mr.mu.Lock()
	mr.precopied[mv2.ID] = time.Now().Add(-precopyFresh)
	mr.mu.Unlock()
	if err := step(); err != nil {
		t.Fatal(err)
	}
	if len(admin.pulls) != 2 {
		t.Fatalf("pulls %v, want a second pre-copy once the first is stale", admin.pulls)
	}
}
