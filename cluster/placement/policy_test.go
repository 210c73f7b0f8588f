package placement

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

func TestDesiredShards(t *testing.T) {
	for _, tc := range []struct{ per, active, want int }{
		{3, 0, 1}, {3, 1, 1}, {3, 2, 1}, {3, 3, 1}, {3, 5, 1}, {3, 6, 2}, {3, 8, 2}, {3, 9, 3},
		{1, 4, 4}, {2, 7, 3}, {0, 6, 2}, // 0: the default ratio
		{1, 1000, shard.MaxShards},
	} {
		if got := DesiredShards(tc.per, tc.active); got != tc.want {
			t.Errorf("DesiredShards(%d, %d) = %d, want %d", tc.per, tc.active, got, tc.want)
		}
	}
}

func TestShardPolicyValidate(t *testing.T) {
	good := ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 1 << 30}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []ShardPolicy{
		{NodesPerShard: 0}, {NodesPerShard: -1}, {NodesPerShard: 1001},
		{NodesPerShard: 3, MaxShardLoad: -1}, {NodesPerShard: 3, MaxShardLoad: math.NaN()}, {NodesPerShard: 3, MaxShardLoad: math.Inf(1)},
	} {
		if err := p.Validate(); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("Validate(%+v) = %v, want ErrBadPolicy", p, err)
		}
	}
}

// TestDecideShards: the policy's table: the count rule as nodes come and
// go (3 -> 6 -> 3), the size and load rules, the merge limits, the
// cooldown and a move in progress.
func TestDecideShards(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	auto := ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 1000}
	fixed := ShardPolicy{NodesPerShard: 3, MaxShardBytes: 1000}
	st := func(id shard.ID, slots int, bytes uint64, load float64) ShardStats {
		return ShardStats{Shard: id, Slots: slots, Bytes: bytes, Load: load}
	}
	one := []ShardStats{st(0, 256, 100, 5)}
	two := []ShardStats{st(0, 128, 100, 5), st(1, 128, 200, 1)}
	three := []ShardStats{st(0, 86, 300, 5), st(1, 85, 100, 1), st(2, 85, 100, 2)}
	for _, tc := range []struct {
		name     string
		policy   ShardPolicy
		active   int
		shards   []ShardStats
		moving   bool
		last     time.Time
		kind     string
		shard    shard.ID
		from     shard.ID
		inReason string
	}{
		{name: "3 nodes, 1 shard: settled", policy: auto, active: 3, shards: one, inReason: "nothing to do"},
		{name: "6 nodes, 1 shard: split", policy: auto, active: 6, shards: one, kind: MoveSplit, shard: 0, inReason: "2 wanted for 6 active nodes"},
		{name: "6 nodes, 2 shards: settled", policy: auto, active: 6, shards: two, inReason: "nothing to do"},
		{name: "9 nodes, 2 shards: split the largest by size", policy: auto, active: 9, shards: two, kind: MoveSplit, shard: 1},
		{name: "3 nodes, 2 shards: merge the smaller into the other", policy: auto, active: 3, shards: two, kind: MoveMerge, shard: 1, from: 0, inReason: "merge the two smallest"},
		{name: "3 nodes, 3 shards: merge the two smallest", policy: auto, active: 3, shards: three, kind: MoveMerge, shard: 2, from: 1},
		{name: "5 nodes, 2 shards: merge (5/3 = 1)", policy: auto, active: 5, shards: two, kind: MoveMerge, shard: 1, from: 0},
		{name: "count rule off: 6 nodes, 1 shard stays", policy: fixed, active: 6, shards: one, inReason: "nothing to do"},
		{name: "count rule off: 1 node, 3 shards stay", policy: fixed, active: 1, shards: three, inReason: "nothing to do"},
		{name: "size split with the count rule off", policy: fixed, active: 3,
			shards: []ShardStats{st(0, 128, 900, 0), st(1, 128, 1500, 0)}, kind: MoveSplit, shard: 1, inReason: "above the limit of 1000"},
		{name: "size split beyond the desired count", policy: auto, active: 3, shards: []ShardStats{st(0, 256, 1001, 0)}, kind: MoveSplit, shard: 0},
		{name: "size rule off", policy: ShardPolicy{NodesPerShard: 3}, active: 3, shards: []ShardStats{st(0, 256, 1<<40, 0)}, inReason: "nothing to do"},
		{name: "at the size limit: no split", policy: fixed, active: 3, shards: []ShardStats{st(0, 256, 1000, 0)}, inReason: "nothing to do"},
		{name: "load split", policy: ShardPolicy{NodesPerShard: 3, MaxShardLoad: 100}, active: 3,
			shards: []ShardStats{st(0, 128, 5000, 20), st(1, 128, 10, 150)}, kind: MoveSplit, shard: 1, inReason: "150.0 ops/s"},
		{name: "load rule off", policy: ShardPolicy{NodesPerShard: 3}, active: 3, shards: []ShardStats{st(0, 256, 0, 1e6)}, inReason: "nothing to do"},
		{name: "a shard with one slot is never split", policy: fixed, active: 3,
			shards: []ShardStats{st(0, 1, 5000, 0), st(1, 255, 10, 0)}, inReason: "nothing to do"},
		{name: "count split skips a one-slot shard", policy: auto, active: 6,
			shards: []ShardStats{st(0, 1, 5000, 0)}, inReason: "no shard has two slots"},
		{name: "ties: size, then load, then slots, then the lower id", policy: auto, active: 9,
			shards: []ShardStats{st(0, 100, 10, 1), st(1, 156, 10, 1)}, kind: MoveSplit, shard: 1},
		{name: "ties on load", policy: auto, active: 9,
			shards: []ShardStats{st(3, 200, 10, 1), st(4, 56, 10, 2)}, kind: MoveSplit, shard: 4},
		{name: "merge refused: the sum passes 3/4 of the size limit", policy: auto, active: 3,
			shards: []ShardStats{st(0, 128, 400, 0), st(1, 128, 400, 0)}, inReason: "above 75% of the limit of 1000"},
		{name: "merge at 3/4 of the size limit", policy: auto, active: 3,
			shards: []ShardStats{st(0, 128, 375, 0), st(1, 128, 375, 0)}, kind: MoveMerge, shard: 0, from: 1},
		{name: "merge refused by load", policy: ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardLoad: 100}, active: 3,
			shards: []ShardStats{st(0, 128, 1, 40), st(1, 128, 1, 40)}, inReason: "ops/s together, above 75%"},
		{name: "merge without limits", policy: ShardPolicy{Auto: true, NodesPerShard: 3}, active: 3,
			shards: []ShardStats{st(0, 128, 1<<40, 1e6), st(1, 128, 1<<40, 1e6)}, kind: MoveMerge, shard: 0, from: 1},
		{name: "a move in progress", policy: auto, active: 6, shards: one, moving: true, inReason: "in progress"},
		{name: "cooldown", policy: auto, active: 6, shards: one, last: now.Add(-30 * time.Second), inReason: "cooldown until"},
		{name: "cooldown over", policy: auto, active: 6, shards: one, last: now.Add(-time.Minute), kind: MoveSplit, shard: 0},
		{name: "no shard", policy: auto, active: 3, inReason: "no shard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := PolicyInput{Policy: tc.policy, ActiveNodes: tc.active, Shards: tc.shards, Moving: tc.moving,
				Now: now, LastMove: tc.last, Cooldown: time.Minute}
			before, _ := json.Marshal(tc.shards)
			d := DecideShards(in)
			if d.Kind != tc.kind || (d.Kind != "" && (d.Shard != tc.shard || d.From != tc.from)) {
				t.Fatalf("DecideShards = %+v, want %s shard %d from %d", d, tc.kind, tc.shard, tc.from)
			}
			if d.Reason == "" || !strings.Contains(d.Reason, tc.inReason) {
				t.Fatalf("reason %q, want it to contain %q", d.Reason, tc.inReason)
			}
			if after, _ := json.Marshal(tc.shards); string(after) != string(before) {
				t.Fatalf("DecideShards reordered its input: %s -> %s", before, after)
			}
		})
	}
}

