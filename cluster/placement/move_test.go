package placement

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// moveState is a 3-node state with n shards on the default map.
func moveState(t *testing.T, n int) *State {
	t.Helper()
	m, err := shard.DefaultMap(n)
	if err != nil {
		t.Fatal(err)
	}
	return &State{FormatVersion: StateFormat, ClusterID: "c", Epoch: 1, ReplicationFactor: 3,
		MapVersion: m.Version, NumShards: m.NumShards, Slots: m.Slots[:],
		Shards: Place([]string{"a", "b", "c"}, n, 3)}
}

var t0 = time.Unix(1000, 0).UTC()

func TestPlanSplitDefaults(t *testing.T) {
	st := moveState(t, 2)
	before := st.SlotsOf(0)
	m, err := PlanSplit(st, 0, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	all := before.Slots()
	want := shard.SlotSetOf(all[len(all)/2:]...)
	if m.ID != 1 || m.Kind != MoveSplit || m.Source != 0 || m.Target != 2 || m.Slots != want ||
		m.MapVersion != 2 || m.Phase != PhasePlanned || !m.Created.Equal(t0) {
		t.Fatalf("move %+v, want id 1 split 0 -> 2 of %s, map version 2", m, want)
	}
	if m.Slots.Len() != before.Len()/2 || !before.Contains(m.Slots) {
		t.Fatalf("split takes %d of %d slots", m.Slots.Len(), before.Len())
	}
	p := st.Placement(2)
	if p == nil || !p.New || !p.StartsEmpty || !reflect.DeepEqual(p.Voters, st.Voters(0)) {
		t.Fatalf("target placement %+v, want new, empty, on %v", p, st.Voters(0))
	}
	// The map does not change before the publish.
	if st.MapVersion != 1 || !st.SlotsOf(2).IsEmpty() || st.NumShards != 2 {
		t.Fatalf("plan changed the map: version %d, shards %d", st.MapVersion, st.NumShards)
	}
	if _, err := st.Map(); err != nil {
		t.Fatal(err)
	}
	// A second split (of shard 1) gets the next id, target and version.
	m2, err := PlanSplit(st, 1, nil, t0)
	if err != nil || m2.ID != 2 || m2.Target != 3 || m2.MapVersion != 3 {
		t.Fatalf("second split %+v, %v", m2, err)
	}
}

func TestPlanRefusals(t *testing.T) {
	s := func(x ...shard.Slot) *shard.SlotSet { v := shard.SlotSetOf(x...); return &v }
	for _, tc := range []struct {
		name string
		prep func(*State)
		plan func(*State) error
		want string
	}{
		{"unknown source", nil, func(st *State) error { _, err := PlanSplit(st, 7, nil, t0); return err }, "unknown shard 7"},
		{"one slot", func(st *State) {
			for x := range st.Slots {
				st.Slots[x] = 1
			}
			st.Slots[5] = 0
		}, func(st *State) error { _, err := PlanSplit(st, 0, nil, t0); return err }, "owns one slot"},
		{"slots not owned", nil, func(st *State) error { _, err := PlanSplit(st, 0, s(0, 1), t0); return err }, "does not own slots 1"},
		{"no slots", nil, func(st *State) error { _, err := PlanSplit(st, 0, s(), t0); return err }, "no slots given"},
		{"every slot", nil, func(st *State) error {
			all := st.SlotsOf(0)
			_, err := PlanSplit(st, 0, &all, t0)
			return err
		}, "at least one slot"},
		{"source moving", func(st *State) { PlanSplit(st, 0, nil, t0) }, func(st *State) error { _, err := PlanSplit(st, 0, s(0), t0); return err }, "already in move 1"},
		{"source merging", func(st *State) { PlanMerge(st, 1, 0, t0) }, func(st *State) error { _, err := PlanSplit(st, 0, nil, t0); return err }, "already in move 1"},
		{"other merge", func(st *State) { PlanMerge(st, 1, 0, t0) }, func(st *State) error { _, err := PlanMerge(st, 0, 1, t0); return err }, "already in move 1"},
		{"source aborting", func(st *State) {
			PlanSplit(st, 0, nil, t0)
			Abort(st, 1, "test", t0)
		}, func(st *State) error { _, err := PlanSplit(st, 0, nil, t0); return err }, "already in move 1"},
		{"merge self", nil, func(st *State) error { _, err := PlanMerge(st, 1, 1, t0); return err }, "into itself"},
		{"merge unknown", nil, func(st *State) error { _, err := PlanMerge(st, 0, 9, t0); return err }, "unknown shard 9"},
		{"merge into split target", func(st *State) { PlanSplit(st, 0, nil, t0) }, func(st *State) error { _, err := PlanMerge(st, 2, 1, t0); return err }, "unknown shard 2"},
		{"merge moving", func(st *State) { PlanSplit(st, 0, nil, t0) }, func(st *State) error { _, err := PlanMerge(st, 1, 0, t0); return err }, "already in move"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := moveState(t, 2)
			if tc.prep != nil {
				tc.prep(st)
			}
			before := st.Clone()
			err := tc.plan(st)
			if !errors.Is(err, ErrMoveRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a refusal containing %q", err, tc.want)
			}
			if !reflect.DeepEqual(st, before) {
				t.Fatalf("a refused plan changed the state")
			}
		})
	}
}

