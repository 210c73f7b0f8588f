package placement

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// zoneWorld is recState's six members labelled in three zones of two,
// each zone on one host:
//
//	z1: n1 n2   z2: n3 n4   z3: n5 n6
//
// so recState's shards 0 and 1 (n1 n2 n3) have two voters in z1 and shard
// 2 (n2 n4 n5) is zone-safe.
func zoneWorld() *world {
	w := newWorld()
	for i, m := range w.st.Nodes {
		z := fmt.Sprintf("z%d", i/2+1)
		w.st.Member(m.ID).Zone, w.st.Member(m.ID).Host = z, z+"-host"
	}
	return w
}

func TestParseIsolation(t *testing.T) {
	for _, s := range []string{"zone", "host", "none"} {
		i, err := ParseIsolation(s)
		if err != nil || i.String() != s {
			t.Errorf("ParseIsolation(%q) = %v, %v", s, i, err)
		}
	}
	if _, err := ParseIsolation("rack"); err == nil {
		t.Error("ParseIsolation(rack): no error")
	}
	if Isolation(0) != IsolationZone {
		t.Error("the zero Isolation is not IsolationZone")
	}
}

func TestLabels(t *testing.T) {
	w := zoneWorld()
	st := w.st
	st.Member("n6").Zone, st.Member("n6").Host = "", ""
	if st.Zone("n1") != "z1" || st.Host("n1") != "z1-host" {
		t.Errorf("n1: zone %q host %q", st.Zone("n1"), st.Host("n1"))
	}
	if st.Zone("n6") != "n6" || st.Host("n6") != "n6" || st.Zone("nx") != "nx" {
		t.Errorf("unlabelled: zone %q host %q, non-member zone %q", st.Zone("n6"), st.Host("n6"), st.Zone("nx"))
	}
	if err := SetLabels(st, "n6", "z3", "z3-host"); err != nil || st.Zone("n6") != "z3" {
		t.Fatalf("SetLabels: %v, zone %q", err, st.Zone("n6"))
	}
	if err := SetLabels(st, "n6", "z3", "z3-host"); err != ErrNoChange {
		t.Errorf("SetLabels again: %v, want ErrNoChange", err)
	}
	if err := SetLabels(st, "nx", "z3", ""); err != ErrNoChange {
		t.Errorf("SetLabels of a non-member: %v, want ErrNoChange", err)
	}
	// The labels survive the state document; documents without them read
	// as unlabelled.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil || back.Zone("n6") != "z3" || back.Host("n1") != "z1-host" {
		t.Errorf("round trip: %v, zone %q", err, back.Zone("n6"))
	}
	var old State
	if err := json.Unmarshal([]byte(`{"nodes":[{"id":"n1","raft_addr":"a","grpc_addr":"b"}]}`), &old); err != nil || old.Zone("n1") != "n1" {
		t.Errorf("document without labels: %v, zone %q", err, old.Zone("n1"))
	}
}

func TestZoneSafe(t *testing.T) {
	st := zoneWorld().st
	for _, c := range []struct {
		voters         []string
		zoneSafe, host bool
	}{
		{ids("n1", "n3", "n5"), true, true},
		{ids("n1", "n2", "n3"), false, false}, // z1 holds two of three
		{ids("n1", "n3"), false, false},       // two voters: any loss is half
		{ids("n1"), false, false},
		{nil, false, false},
		{ids("n1", "n2", "n3", "n5"), false, false},     // z1 holds two of four: 2 remain
		{ids("n1", "n2", "n3", "n5", "n6"), true, true}, // two of five at most: 3 remain
	} {
		if got := st.ZoneSafe(c.voters); got != c.zoneSafe {
			t.Errorf("ZoneSafe(%v) = %v", c.voters, got)
		}
		if got := st.HostSafe(c.voters); got != c.host {
			t.Errorf("HostSafe(%v) = %v", c.voters, got)
		}
	}
	// Unlabelled: every node its own zone and host.
	plain := recState()
	if !plain.ZoneSafe(ids("n1", "n2", "n3")) || !plain.HostSafe(ids("n1", "n2", "n3")) {
		t.Error("unlabelled n1 n2 n3 not zone-safe")
	}
	// Hosts apart from zones: two zones on three hosts.
	st.Member("n2").Host = "other"
	if st.ZoneSafe(ids("n1", "n2", "n3")) || !st.HostSafe(ids("n1", "n2", "n3")) {
		t.Error("n1 n2 n3 with n2 on its own host: want host-safe, not zone-safe")
	}
	// zoneWorld: shards 0 and 1 are not zone-safe.
	if nz, nh := zoneWorld().st.Safety(); nz != 2 || nh != 2 {
		t.Errorf("Safety = %d, %d; want 2, 2", nz, nh)
	}
}

