package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The placement rule checked over random clusters: a model of a cluster
// (every group's Raft configuration is its placement, every replica caught
// up at once) that the reconciler's decisions (Step, BalanceReplicas) drive
// one action per group at a time, with the invariants checked after every
// action and the outcome compared with the best placement found by brute
// force. Seeded: the same clusters every run.

// sim is one random cluster.
type sim struct {
	t       *testing.T
	st      *State
	alive   map[string]bool
	downFor map[string]time.Duration
	iso     Isolation
	leader  map[string]string // group -> leader node
	actions int
}

func groupKeyOf(g Group) string { return g.String() }

func newSim(t *testing.T, r *rand.Rand) *sim {
	s := &sim{t: t, alive: map[string]bool{}, downFor: map[string]time.Duration{}, leader: map[string]string{},
		iso: Isolation(r.IntN(3))}
	zones := 1 + r.IntN(4)
	var ids []string
	var nodes []NodeAddrs
	for z := range zones {
		hosts := 1 + r.IntN(2)
		for range 1 + r.IntN(3) {
			id := fmt.Sprintf("n%02d", len(ids)+1)
			n := NodeAddrs{ID: id, Status: StatusActive,
				Zone: fmt.Sprintf("z%d", z), Host: fmt.Sprintf("z%d-h%d", z, r.IntN(hosts))}
			if r.IntN(10) == 0 { // a node without labels: its own zone and host
				n.Zone, n.Host = "", ""
			}
			ids = append(ids, id)
			nodes = append(nodes, n)
			s.alive[id] = true
		}
	}
	shards := 1 + r.IntN(4)
	s.st = &State{ReplicationFactor: 3, Nodes: nodes, Shards: Place(ids, shards, 3),
		MetaVoters: slices.Clone(ids[:MetaVoterTarget(len(ids))])}
	return s
}

func (s *sim) lv() *Liveness {
	lv := NewLiveness(s.st, s.alive, s.downFor, recTimeout)
	lv.Isolation = s.iso
	return lv
}

func (s *sim) describe() string {
	var b []string
	for _, m := range s.st.Nodes {
		b = append(b, fmt.Sprintf("%s(%s/%s alive=%v)", m.ID, s.st.Zone(m.ID), s.st.Host(m.ID), s.alive[m.ID]))
	}
	out := fmt.Sprintf("isolation %v nodes %v\n", s.iso, b)
	for _, g := range Groups(s.st) {
		out += fmt.Sprintf("  %v: voters %v learners %v\n", g, g.Voters, g.Learners)
	}
	return out
}

// observe is group g's observation: a live voter leads when a majority of
// its voters is alive.
func (s *sim) observe(g Group) (Observation, bool) {
	up := 0
	for _, v := range g.Voters {
		if s.alive[v] {
			up++
		}
	}
	if up <= len(g.Voters)/2 {
		return Observation{}, false
	}
	l := s.leader[groupKeyOf(g)]
	if !s.alive[l] || !slices.Contains(g.Voters, l) {
		for _, v := range g.Voters {
			if s.alive[v] {
				l = v
				break
			}
		}
		s.leader[groupKeyOf(g)] = l
	}
	o := Observation{Leader: l, Voters: slices.Clone(g.Voters), NonVoters: slices.Clone(g.Learners),
		LeaderCommit: 100, Replicas: map[string]ReplicaStatus{}}
	for _, id := range g.Holders() {
		if s.alive[id] {
			o.Replicas[id] = ReplicaStatus{AppliedIndex: 100, CommitIndex: 100}
		}
	}
	return o, true
}

// apply carries out a, checking the invariants of one action first.
func (s *sim) apply(a Action, lv *Liveness) {
	s.t.Helper()
	s.actions++
	g := GroupOf(s.st, a.Group)
	target := lv.VoterTarget(g)
	voters, learners := slices.Clone(g.Voters), slices.Clone(g.Learners)
	switch a.Kind {
	case ActSetPlacement:
		voters, learners = a.Voters, a.Learners
	case ActAddLearner:
		if slices.Contains(g.Holders(), a.Target) || !lv.Placeable(a.Target) {
			s.t.Fatalf("%v adds %s, which holds it or is not placeable\n%s", g, a.Target, s.describe())
		}
		others := lv.eligibleOf(Without(g.Holders(), a.From))
		if !lv.allowed(a.Target, others, target) {
			s.t.Fatalf("%v adds %s, which isolation %v refuses next to %v (%s)\n%s", g, a.Target, s.iso, others, a.Reason, s.describe())
		}
		learners = append(learners, a.Target)
	case ActPromote:
		voters, learners = append(voters, a.Target), Without(learners, a.Target)
	case ActRemove:
		// Adding before removing: a good voter leaves only a group with
		// more voters than its target; never a group's quorum of live
		// voters.
		if slices.Contains(voters, a.Target) && lv.Eligible(a.Target) && len(voters) <= target {
			s.t.Fatalf("%v removes good voter %s from %v (target %d)\n%s", g, a.Target, voters, target, s.describe())
		}
		voters, learners = Without(voters, a.Target), Without(learners, a.Target)
		up := 0
		for _, v := range voters {
			if s.alive[v] {
				up++
			}
		}
		if up <= len(voters)/2 {
			s.t.Fatalf("%v: removing %s leaves %d of %d voters alive\n%s", g, a.Target, up, len(voters), s.describe())
		}
	case ActTransferLeader:
		s.leader[groupKeyOf(g)] = a.Target
		return
	case ActNone, ActAddNonvoter:
		return
	}
	if err := SetPlacement(s.st, g, voters, learners); err != nil {
		s.t.Fatalf("%v: %v: %v", g, a.Kind, err)
	}
	for _, p := range Groups(s.st) {
		h := p.Holders()
		if len(h) != len(p.Voters)+len(p.Learners) {
			s.t.Fatalf("%v holds a node twice: %v %v", p, p.Voters, p.Learners)
		}
	}
}

