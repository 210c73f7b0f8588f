package cluster

import (
	"cmp"
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
// per group:
//
//  1. make the placement agree with the group's Raft configuration (the
//     configuration is the truth; a learner recorded but not yet added is
//     added);
//  2. promote a non-voter that has caught up (or remove one whose node is
//     gone);
//  3. add a learner on the least loaded live node when the group has fewer
//     good voters than its target (min(replication factor, active nodes));
//  4. remove a voter beyond the target, or one on a node that is leaving or
//     has been dead longer than DeadNodeTimeout, once the group has enough
//     good voters without it (moving the leadership away first).
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

// catchUpSlack is how far (in log entries) a non-voter may trail the
// leader's commit index and still be promoted.
const catchUpSlack = 512

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
	gossip := n.members.all()
	now := time.Now()
	n.recon.mu.Lock()
	defer n.recon.mu.Unlock()
	if n.recon.downSince == nil {
		n.recon.downSince = map[string]time.Time{}
	}
	for _, m := range st.Nodes {
		g, ok := gossip[m.ID]
		up := m.ID == n.cfg.ID || (ok && g.alive && g.meta.Inc == m.Incarnation)
		alive[m.ID] = up
		if up {
			delete(n.recon.downSince, m.ID)
			continue
		}
		since, seen := n.recon.downSince[m.ID]
		if !seen {
			since = now
			if ok && !g.alive && g.since.Before(now) {
				since = g.since // gossip has seen it down for longer
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
	leaders := map[string]int{}
	var settled []shardView
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
			leaders[obs.leader.NodeId]++
			settled = append(settled, shardView{g: placement.GroupOf(st, g), obs: obs})
		}
	}
	if steps > 0 || len(settled) < len(st.Shards) {
		return nil
	}
	if moved, err := n.balanceReplicas(ctx, st, lv); moved || err != nil {
		return err
	}
	return n.balanceLeaders(ctx, settled, leaders, lv)
}

type shardView struct {
	g   placement.Group
	obs observation
}

// stepGroup takes at most one step for g; did reports whether it did.
func (n *Node) stepGroup(ctx context.Context, g placement.Group, obs observation, lv *placement.Liveness) (bool, error) {
	cfgVoters, cfgNonvoters := obs.config()
	inCfg := func(id string) bool {
		return slices.Contains(cfgVoters, id) || slices.Contains(cfgNonvoters, id)
	}
	// 1. Placement follows the configuration; pending learners stay while
	// their node can still take them.
	voters := slices.Clone(cfgVoters)
	learners := slices.Clone(cfgNonvoters)
	var pending []string
	for _, l := range g.Learners {
		if !inCfg(l) && lv.Placeable(l) {
			learners = append(learners, l)
			pending = append(pending, l)
		}
	}
	if changed, err := n.updatePlacement(ctx, g, voters, learners); changed || err != nil {
		return changed, err
	}
	for _, l := range pending {
		return true, n.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, l)
	}
	// 2. Non-voters: promote when caught up, remove when their node is gone.
	for _, id := range cfgNonvoters {
		if !lv.Eligible(id) {
			return true, n.removeFromGroup(ctx, g, obs, id)
		}
		st := obs.replicas[id]
		if st == nil || st.AppliedIndex == 0 || st.AppliedIndex+catchUpSlack < obs.leader.CommitIndex {
			return false, nil // still catching up: nothing else moves meanwhile
		}
		if err := n.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_VOTER, id); err != nil {
			return true, err
		}
		_, err := n.updatePlacement(ctx, g, append(slices.Clone(cfgVoters), id), placement.Without(cfgNonvoters, id))
		n.log.Info("replica promoted to voter", "group", g.String(), "target_node", id)
		return true, err
	}
	// 3. Too few good voters: add a learner on the least loaded live node.
	target := lv.VoterTarget(g)
	good := 0
	for _, v := range cfgVoters {
		if lv.Eligible(v) {
			good++
		}
	}
	if good < target {
		if c := placement.PickCandidate(g, cfgVoters, lv); c != "" {
			return true, n.addLearner(ctx, g, obs, c)
		}
	}
	// 4. A voter to remove: one on a node that is going away (once the
	// group has enough good voters without it), or one beyond the target.
	victim := ""
	for _, v := range cfgVoters {
		if !lv.Eligible(v) && good >= target {
			victim = v
			break
		}
	}
	if victim == "" && len(cfgVoters) > target && target > 0 {
		cands := slices.Clone(cfgVoters)
		slices.SortFunc(cands, func(a, b string) int {
			return cmp.Or(cmp.Compare(lv.Replicas[b], lv.Replicas[a]), cmp.Compare(b, a))
		})
		victim = cands[0]
	}
	if victim == "" {
		return false, nil
	}
	if victim == obs.leader.NodeId {
		to := ""
		for _, v := range cfgVoters {
			if v != victim && lv.Placeable(v) {
				to = v
				break
			}
		}
		if to == "" {
			return false, nil
		}
		n.log.Info("moving leadership off a replica to remove", "group", g.String(), "from", victim, "to", to)
		return true, n.transferGroup(ctx, g, obs, to)
	}
	return true, n.removeFromGroup(ctx, g, obs, victim)
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
// node when their counts differ by two or more.
func (n *Node) balanceReplicas(ctx context.Context, st *State, lv *placement.Liveness) (bool, error) {
	var ids []string
	for _, m := range st.Nodes {
		if lv.Placeable(m.ID) {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) < 2 {
		return false, nil
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(lv.Replicas[a], lv.Replicas[b]), cmp.Compare(a, b)) })
	lo, hi := ids[0], ids[len(ids)-1]
	if lv.Replicas[hi]-lv.Replicas[lo] < 2 {
		return false, nil
	}
	for _, p := range st.Shards {
		if p.Holds(hi) && !p.Holds(lo) {
			g := placement.Group{Shard: p.Shard, Voters: p.Voters, Learners: p.Learners}
			obs := n.observe(ctx, g)
			if obs.leader == nil {
				continue
			}
			n.log.Info("rebalancing: moving a replica", "shard", uint32(p.Shard), "from", hi, "to", lo)
			return true, n.addLearner(ctx, g, obs, lo)
		}
	}
	return false, nil
}

// balanceLeaders moves one leadership from the node leading the most
// shards to a voter of that shard leading at least two fewer.
func (n *Node) balanceLeaders(ctx context.Context, settled []shardView, leaders map[string]int, lv *placement.Liveness) error {
	slices.SortFunc(settled, func(a, b shardView) int {
		return cmp.Or(cmp.Compare(leaders[b.obs.leader.NodeId], leaders[a.obs.leader.NodeId]), cmp.Compare(a.g.Shard, b.g.Shard))
	})
	for _, sv := range settled {
		from := sv.obs.leader.NodeId
		best := ""
		for _, v := range sv.g.Voters {
			if v == from || !lv.Placeable(v) {
				continue
			}
			if st := sv.obs.replicas[v]; st == nil || st.AppliedIndex+catchUpSlack < sv.obs.leader.CommitIndex {
				continue
			}
			if best == "" || leaders[v] < leaders[best] {
				best = v
			}
		}
		if best != "" && leaders[from]-leaders[best] >= 2 {
			if !n.recon.leaderMoveDue(n.cfg.LeaderBalanceInterval) {
				return nil
			}
			n.log.Info("rebalancing: moving a leadership", "shard", uint32(sv.g.Shard), "from", from, "to", best)
			return n.transferGroup(ctx, sv.g, sv.obs, best)
		}
	}
	return nil
}