// TestStepZones: the failure-domain rules of Step (reconcile.go, zones.go)
// on zoneWorld.
func TestStepZones(t *testing.T) {
	for _, c := range []struct {
		name   string
		iso    Isolation
		voters []string // shard 0's voters (the configuration too)
		setup  func(w *world)
		want   Action
	}{
		{name: "zone-safe group is settled",
			voters: ids("n1", "n3", "n5"),
			want:   Action{Kind: ActNone}},
		{name: "two voters in one zone: a learner in the empty zone replaces one",
			voters: ids("n1", "n2", "n3"),
			// n6 holds no replica (n5 one): the least loaded of z3;
			// n2 (3 replicas) is the more loaded voter of z1.
			want: Action{Kind: ActAddLearner, Target: "n6", From: "n2"}},
		{name: "replacement of a dead voter goes to its zone",
			voters: ids("n1", "n3", "n5"),
			setup:  func(w *world) { w.down("n5", 2*recTimeout) },
			want:   Action{Kind: ActAddLearner, Target: "n6"}},
		{name: "zone lost, isolation zone: under-replicated, nothing stacked",
			voters: ids("n1", "n3", "n5"),
			setup: func(w *world) {
				w.down("n5", 2*recTimeout)
				w.down("n6", 2*recTimeout)
			},
			want: Action{Kind: ActNone}},
		{name: "zone lost, isolation host: a surviving zone takes it on another host",
			iso:    IsolationHost,
			voters: ids("n1", "n3", "n5"),
			setup: func(w *world) {
				w.down("n5", 2*recTimeout)
				w.down("n6", 2*recTimeout)
				w.st.Member("n4").Host = "z2-other"
			},
			want: Action{Kind: ActAddLearner, Target: "n4"}},
		{name: "zone lost, isolation host, no other host: under-replicated",
			iso:    IsolationHost,
			voters: ids("n1", "n3", "n5"),
			setup: func(w *world) {
				w.down("n5", 2*recTimeout)
				w.down("n6", 2*recTimeout)
			},
			want: Action{Kind: ActNone}},
		{name: "zone lost, isolation none: rebuilt anywhere",
			iso:    IsolationNone,
			voters: ids("n1", "n3", "n5"),
			setup: func(w *world) {
				w.down("n5", 2*recTimeout)
				w.down("n6", 2*recTimeout)
			},
			want: Action{Kind: ActAddLearner, Target: "n4"}},
		{name: "lost zone's nodes removed: two zones, two voters may share one",
			voters: ids("n1", "n3", "n5"),
			setup: func(w *world) {
				w.down("n5", 2*recTimeout)
				w.down("n6", 2*recTimeout)
				w.status("n5", StatusLeaving)
				w.status("n6", StatusLeaving)
			},
			want: Action{Kind: ActAddLearner, Target: "n4"}},
		{name: "four voters: the one sharing a zone goes",
			voters: ids("n1", "n2", "n3", "n5"),
			want:   Action{Kind: ActRemove, Target: "n2"}},
		{name: "four voters, two dead, no candidate: a dead one goes first",
			voters: ids("n1", "n3", "n4", "n5"),
			setup: func(w *world) {
				for _, id := range ids("n1", "n2", "n5", "n6") {
					w.down(id, 2*recTimeout)
				}
			},
			// n1 and n5 both hold 2 replicas: the larger id.
			want: Action{Kind: ActRemove, Target: "n5"}},
	} {
		w := zoneWorld()
		w.st.Shards[0].Voters = c.voters
		if c.setup != nil {
			c.setup(w)
		}
		lv := w.liveness()
		lv.Isolation = c.iso
		g := Group{Shard: 0, Voters: c.voters}
		leader := ""
		for _, v := range c.voters {
			if w.alive[v] && leader == "" {
				leader = v
			}
		}
		obs := observed(leader, c.voters, nil)
		for id := range obs.Replicas {
			if !w.alive[id] {
				delete(obs.Replicas, id)
			}
		}
		c.want.Group = g
		checkAction(t, c.name, Step(g, obs, lv), c.want)
	}
}

// TestStepUnderReplicatedReason: the under-replicated answer says why.
func TestStepUnderReplicatedReason(t *testing.T) {
	w := zoneWorld()
	w.st.Shards[0].Voters = ids("n1", "n3", "n5")
	w.down("n5", 2*recTimeout)
	w.down("n6", 2*recTimeout)
	g := Group{Shard: 0, Voters: ids("n1", "n3", "n5")}
	a := Step(g, observed("n1", g.Voters, nil), w.liveness())
	if a.Kind != ActNone || a.Reason != "under-replicated: no live node the isolation level (zone) allows" {
		t.Errorf("got %v (%s)", a.Kind, a.Reason)
	}
}

