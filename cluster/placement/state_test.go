package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/shard"
)

// stNodeIDs returns n node ids, deliberately not in sorted order.
func stNodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%c", 'z'-i)
	}
	return ids
}

// TestPlaceProperties checks Place for 1..9 nodes, 1..64 shards and
// replication factor 1..5: each shard gets min(rf, n) distinct voters, all
// of them known nodes; the result does not depend on the order of the ids,
// nor on anything but the inputs; the ids slice is not modified.
func TestPlaceProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 9; n++ {
		for shards := 1; shards <= 64; shards++ {
			for rf := 1; rf <= 5; rf++ {
				ids := stNodeIDs(n)
				orig := slices.Clone(ids)
				got := Place(ids, shards, rf)
				if !slices.Equal(ids, orig) {
					t.Fatalf("Place(n=%d) reordered its input to %v", n, ids)
				}
				name := fmt.Sprintf("n=%d shards=%d rf=%d", n, shards, rf)
				stCheckPlacement(t, name, ids, got, shards, min(rf, n))

				shuffled := slices.Clone(ids)
				rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				if again := Place(shuffled, shards, rf); !reflect.DeepEqual(again, got) {
					t.Fatalf("%s: Place depends on the order of the ids:\n%v\n%v", name, got, again)
				}
				if again := Place(ids, shards, rf); !reflect.DeepEqual(again, got) {
					t.Fatalf("%s: Place is not deterministic", name)
				}
			}
		}
	}
}

func stCheckPlacement(t *testing.T, name string, ids []string, got []Placement, shards, voters int) {
	t.Helper()
	if len(got) != shards {
		t.Fatalf("%s: %d placements, want %d", name, len(got), shards)
	}
	for s, p := range got {
		if p.Shard != shard.ID(s) {
			t.Fatalf("%s: placement %d is for shard %d", name, s, p.Shard)
		}
		if len(p.Voters) != voters {
			t.Fatalf("%s: shard %d has %d voters %v, want %d", name, s, len(p.Voters), p.Voters, voters)
		}
		seen := map[string]bool{}
		for _, v := range p.Voters {
			if seen[v] {
				t.Fatalf("%s: shard %d has voter %s twice: %v", name, s, v, p.Voters)
			}
			if !slices.Contains(ids, v) {
				t.Fatalf("%s: shard %d has unknown voter %s", name, s, v)
			}
			seen[v] = true
		}
	}
}

