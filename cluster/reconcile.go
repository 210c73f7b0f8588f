package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The reconciler runs on the meta group's leader. Each round it compares
// the committed placement with the Raft configuration of every group (the
// meta group and each shard) and with gossip, and takes at most one step
// per group. What to do is decided by package placement, as a function of
// the state and of what the round observed (placement.Step, the rules at
// the top of cluster/placement/reconcile.go; BalanceReplicas,
// BalanceLeaders); this file observes the groups (ReplicaStatus calls) and
// carries out the decided Action.
//
// Placement changes follow a strict order that keeps replicas safe: a node
// is added to the placement before it is added to the Raft configuration,
// and dropped from the placement only after it left the configuration (the
// node's sync loop deletes a replica once it is no longer placed there).
// When every group is settled, one round moves at most one replica from the
// most to the least loaded node, or else one leadership.

// reconciler is the reconcile loop's memory of gossip (when this leader
// first saw each node down).
type reconciler struct {
	mu        sync.Mutex
	downSince map[string]time.Time
	// lastLeaderMove is when this leader started, or last moved a
	// leadership to balance leaders.
	lastLeaderMove time.Time
}

func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.ReconcileInterval)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		r := n.metaReplica()
		if r == nil || r.Raft().State() != raft.Leader || r.ReadyTerm() == 0 {
			n.recon.reset()
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		err := n.reconcileOnce(ctx)
		cancel()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != lastErr && n.ctx.Err() == nil {
			if err != nil {
				n.log.Warn("reconcile", "err", err)
			}
			lastErr = msg
		}
	}
}

func (rc *reconciler) reset() {
	rc.mu.Lock()
	rc.downSince = nil
	rc.lastLeaderMove = time.Time{}
	rc.mu.Unlock()
}

// leaderMoveDue reports whether a leadership may be moved now, and if so
// records the move.
func (rc *reconciler) leaderMoveDue(every time.Duration) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := time.Now()
	if rc.lastLeaderMove.IsZero() {
		rc.lastLeaderMove = now
	}
	if now.Sub(rc.lastLeaderMove) < every {
		return false
	}
	rc.lastLeaderMove = now
	return true
}

// liveness returns the round's placement.Liveness of st's members, from
// gossip and this leader's memory of when it first saw each node down.
func (n *Node) liveness(st *State) *placement.Liveness {
	alive, downFor := map[string]bool{}, map[string]time.Duration{}
	gossiped := n.members.All()
	now := time.Now()
	n.recon.mu.Lock()
	defer n.recon.mu.Unlock()
	if n.recon.downSince == nil {
		n.recon.downSince = map[string]time.Time{}
	}
	for _, m := range st.Nodes {
		g, ok := gossiped[m.ID]
		up := m.ID == n.cfg.ID || (ok && g.Alive && g.Meta.Inc == m.Incarnation)
		alive[m.ID] = up
		if up {
			delete(n.recon.downSince, m.ID)
			continue
		}
		since, seen := n.recon.downSince[m.ID]
		if !seen {
			since = now
			if ok && !g.Alive && g.Since.Before(now) {
				since = g.Since // gossip has seen it down for longer
			}
			n.recon.downSince[m.ID] = since
		}
		downFor[m.ID] = now.Sub(since)
	}
	return placement.NewLiveness(st, alive, downFor, n.cfg.DeadNodeTimeout)
}

// observation is what the holders of a group report.
type observation struct {
	leader   *rpc.ReplicaStatusResponse            // nil when no holder leads
	replicas map[string]*rpc.ReplicaStatusResponse // by node id, the ones that answered
}

func (o observation) config() (voters, nonvoters []string) {
	if o.leader == nil {
		return nil, nil
	}
	for _, s := range o.leader.Servers {
		if s.Suffrage == "voter" {
			voters = append(voters, s.Id)
		} else {
			nonvoters = append(nonvoters, s.Id)
		}
	}
	return voters, nonvoters
}