// TestBalanceReplicasKeepsZones: a move that would put two voters in one
// zone is left out.
func TestBalanceReplicasKeepsZones(t *testing.T) {
	w := zoneWorld()
	// n1 holds 4 replicas, n2 none; every shard is zone-safe; moving a
	// replica from n1 to n2 keeps zones (same zone), moving to n4 would
	// not.
	w.st.Shards = []Placement{
		{Shard: 0, Voters: ids("n1", "n3", "n5")},
		{Shard: 1, Voters: ids("n1", "n4", "n6")},
		{Shard: 2, Voters: ids("n1", "n3", "n6")},
		{Shard: 3, Voters: ids("n1", "n4", "n5")},
	}
	for _, a := range BalanceReplicas(w.liveness()) {
		if a.Target != "n2" || a.From != "n1" {
			t.Errorf("move %s -> %s", a.From, a.Target)
		}
	}
	if len(BalanceReplicas(w.liveness())) == 0 {
		t.Error("no move from n1 to n2")
	}
	// With n2 leaving, the least loaded is in another zone: no move.
	w.status("n2", StatusLeaving)
	for _, a := range BalanceReplicas(w.liveness()) {
		g := w.st.Placement(a.Group.Shard)
		after := append(Without(g.Voters, a.From), a.Target)
		if !w.st.ZoneSafe(after) {
			t.Errorf("move %s -> %s of shard %d leaves %v", a.From, a.Target, a.Group.Shard, after)
		}
	}
}

// TestUnlabelledAsBefore: in clusters without labels (every node its own
// zone and host) the failure-domain rules change nothing: PickCandidate is
// the least loaded placeable node (the smallest id among equals) and the
// voter removed beyond the target the most loaded good one (the largest id
// among equals), as before labels, and no group is repaired. A naive
// reference of the rule before labels, over random states.
func TestUnlabelledAsBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 41))
	for trial := range 500 {
		n := 3 + r.IntN(6)
		var nodes []string
		st := &State{ReplicationFactor: 3}
		alive := map[string]bool{}
		for i := range n {
			id := fmt.Sprintf("n%d", i)
			nodes = append(nodes, id)
			st.Nodes = append(st.Nodes, NodeAddrs{ID: id, Status: StatusActive})
			alive[id] = r.IntN(5) != 0
		}
		st.Shards = Place(nodes, 1+r.IntN(5), 3)
		st.MetaVoters = nodes[:MetaVoterTarget(n)]
		for iso := range 3 {
			lv := NewLiveness(st, alive, map[string]time.Duration{}, time.Minute)
			lv.Isolation = Isolation(iso)
			for _, g := range Groups(st) {
				want := ""
				for _, m := range st.Nodes {
					id := m.ID
					if !alive[id] || slices.Contains(g.Voters, id) {
						continue
					}
					if want == "" || lv.Replicas[id] < lv.Replicas[want] || (lv.Replicas[id] == lv.Replicas[want] && id < want) {
						want = id
					}
				}
				if got := PickCandidate(g, g.Voters, lv); got != want {
					t.Fatalf("trial %d %v %v: PickCandidate = %q, the rule before labels %q", trial, Isolation(iso), g, got, want)
				}
				if _, _, ok := lv.repair(g, g.Voters, lv.VoterTarget(g)); ok {
					t.Fatalf("trial %d: %v repaired without labels", trial, g)
				}
				if c := want; c != "" {
					// With one more voter than the target, all alive: the
					// most loaded goes.
					for _, v := range g.Voters {
						alive[v] = true
					}
					alive[c] = true
					lv := NewLiveness(st, alive, map[string]time.Duration{}, time.Minute)
					lv.Isolation = Isolation(iso)
					voters := append(slices.Clone(g.Voters), c)
					slices.Sort(voters)
					wantV := ""
					for _, v := range voters {
						if wantV == "" || lv.Replicas[v] > lv.Replicas[wantV] || (lv.Replicas[v] == lv.Replicas[wantV] && v > wantV) {
							wantV = v
						}
					}
					gg := Group{Meta: g.Meta, Shard: g.Shard, Voters: voters}
					obs := observed(voters[0], voters, nil)
					if a := Step(gg, obs, lv); len(voters) > lv.VoterTarget(gg) && (a.Kind != ActRemove && a.Kind != ActTransferLeader || (a.Kind == ActRemove && a.Target != wantV)) {
						t.Fatalf("trial %d %v: Step = %v %q, the rule before labels removes %q", trial, gg, a.Kind, a.Target, wantV)
					}
				}
			}
		}
	}
}
