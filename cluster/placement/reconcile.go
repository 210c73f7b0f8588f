package placement

import (
	"cmp"
	"slices"
)

// The reconciler's per-round decisions (the loop in
// cluster/reconcile/reconcile.go observes every group, calls these and
// acts on the Action they return):
//
//  1. make the placement agree with the group's Raft configuration (the
//     configuration is the truth; a learner recorded but not yet added is
//     added);
//  2. promote a non-voter that has caught up (or remove one whose node is
//     gone);
//  3. when the group has fewer good voters than its target
//     (min(replication factor, active nodes)), add a learner on a live node
//     the isolation level allows, in the zone and host holding fewest of
//     its replicas, then the least loaded (PickCandidate, zones.go); when
//     there is none, the group stays under-replicated;
//  4. in a settled group that breaks the failure-domain rule (zones.go),
//     add a learner where it lowers the spread (the voter it replaces is
//     removed by 5 once it is promoted);
//  5. remove a voter beyond the target (a voter that is not good first, else
//     the one whose departure leaves the lowest spread), or one on a node that is leaving or has been dead
//     longer than DeadNodeTimeout, once the group has enough good voters
//     without it (moving the leadership away first).
//
// When every group is settled, one round moves at most one replica from the
// most to the least loaded node (BalanceReplicas), or else one leadership
// (BalanceLeaders).

// CatchUpSlack is how far (in log entries) a non-voter may trail the
// leader's commit index and still be promoted (and a voter and still
// receive a leadership).
const CatchUpSlack = 512

// ReplicaStatus is one replica's progress as a round observed it.
type ReplicaStatus struct {
	AppliedIndex uint64
	CommitIndex  uint64
}

// Observation is what a group's replicas reported in one round: the
// confirmed leader's Raft configuration and each answering replica's
// progress.
type Observation struct {
	// Leader is the node id of the confirmed leader ("" when none).
	Leader string
	// Voters and NonVoters are the leader's Raft configuration.
	Voters, NonVoters []string
	// LeaderCommit is the leader's commit index.
	LeaderCommit uint64
	// Replicas is, by node id, the status of the replicas that answered
	// (the leader's among them).
	Replicas map[string]ReplicaStatus
}

// caughtUp reports whether node id answered with an applied index within
// CatchUpSlack of the leader's commit index.
func (o Observation) caughtUp(id string) bool {
	st, ok := o.Replicas[id]
	return ok && st.AppliedIndex+CatchUpSlack >= o.LeaderCommit
}

func (o Observation) inConfig(id string) bool {
	return slices.Contains(o.Voters, id) || slices.Contains(o.NonVoters, id)
}

// ActionKind is what an Action asks the reconcile loop to do.
type ActionKind int

const (
	// ActNone: nothing to do for this group this round.
	ActNone ActionKind = iota
	// ActSetPlacement: record Voters and Learners as the group's placement.
	ActSetPlacement
	// ActAddNonvoter: add Target, already a learner in the placement, to
	// the group's Raft configuration as a non-voter.
	ActAddNonvoter
	// ActAddLearner: record Target as a learner in the placement, then add
	// it to the Raft configuration as a non-voter.
	ActAddLearner
	// ActPromote: make non-voter Target a voter, then record Voters and
	// Learners as the placement.
	ActPromote
	// ActRemove: remove Target from the Raft configuration, then from the
	// placement.
	ActRemove
	// ActTransferLeader: move the group's leadership from From to Target.
	ActTransferLeader
)

var actionNames = [...]string{"none", "set placement", "add non-voter", "add learner", "promote", "remove", "transfer leader"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return "unknown"
}

// Action is one step the reconciler decided for a group.
type Action struct {
	Kind  ActionKind
	Group Group
	// Target is the node the action is about (added, promoted, removed or
	// given the leadership).
	Target string
	// From is the node a replica or leadership moves away from, if any.
	From string
	// Voters and Learners are the placement to record (ActSetPlacement,
	// ActPromote), sorted.
	Voters, Learners []string
	// Reason says why, for logs and tests.
	Reason string
}

