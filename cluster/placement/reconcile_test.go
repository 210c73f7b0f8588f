package placement

import (
	"slices"
	"testing"
	"time"
)

const recTimeout = 5 * time.Minute

// recState is a state of six active members n1..n6, replication factor 3,
// the meta group on n1..n3 and three shards:
//
//	shard 0: n1 n2 n3
//	shard 1: n1 n2 n3
//	shard 2: n2 n4 n5
//
// so n2 holds 3 replicas, n1 and n3 2, n4 and n5 1, n6 none.
func recState() *State {
	st := &State{ReplicationFactor: 3, MetaVoters: []string{"n1", "n2", "n3"},
		Shards: []Placement{
			{Shard: 0, Voters: []string{"n1", "n2", "n3"}},
			{Shard: 1, Voters: []string{"n1", "n2", "n3"}},
			{Shard: 2, Voters: []string{"n2", "n4", "n5"}},
		}}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		st.Nodes = append(st.Nodes, NodeAddrs{ID: id, Status: StatusActive})
	}
	return st
}

// world is a round's view: the state and gossip.
type world struct {
	st      *State
	alive   map[string]bool
	downFor map[string]time.Duration
}

func newWorld() *world {
	w := &world{st: recState(), alive: map[string]bool{}, downFor: map[string]time.Duration{}}
	for _, m := range w.st.Nodes {
		w.alive[m.ID] = true
	}
	return w
}

func (w *world) down(id string, d time.Duration) {
	w.alive[id] = false
	w.downFor[id] = d
}

func (w *world) status(id, s string) { w.st.Member(id).Status = s }

func (w *world) liveness() *Liveness { return NewLiveness(w.st, w.alive, w.downFor, recTimeout) }

// observed is an observation led by leader with every replica of the
// configuration at the leader's commit index 1000.
func observed(leader string, voters, nonvoters []string) Observation {
	o := Observation{Leader: leader, Voters: voters, NonVoters: nonvoters, LeaderCommit: 1000, Replicas: map[string]ReplicaStatus{}}
	for _, id := range append(slices.Clone(voters), nonvoters...) {
		o.Replicas[id] = ReplicaStatus{AppliedIndex: 1000, CommitIndex: 1000}
	}
	return o
}

func ids(s ...string) []string { return s }

func checkAction(t *testing.T, name string, got, want Action) {
	t.Helper()
	if got.Kind != want.Kind || got.Target != want.Target || got.From != want.From ||
		!slices.Equal(got.Voters, want.Voters) || !slices.Equal(got.Learners, want.Learners) {
		t.Errorf("%s: got %v target %q from %q voters %v learners %v (%s), want %v target %q from %q voters %v learners %v",
			name, got.Kind, got.Target, got.From, got.Voters, got.Learners, got.Reason,
			want.Kind, want.Target, want.From, want.Voters, want.Learners)
	}
	if got.Reason == "" {
		t.Errorf("%s: action without a reason", name)
	}
}