// TestPolicyGrowShrink replays the policy over a cluster that grows from 3
// to 6 nodes and shrinks back, applying each decision to a State with
// PlanSplit / PlanMerge and finishing the move at once: 1 -> 2 -> 1 shard,
// one move per cooldown.
func TestPolicyGrowShrink(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	s := moveState(t, 1)
	s.Policy = &ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: DefaultMaxShardBytes}
	setActive := func(n int) {
		s.Nodes = nil
		for i := range 6 {
			st := StatusActive
			if i >= n {
				st = StatusLeaving
			}
			s.Nodes = append(s.Nodes, NodeAddrs{ID: string(rune('a' + i)), Status: st})
		}
	}
	last := time.Time{}
	step := func() Decision {
		var stats []ShardStats
		m, err := s.Map()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range m.Shards() {
			stats = append(stats, ShardStats{Shard: id, Slots: s.SlotsOf(id).Len(), Bytes: uint64(s.SlotsOf(id).Len()) * 1000})
		}
		d := DecideShards(PolicyInput{Policy: *s.Policy, ActiveNodes: s.ActiveMembers(), Shards: stats, Now: now, LastMove: last, Cooldown: time.Minute})
		var mv Move
		switch d.Kind {
		case MoveSplit:
			mv, err = PlanSplit(s, d.Shard, nil, now)
		case MoveMerge:
			mv, err = PlanMerge(s, d.Shard, d.From, now)
		default:
			return d
		}
		if err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		last = now
		for _, ph := range []string{PhaseCreated, PhaseFrozen, PhaseAdopted} {
			if err := SetPhase(s, mv.ID, s.Move(mv.ID).Phase, ph, now); err != nil {
				t.Fatal(err)
			}
		}
		if err := Publish(s, mv.ID, now); err != nil {
			t.Fatal(err)
		}
		if err := Finish(s, mv.ID); err != nil {
			t.Fatal(err)
		}
		return d
	}
	count := func() int { m, _ := s.Map(); return len(m.Shards()) }
	setActive(3)
	if d := step(); d.Kind != "" || count() != 1 {
		t.Fatalf("3 nodes: %+v, %d shards", d, count())
	}
	setActive(6)
	if d := step(); d.Kind != MoveSplit || count() != 2 {
		t.Fatalf("6 nodes: %+v, %d shards", d, count())
	}
	now = now.Add(2 * time.Minute)
	if d := step(); d.Kind != "" || count() != 2 {
		t.Fatalf("6 nodes, 2 shards: %+v, %d shards", d, count())
	}
	setActive(3)
	if d := step(); d.Kind != MoveMerge || count() != 1 {
		t.Fatalf("3 nodes again: %+v, %d shards", d, count())
	}
	if s.SlotsOf(0).Len() != shard.NumSlots {
		t.Fatalf("shard 0 owns %d slots after the merge", s.SlotsOf(0).Len())
	}
	// The cooldown holds the next decision back.
	setActive(6)
	if d := step(); d.Kind != "" || !strings.Contains(d.Reason, "cooldown") {
		t.Fatalf("right after a move: %+v", d)
	}
}

