// Package placement owns the cluster state as data (State: members, shard
// map, placement of every replica, the meta group's voters, tokens) and the
// pure decisions made from it: the initial placement (Place), the meta
// group's size (MetaVoterTarget), the reconciler's choices (plan.go;
// reconcile.go: Step, BalanceReplicas, BalanceLeaders and the Action
// they return), failure domains (zones.go: zone and host labels, the
// isolation level, the placement rule by zone and host, ZoneSafe), the slot moves of elastic shards (move.go: PlanSplit,
// PlanMerge and the phase changes the mover commits) and the automatic
// shard policy (policy.go: DecideShards, the next split or merge).
// Nothing here does I/O, holds a lock or talks to a node: package cluster
// (and cluster/reconcile, cluster/shardmove) reads the state, calls these
// functions and acts on what they return, so they are tested without a
// cluster. It imports shard (and the standard library) only.
//
// Usage:
//
//	st := &placement.State{ReplicationFactor: 3, Shards: placement.Place(ids, 8, 3)}
//	n := st.ReplicaCount("n1")
package placement

import (
	"fmt"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// NodeAddrs are the addresses a node announces, keyed by its stable id,
// and, in the cluster state, its membership status.
type NodeAddrs struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	GRPCAddr   string `json:"grpc_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
	GossipAddr string `json:"gossip_addr,omitempty"`
	// Incarnation identifies the node's data dir (random, made when the
	// dir is first used). A node that comes back with another data dir
	// than the one admitted, or with the data dir of a removed member, is
	// refused.
	Incarnation string `json:"incarnation,omitempty"`
	// Status is the membership status: StatusActive, StatusLeaving
	// (decommissioning: its replicas move away) or StatusRemoved.
	Status string `json:"status,omitempty"`
	// Zone and Host are the node's failure-domain labels (serve --zone,
	// --host) as the meta leader recorded them from gossip (zones.go);
	// empty: none, the node is its own zone (host). Documents written
	// before labels have neither.
	Zone string `json:"zone,omitempty"`
	Host string `json:"host,omitempty"`
}

// Membership statuses of a node in the cluster state.
const (
	StatusActive  = "active"
	StatusLeaving = "leaving"
	StatusRemoved = "removed"
)

// Placement lists the replicas of one shard, by node id: the voters, and
// the learners (non-voters catching up before promotion). Every node
// listed holds a replica; the reconciler adds a node here before it asks
// the shard leader to add it to the Raft configuration, and drops it from
// here only after the Raft configuration no longer has it.
type Placement struct {
	Shard    shard.ID `json:"shard"`
	Voters   []string `json:"voters"`
	Learners []string `json:"learners,omitempty"`
	// New marks a group a split created at runtime that has had no leader
	// yet: each of its voters bootstraps it with Voters (the identical
	// configuration on every voter, which hashicorp/raft allows). The
	// mover clears it once the group has a leader.
	New bool `json:"new,omitempty"`
	// StartsEmpty: the group's state machine starts owning no slot
	// (fsm.Config.InitialSlots = the empty set), on every replica and for
	// its whole life (a replica added later replays the log from the
	// same start). Groups made at bootstrap start owning every slot.
	StartsEmpty bool `json:"starts_empty,omitempty"`
	// Incarnation tells groups apart that had the same shard id (ids are
	// reused after a merge or an aborted split): the id of the move that
	// created the group (a split), 0 for a group made at bootstrap. Each
	// replica records it in its folder; a node that finds a replica of
	// another incarnation (a dead group's, left while the node was down)
	// deletes it before opening the group's (package cluster, openShard).
	Incarnation uint64 `json:"incarnation,omitempty"`
}

// Holds reports whether node id holds a replica (voter or learner).
func (p Placement) Holds(id string) bool {
	return slices.Contains(p.Voters, id) || slices.Contains(p.Learners, id)
}

// State is the cluster state: members, shard map, placement and the meta
// group's voters. Its authoritative copy is committed in the meta Raft
// group (package cluster); every node keeps the last copy it saw in
// <data-dir>/cluster.json, written at bootstrap or admission and whenever
// the meta copy changes, and read back on restart so that a node never
// bootstraps twice and reopens its replicas before it reaches the meta
// group.
type State struct {
	// FormatVersion of this document; currently 2.
	FormatVersion int `json:"format_version"`
	// ClusterID is derived from the bootstrap members and shard count.
	ClusterID string `json:"cluster_id"`
	// Epoch counts committed changes of the meta copy (0 for a state
	// computed at bootstrap and not yet committed).
	Epoch uint64 `json:"epoch"`
	// ReplicationFactor is the target number of voters per shard.
	ReplicationFactor int `json:"replication_factor"`
	// MetaVoters are the voters of the meta group (up to 5);
	// MetaLearners are nodes being added to it (non-voters catching up).
	MetaVoters   []string `json:"meta_voters"`
	MetaLearners []string `json:"meta_learners,omitempty"`
	// MapVersion and Slots are the shard map (Slots[s] = shard of slot s).
	MapVersion uint64      `json:"map_version"`
	NumShards  int         `json:"num_shards"`
	Slots      []shard.ID  `json:"slots"`
	Shards     []Placement `json:"shards"`
	Nodes      []NodeAddrs `json:"nodes"`
	// Bootstrapped is set once every local replica has been bootstrapped;
	// after that a replica with empty Raft state is never bootstrapped
	// again (it waits for its leader to send it the log).
	Bootstrapped bool `json:"bootstrapped"`
	// Tokens are the clients' bearer tokens (auth/authn,
	// cluster/tokens.go): only the SHA-256 of each secret is stored.
	Tokens []Token `json:"tokens,omitempty"`
	// Moves are the slot moves in progress (split, merge; move.go), and
	// NextMoveID the id the next one gets (ids are never reused: the
	// shards' state machines keep their move records forever). Documents
	// written before elastic shards have neither.
	Moves      []Move `json:"moves,omitempty"`
	NextMoveID uint64 `json:"next_move_id,omitempty"`
	// Policy is the automatic shard policy (policy.go; the meta leader
	// acts on it), set at bootstrap. nil (documents written before it):
	// no automatic split or merge.
	Policy *ShardPolicy `json:"shard_policy,omitempty"`
	// ProtocolVersion is the protocol version the cluster runs (package
	// cluster, version.go): set at bootstrap to the highest version every
	// bootstrapping node speaks, raised by the meta leader once every
	// member speaks a higher one, never lowered. 0 (documents written by
	// binaries before version ranges, which drop the field when they
	// rewrite the document): version 1 (ActiveVersion).
	ProtocolVersion int `json:"protocol_version,omitempty"`
}

// ActiveVersion is the protocol version the cluster runs: ProtocolVersion,
// or 1 when the document has none.
func (s *State) ActiveVersion() int { return max(s.ProtocolVersion, 1) }

// Token is a bearer token's record in the cluster state.
type Token struct {
	ID    string   `json:"id"`
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
	// Actor is the user id the token acts for in the Pools service ("":
	// not bound). A bound token may only act as Actor (api/auth.go,
	// bindActor).
	Actor   string     `json:"actor,omitempty"`
	Hash    string     `json:"hash,omitempty"` // hex SHA-256 of the secret (never empty in the state; blanked in /v1/state)
	Created time.Time  `json:"created"`
	Revoked *time.Time `json:"revoked,omitempty"`
}

// StateFormat is the FormatVersion of the State documents this release
// writes and reads.
const StateFormat = 2

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.Slots = slices.Clone(s.Slots)
	c.MetaVoters = slices.Clone(s.MetaVoters)
	c.MetaLearners = slices.Clone(s.MetaLearners)
	c.Nodes = slices.Clone(s.Nodes)
	c.Tokens = make([]Token, len(s.Tokens))
	for i, t := range s.Tokens {
		c.Tokens[i] = t
		c.Tokens[i].Roles = slices.Clone(t.Roles)
	}
	if s.Tokens == nil {
		c.Tokens = nil
	}
	c.Shards = make([]Placement, len(s.Shards))
	for i, p := range s.Shards {
		c.Shards[i] = p
		c.Shards[i].Voters, c.Shards[i].Learners = slices.Clone(p.Voters), slices.Clone(p.Learners)
	}
	c.Moves = slices.Clone(s.Moves)
	if s.Policy != nil {
		p := *s.Policy
		c.Policy = &p
	}
	return &c
}

// Placement returns a pointer to shard id's placement in s, or nil.
func (s *State) Placement(id shard.ID) *Placement {
	for i := range s.Shards {
		if s.Shards[i].Shard == id {
			return &s.Shards[i]
		}
	}
	return nil
}

// Member returns a pointer to node id's entry, or nil.
func (s *State) Member(id string) *NodeAddrs {
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			return &s.Nodes[i]
		}
	}
	return nil
}

// Status returns node id's membership status ("" when not a member).
func (s *State) Status(id string) string {
	if m := s.Member(id); m != nil {
		if m.Status == "" {
			return StatusActive
		}
		return m.Status
	}
	return ""
}

// ReplicaCount returns the number of replicas (voters and learners) node
// id holds.
func (s *State) ReplicaCount(id string) int {
	c := 0
	for _, p := range s.Shards {
		if p.Holds(id) {
			c++
		}
	}
	return c
}

// MetaVoterTarget is the meta group's size for n eligible nodes: up to 5,
// odd when it can be (an even group tolerates no more failures than the
// odd one below it).
func MetaVoterTarget(n int) int {
	t := min(n, 5)
	if t > 1 && t%2 == 0 {
		t--
	}
	return t
}

// Map returns the shard map recorded in s.
func (s *State) Map() (*shard.Map, error) {
	if len(s.Slots) != shard.NumSlots {
		return nil, fmt.Errorf("%w: %d slots in cluster.json", shard.ErrInvalidMap, len(s.Slots))
	}
	m := &shard.Map{Version: s.MapVersion, NumShards: s.NumShards}
	copy(m.Slots[:], s.Slots)
	return m, m.Validate()
}

// Voters returns the voters of shard id, or nil.
func (s *State) Voters(id shard.ID) []string {
	for _, p := range s.Shards {
		if p.Shard == id {
			return p.Voters
		}
	}
	return nil
}

// Node returns the recorded addresses of a node.
func (s *State) Node(id string) (NodeAddrs, bool) {
	for _, a := range s.Nodes {
		if a.ID == id {
			return a, true
		}
	}
	return NodeAddrs{}, false
}

// Place assigns each of numShards shards k = min(rf, len(nodes)) voters,
// dealt round-robin over the nodes sorted by id: replica j of shard s goes
// to node (s*k + j) mod n. The shards*k replicas form one continuous
// round-robin, so every node holds the same number of replicas (±1), and
// the k replicas of a shard are k consecutive nodes, so no node holds two
// replicas of one shard. With fewer than rf nodes every node holds
// every shard. Deterministic: every node computes the same placement.
func Place(nodeIDs []string, numShards, rf int) []Placement {
	ids := slices.Clone(nodeIDs)
	slices.Sort(ids)
	n := len(ids)
	k := min(rf, n)
	out := make([]Placement, numShards)
	for s := range numShards {
		v := make([]string, k)
		for i := range k {
			v[i] = ids[(s*k+i)%n]
		}
		out[s] = Placement{Shard: shard.ID(s), Voters: v}
	}
	return out
}
