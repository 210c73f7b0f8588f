package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// The reconciler's decisions as functions of the state (the reconcile loop
// in package cluster observes the groups and acts on them).

// ErrNoChange is returned by SetPlacement (and by the node's state update
// functions) when the state already says what was asked: nothing to commit.
var ErrNoChange = errors.New("no change")

// Liveness is the state as the reconciler sees it in one round: for every
// member, whether gossip sees it alive and how long it has been seen down.
type Liveness struct {
	// Alive tells, by node id, whether the node is up (gossip sees it alive
	// with the admitted incarnation; the reconciling node itself is).
	Alive map[string]bool
	// DownFor is, by node id of a node not Alive, how long it has been down.
	DownFor map[string]time.Duration
	// Timeout is how long a node may be down and keep its replicas
	// (Config.DeadNodeTimeout).
	Timeout time.Duration
	// State is the cluster state of the round.
	State *State
	// Replicas is, by node id, the number of replicas the node holds.
	Replicas map[string]int
	// Isolation is the failure domain new replicas are kept apart by
	// (zones.go); the zero value is IsolationZone.
	Isolation Isolation
	// zones and hosts are the numbers of distinct zones and hosts among
	// the active members (zones.go).
	zones, hosts int
}

// NewLiveness returns the liveness of st's members: alive and downFor as
// observed, replica counts from st.
func NewLiveness(st *State, alive map[string]bool, downFor map[string]time.Duration, timeout time.Duration) *Liveness {
	lv := &Liveness{Alive: alive, DownFor: downFor, Timeout: timeout, State: st, Replicas: map[string]int{}}
	zones, hosts := map[string]bool{}, map[string]bool{}
	for _, m := range st.Nodes {
		lv.Replicas[m.ID] = st.ReplicaCount(m.ID)
		if lv.Active(m.ID) {
			zones[st.Zone(m.ID)], hosts[st.Host(m.ID)] = true, true
		}
	}
	lv.zones, lv.hosts = len(zones), len(hosts)
	return lv
}

// Active reports whether node id is counted in targets (not leaving or
// removed).
func (lv *Liveness) Active(id string) bool { return lv.State.Status(id) == StatusActive }

// Eligible reports whether node id may keep its replicas (active and not
// dead for too long).
func (lv *Liveness) Eligible(id string) bool {
	return lv.Active(id) && (lv.Alive[id] || lv.DownFor[id] < lv.Timeout)
}

// Placeable reports whether node id may receive a new replica (active and
// alive).
func (lv *Liveness) Placeable(id string) bool { return lv.Active(id) && lv.Alive[id] }

// ActiveCount is the number of active members.
func (lv *Liveness) ActiveCount() int {
	c := 0
	for _, m := range lv.State.Nodes {
		if lv.Active(m.ID) {
			c++
		}
	}
	return c
}

// VoterTarget is the number of voters g should have: the replication
// factor (at most the active members) for a shard, MetaVoterTarget for the
// meta group.
func (lv *Liveness) VoterTarget(g Group) int {
	if g.Meta {
		return MetaVoterTarget(lv.ActiveCount())
	}
	return min(lv.State.ReplicationFactor, lv.ActiveCount())
}

// Group is the meta group or one shard, with its placement.
type Group struct {
	Meta     bool
	Shard    shard.ID
	Voters   []string
	Learners []string
}

func (g Group) String() string {
	if g.Meta {
		return "meta"
	}
	return fmt.Sprintf("shard %d", g.Shard)
}

// Groups returns st's groups: the meta group first, then every shard.
func Groups(st *State) []Group {
	gs := []Group{{Meta: true, Voters: st.MetaVoters, Learners: st.MetaLearners}}
	for _, p := range st.Shards {
		gs = append(gs, Group{Shard: p.Shard, Voters: p.Voters, Learners: p.Learners})
	}
	return gs
}

// Holders returns the nodes holding a replica of g: its voters, then its
// learners.
func (g Group) Holders() []string {
	out := slices.Clone(g.Voters)
	for _, l := range g.Learners {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// SetPlacement writes a group's placement into st (sorting voters and
// learners in place); ErrNoChange if st already has it.
func SetPlacement(st *State, g Group, voters, learners []string) error {
	slices.Sort(voters)
	slices.Sort(learners)
	if g.Meta {
		if slices.Equal(st.MetaVoters, voters) && slices.Equal(st.MetaLearners, learners) {
			return ErrNoChange
		}
		st.MetaVoters, st.MetaLearners = voters, learners
		return nil
	}
	p := st.Placement(g.Shard)
	if p == nil {
		return fmt.Errorf("cluster: shard %d has no placement", g.Shard)
	}
	if slices.Equal(p.Voters, voters) && slices.Equal(p.Learners, learners) {
		return ErrNoChange
	}
	p.Voters, p.Learners = voters, learners
	return nil
}

// GroupOf re-reads g's placement from st.
func GroupOf(st *State, g Group) Group {
	if g.Meta {
		return Group{Meta: true, Voters: st.MetaVoters, Learners: st.MetaLearners}
	}
	if p := st.Placement(g.Shard); p != nil {
		return Group{Shard: g.Shard, Voters: p.Voters, Learners: p.Learners}
	}
	return g
}

// Without returns a copy of s without x.
func Without(s []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(v string) bool { return v == x })
}

// PickCandidate returns the placeable node that is not among cfgVoters,
// does not hold g and that the isolation level allows next to the group's
// eligible replicas (zones.go), preferring the zone, then the host, with
// the fewest of them, then the fewest replicas, then the smallest id; ""
// when none.
func PickCandidate(g Group, cfgVoters []string, lv *Liveness) string {
	target := lv.VoterTarget(g)
	others := lv.eligibleOf(append(slices.Clone(cfgVoters), g.Holders()...))
	in := func(id string) (zone, host int) {
		for _, o := range others {
			if lv.State.Zone(o) == lv.State.Zone(id) {
				zone++
			}
			if lv.State.Host(o) == lv.State.Host(id) {
				host++
			}
		}
		return zone, host
	}
	best, bz, bh := "", 0, 0
	for _, m := range lv.State.Nodes {
		id := m.ID
		if !lv.Placeable(id) || slices.Contains(cfgVoters, id) || slices.Contains(g.Holders(), id) || !lv.allowed(id, others, target) {
			continue
		}
		z, h := in(id)
		if best == "" || cmp.Or(cmp.Compare(z, bz), cmp.Compare(h, bh), cmp.Compare(lv.Replicas[id], lv.Replicas[best]), cmp.Compare(id, best)) < 0 {
			best, bz, bh = id, z, h
		}
	}
	return best
}