func TestStatePolicyJSON(t *testing.T) {
	s := moveState(t, 2)
	b, _ := json.Marshal(s)
	if strings.Contains(string(b), "shard_policy") {
		t.Fatalf("a state without a policy writes one: %s", b)
	}
	s.Policy = &ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 5, MaxShardLoad: 1.5}
	b, _ = json.Marshal(s)
	var o State
	if err := json.Unmarshal(b, &o); err != nil || o.Policy == nil || *o.Policy != *s.Policy {
		t.Fatalf("round trip: %v %+v", err, o.Policy)
	}
	c := s.Clone()
	c.Policy.NodesPerShard = 9
	if s.Policy.NodesPerShard != 3 {
		t.Fatal("Clone shares the policy")
	}
}

func TestPolicyPatch(t *testing.T) {
	base := ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 100, MaxShardLoad: 5}
	p, err := DecodePolicyPatch([]byte(`{"auto":false,"nodes_per_shard":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Apply(base); got != (ShardPolicy{NodesPerShard: 2, MaxShardBytes: 100, MaxShardLoad: 5}) {
		t.Fatalf("Apply = %+v", got)
	}
	p, err = DecodePolicyPatch([]byte(`{"max_shard_bytes":0,"max_shard_load":0}`))
	if err != nil || p.IsEmpty() {
		t.Fatalf("zero values are changes: %+v, %v", p, err)
	}
	if got := p.Apply(base); got != (ShardPolicy{Auto: true, NodesPerShard: 3}) {
		t.Fatalf("Apply = %+v", got)
	}
	for _, b := range []string{"", "{}"} {
		if p, err := DecodePolicyPatch([]byte(b)); err != nil || !p.IsEmpty() || p.Apply(base) != base {
			t.Fatalf("%q: %+v, %v", b, p, err)
		}
	}
	for _, b := range []string{`{"auto":1}`, `{"nodes":3}`, `{"auto":true} {}`, `[`, `{"nodes_per_shard":1.5}`, `{"max_shard_bytes":-1}`, "{\"auto\":true" + strings.Repeat(" ", 5000) + "}"} {
		if _, err := DecodePolicyPatch([]byte(b)); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("DecodePolicyPatch(%.40q) = %v, want ErrBadPolicy", b, err)
		}
	}
	if p, ok := PolicyOf(&State{}); ok || p.Auto || p.NodesPerShard != DefaultNodesPerShard {
		t.Fatalf("PolicyOf a state without one = %+v, %v", p, ok)
	}
}

// FuzzDecodePolicyPatch: any input decodes or is refused with
// ErrBadPolicy, never panics; a decoded patch re-encodes to a patch that
// decodes to the same.
func FuzzDecodePolicyPatch(f *testing.F) {
	for _, s := range []string{"", "{}", `{"auto":true,"nodes_per_shard":3,"max_shard_bytes":1073741824,"max_shard_load":2.5}`, `{"auto":null}`, `{"x":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePolicyPatch(b)
		if err != nil {
			if !errors.Is(err, ErrBadPolicy) {
				t.Fatalf("error %v does not wrap ErrBadPolicy", err)
			}
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			return // NaN cannot come from JSON; nothing else fails
		}
		q, err := DecodePolicyPatch(out)
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		base := ShardPolicy{NodesPerShard: 3}
		if a, b := p.Apply(base), q.Apply(base); a != b {
			t.Fatalf("round trip changed the patch: %+v != %+v", a, b)
		}
	})
}
