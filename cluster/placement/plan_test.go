package placement

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// planState is a state of five members, n1..n5 (n4 leaving, n5 removed),
// two shards on n1..n3 and n1 also a learner of shard 1 on n4.
func planState() *State {
	st := &State{ReplicationFactor: 3, MetaVoters: []string{"n1", "n2", "n3"},
		Shards: []Placement{
			{Shard: 0, Voters: []string{"n1", "n2", "n3"}},
			{Shard: 1, Voters: []string{"n1", "n2"}, Learners: []string{"n4"}},
		}}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		st.Nodes = append(st.Nodes, NodeAddrs{ID: id})
	}
	st.Member("n4").Status = StatusLeaving
	st.Member("n5").Status = StatusRemoved
	return st
}

func TestLiveness(t *testing.T) {
	st := planState()
	lv := NewLiveness(st,
		map[string]bool{"n1": true, "n2": true, "n3": false, "n4": true},
		map[string]time.Duration{"n3": time.Minute},
		5*time.Minute)
	for _, c := range []struct {
		id                          string
		active, eligible, placeable bool
		replicas                    int
	}{
		{"n1", true, true, true, 2},
		{"n3", true, true, false, 1}, // down for less than the timeout
		{"n4", false, false, false, 1},
		{"n5", false, false, false, 0},
		{"n9", false, false, false, 0},
	} {
		if lv.Active(c.id) != c.active || lv.Eligible(c.id) != c.eligible || lv.Placeable(c.id) != c.placeable || lv.Replicas[c.id] != c.replicas {
			t.Errorf("%s: active %v eligible %v placeable %v replicas %d, want %+v",
				c.id, lv.Active(c.id), lv.Eligible(c.id), lv.Placeable(c.id), lv.Replicas[c.id], c)
		}
	}
	lv.DownFor["n3"] = 5 * time.Minute
	if lv.Eligible("n3") {
		t.Error("n3 down for the timeout is still eligible")
	}
	if n := lv.ActiveCount(); n != 3 {
		t.Errorf("ActiveCount = %d, want 3", n)
	}
	gs := Groups(st)
	if len(gs) != 3 || !gs[0].Meta || gs[1].Shard != 0 || gs[2].Shard != 1 {
		t.Fatalf("Groups = %v", gs)
	}
	if got := lv.VoterTarget(gs[0]); got != 3 {
		t.Errorf("meta target = %d, want 3", got)
	}
	st.ReplicationFactor = 5
	if got := lv.VoterTarget(gs[1]); got != 3 {
		t.Errorf("shard target with 3 active members and RF 5 = %d, want 3", got)
	}
}

func TestSetPlacement(t *testing.T) {
	st := planState()
	g := Groups(st)[2]
	if h := g.Holders(); !slices.Equal(h, []string{"n1", "n2", "n4"}) {
		t.Fatalf("Holders = %v", h)
	}
	if err := SetPlacement(st, g, []string{"n2", "n1"}, []string{"n4"}); !errors.Is(err, ErrNoChange) {
		t.Fatalf("same placement: %v, want ErrNoChange", err)
	}
	if err := SetPlacement(st, g, []string{"n2", "n1", "n4"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := GroupOf(st, g); !slices.Equal(got.Voters, []string{"n1", "n2", "n4"}) || len(got.Learners) != 0 {
		t.Fatalf("GroupOf after SetPlacement = %+v", got)
	}
	if err := SetPlacement(st, Groups(st)[0], []string{"n3", "n1"}, []string{"n2"}); err != nil ||
		!slices.Equal(st.MetaVoters, []string{"n1", "n3"}) || !slices.Equal(st.MetaLearners, []string{"n2"}) {
		t.Fatalf("meta: %v %v %v", err, st.MetaVoters, st.MetaLearners)
	}
	if err := SetPlacement(st, Group{Shard: 7}, nil, nil); err == nil || errors.Is(err, ErrNoChange) {
		t.Fatalf("shard without placement: %v", err)
	}
	if w := Without([]string{"a", "b", "a"}, "a"); !slices.Equal(w, []string{"b"}) {
		t.Fatalf("Without = %v", w)
	}
}

func TestPickCandidate(t *testing.T) {
	st := planState()
	st.Nodes = append(st.Nodes, NodeAddrs{ID: "n6"}, NodeAddrs{ID: "n0"})
	alive := map[string]bool{"n0": true, "n1": true, "n2": true, "n3": true, "n4": true, "n5": true, "n6": true}
	lv := NewLiveness(st, alive, map[string]time.Duration{}, time.Minute)
	g := Groups(st)[2] // shard 1: n1, n2 and learner n4
	// n3 holds one replica, n0 and n6 none: the smallest id of the least
	// loaded wins; n4 (leaving, and a holder) and n5 (removed) never.
	if c := PickCandidate(g, g.Voters, lv); c != "n0" {
		t.Fatalf("candidate %q, want n0", c)
	}
	lv.Alive["n0"] = false
	if c := PickCandidate(g, g.Voters, lv); c != "n6" {
		t.Fatalf("candidate with n0 down %q, want n6", c)
	}
	lv.Alive["n6"] = false
	if c := PickCandidate(g, g.Voters, lv); c != "n3" {
		t.Fatalf("candidate %q, want n3", c)
	}
	if c := PickCandidate(g, []string{"n3"}, lv); c != "" {
		t.Fatalf("candidate %q among the configuration's voters, want none", c)
	}
}