// decide returns o as package placement's decisions take it.
func (o observation) decide() placement.Observation {
	d := placement.Observation{Replicas: make(map[string]placement.ReplicaStatus, len(o.replicas))}
	if o.leader != nil {
		d.Leader, d.LeaderCommit = o.leader.NodeId, o.leader.CommitIndex
		d.Voters, d.NonVoters = o.config()
	}
	for id, st := range o.replicas {
		d.Replicas[id] = placement.ReplicaStatus{AppliedIndex: st.AppliedIndex, CommitIndex: st.CommitIndex}
	}
	return d
}

// observe asks every holder of g (and every server of the leader's
// configuration) for its replica's status, in parallel.
func (n *Node) observe(ctx context.Context, g placement.Group, extra ...string) observation {
	ids := g.Holders()
	for _, e := range extra {
		if !slices.Contains(ids, e) {
			ids = append(ids, e)
		}
	}
	obs := observation{replicas: map[string]*rpc.ReplicaStatusResponse{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := n.replicaStatus(ctx, id, g)
			if st == nil || !st.Present {
				return
			}
			mu.Lock()
			obs.replicas[id] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	// The leader is the replica that says so and that a majority of its
	// configuration's voters confirm (same leader, same term): a deposed
	// leader that has not noticed yet cannot gather that, so the
	// reconciler never acts on an old configuration.
	for _, st := range obs.replicas {
		if st.State != raft.Leader.String() || (obs.leader != nil && st.Term <= obs.leader.Term) {
			continue
		}
		voters, agree := 0, 0
		for _, s := range st.Servers {
			if s.Suffrage != "voter" {
				continue
			}
			voters++
			if o := obs.replicas[s.Id]; o != nil && o.Term == st.Term && o.LeaderId == st.NodeId {
				agree++
			}
		}
		if agree > voters/2 {
			obs.leader = st
		}
	}
	// A leader's configuration may name servers the placement lacks: ask
	// them too (once).
	if obs.leader != nil && len(extra) == 0 {
		var more []string
		for _, s := range obs.leader.Servers {
			if _, ok := obs.replicas[s.Id]; !ok && !slices.Contains(ids, s.Id) {
				more = append(more, s.Id)
			}
		}
		if len(more) > 0 {
			return n.observe(ctx, g, more...)
		}
	}
	return obs
}

// replicaStatus returns node id's status of its replica of g, or nil.
func (n *Node) replicaStatus(ctx context.Context, id string, g placement.Group) *rpc.ReplicaStatusResponse {
	if id == n.cfg.ID {
		if r := n.groupReplica(g.Meta, g.Shard); r != nil {
			return r.Status(n.cfg.ID)
		}
		return nil
	}
	c, err := n.adminClient(id)
	if err != nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.ReplicaStatus(cctx, &rpc.ReplicaStatusRequest{Shard: uint32(g.Shard), Meta: g.Meta})
	if err != nil {
		return nil
	}
	return st
}

// groupReplica returns the local replica of the meta group or of a shard.
func (n *Node) groupReplica(meta bool, id shard.ID) *replica.Replica {
	if meta {
		return n.metaReplica()
	}
	return n.localReplica(id)
}

// reconcileOnce runs one round; see the comment at the top of the file.
func (n *Node) reconcileOnce(ctx context.Context) error {
	st, _, err := n.metaRead(ctx)
	if err != nil {
		return err
	}
	lv := n.liveness(st)
	// Decommissions that are complete.
	for _, m := range st.Nodes {
		if st.Status(m.ID) != StatusLeaving || st.ReplicaCount(m.ID) > 0 ||
			slices.Contains(st.MetaVoters, m.ID) || slices.Contains(st.MetaLearners, m.ID) {
			continue
		}
		id := m.ID
		if _, err := n.metaUpdate(ctx, func(s *State) error {
			if mm := s.Member(id); mm != nil && s.Status(id) == StatusLeaving && s.ReplicaCount(id) == 0 {
				mm.Status = StatusRemoved
				return nil
			}
			return errNoChange
		}); err != nil {
			return err
		}
		n.log.Info("node removed: all its replicas moved away", "removed_node", id)
	}
	steps := 0
	var settled []placement.Settled
	views := map[shard.ID]observation{} // the settled shards' observations, for acting
	for _, g := range placement.Groups(st) {
		obs := n.observe(ctx, g)
		if obs.leader == nil {
			continue
		}
		did, err := n.stepGroup(ctx, g, obs, lv)
		if err != nil {
			n.log.Warn("reconcile step failed", "group", g.String(), "err", err)
			steps++ // something is in motion; don't balance this round
			continue
		}
		if did {
			steps++
			if st, _, err = n.metaRead(ctx); err != nil {
				return err
			}
			lv = n.liveness(st)
			continue
		}
		if !g.Meta {
			settled = append(settled, placement.Settled{Group: placement.GroupOf(st, g), Obs: obs.decide()})
			views[g.Shard] = obs
		}
	}
	if steps > 0 || len(settled) < len(st.Shards) {
		return nil
	}
	if moved, err := n.balanceReplicas(ctx, lv); moved || err != nil {
		return err
	}
	a := placement.BalanceLeaders(settled, lv)
	if a.Kind != placement.ActTransferLeader || !n.recon.leaderMoveDue(n.cfg.LeaderBalanceInterval) {
		return nil
	}
	n.log.Info("rebalancing: moving a leadership", "shard", uint32(a.Group.Shard), "from", a.From, "to", a.Target)
	return n.transferGroup(ctx, a.Group, views[a.Group.Shard], a.Target)
}

// stepGroup takes at most one step for g, the one placement.Step decides;
// did reports whether it did.
func (n *Node) stepGroup(ctx context.Context, g placement.Group, obs observation, lv *placement.Liveness) (bool, error) {
	a := placement.Step(g, obs.decide(), lv)
	if a.Kind == placement.ActSetPlacement {
		if changed, err := n.updatePlacement(ctx, g, a.Voters, a.Learners); changed || err != nil {
			return changed, err
		}
		// The committed placement already says so (g was read earlier in
		// the round): decide again from it.
		g.Voters, g.Learners = a.Voters, a.Learners
		a = placement.Step(g, obs.decide(), lv)
	}
	return n.act(ctx, a, obs)
}

// act carries out a, a step of a group observed as obs; did reports
// whether it did something.
func (n *Node) act(ctx context.Context, a placement.Action, obs observation) (bool, error) {
	g := a.Group
	switch a.Kind {
	case placement.ActSetPlacement:
		return n.updatePlacement(ctx, g, a.Voters, a.Learners)
	case placement.ActAddNonvoter:
		return true, n.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, a.Target)
	case placement.ActAddLearner:
		return true, n.addLearner(ctx, g, obs, a.Target)
	case placement.ActPromote:
		if err := n.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_VOTER, a.Target); err != nil {
			return true, err
		}
		_, err := n.updatePlacement(ctx, g, a.Voters, a.Learners)
		n.log.Info("replica promoted to voter", "group", g.String(), "target_node", a.Target)
		return true, err
	case placement.ActRemove:
		return true, n.removeFromGroup(ctx, g, obs, a.Target)
	case placement.ActTransferLeader:
		n.log.Info("moving leadership off a replica to remove", "group", g.String(), "from", a.From, "to", a.Target)
		return true, n.transferGroup(ctx, g, obs, a.Target)
	}
	return false, nil
}

