package placement

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// The automatic shard policy: the decision, made from numbers package
// cluster gathers (members, each shard's slots, size and load), of the
// next split or merge. The meta leader acts on it (cluster/shardmove/policy.go), one
// move at a time and after a cooldown.

// ShardPolicy is the automatic shard policy, part of the cluster state
// (State.Policy): set at bootstrap from the serve flags, changed later
// with `swarmnode shards policy` (Node.SetShardPolicy).
type ShardPolicy struct {
	// Auto turns the count rule on: keep max(1, active members /
	// NodesPerShard) shards (split below that count, merge above it).
	Auto bool `json:"auto"`
	// NodesPerShard is the count rule's ratio (default 3: one shard per
	// three active members).
	NodesPerShard int `json:"nodes_per_shard"`
	// MaxShardBytes splits a shard whose leader's state machine uses more
	// disk space (its Pebble store); 0 turns the size rule off.
	MaxShardBytes uint64 `json:"max_shard_bytes"`
	// MaxShardLoad splits a shard that applies more commands per second;
	// 0 turns the load rule off.
	MaxShardLoad float64 `json:"max_shard_load"`
}

// Policy defaults (swarmnode serve --nodes-per-shard, --max-shard-size).
const (
	DefaultNodesPerShard = 3
	DefaultMaxShardBytes = 1 << 30
	// maxNodesPerShard bounds NodesPerShard (a sanity bound).
	maxNodesPerShard = 1000
)

// ErrBadPolicy is wrapped by ShardPolicy.Validate's errors.
var ErrBadPolicy = errors.New("bad shard policy")

// Validate refuses a policy the decision cannot use.
func (p ShardPolicy) Validate() error {
	switch {
	case p.NodesPerShard < 1 || p.NodesPerShard > maxNodesPerShard:
		return fmt.Errorf("%w: nodes per shard %d: want 1..%d", ErrBadPolicy, p.NodesPerShard, maxNodesPerShard)
	case math.IsNaN(p.MaxShardLoad) || math.IsInf(p.MaxShardLoad, 0) || p.MaxShardLoad < 0:
		return fmt.Errorf("%w: max shard load %v: want a number >= 0 (0: off)", ErrBadPolicy, p.MaxShardLoad)
	}
	return nil
}

// DesiredShards is the count rule's shard count for active members:
// max(1, active / NodesPerShard), at most shard.MaxShards. Also the shard
// count a cluster bootstraps with when --shards is 0 (auto).
func DesiredShards(nodesPerShard, active int) int {
	if nodesPerShard < 1 {
		nodesPerShard = DefaultNodesPerShard
	}
	return min(max(1, active/nodesPerShard), shard.MaxShards)
}

// ActiveMembers counts the members with status active.
func (s *State) ActiveMembers() int {
	c := 0
	for _, m := range s.Nodes {
		if s.Status(m.ID) == StatusActive {
			c++
		}
	}
	return c
}

// ShardStats is what the policy knows of one shard: its slots in the map
// and its leader's numbers.
type ShardStats struct {
	Shard shard.ID `json:"shard"`
	Slots int      `json:"slots"`
	Bytes uint64   `json:"bytes"` // the leader's state machine's disk space
	Load  float64  `json:"load"`  // commands per second the leader applied, last interval
}

// PolicyInput is everything a decision needs.
type PolicyInput struct {
	Policy      ShardPolicy
	ActiveNodes int
	// Shards are the shards that own slots, each with its stats.
	Shards []ShardStats
	// Moving is set while any move is in progress: the policy waits.
	Moving bool
	// LastMove is when a move was last seen in progress or planned (or
	// when this meta leader took over); nothing is decided before
	// LastMove + Cooldown.
	Now, LastMove time.Time
	Cooldown      time.Duration
}

// Decision is the policy's next move: Kind MoveSplit (split Shard, the
// upper half of its slots) or MoveMerge (merge From into Shard), or ""
// for none; Reason says why, in either case.
type Decision struct {
	Kind   string   `json:"kind,omitempty"`
	Shard  shard.ID `json:"shard"`
	From   shard.ID `json:"from,omitempty"`
	Reason string   `json:"reason"`
}

// mergeMargin is the share of a limit two merged shards may reach: a
// merge leaves room to grow before the size or load rule splits the
// shard again (no split and merge of the same data back and forth).
const mergeMargin = 0.75

// larger orders shards by size, then load, then slots (largest first),
// then id (lowest first).
func larger(a, b ShardStats) int {
	return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(b.Load, a.Load), cmp.Compare(b.Slots, a.Slots), cmp.Compare(a.Shard, b.Shard))
}