// TestStep: one case per rule of the reconciler's step (reconcile.go).
func TestStep(t *testing.T) {
	for _, c := range []struct {
		name string
		// voters and learners of shard 0 as placed (written into the
		// state, so replica counts follow); nil: as recState has them.
		voters, learners []string
		meta             bool
		setup            func(w *world, o *Observation)
		obs              Observation
		want             Action
	}{
		{name: "settled",
			obs:  observed("n1", ids("n1", "n2", "n3"), nil),
			want: Action{Kind: ActNone}},

		// 1. The placement follows the Raft configuration.
		{name: "configuration has an extra voter",
			obs:  observed("n1", ids("n1", "n2", "n3", "n4"), nil),
			want: Action{Kind: ActSetPlacement, Voters: ids("n1", "n2", "n3", "n4")}},
		{name: "configuration lost a voter",
			obs:  observed("n1", ids("n2", "n1"), nil),
			want: Action{Kind: ActSetPlacement, Voters: ids("n1", "n2")}},
		{name: "configuration has a non-voter the placement lacks",
			obs:  observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want: Action{Kind: ActSetPlacement, Voters: ids("n1", "n2", "n3"), Learners: ids("n6")}},
		{name: "pending learner is added to the configuration",
			learners: ids("n6"),
			obs:      observed("n1", ids("n1", "n2", "n3"), nil),
			want:     Action{Kind: ActAddNonvoter, Target: "n6"}},
		{name: "pending learner on a down node is dropped from the placement",
			learners: ids("n6"),
			setup:    func(w *world, _ *Observation) { w.down("n6", time.Second) },
			obs:      observed("n1", ids("n1", "n2", "n3"), nil),
			want:     Action{Kind: ActSetPlacement, Voters: ids("n1", "n2", "n3")}},
		{name: "pending learner on a leaving node is dropped from the placement",
			learners: ids("n6"),
			setup:    func(w *world, _ *Observation) { w.status("n6", StatusLeaving) },
			obs:      observed("n1", ids("n1", "n2", "n3"), nil),
			want:     Action{Kind: ActSetPlacement, Voters: ids("n1", "n2", "n3")}},

		// 2. Non-voters: promoted once caught up, removed when gone.
		{name: "caught-up non-voter is promoted",
			learners: ids("n6"),
			obs:      observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want:     Action{Kind: ActPromote, Target: "n6", Voters: ids("n1", "n2", "n3", "n6")}},
		{name: "non-voter exactly the slack behind is promoted",
			learners: ids("n6"),
			setup: func(_ *world, o *Observation) {
				o.Replicas["n6"] = ReplicaStatus{AppliedIndex: 1000 - CatchUpSlack}
			},
			obs:  observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want: Action{Kind: ActPromote, Target: "n6", Voters: ids("n1", "n2", "n3", "n6")}},
		{name: "non-voter beyond the slack waits",
			learners: ids("n6"),
			setup: func(_ *world, o *Observation) {
				o.Replicas["n6"] = ReplicaStatus{AppliedIndex: 1000 - CatchUpSlack - 1}
			},
			obs:  observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want: Action{Kind: ActNone, Target: "n6"}},
		{name: "non-voter that applied nothing waits, even within the slack",
			learners: ids("n6"),
			setup: func(_ *world, o *Observation) {
				o.LeaderCommit = 10
				o.Replicas["n6"] = ReplicaStatus{}
			},
			obs:  observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want: Action{Kind: ActNone, Target: "n6"}},
		{name: "non-voter that did not answer waits",
			learners: ids("n6"),
			setup:    func(_ *world, o *Observation) { delete(o.Replicas, "n6") },
			obs:      observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want:     Action{Kind: ActNone, Target: "n6"}},
		{name: "waiting non-voter holds back the other rules",
			voters: ids("n1", "n2"), learners: ids("n6"),
			setup: func(_ *world, o *Observation) { delete(o.Replicas, "n6") },
			obs:   observed("n1", ids("n1", "n2"), ids("n6")),
			want:  Action{Kind: ActNone, Target: "n6"}},
		{name: "non-voter down within the dead-node timeout is still promoted",
			learners: ids("n6"),
			setup:    func(w *world, _ *Observation) { w.down("n6", recTimeout-time.Second) },
			obs:      observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want:     Action{Kind: ActPromote, Target: "n6", Voters: ids("n1", "n2", "n3", "n6")}},
		{name: "non-voter dead for the timeout is removed",
			learners: ids("n6"),
			setup:    func(w *world, _ *Observation) { w.down("n6", recTimeout) },
			obs:      observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want:     Action{Kind: ActRemove, Target: "n6"}},
		{name: "non-voter on a leaving node is removed",
			learners: ids("n6"),
			setup:    func(w *world, _ *Observation) { w.status("n6", StatusLeaving) },
			obs:      observed("n1", ids("n1", "n2", "n3"), ids("n6")),
			want:     Action{Kind: ActRemove, Target: "n6"}},

		// 3. Too few good voters: a learner on the least loaded live node.
		{name: "too few voters: learner on the least loaded node",
			voters: ids("n1", "n2"),
			obs:    observed("n1", ids("n1", "n2"), nil),
			want:   Action{Kind: ActAddLearner, Target: "n6"}},
		{name: "least loaded node down: the next, smallest id first",
			voters: ids("n1", "n2"),
			setup:  func(w *world, _ *Observation) { w.down("n6", time.Second) },
			obs:    observed("n1", ids("n1", "n2"), nil),
			want:   Action{Kind: ActAddLearner, Target: "n3"}},
		{name: "no live node to take a replica",
			voters: ids("n1", "n2"),
			setup: func(w *world, _ *Observation) {
				for _, id := range ids("n3", "n4", "n5", "n6") {
					w.down(id, time.Second)
				}
			},
			obs:  observed("n1", ids("n1", "n2"), nil),
			want: Action{Kind: ActNone}},
		{name: "replication factor above the active members: target is the members",
			setup: func(w *world, _ *Observation) {
				w.st.ReplicationFactor = 5
				for _, id := range ids("n4", "n5", "n6") {
					w.status(id, StatusRemoved)
				}
			},
			obs:  observed("n1", ids("n1", "n2", "n3"), nil),
			want: Action{Kind: ActNone}},
		{name: "meta group: up to five voters",
			meta: true,
			obs:  observed("n1", ids("n1", "n2", "n3"), nil),
			want: Action{Kind: ActAddLearner, Target: "n6"}},

		// 4. Voters to remove.
		{name: "voter on a leaving node: replacement first",
			setup: func(w *world, _ *Observation) { w.status("n3", StatusLeaving) },
			obs:   observed("n1", ids("n1", "n2", "n3"), nil),
			want:  Action{Kind: ActAddLearner, Target: "n6"}},
		{name: "voter on a leaving node removed once replaced",
			voters: ids("n1", "n2", "n3", "n6"),
			setup:  func(w *world, _ *Observation) { w.status("n3", StatusLeaving) },
			obs:    observed("n1", ids("n1", "n2", "n3", "n6"), nil),
			want:   Action{Kind: ActRemove, Target: "n3"}},
		{name: "voter down within the dead-node timeout is kept",
			setup: func(w *world, _ *Observation) { w.down("n3", recTimeout-time.Second) },
			obs:   observed("n1", ids("n1", "n2", "n3"), nil),
			want:  Action{Kind: ActNone}},
		{name: "voter dead for the timeout: replacement first",
			setup: func(w *world, _ *Observation) { w.down("n3", recTimeout) },
			obs:   observed("n1", ids("n1", "n2", "n3"), nil),
			want:  Action{Kind: ActAddLearner, Target: "n6"}},
		{name: "dead voter removed once replaced",
			voters: ids("n1", "n2", "n3", "n6"),
			setup:  func(w *world, _ *Observation) { w.down("n3", recTimeout) },
			obs:    observed("n1", ids("n1", "n2", "n3", "n6"), nil),
			want:   Action{Kind: ActRemove, Target: "n3"}},
		{name: "voter beyond the target: the most loaded goes",
			voters: ids("n1", "n2", "n3", "n4"),
			obs:    observed("n1", ids("n1", "n2", "n3", "n4"), nil),
			want:   Action{Kind: ActRemove, Target: "n2"}},
		{name: "voter beyond the target: the largest id among equals",
			voters: ids("n1", "n3", "n4", "n6"),
			obs:    observed("n1", ids("n1", "n3", "n4", "n6"), nil),
			want:   Action{Kind: ActRemove, Target: "n4"}},
		{name: "voter to remove leads: leadership moves first",
			voters: ids("n1", "n2", "n3", "n4"),
			obs:    observed("n2", ids("n1", "n2", "n3", "n4"), nil),
			want:   Action{Kind: ActTransferLeader, From: "n2", Target: "n1"}},
		{name: "leader on a leaving node: leadership moves to a live voter",
			voters: ids("n1", "n2", "n3", "n6"),
			setup: func(w *world, _ *Observation) {
				w.status("n1", StatusLeaving)
				w.down("n2", time.Second)
			},
			obs:  observed("n1", ids("n1", "n2", "n3", "n6"), nil),
			want: Action{Kind: ActTransferLeader, From: "n1", Target: "n3"}},
		{name: "voter to remove leads and no other voter is live",
			voters: ids("n1", "n2", "n3", "n4"),
			setup: func(w *world, _ *Observation) {
				for _, id := range ids("n1", "n3", "n4") {
					w.down(id, time.Second)
				}
			},
			obs:  observed("n2", ids("n1", "n2", "n3", "n4"), nil),
			want: Action{Kind: ActNone, Target: "n2"}},
	} {
		w := newWorld()
		g := Groups(w.st)[1] // shard 0
		if c.meta {
			g = Groups(w.st)[0]
		}
		if c.voters != nil || c.learners != nil {
			v := c.voters
			if v == nil {
				v = g.Voters
			}
			if err := SetPlacement(w.st, g, slices.Clone(v), slices.Clone(c.learners)); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			g = GroupOf(w.st, g)
		}
		obs := c.obs
		if c.setup != nil {
			c.setup(w, &obs)
		}
		got := Step(g, obs, w.liveness())
		if got.Group.Meta != g.Meta || got.Group.Shard != g.Shard {
			t.Errorf("%s: action for %v, want %v", c.name, got.Group, g)
		}
		checkAction(t, c.name, got, c.want)
	}
}