// updatePlacement records voters and learners as g's placement.
func (n *Node) updatePlacement(ctx context.Context, g placement.Group, voters, learners []string) (bool, error) {
	changed := false
	_, err := n.metaUpdate(ctx, func(s *State) error {
		err := placement.SetPlacement(s, placement.GroupOf(s, g), slices.Clone(voters), slices.Clone(learners))
		changed = err == nil
		return err
	})
	return changed, err
}

// addLearner records node id as a learner of g, then adds it to g's Raft
// configuration as a non-voter.
func (n *Node) addLearner(ctx context.Context, g placement.Group, obs observation, id string) error {
	if _, err := n.metaUpdate(ctx, func(s *State) error {
		cur := placement.GroupOf(s, g)
		if slices.Contains(cur.Holders(), id) {
			return errNoChange
		}
		return placement.SetPlacement(s, cur, slices.Clone(cur.Voters), append(slices.Clone(cur.Learners), id))
	}); err != nil {
		return err
	}
	n.log.Info("adding replica", "group", g.String(), "target_node", id)
	return n.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, id)
}

// removeFromGroup removes node id from g's Raft configuration, then from
// its placement.
func (n *Node) removeFromGroup(ctx context.Context, g placement.Group, obs observation, id string) error {
	if err := n.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_REMOVE, id); err != nil {
		return err
	}
	n.log.Info("replica removed", "group", g.String(), "target_node", id)
	_, err := n.metaUpdate(ctx, func(s *State) error {
		cur := placement.GroupOf(s, g)
		return placement.SetPlacement(s, cur, placement.Without(cur.Voters, id), placement.Without(cur.Learners, id))
	})
	return err
}