// DecideShards returns the next move of the policy, in this order:
//  1. nothing while a move is in progress or before the cooldown ends;
//  2. count rule (Auto): below the desired count, split the largest shard
//     (by size, then load, then slots) that has two slots or more;
//  3. size and load rules: split the largest shard above MaxShardBytes or
//     MaxShardLoad (each 0: off);
//  4. count rule: above the desired count, merge the two smallest shards
//     (the smaller one into the other) if their sum stays within 3/4 of
//     each limit that is on.
//
// Pure: the same input gives the same decision.
func DecideShards(in PolicyInput) Decision {
	p := in.Policy
	switch {
	case in.Moving:
		return Decision{Reason: "a move is in progress"}
	case in.Now.Before(in.LastMove.Add(in.Cooldown)):
		return Decision{Reason: fmt.Sprintf("cooldown until %s", in.LastMove.Add(in.Cooldown).Format(time.RFC3339))}
	case len(in.Shards) == 0:
		return Decision{Reason: "no shard"}
	}
	shards := slices.Clone(in.Shards)
	slices.SortFunc(shards, larger)
	have, desired := len(shards), DesiredShards(p.NodesPerShard, in.ActiveNodes)
	splittable := slices.DeleteFunc(slices.Clone(shards), func(s ShardStats) bool { return s.Slots < 2 })
	if p.Auto && have < desired {
		if len(splittable) == 0 {
			return Decision{Reason: fmt.Sprintf("%d shards, %d wanted for %d active nodes, but no shard has two slots", have, desired, in.ActiveNodes)}
		}
		s := splittable[0]
		return Decision{Kind: MoveSplit, Shard: s.Shard,
			Reason: fmt.Sprintf("%d shards, %d wanted for %d active nodes (%d per shard): split the largest, shard %d (%d bytes, %.1f ops/s, %d slots)",
				have, desired, in.ActiveNodes, p.NodesPerShard, s.Shard, s.Bytes, s.Load, s.Slots)}
	}
	if have < shard.MaxShards {
		for _, s := range splittable {
			switch {
			case p.MaxShardBytes > 0 && s.Bytes > p.MaxShardBytes:
				return Decision{Kind: MoveSplit, Shard: s.Shard,
					Reason: fmt.Sprintf("shard %d uses %d bytes, above the limit of %d", s.Shard, s.Bytes, p.MaxShardBytes)}
			case p.MaxShardLoad > 0 && s.Load > p.MaxShardLoad:
				return Decision{Kind: MoveSplit, Shard: s.Shard,
					Reason: fmt.Sprintf("shard %d applies %.1f ops/s, above the limit of %.1f", s.Shard, s.Load, p.MaxShardLoad)}
			}
		}
	}
	if !p.Auto || have <= desired {
		return Decision{Reason: fmt.Sprintf("%d shards for %d active nodes: nothing to do", have, in.ActiveNodes)}
	}
	// The two smallest: the last two in largest-first order.
	a, b := shards[have-1], shards[have-2] // a is the smaller
	bytes, load := a.Bytes+b.Bytes, a.Load+b.Load
	if p.MaxShardBytes > 0 && float64(bytes) > mergeMargin*float64(p.MaxShardBytes) {
		return Decision{Reason: fmt.Sprintf("%d shards, %d wanted, but the two smallest (%d, %d) hold %d bytes together, above %.0f%% of the limit of %d",
			have, desired, a.Shard, b.Shard, bytes, 100*mergeMargin, p.MaxShardBytes)}
	}
	if p.MaxShardLoad > 0 && load > mergeMargin*p.MaxShardLoad {
		return Decision{Reason: fmt.Sprintf("%d shards, %d wanted, but the two smallest (%d, %d) apply %.1f ops/s together, above %.0f%% of the limit of %.1f",
			have, desired, a.Shard, b.Shard, load, 100*mergeMargin, p.MaxShardLoad)}
	}
	return Decision{Kind: MoveMerge, Shard: b.Shard, From: a.Shard,
		Reason: fmt.Sprintf("%d shards, %d wanted for %d active nodes (%d per shard): merge the two smallest, shard %d into %d (%d bytes, %.1f ops/s together)",
			have, desired, in.ActiveNodes, p.NodesPerShard, a.Shard, b.Shard, bytes, load)}
}

// PolicyPatch is a change of the shard policy: the fields set (non-nil)
// replace the policy's (`swarmnode shards policy`, the admin API's POST
// /v1/shards/policy).
type PolicyPatch struct {
	Auto          *bool    `json:"auto,omitempty"`
	NodesPerShard *int     `json:"nodes_per_shard,omitempty"`
	MaxShardBytes *uint64  `json:"max_shard_bytes,omitempty"`
	MaxShardLoad  *float64 `json:"max_shard_load,omitempty"`
}

// maxPatchBytes bounds an encoded PolicyPatch.
const maxPatchBytes = 4 << 10

// DecodePolicyPatch decodes a JSON PolicyPatch (an empty input is the
// empty patch); unknown fields, trailing data and more than 4 KiB are
// refused (ErrBadPolicy). It does not validate the values (Apply, then
// Validate).
func DecodePolicyPatch(b []byte) (PolicyPatch, error) {
	var p PolicyPatch
	if len(b) == 0 {
		return p, nil
	}
	if len(b) > maxPatchBytes {
		return p, fmt.Errorf("%w: patch of %d bytes", ErrBadPolicy, len(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return PolicyPatch{}, fmt.Errorf("%w: %v", ErrBadPolicy, err)
	}
	if dec.More() {
		return PolicyPatch{}, fmt.Errorf("%w: trailing data after the patch", ErrBadPolicy)
	}
	return p, nil
}

// IsEmpty reports whether p changes nothing.
func (p PolicyPatch) IsEmpty() bool { return p == PolicyPatch{} }

// Apply returns the policy with p's fields set.
func (p PolicyPatch) Apply(to ShardPolicy) ShardPolicy {
	if p.Auto != nil {
		to.Auto = *p.Auto
	}
	if p.NodesPerShard != nil {
		to.NodesPerShard = *p.NodesPerShard
	}
	if p.MaxShardBytes != nil {
		to.MaxShardBytes = *p.MaxShardBytes
	}
	if p.MaxShardLoad != nil {
		to.MaxShardLoad = *p.MaxShardLoad
	}
	return to
}

// PolicyOf returns the policy of s: its Policy, or for a state without
// one (written before the policy) the defaults with the count rule off
// and no rule acting (Auto false; the size limit shown is what setting
// the policy starts from), and whether s has one.
func PolicyOf(s *State) (ShardPolicy, bool) {
	if s.Policy != nil {
		return *s.Policy, true
	}
	return ShardPolicy{NodesPerShard: DefaultNodesPerShard, MaxShardBytes: DefaultMaxShardBytes}, false
}
