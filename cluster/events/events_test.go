package events

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// TestRingBounded: the ring keeps the last events in order, numbered from
// 1, and drops the oldest once full.
func TestRingBounded(t *testing.T) {
	at := time.Unix(1000, 0)
	r := NewRing(3)
	r.now = func() time.Time { return at }
	if got := r.Recent(); len(got) != 0 {
		t.Fatalf("empty ring holds %v", got)
	}
	texts := func() []string {
		var out []string
		for _, e := range r.Recent() {
			out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.Text))
		}
		return out
	}
	r.Add(Event{Text: "a"})
	r.Add(Event{Text: "b"})
	if got := texts(); !slices.Equal(got, []string{"1:a", "2:b"}) {
		t.Fatalf("Recent = %v", got)
	}
	for _, s := range []string{"c", "d", "e", "f", "g"} {
		r.Add(Event{Text: s})
	}
	if got := texts(); !slices.Equal(got, []string{"5:e", "6:f", "7:g"}) {
		t.Fatalf("Recent after wrapping = %v", got)
	}
	if e := r.Recent()[0]; !e.Time.Equal(at) {
		t.Errorf("Time %v, want the ring's clock %v", e.Time, at)
	}
	given := time.Unix(5, 0)
	r.Add(Event{Text: "h", Time: given})
	if got := r.Recent(); !got[2].Time.Equal(given) || len(got) != 3 {
		t.Errorf("a given Time was replaced: %+v", got)
	}
	var nilRing *Ring
	nilRing.Add(Event{Text: "x"}) // no panic
	if nilRing.Recent() != nil {
		t.Error("nil ring holds events")
	}
}

// TestRingConcurrent: concurrent adds are all numbered once (run under
// the race detector by make test).
func TestRingConcurrent(t *testing.T) {
	r := NewRing(1000)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				r.Add(Event{Text: fmt.Sprint(g, i)})
				r.Recent()
			}
		}()
	}
	wg.Wait()
	got := r.Recent()
	if len(got) != 400 {
		t.Fatalf("%d events, want 400", len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has Seq %d", i, e.Seq)
		}
	}
}

func state() *placement.State {
	return &placement.State{
		MetaVoters: []string{"n1", "n2", "n3"},
		Shards:     []placement.Placement{{Shard: 0, Voters: []string{"n1", "n2", "n3"}}},
		Nodes:      []placement.NodeAddrs{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}},
	}
}

func texts(es []Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s|%s|%s|%s", e.Kind, e.Shard, e.Node, e.Text))
	}
	return out
}

// TestDiff: each change of the committed state between two versions
// becomes one event, and nothing else does.
func TestDiff(t *testing.T) {
	upper, err := shard.ParseSlotSet("128-255")
	if err != nil {
		t.Fatal(err)
	}
	split := placement.Move{ID: 4, Kind: placement.MoveSplit, Source: 0, Target: 1, Slots: upper, Phase: placement.PhasePlanned}
	cases := []struct {
		name   string
		change func(*placement.State)
		want   []string
	}{
		{"nothing", func(s *placement.State) { s.Epoch++ }, nil},
		{"admitted", func(s *placement.State) { s.Nodes = append(s.Nodes, placement.NodeAddrs{ID: "n4"}) },
			[]string{"member||n4|n4 admitted (active)"}},
		{"leaving", func(s *placement.State) { s.Nodes[1].Status = placement.StatusLeaving },
			[]string{"member||n2|n2 leaving (was active)"}},
		{"unlisted", func(s *placement.State) { s.Nodes = s.Nodes[:2] },
			[]string{"member||n3|n3 no longer listed"}},
		{"learner added", func(s *placement.State) { s.Shards[0].Learners = []string{"n4"} },
			[]string{"replica|0|n4|shard 0: n4 added as learner"}},
		{"meta voter replaced", func(s *placement.State) { s.MetaVoters = []string{"n1", "n2", "n4"} },
			[]string{"replica|meta|n3|meta: n3 removed", "replica|meta|n4|meta: n4 added as voter"}},
		{"shard created", func(s *placement.State) {
			s.Shards = append(s.Shards, placement.Placement{Shard: 1, Voters: []string{"n1", "n2"}, Incarnation: 4})
		}, []string{"replica|1||shard 1 created on n1,n2"}},
		{"shard removed", func(s *placement.State) { s.Shards = nil }, []string{"replica|0||shard 0 removed"}},
		{"move planned", func(s *placement.State) { s.Moves = []placement.Move{split} },
			[]string{"move|0||move 4 (split 0 -> 1, slots 128-255) planned: planned"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prev := state()
			next := prev.Clone()
			c.change(next)
			if got := texts(Diff(prev, next)); !slices.Equal(got, c.want) {
				t.Errorf("Diff = %q, want %q", got, c.want)
			}
		})
	}

	// A learner promoted; a move advancing, aborting, done.
	prev, next := state(), state()
	prev.Shards[0].Learners = []string{"n4"}
	next.Shards[0].Voters = append(next.Shards[0].Voters, "n4")
	if got := texts(Diff(prev, next)); !slices.Equal(got, []string{"replica|0|n4|shard 0: n4 promoted to voter"}) {
		t.Errorf("promotion: %q", got)
	}
	prev, next = state(), state()
	prev.Moves = []placement.Move{split}
	frozen := split
	frozen.Phase = placement.PhaseFrozen
	next.Moves = []placement.Move{frozen}
	if got := texts(Diff(prev, next)); !slices.Equal(got, []string{"move|0||move 4 (split 0 -> 1, slots 128-255): frozen"}) {
		t.Errorf("phase: %q", got)
	}
	aborting := split
	aborting.Phase, aborting.Error = placement.PhaseAborting, "target unreachable"
	next.Moves = []placement.Move{aborting}
	if got := texts(Diff(prev, next)); !slices.Equal(got, []string{"move|0||move 4 (split 0 -> 1, slots 128-255) aborting: target unreachable"}) {
		t.Errorf("aborting: %q", got)
	}
	prev.Moves, next.Moves = []placement.Move{aborting}, nil
	if got := texts(Diff(prev, next)); !slices.Equal(got, []string{"move|0||move 4 (split 0 -> 1, slots 128-255) aborted"}) {
		t.Errorf("aborted: %q", got)
	}
	published := split
	published.Phase = placement.PhasePublished
	merge := placement.Move{ID: 5, Kind: placement.MoveMerge, Source: 2, Target: 0, Phase: placement.PhasePublished}
	prev.Moves = []placement.Move{published, merge}
	if got := texts(Diff(prev, next)); !slices.Equal(got, []string{
		"move|0||move 4 (split 0 -> 1, slots 128-255) done", "move|2||move 5 (merge 2 into 0) done"}) {
		t.Errorf("done: %q", got)
	}

	if Diff(nil, state()) != nil || Diff(state(), nil) != nil {
		t.Error("Diff with a nil state returned events")
	}
}