// changeGroup asks g's leader to change its configuration.
func (n *Node) changeGroup(ctx context.Context, g placement.Group, obs observation, change rpc.ReplicaChange, id string) error {
	a, ok := n.nodeAddrs(id)
	if !ok && change != rpc.ReplicaChange_REPLICA_CHANGE_REMOVE {
		return fmt.Errorf("cluster: no Raft address for node %s", id)
	}
	req := &rpc.ChangeReplicaRequest{Shard: uint32(g.Shard), Meta: g.Meta, Change: change, NodeId: id, RaftAddr: a.RaftAddr}
	if obs.leader.NodeId == n.cfg.ID {
		r := n.groupReplica(g.Meta, g.Shard)
		if r == nil {
			return ErrNotLeader
		}
		_, err := r.ChangeConfig(ctx, change, id, a.RaftAddr)
		return err
	}
	c, err := n.adminClient(obs.leader.NodeId)
	if err != nil {
		return err
	}
	_, err = c.ChangeReplica(ctx, req)
	return err
}

// transferGroup moves g's leadership to node to.
func (n *Node) transferGroup(ctx context.Context, g placement.Group, obs observation, to string) error {
	if obs.leader.NodeId == n.cfg.ID {
		r := n.groupReplica(g.Meta, g.Shard)
		if r == nil {
			return ErrNotLeader
		}
		a, _ := n.nodeAddrs(to)
		return r.TransferLeadership(ctx, to, a.RaftAddr)
	}
	c, err := n.adminClient(obs.leader.NodeId)
	if err != nil {
		return err
	}
	_, err = c.TransferLeader(ctx, &rpc.TransferLeaderRequest{Shard: uint32(g.Shard), Meta: g.Meta, ToNode: to})
	return err
}

// balanceReplicas moves one replica from the most to the least loaded live
// node when their counts differ by two or more (placement.BalanceReplicas),
// in the first shard that has a leader.
func (n *Node) balanceReplicas(ctx context.Context, lv *placement.Liveness) (bool, error) {
	for _, a := range placement.BalanceReplicas(lv) {
		obs := n.observe(ctx, a.Group)
		if obs.leader == nil {
			continue
		}
		n.log.Info("rebalancing: moving a replica", "shard", uint32(a.Group.Shard), "from", a.From, "to", a.Target)
		return true, n.addLearner(ctx, a.Group, obs, a.Target)
	}
	return false, nil
}