// Step decides at most one step for group g (its placement as committed)
// given obs (which must have a leader) and the round's liveness; see the
// rules at the top of this file. ActNone when the group is settled, or
// waits for a non-voter to catch up.
func Step(g Group, obs Observation, lv *Liveness) Action {
	// 1. Placement follows the configuration; pending learners stay while
	// their node can still take them.
	voters := slices.Clone(obs.Voters)
	learners := slices.Clone(obs.NonVoters)
	var pending []string
	for _, l := range g.Learners {
		if !obs.inConfig(l) && lv.Placeable(l) {
			learners = append(learners, l)
			pending = append(pending, l)
		}
	}
	slices.Sort(voters)
	slices.Sort(learners)
	if !slices.Equal(g.Voters, voters) || !slices.Equal(g.Learners, learners) {
		return Action{Kind: ActSetPlacement, Group: g, Voters: voters, Learners: learners,
			Reason: "placement differs from the Raft configuration"}
	}
	if len(pending) > 0 {
		return Action{Kind: ActAddNonvoter, Group: g, Target: pending[0],
			Reason: "learner in the placement but not in the Raft configuration"}
	}
	// 2. Non-voters: promote when caught up, remove when their node is gone.
	for _, id := range obs.NonVoters {
		if !lv.Eligible(id) {
			return Action{Kind: ActRemove, Group: g, Target: id, Reason: "non-voter on a node that is gone"}
		}
		if st := obs.Replicas[id]; st.AppliedIndex == 0 || !obs.caughtUp(id) {
			return Action{Kind: ActNone, Group: g, Target: id, Reason: "non-voter catching up"}
		}
		v := append(slices.Clone(obs.Voters), id)
		l := Without(obs.NonVoters, id)
		slices.Sort(v)
		slices.Sort(l)
		return Action{Kind: ActPromote, Group: g, Target: id, Voters: v, Learners: l, Reason: "non-voter caught up"}
	}
	// 3. Too few good voters: add a learner on the least loaded live node.
	target := lv.VoterTarget(g)
	good := 0
	for _, v := range obs.Voters {
		if lv.Eligible(v) {
			good++
		}
	}
	if good < target {
		if c := PickCandidate(g, obs.Voters, lv); c != "" {
			return Action{Kind: ActAddLearner, Group: g, Target: c, Reason: "fewer good voters than the target"}
		}
	}
	// 4. A settled group whose voters break the failure-domain rule
	// (zones.go): a learner where it lowers the spread, replacing From
	// (removed by 5 once the learner is a voter).
	if good == target && len(obs.Voters) == target && len(obs.NonVoters) == 0 {
		if c, v, ok := lv.repair(g, obs.Voters, target); ok {
			return Action{Kind: ActAddLearner, Group: g, Target: c, From: v, Reason: "repairing the placement by failure domain"}
		}
	}
	// 5. A voter to remove: one on a node that is going away (once the
	// group has enough good voters without it), or one beyond the target
	// (one that is not good, else the one whose departure leaves the
	// lowest spread, then the one on the most loaded node).
	victim, reason := "", ""
	for _, v := range obs.Voters {
		if !lv.Eligible(v) && good >= target {
			victim, reason = v, "voter on a node that is leaving or dead"
			break
		}
	}
	if victim == "" && len(obs.Voters) > target && target > 0 {
		cands := slices.Clone(obs.Voters)
		after := func(v string) spread { return lv.spreadOf(Without(obs.Voters, v), target) }
		slices.SortFunc(cands, func(a, b string) int {
			return cmp.Or(cmpBool(lv.Eligible(a), lv.Eligible(b)), after(a).compare(after(b)),
				cmp.Compare(lv.Replicas[b], lv.Replicas[a]), cmp.Compare(b, a))
		})
		victim, reason = cands[0], "more voters than the target"
	}
	if victim == "" && good < target {
		return Action{Kind: ActNone, Group: g, Reason: "under-replicated: no live node the isolation level (" + lv.Isolation.String() + ") allows"}
	}
	if victim == "" {
		return Action{Kind: ActNone, Group: g, Reason: "settled"}
	}
	if victim == obs.Leader {
		for _, v := range obs.Voters {
			if v != victim && lv.Placeable(v) {
				return Action{Kind: ActTransferLeader, Group: g, From: victim, Target: v,
					Reason: "moving the leadership off a replica to remove: " + reason}
			}
		}
		return Action{Kind: ActNone, Group: g, Target: victim, Reason: "no voter to take the leadership of a replica to remove"}
	}
	return Action{Kind: ActRemove, Group: g, Target: victim, Reason: reason}
}