// TestBalanceReplicas: moves go from the most to the least loaded
// placeable node, one per shard the first holds and the second does not.
func TestBalanceReplicas(t *testing.T) {
	for _, c := range []struct {
		name     string
		setup    func(w *world)
		from, to string
		shards   []int
	}{
		{name: "n2 holds 3, n6 none", from: "n2", to: "n6", shards: []int{0, 1, 2}},
		{name: "a down node is no source",
			setup: func(w *world) { w.down("n2", time.Second) },
			from:  "n3", to: "n6", shards: []int{0, 1}},
		{name: "a down node is no target",
			setup: func(w *world) { w.down("n6", time.Second) },
			from:  "n2", to: "n4", shards: []int{0, 1}},
		{name: "a leaving node is no target",
			setup: func(w *world) { w.status("n6", StatusLeaving) },
			from:  "n2", to: "n4", shards: []int{0, 1}},
		{name: "counts differing by one are balanced",
			setup: func(w *world) {
				w.st.Shards[1].Voters = ids("n1", "n3", "n6") // n1 2, n2 2, n3 2, n4 1, n5 1, n6 1
			}},
		{name: "fewer than two placeable nodes",
			setup: func(w *world) {
				for _, id := range ids("n1", "n3", "n4", "n5", "n6") {
					w.down(id, time.Second)
				}
			}},
	} {
		w := newWorld()
		if c.setup != nil {
			c.setup(w)
		}
		got := BalanceReplicas(w.liveness())
		if len(got) != len(c.shards) {
			t.Errorf("%s: %d moves %v, want shards %v", c.name, len(got), got, c.shards)
			continue
		}
		for i, a := range got {
			checkAction(t, c.name, a, Action{Kind: ActAddLearner, From: c.from, Target: c.to})
			if a.Group.Meta || int(a.Group.Shard) != c.shards[i] || !slices.Equal(a.Group.Voters, w.st.Shards[c.shards[i]].Voters) {
				t.Errorf("%s: move %d in %+v, want shard %d", c.name, i, a.Group, c.shards[i])
			}
		}
	}
}