// TestPlaceBalanced checks the documented balance: every node holds the
// same number of replicas, ±1.
func TestPlaceBalanced(t *testing.T) {
	var bad []string
	for n := 1; n <= 9; n++ {
		for shards := 1; shards <= 64; shards++ {
			for rf := 1; rf <= 5; rf++ {
				ids := stNodeIDs(n)
				count := map[string]int{}
				for _, id := range ids {
					count[id] = 0
				}
				for _, p := range Place(ids, shards, rf) {
					for _, v := range p.Voters {
						count[v]++
					}
				}
				lo, hi := shards*rf, 0
				for _, c := range count {
					lo, hi = min(lo, c), max(hi, c)
				}
				if hi-lo > 1 {
					bad = append(bad, fmt.Sprintf("%d nodes, %d shards, rf %d: %d to %d replicas per node", n, shards, rf, lo, hi))
				}
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("Place spreads replicas unevenly (more than ±1) in %d of %d cases, e.g.\n  %s",
			len(bad), 9*64*5, strings.Join(bad[:min(len(bad), 5)], "\n  "))
	}
}

// TestPlaceExamples pins a few placements of the documented rule: with
// k = min(rf, n), replica j of shard s goes to node (s*k + j) mod n of the
// sorted ids. Every node must compute the same placement, so a change here
// is a protocol change.
func TestPlaceExamples(t *testing.T) {
	for _, tc := range []struct {
		ids    []string
		shards int
		rf     int
		want   [][]string
	}{
		{[]string{"n1"}, 2, 3, [][]string{{"n1"}, {"n1"}}},
		{[]string{"n2", "n1"}, 2, 3, [][]string{{"n1", "n2"}, {"n1", "n2"}}},
		{[]string{"c", "a", "b"}, 4, 3, [][]string{{"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}}},
		{[]string{"d", "c", "b", "a"}, 4, 1, [][]string{{"a"}, {"b"}, {"c"}, {"d"}}},
		{[]string{"d", "c", "b", "a"}, 3, 2, [][]string{{"a", "b"}, {"c", "d"}, {"a", "b"}}},
		// The defaults (8 shards, rf 3) on 5 nodes: 5, 5, 5, 5, 4 replicas.
		{[]string{"e", "d", "c", "b", "a"}, 8, 3, [][]string{
			{"a", "b", "c"}, {"d", "e", "a"}, {"b", "c", "d"}, {"e", "a", "b"},
			{"c", "d", "e"}, {"a", "b", "c"}, {"d", "e", "a"}, {"b", "c", "d"},
		}},
	} {
		got := Place(tc.ids, tc.shards, tc.rf)
		var voters [][]string
		for _, p := range got {
			voters = append(voters, p.Voters)
		}
		if !reflect.DeepEqual(voters, tc.want) {
			t.Errorf("Place(%v, %d, %d) = %v, want %v", tc.ids, tc.shards, tc.rf, voters, tc.want)
		}
	}
}

// stState returns a valid state for numShards shards on three nodes.
func stState(t *testing.T, numShards int) *State {
	t.Helper()
	m, err := shard.DefaultMap(numShards)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"n1", "n2", "n3"}
	s := &State{
		FormatVersion: StateFormat,
		ClusterID:     "c-123",
		MapVersion:    m.Version,
		NumShards:     numShards,
		Slots:         m.Slots[:],
		Shards:        Place(ids, numShards, 3),
	}
	for i, id := range ids {
		s.Nodes = append(s.Nodes, NodeAddrs{
			ID:         id,
			RaftAddr:   fmt.Sprintf("127.0.0.1:%d7101", i+1),
			GRPCAddr:   fmt.Sprintf("127.0.0.1:%d7100", i+1),
			HTTPAddr:   fmt.Sprintf("127.0.0.1:%d7102", i+1),
			GossipAddr: fmt.Sprintf("127.0.0.1:%d7103", i+1),
		})
	}
	return s
}

func TestStateAccessors(t *testing.T) {
	s := stState(t, 5)
	m, err := s.Map()
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	want, _ := shard.DefaultMap(5)
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("Map = %+v, want %+v", m, want)
	}
	// The map is a copy: changing it leaves the state alone.
	m.Slots[0] = 4
	if s.Slots[0] != 0 {
		t.Fatalf("Map aliases the state's slots")
	}

	for _, tc := range []struct {
		name   string
		tweak  func(*State)
		errSub string
	}{
		{"no slots", func(s *State) { s.Slots = nil }, "0 slots in cluster.json"},
		{"too many slots", func(s *State) { s.Slots = append(s.Slots, 0) }, "257 slots in cluster.json"},
		{"bad shard", func(s *State) { s.Slots[7] = 9 }, "slot 7 maps to shard 9, want < 5"},
		{"no version", func(s *State) { s.MapVersion = 0 }, "version 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stState(t, 5)
			tc.tweak(s)
			if _, err := s.Map(); !errors.Is(err, shard.ErrInvalidMap) || !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("Map: %v, want ErrInvalidMap containing %q", err, tc.errSub)
			}
		})
	}

	for id := range shard.ID(5) {
		if got, want := s.Voters(id), s.Shards[id].Voters; !slices.Equal(got, want) || len(got) != 3 {
			t.Errorf("Voters(%d) = %v, want %v", id, got, want)
		}
	}
	if v := s.Voters(5); v != nil {
		t.Errorf("Voters of a missing shard = %v, want nil", v)
	}
	if v := (&State{}).Voters(0); v != nil {
		t.Errorf("Voters of an empty state = %v, want nil", v)
	}

	a, ok := s.Node("n2")
	if !ok || a != s.Nodes[1] {
		t.Errorf("Node(n2) = %+v, %t; want %+v", a, ok, s.Nodes[1])
	}
	if a, ok := s.Node("n4"); ok || a != (NodeAddrs{}) {
		t.Errorf("Node(n4) = %+v, %t; want zero, false", a, ok)
	}
}
