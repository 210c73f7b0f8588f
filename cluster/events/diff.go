package events

import (
	"fmt"
	"slices"
	"strings"

	"github.com/swarmkv/swarmkv/cluster/placement"
)

// Diff returns the events that lead from committed cluster state prev to
// next (a later one; changes in between that were undone are not seen):
// members admitted or changing status, meta voters and shard replicas
// added, promoted or removed, groups created and removed, slot moves
// planned, changing phase and finished (done, or aborted with the
// reason). Nothing when prev is nil (the node's first state) or either
// is nil. The events carry no Seq or Time (Ring.Add sets them).
func Diff(prev, next *placement.State) []Event {
	if prev == nil || next == nil {
		return nil
	}
	var out []Event
	out = append(out, diffMembers(prev, next)...)
	out = append(out, diffGroup("meta", "meta", placement.Placement{Voters: prev.MetaVoters, Learners: prev.MetaLearners},
		placement.Placement{Voters: next.MetaVoters, Learners: next.MetaLearners})...)
	out = append(out, diffShards(prev, next)...)
	out = append(out, diffMoves(prev, next)...)
	return out
}

func diffMembers(prev, next *placement.State) []Event {
	var out []Event
	for _, m := range next.Nodes {
		was, now := prev.Status(m.ID), next.Status(m.ID)
		switch {
		case was == "":
			out = append(out, Event{Kind: Member, Node: m.ID, Text: fmt.Sprintf("%s admitted (%s)", m.ID, now)})
		case was != now:
			out = append(out, Event{Kind: Member, Node: m.ID, Text: fmt.Sprintf("%s %s (was %s)", m.ID, now, was)})
		}
	}
	for _, m := range prev.Nodes {
		if next.Member(m.ID) == nil {
			out = append(out, Event{Kind: Member, Node: m.ID, Text: m.ID + " no longer listed"})
		}
	}
	return out
}

// groupKey tells groups apart that had the same shard id (placement's
// Incarnation).
type groupKey struct {
	id  uint32
	inc uint64
}

func diffShards(prev, next *placement.State) []Event {
	old := map[groupKey]placement.Placement{}
	for _, p := range prev.Shards {
		old[groupKey{uint32(p.Shard), p.Incarnation}] = p
	}
	var out []Event
	seen := map[groupKey]bool{}
	for _, p := range next.Shards {
		k := groupKey{uint32(p.Shard), p.Incarnation}
		seen[k] = true
		name := fmt.Sprint(p.Shard)
		q, ok := old[k]
		if !ok {
			out = append(out, Event{Kind: Replica, Shard: name,
				Text: fmt.Sprintf("shard %s created on %s", name, strings.Join(p.Voters, ","))})
			continue
		}
		out = append(out, diffGroup(name, "shard "+name, q, p)...)
	}
	for _, p := range prev.Shards {
		if !seen[groupKey{uint32(p.Shard), p.Incarnation}] {
			name := fmt.Sprint(p.Shard)
			out = append(out, Event{Kind: Replica, Shard: name, Text: fmt.Sprintf("shard %s removed", name)})
		}
	}
	return out
}

// diffGroup tells the replicas of one group (label: "meta", "shard 3")
// that were added, promoted, demoted or removed.
func diffGroup(shard, label string, prev, next placement.Placement) []Event {
	role := func(p placement.Placement, id string) string {
		switch {
		case slices.Contains(p.Voters, id):
			return "voter"
		case slices.Contains(p.Learners, id):
			return "learner"
		}
		return ""
	}
	var out []Event
	ids := slices.Concat(next.Voters, next.Learners, prev.Voters, prev.Learners)
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		was, now := role(prev, id), role(next, id)
		var what string
		switch {
		case was == now:
			continue
		case was == "":
			what = "added as " + now
		case now == "":
			what = "removed"
		case now == "voter":
			what = "promoted to voter"
		default:
			what = "now " + now
		}
		out = append(out, Event{Kind: Replica, Shard: shard, Node: id, Text: fmt.Sprintf("%s: %s %s", label, id, what)})
	}
	return out
}

func diffMoves(prev, next *placement.State) []Event {
	var out []Event
	for _, m := range next.Moves {
		shard := fmt.Sprint(m.Source)
		old := prev.Move(m.ID)
		switch {
		case old == nil:
			out = append(out, Event{Kind: Move, Shard: shard, Text: fmt.Sprintf("%s planned: %s", describeMove(m), m.Phase)})
		case old.Phase != m.Phase && m.Phase == placement.PhaseAborting:
			out = append(out, Event{Kind: Move, Shard: shard, Text: fmt.Sprintf("%s aborting: %s", describeMove(m), m.Error)})
		case old.Phase != m.Phase:
			out = append(out, Event{Kind: Move, Shard: shard, Text: fmt.Sprintf("%s: %s", describeMove(m), m.Phase)})
		}
	}
	for _, m := range prev.Moves {
		if next.Move(m.ID) != nil {
			continue
		}
		end := "done"
		if m.Phase == placement.PhaseAborting {
			end = "aborted"
		} else if m.Phase != placement.PhasePublished {
			end = "finished" // done or aborted: the phases in between were not seen
		}
		out = append(out, Event{Kind: Move, Shard: fmt.Sprint(m.Source), Text: fmt.Sprintf("%s %s", describeMove(m), end)})
	}
	return out
}

// describeMove names a move: "move 4 (split 0 -> 2, slots 128-255)".
func describeMove(m placement.Move) string {
	if m.Kind == placement.MoveMerge {
		return fmt.Sprintf("move %d (merge %d into %d)", m.ID, m.Source, m.Target)
	}
	return fmt.Sprintf("move %d (%s %d -> %d, slots %s)", m.ID, m.Kind, m.Source, m.Target, m.Slots.String())
}