// run drives the reconciler until it has nothing to do; it fails when that
// takes more than limit rounds (an oscillation).
func (s *sim) run(limit int) {
	s.t.Helper()
	for range limit {
		acted := false
		for _, g := range Groups(s.st) {
			obs, ok := s.observe(g)
			if !ok {
				continue
			}
			lv := s.lv()
			a := Step(g, obs, lv)
			if a.Kind != ActNone {
				s.apply(a, lv)
				acted = true
			}
		}
		if acted {
			continue
		}
		lv := s.lv()
		for _, a := range BalanceReplicas(lv) {
			if _, ok := s.observe(GroupOf(s.st, a.Group)); ok {
				s.apply(a, lv)
				acted = true
				break
			}
		}
		if !acted {
			return
		}
	}
	s.t.Fatalf("no quiescence after %d rounds\n%s", limit, s.describe())
}

// best is the lowest spread any target voters among the live nodes can
// have (brute force).
func (s *sim) best(lv *Liveness, target int) spread {
	var live []string
	for _, m := range s.st.Nodes {
		if lv.Placeable(m.ID) {
			live = append(live, m.ID)
		}
	}
	best, found := spread{}, false
	var pick func(i int, chosen []string)
	pick = func(i int, chosen []string) {
		if len(chosen) == target {
			if sp := lv.spreadOf(chosen, target); !found || sp.compare(best) < 0 {
				best, found = sp, true
			}
			return
		}
		if i == len(live) {
			return
		}
		pick(i+1, append(chosen, live[i]))
		pick(i+1, chosen)
	}
	pick(0, nil)
	return best
}

// checkSettled: every group has its target of voters, no learner, and the
// lowest spread possible.
func (s *sim) checkSettled(phase string) {
	s.t.Helper()
	lv := s.lv()
	for _, g := range Groups(s.st) {
		target := lv.VoterTarget(g)
		if len(g.Voters) != target || len(g.Learners) != 0 {
			s.t.Fatalf("%s: %v has voters %v learners %v, want %d voters\n%s", phase, g, g.Voters, g.Learners, target, s.describe())
		}
		if got, want := lv.spreadOf(g.Voters, target), s.best(lv, target); got != want {
			s.t.Errorf("%s: %v voters %v have spread %+v, the best is %+v\n%s", phase, g, g.Voters, got, want, s.describe())
		}
	}
}

// TestPlacementProperties: random clusters (1-4 zones of 1-3 nodes on 1-2
// hosts each, some nodes unlabelled, 1-4 shards, every isolation level),
// from the zone-blind initial placement to a settled one, through the loss
// of a whole zone and back.
func TestPlacementProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 41))
	for trial := range 300 {
		s := newSim(t, r)
		s.run(400)
		s.checkSettled(fmt.Sprintf("trial %d, settled", trial))
		before := s.st.Clone()

		// Lose a whole zone for longer than the dead-node timeout.
		lost := s.st.Zone(s.st.Nodes[r.IntN(len(s.st.Nodes))].ID)
		for _, m := range s.st.Nodes {
			if s.st.Zone(m.ID) == lost {
				s.alive[m.ID], s.downFor[m.ID] = false, 2*recTimeout
			}
		}
		s.run(400)
		lv := s.lv()
		for _, g := range Groups(s.st) {
			target := lv.VoterTarget(g)
			live := 0
			for _, v := range g.Voters {
				if s.alive[v] {
					live++
				}
			}
			zs, _ := lv.shares(target)
			switch {
			case s.iso == IsolationZone:
				// Nothing stacked beyond a zone's share: the live
				// voters' zones hold at most their share each.
				if sp := lv.spreadOf(lv.eligibleOf(g.Holders()), target); sp.zone > 0 && lv.spreadOf(lv.eligibleOf(before.Voters(g.Shard)), target).zone == 0 && !g.Meta {
					t.Fatalf("trial %d: zone %s lost: %v stacks beyond a zone's share %d: %v\n%s", trial, lost, g, zs, g.Voters, s.describe())
				}
			case s.iso == IsolationNone && live > len(g.Voters)/2:
				// Rebuilt anywhere: as many good voters as live nodes allow.
				placeable := 0
				for _, m := range s.st.Nodes {
					if lv.Placeable(m.ID) {
						placeable++
					}
				}
				if live < min(target, placeable) {
					t.Fatalf("trial %d: zone %s lost: %v has %d live voters, want %d\n%s", trial, lost, g, live, min(target, placeable), s.describe())
				}
			}
		}

		// The zone comes back: settled again.
		for _, m := range s.st.Nodes {
			s.alive[m.ID] = true
			delete(s.downFor, m.ID)
		}
		s.run(400)
		s.checkSettled(fmt.Sprintf("trial %d, zone %s back", trial, lost))
	}
}