// TestSplitLifecycle walks a split through every phase and checks the
// state at each: the map changes only at the publish.
// TestPlanRepeated: the same split or merge planned again while it is in
// progress (a request retried after its commit's outcome was lost) gets
// the move in progress back, with ErrNoChange and the state unchanged.
func TestPlanRepeated(t *testing.T) {
	st := moveState(t, 2)
	half := upperHalf(st.SlotsOf(0))
	first, err := PlanSplit(st, 0, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, slots := range []*shard.SlotSet{nil, &half} {
		m, err := PlanSplit(st, 0, slots, t0.Add(time.Second))
		if !errors.Is(err, ErrNoChange) || m.ID != first.ID || m.Slots != first.Slots {
			t.Fatalf("split again (slots %v): %+v, %v; want move %d, ErrNoChange", slots, m, err, first.ID)
		}
	}
	if err := SetPhase(st, first.ID, PhasePlanned, PhaseCreated, t0); err != nil {
		t.Fatal(err)
	}
	if m, err := PlanSplit(st, 0, nil, t0); !errors.Is(err, ErrNoChange) || m.ID != first.ID {
		t.Fatalf("split again once created: %+v, %v", m, err)
	}
	before := st.Clone()
	if _, err := PlanSplit(st, 0, nil, t0); !reflect.DeepEqual(st, before) {
		t.Fatalf("a repeated split changed the state: %v", err)
	}

	st = moveState(t, 2)
	mm, err := PlanMerge(st, 0, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := PlanMerge(st, 0, 1, t0); !errors.Is(err, ErrNoChange) || m.ID != mm.ID {
		t.Fatalf("merge again: %+v, %v; want move %d, ErrNoChange", m, err, mm.ID)
	}
	if _, err := PlanMerge(st, 1, 0, t0); !errors.Is(err, ErrMoveRefused) {
		t.Fatalf("the opposite merge: %v, want a refusal", err)
	}
}

func TestSplitLifecycle(t *testing.T) {
	st := moveState(t, 2)
	m, err := PlanSplit(st, 1, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Placement(m.Target); p == nil || p.Incarnation != m.ID || m.ID == 0 {
		t.Fatalf("split's new group %+v, move %d", p, m.ID)
	}
	step := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := SetPhase(st, m.ID, PhaseCreated, PhaseFrozen, t0); !errors.Is(err, ErrMoveRefused) {
		t.Fatalf("skipping created: %v", err)
	}
	if err := Publish(st, m.ID, t0); !errors.Is(err, ErrMoveRefused) {
		t.Fatalf("publish of a planned move: %v", err)
	}
	step(SetPhase(st, m.ID, PhasePlanned, PhaseCreated, t0))
	if st.Placement(m.Target).New {
		t.Fatal("created: target still marked new")
	}
	if err := SetPhase(st, m.ID, PhasePlanned, PhaseCreated, t0); !errors.Is(err, ErrNoChange) {
		t.Fatalf("repeat step: %v, want ErrNoChange", err)
	}
	step(Frozen(st, m.ID, 42, t0.Add(time.Second)))
	if got := st.Move(m.ID); got.FreezeIndex != 42 || !got.FrozenAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("frozen move %+v", got)
	}
	step(SetPhase(st, m.ID, PhaseFrozen, PhaseAdopted, t0))
	if err := Abort(st, m.ID, "late", t0); !errors.Is(err, ErrMoveRefused) {
		t.Fatalf("abort after adoption: %v", err)
	}
	step(Publish(st, m.ID, t0))
	if st.MapVersion != m.MapVersion || st.NumShards != 3 || st.SlotsOf(2) != m.Slots {
		t.Fatalf("published: version %d shards %d slots %s", st.MapVersion, st.NumShards, st.SlotsOf(2))
	}
	if _, err := st.Map(); err != nil {
		t.Fatal(err)
	}
	step(Finish(st, m.ID))
	if len(st.Moves) != 0 || st.Placement(2) == nil || st.NumShards != 3 {
		t.Fatalf("finished split: moves %v, shards %d", st.Moves, st.NumShards)
	}
	if err := Finish(st, m.ID); !errors.Is(err, ErrNoChange) {
		t.Fatalf("finish again: %v", err)
	}

	// Merge it back: shard 2 goes away, NumShards shrinks with a new map.
	mm, err := PlanMerge(st, 1, 2, t0)
	if err != nil || mm.ID != 2 || mm.Slots != m.Slots || mm.MapVersion != st.MapVersion+1 {
		t.Fatalf("merge %+v, %v", mm, err)
	}
	step(SetPhase(st, mm.ID, PhasePlanned, PhaseCreated, t0))
	step(Frozen(st, mm.ID, 7, t0))
	step(SetPhase(st, mm.ID, PhaseFrozen, PhaseAdopted, t0))
	step(Publish(st, mm.ID, t0))
	v := st.MapVersion
	step(Finish(st, mm.ID))
	if st.Placement(2) != nil || st.NumShards != 2 || st.MapVersion != v+1 || st.SlotsOf(1).Len() != 128 {
		t.Fatalf("merged: placement %v, shards %d, version %d", st.Placement(2), st.NumShards, st.MapVersion)
	}
	// Ids are not reused; the freed shard id is, by a group of another
	// incarnation.
	m3, err := PlanSplit(st, 0, nil, t0)
	if err != nil || m3.ID != 3 || m3.Target != 2 {
		t.Fatalf("third move %+v, %v", m3, err)
	}
	if inc := st.Placement(2).Incarnation; inc != m3.ID || inc == m.ID {
		t.Fatalf("reused shard id 2: incarnation %d, first group's %d", inc, m.ID)
	}
	if inc := st.Placement(0).Incarnation; inc != 0 {
		t.Fatalf("bootstrap group's incarnation %d", inc)
	}

	// Moves unknown to the state: ErrMoveNotFound, nothing changed.
	before := st.Clone()
	for _, err := range []error{Abort(st, 99, "x", t0), SetPhase(st, 99, PhasePlanned, PhaseCreated, t0),
		Publish(st, 99, t0), Frozen(st, 99, 1, t0), Abort(st, m.ID, "finished", t0)} {
		if !errors.Is(err, ErrMoveNotFound) || errors.Is(err, ErrMoveRefused) {
			t.Fatalf("unknown move: %v, want ErrMoveNotFound", err)
		}
	}
	if !reflect.DeepEqual(before, st) {
		t.Fatal("a refused request changed the state")
	}
}

func TestAbortSplitRemovesGroup(t *testing.T) {
	st := moveState(t, 3)
	m, _ := PlanSplit(st, 0, nil, t0)
	if err := SetPhase(st, m.ID, PhasePlanned, PhaseCreated, t0); err != nil {
		t.Fatal(err)
	}
	if err := Finish(st, m.ID); !errors.Is(err, ErrMoveRefused) {
		t.Fatalf("finish of a created move: %v", err)
	}
	if err := Abort(st, m.ID, "cancelled", t0); err != nil {
		t.Fatal(err)
	}
	if got := st.Move(m.ID); got.Phase != PhaseAborting || got.Error != "cancelled" {
		t.Fatalf("aborting move %+v", got)
	}
	// An abort that finds the target adopted rolls forward.
	if err := SetPhase(st, m.ID, PhaseAborting, PhaseAdopted, t0); err != nil {
		t.Fatal(err)
	}
	if err := Abort(st, m.ID, "x", t0); !errors.Is(err, ErrMoveRefused) {
		t.Fatal("abort of an adopted move")
	}
	st.Move(m.ID).Phase = PhaseAborting
	if err := Finish(st, m.ID); err != nil {
		t.Fatal(err)
	}
	if st.Placement(3) != nil || len(st.Moves) != 0 || st.NumShards != 3 || st.MapVersion != 1 {
		t.Fatalf("aborted split left %+v, shards %d, version %d", st.Shards, st.NumShards, st.MapVersion)
	}
}

// TestStateMovesJSON: moves round-trip through JSON, and a document
// written before elastic shards (no moves, no flags) still loads.
func TestStateMovesJSON(t *testing.T) {
	st := moveState(t, 2)
	if _, err := PlanSplit(st, 0, nil, t0); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"slots":"`) || !strings.Contains(string(b), `"starts_empty":true`) {
		t.Fatalf("json %s", b)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, st) {
		t.Fatalf("round trip:\n%+v\n%+v", back, *st)
	}
	old := moveState(t, 2)
	b, _ = json.Marshal(old)
	if strings.Contains(string(b), "moves") || strings.Contains(string(b), "next_move_id") || strings.Contains(string(b), `"new"`) {
		t.Fatalf("a state without moves writes them: %s", b)
	}
	var o State
	if err := json.Unmarshal(b, &o); err != nil || o.Moves != nil || o.FormatVersion != StateFormat {
		t.Fatalf("old document: %v %+v", err, o)
	}
	// Clone copies the moves.
	c := st.Clone()
	c.Moves[0].Phase = PhaseAborting
	c.Placement(2).New = false
	if st.Moves[0].Phase != PhasePlanned || !st.Placement(2).New {
		t.Fatal("Clone shares moves or placements")
	}
}

// TestCheckNoMoves: a state without moves passes; one with a move is
// refused with ErrMoveInProgress, naming the move and how to cancel it.
func TestCheckNoMoves(t *testing.T) {
	if err := CheckNoMoves(&State{}); err != nil {
		t.Fatal(err)
	}
	st := &State{Moves: []Move{{ID: 7, Kind: MoveSplit, Source: 0, Target: 2, Phase: PhaseFrozen}}}
	err := CheckNoMoves(st)
	want := "backup: a split or merge is in progress (move 7, split of shard 0 into shard 2, frozen): wait for it to finish, or cancel it (swarmnode shards cancel 7)"
	if !errors.Is(err, ErrMoveInProgress) || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}