// BalanceReplicas decides the replica moves that even out the load: from
// the most to the least loaded placeable node of lv.State, when their
// counts differ by two or more, one ActAddLearner per shard the first holds
// and the second does not, in shard order, leaving out the moves that would
// raise the shard's spread or that the isolation level refuses (zones.go). The caller takes the first
// whose group has a leader (the reconciler's steps then move the replica:
// promote it, remove the surplus voter). None when balanced.
func BalanceReplicas(lv *Liveness) []Action {
	var ids []string
	for _, m := range lv.State.Nodes {
		if lv.Placeable(m.ID) {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) < 2 {
		return nil
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(lv.Replicas[a], lv.Replicas[b]), cmp.Compare(a, b)) })
	lo, hi := ids[0], ids[len(ids)-1]
	if lv.Replicas[hi]-lv.Replicas[lo] < 2 {
		return nil
	}
	var out []Action
	for _, p := range lv.State.Shards {
		if p.Holds(hi) && !p.Holds(lo) {
			g := Group{Shard: p.Shard, Voters: p.Voters, Learners: p.Learners}
			target := lv.VoterTarget(g)
			rest := Without(p.Voters, hi)
			if !lv.allowed(lo, rest, target) || lv.spreadOf(append(rest, lo), target).compare(lv.spreadOf(p.Voters, target)) > 0 {
				continue
			}
			out = append(out, Action{Kind: ActAddLearner, Group: g, Target: lo, From: hi, Reason: "rebalancing replicas"})
		}
	}
	return out
}

// Settled is a shard group the round left settled, with what it observed.
type Settled struct {
	Group Group
	Obs   Observation
}

// BalanceLeaders decides one leadership move: from the node leading the
// most of the settled shards to a placeable, caught-up voter of that shard
// leading at least two fewer. ActNone when balanced. The caller also paces
// these moves (LeaderBalanceInterval).
func BalanceLeaders(settled []Settled, lv *Liveness) Action {
	leaders := map[string]int{}
	for _, s := range settled {
		leaders[s.Obs.Leader]++
	}
	settled = slices.Clone(settled)
	slices.SortFunc(settled, func(a, b Settled) int {
		return cmp.Or(cmp.Compare(leaders[b.Obs.Leader], leaders[a.Obs.Leader]), cmp.Compare(a.Group.Shard, b.Group.Shard))
	})
	for _, s := range settled {
		from := s.Obs.Leader
		best := ""
		for _, v := range s.Group.Voters {
			if v == from || !lv.Placeable(v) || !s.Obs.caughtUp(v) {
				continue
			}
			if best == "" || leaders[v] < leaders[best] {
				best = v
			}
		}
		if best != "" && leaders[from]-leaders[best] >= 2 {
			return Action{Kind: ActTransferLeader, Group: s.Group, From: from, Target: best, Reason: "rebalancing leaders"}
		}
	}
	return Action{Kind: ActNone, Reason: "leaders balanced"}
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