// TestBalanceLeaders: one leadership moves from the node leading the most
// settled shards to a live, caught-up voter leading at least two fewer.
func TestBalanceLeaders(t *testing.T) {
	for _, c := range []struct {
		name     string
		leaders  [3]string // of shards 0, 1, 2
		setup    func(w *world, settled []Settled)
		want     ActionKind
		shard    int
		from, to string
	}{
		{name: "n1 leads two, n3 none", leaders: [3]string{"n1", "n1", "n2"},
			want: ActTransferLeader, shard: 0, from: "n1", to: "n3"},
		{name: "balanced", leaders: [3]string{"n1", "n3", "n2"}, want: ActNone},
		{name: "the voter leading fewest wins", leaders: [3]string{"n2", "n2", "n2"},
			want: ActTransferLeader, shard: 0, from: "n2", to: "n1"},
		{name: "a lagging voter gets no leadership", leaders: [3]string{"n1", "n1", "n2"},
			setup: func(_ *world, s []Settled) {
				for i := range 2 {
					s[i].Obs.Replicas["n3"] = ReplicaStatus{AppliedIndex: 1000 - CatchUpSlack - 1}
				}
			},
			want: ActNone},
		{name: "a voter exactly the slack behind does", leaders: [3]string{"n1", "n1", "n2"},
			setup: func(_ *world, s []Settled) {
				s[0].Obs.Replicas["n3"] = ReplicaStatus{AppliedIndex: 1000 - CatchUpSlack}
			},
			want: ActTransferLeader, shard: 0, from: "n1", to: "n3"},
		{name: "a voter that did not answer gets none", leaders: [3]string{"n1", "n1", "n2"},
			setup: func(_ *world, s []Settled) { delete(s[0].Obs.Replicas, "n3") },
			want:  ActTransferLeader, shard: 1, from: "n1", to: "n3"},
		{name: "a down voter gets none", leaders: [3]string{"n1", "n1", "n2"},
			setup: func(w *world, _ []Settled) { w.down("n3", time.Second) },
			want:  ActNone},
		{name: "most loaded leader first, then by shard", leaders: [3]string{"n1", "n2", "n2"},
			want: ActTransferLeader, shard: 1, from: "n2", to: "n3"},
	} {
		w := newWorld()
		var settled []Settled
		for i, g := range Groups(w.st)[1:] {
			settled = append(settled, Settled{Group: g, Obs: observed(c.leaders[i], g.Voters, nil)})
		}
		if c.setup != nil {
			c.setup(w, settled)
		}
		got := BalanceLeaders(settled, w.liveness())
		if c.want == ActNone {
			checkAction(t, c.name, got, Action{Kind: ActNone})
			continue
		}
		checkAction(t, c.name, got, Action{Kind: c.want, From: c.from, Target: c.to})
		if int(got.Group.Shard) != c.shard {
			t.Errorf("%s: shard %d, want %d", c.name, got.Group.Shard, c.shard)
		}
	}
}
