package cluster

import (
	"fmt"

	"github.com/swarmkv/swarmkv/cluster/events"
	"github.com/swarmkv/swarmkv/shard"
)

// The node's recent events (package cluster/events) for the console: fed
// by the sync loop's committed states (applyMeta: events.Diff), gossip
// liveness (gossip.Config.OnLiveness) and the leaders the local replicas
// learn of (replica.Config.OnLeader).

// Events returns the node's recent cluster events, oldest first: what
// this node saw (the leaders of groups it holds no replica of are not
// among them).
func (n *Node) Events() []events.Event { return n.events.Recent() }

// onLiveness records a gossip liveness change.
func (n *Node) onLiveness(id string, alive bool) {
	what := "dead"
	if alive {
		what = "alive"
	}
	n.events.Add(events.Event{Kind: events.Gossip, Node: id, Text: fmt.Sprintf("%s %s (gossip)", id, what)})
}

// onLeader returns the OnLeader hook of the local replica of group id.
func (n *Node) onLeader(id shard.ID) func(leader string, term uint64) {
	name, label := fmt.Sprint(id), fmt.Sprintf("shard %d", id)
	if id == metaShardID {
		name, label = "meta", "meta"
	}
	return func(leader string, term uint64) {
		n.events.Add(events.Event{Kind: events.Leader, Shard: name, Node: leader,
			Text: fmt.Sprintf("%s: leader %s (term %d)", label, leader, term)})
	}
}

// stateEvents records what changed from committed state prev to next.
func (n *Node) stateEvents(prev, next *State) {
	for _, e := range events.Diff(prev, next) {
		n.events.Add(e)
	}
}
