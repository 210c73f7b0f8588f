package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/cluster/gossip"
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
// BalanceLeaders); this package observes the groups and carries out the
// decided Action. A round asks each node about all of its replicas in one
// call (ReplicaStatuses, statuses.go) before any step; once it takes a
// step, or against a node that does not answer it, it asks per group
// (ReplicaStatus), as Observe does.
//
// Placement changes follow a strict order that keeps replicas safe: a node
// is added to the placement before it is added to the Raft configuration,
// and dropped from the placement only after it left the configuration (the
// node's sync loop deletes a replica once it is no longer placed there).
// When every group is settled, one round moves at most one replica from the
// most to the least loaded node, or else one leadership.

// Host is what a Reconciler needs of the node that runs it (package
// cluster fills it in).
type Host struct {
	ID  string       // the node's id
	Log *slog.Logger // the node's logger
	// Interval, DeadNodeTimeout, LeaderBalanceInterval: cluster.Config's
	// ReconcileInterval, DeadNodeTimeout and LeaderBalanceInterval.
	Interval, DeadNodeTimeout, LeaderBalanceInterval time.Duration
	// Isolation is cluster.Config's IsolationLevel.
	Isolation placement.Isolation

	// Leading reports whether this node's meta replica leads the meta
	// group and committed an entry of its term.
	Leading func() bool
	// Read returns the committed state, read linearizably on the local
	// meta replica (the meta leader's).
	Read func(context.Context) (*placement.State, error)
	// Update is the guarded meta update: fn changes a copy of the
	// committed state (placement.ErrNoChange: leave it).
	Update func(ctx context.Context, fn func(*placement.State) error) error
	// Members returns the gossip members, by node id.
	Members func() map[string]gossip.Member
	// Replica is the local replica of the meta group or of a shard (nil:
	// none).
	Replica func(meta bool, id shard.ID) *replica.Replica
	// Admin returns an Admin client of a node.
	Admin func(nodeID string) (rpc.AdminClient, error)
	// RaftAddr returns a node's Raft address (ok false: unknown).
	RaftAddr func(nodeID string) (addr string, ok bool)
}

// Reconciler is a node's reconciler. Its state is the reconcile loop's
// memory of gossip (when this leader first saw each node down).
type Reconciler struct {
	h         Host
	mu        sync.Mutex
	downSince map[string]time.Time
	// lastLeaderMove is when this leader started, or last moved a
	// leadership to balance leaders.
	lastLeaderMove time.Time
	// relabel is, by node id, the labels gossip announces that differ
	// from the recorded ones and were logged (labels.go).
	relabel map[string]string
}

// New returns the Reconciler of the node h describes.
func New(h Host) *Reconciler { return &Reconciler{h: h} }

// ErrNotLeader: the local replica a step needed is gone (it is
// replica.ErrNotLeader, cluster.ErrNotLeader).
var ErrNotLeader = replica.ErrNotLeader

var errNoChange = placement.ErrNoChange

// Run is the reconcile loop: every Host.Interval while this node leads
// the meta group, one round (see the comment at the top of the file). It
// returns when ctx ends.
func (rc *Reconciler) Run(ctx context.Context) {
	tick := time.NewTicker(rc.h.Interval)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !rc.h.Leading() {
			rc.reset()
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := rc.reconcileOnce(rctx)
		cancel()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != lastErr && ctx.Err() == nil {
			if err != nil {
				rc.h.Log.Warn("reconcile", "err", err)
			}
			lastErr = msg
		}
	}
}

func (rc *Reconciler) reset() {
	rc.mu.Lock()
	rc.downSince = nil
	rc.lastLeaderMove = time.Time{}
	rc.mu.Unlock()
}

// leaderMoveDue reports whether a leadership may be moved now, and if so
// records the move.
func (rc *Reconciler) leaderMoveDue(every time.Duration) bool {
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
func (rc *Reconciler) liveness(st *placement.State) *placement.Liveness {
	alive, downFor := map[string]bool{}, map[string]time.Duration{}
	gossiped := rc.h.Members()
	now := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.downSince == nil {
		rc.downSince = map[string]time.Time{}
	}
	for _, m := range st.Nodes {
		g, ok := gossiped[m.ID]
		up := m.ID == rc.h.ID || (ok && g.Alive && g.Meta.Inc == m.Incarnation)
		alive[m.ID] = up
		if up {
			delete(rc.downSince, m.ID)
			continue
		}
		since, seen := rc.downSince[m.ID]
		if !seen {
			since = now
			if ok && !g.Alive && g.Since.Before(now) {
				since = g.Since // gossip has seen it down for longer
			}
			rc.downSince[m.ID] = since
		}
		downFor[m.ID] = now.Sub(since)
	}
	lv := placement.NewLiveness(st, alive, downFor, rc.h.DeadNodeTimeout)
	lv.Isolation = rc.h.Isolation
	return lv
}

// Observation is what the holders of a group report.
type Observation struct {
	Leader   *rpc.ReplicaStatusResponse            // nil when no holder leads
	Replicas map[string]*rpc.ReplicaStatusResponse // by node id, the ones that answered
}

func (o Observation) config() (voters, nonvoters []string) {
	if o.Leader == nil {
		return nil, nil
	}
	for _, s := range o.Leader.Servers {
		if s.Suffrage == "voter" {
			voters = append(voters, s.Id)
		} else {
			nonvoters = append(nonvoters, s.Id)
		}
	}
	return voters, nonvoters
}

// decide returns o as package placement's decisions take it.
func (o Observation) decide() placement.Observation {
	d := placement.Observation{Replicas: make(map[string]placement.ReplicaStatus, len(o.Replicas))}
	if o.Leader != nil {
		d.Leader, d.LeaderCommit = o.Leader.NodeId, o.Leader.CommitIndex
		d.Voters, d.NonVoters = o.config()
	}
	for id, st := range o.Replicas {
		d.Replicas[id] = placement.ReplicaStatus{AppliedIndex: st.AppliedIndex, CommitIndex: st.CommitIndex}
	}
	return d
}

// Observe asks every holder of g (and every server of the leader's
// configuration) for its replica's status, in parallel.
//
// The leader is the replica that says so and that a majority of its
// configuration's voters confirm.
func (rc *Reconciler) Observe(ctx context.Context, g placement.Group, extra ...string) Observation {
	return rc.observe(ctx, g, nil, extra...)
}

// observe is Observe with the round's statuses (nil: none), which answer
// for the nodes and groups they hold.
func (rc *Reconciler) observe(ctx context.Context, g placement.Group, snap *statuses, extra ...string) Observation {
	ids := g.Holders()
	for _, e := range extra {
		if !slices.Contains(ids, e) {
			ids = append(ids, e)
		}
	}
	obs := Observation{Replicas: map[string]*rpc.ReplicaStatusResponse{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := rc.replicaStatus(ctx, id, g, snap)
			if st == nil || !st.Present {
				return
			}
			mu.Lock()
			obs.Replicas[id] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	// The leader is the replica that says so and that a majority of its
	// configuration's voters confirm (same leader, same term): a deposed
	// leader that has not noticed yet cannot gather that, so the
	// reconciler never acts on an old configuration.
	for _, st := range obs.Replicas {
		if st.State != raft.Leader.String() || (obs.Leader != nil && st.Term <= obs.Leader.Term) {
			continue
		}
		voters, agree := 0, 0
		for _, s := range st.Servers {
			if s.Suffrage != "voter" {
				continue
			}
			voters++
			if o := obs.Replicas[s.Id]; o != nil && o.Term == st.Term && o.LeaderId == st.NodeId {
				agree++
			}
		}
		if agree > voters/2 {
			obs.Leader = st
		}
	}
	// A leader's configuration may name servers the placement lacks: ask
	// them too (once).
	if obs.Leader != nil && len(extra) == 0 {
		var more []string
		for _, s := range obs.Leader.Servers {
			if _, ok := obs.Replicas[s.Id]; !ok && !slices.Contains(ids, s.Id) {
				more = append(more, s.Id)
			}
		}
		if len(more) > 0 {
			return rc.observe(ctx, g, snap, more...)
		}
	}
	return obs
}

// replicaStatus returns node id's status of its replica of g, or nil:
// from snap when it holds it, else asked now.
func (rc *Reconciler) replicaStatus(ctx context.Context, id string, g placement.Group, snap *statuses) *rpc.ReplicaStatusResponse {
	if id == rc.h.ID {
		if r := rc.h.Replica(g.Meta, g.Shard); r != nil {
			return r.Status(rc.h.ID)
		}
		return nil
	}
	if st, ok := snap.get(id, g); ok {
		return st
	}
	c, err := rc.h.Admin(id)
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

// reconcileOnce runs one round; see the comment at the top of the file.
func (rc *Reconciler) reconcileOnce(ctx context.Context) error {
	st, err := rc.h.Read(ctx)
	if err != nil {
		return err
	}
	if st, err = rc.recordLabels(ctx, st); err != nil {
		return err
	}
	lv := rc.liveness(st)
	// Decommissions that are complete.
	for _, m := range st.Nodes {
		if st.Status(m.ID) != placement.StatusLeaving || st.ReplicaCount(m.ID) > 0 ||
			slices.Contains(st.MetaVoters, m.ID) || slices.Contains(st.MetaLearners, m.ID) {
			continue
		}
		id := m.ID
		if err := rc.h.Update(ctx, func(s *placement.State) error {
			if mm := s.Member(id); mm != nil && s.Status(id) == placement.StatusLeaving && s.ReplicaCount(id) == 0 {
				mm.Status = placement.StatusRemoved
				return nil
			}
			return errNoChange
		}); err != nil {
			return err
		}
		rc.h.Log.Info("node removed: all its replicas moved away", "removed_node", id)
	}
	steps := 0
	var settled []placement.Settled
	views := map[shard.ID]Observation{} // the settled shards' Observations, for acting
	groups := placement.Groups(st)
	snap := rc.fetchStatuses(ctx, groups)
	for _, g := range groups {
		if snap.stale(rc.h.Interval) {
			snap = nil
		}
		obs := rc.observe(ctx, g, snap)
		if obs.Leader == nil {
			continue
		}
		did, err := rc.stepGroup(ctx, g, obs, lv)
		if err != nil {
			rc.h.Log.Warn("reconcile step failed", "group", g.String(), "err", err)
			steps++ // something is in motion; don't balance this round
			snap = nil
			continue
		}
		if did {
			steps++
			snap = nil // the later groups are asked afresh
			if st, err = rc.h.Read(ctx); err != nil {
				return err
			}
			lv = rc.liveness(st)
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
	if moved, err := rc.balanceReplicas(ctx, lv); moved || err != nil {
		return err
	}
	a := placement.BalanceLeaders(settled, lv)
	if a.Kind != placement.ActTransferLeader || !rc.leaderMoveDue(rc.h.LeaderBalanceInterval) {
		return nil
	}
	rc.h.Log.Info("rebalancing: moving a leadership", "shard", uint32(a.Group.Shard), "from", a.From, "to", a.Target)
	return rc.Transfer(ctx, a.Group, views[a.Group.Shard], a.Target)
}

// stepGroup takes at most one step for g, the one placement.Step decides;
// did reports whether it did.
func (rc *Reconciler) stepGroup(ctx context.Context, g placement.Group, obs Observation, lv *placement.Liveness) (bool, error) {
	a := placement.Step(g, obs.decide(), lv)
	if a.Kind == placement.ActSetPlacement {
		if changed, err := rc.updatePlacement(ctx, g, a.Voters, a.Learners); changed || err != nil {
			return changed, err
		}
		// The committed placement already says so (g was read earlier in
		// the round): decide again from it.
		g.Voters, g.Learners = a.Voters, a.Learners
		a = placement.Step(g, obs.decide(), lv)
	}
	return rc.act(ctx, a, obs, lv)
}

// act carries out a, a step of a group observed as obs; did reports
// whether it did something.
func (rc *Reconciler) act(ctx context.Context, a placement.Action, obs Observation, lv *placement.Liveness) (bool, error) {
	g := a.Group
	switch a.Kind {
	case placement.ActSetPlacement:
		return rc.updatePlacement(ctx, g, a.Voters, a.Learners)
	case placement.ActAddNonvoter:
		return true, rc.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, a.Target)
	case placement.ActAddLearner:
		return true, rc.addLearner(ctx, g, obs, a.Target)
	case placement.ActPromote:
		// The round's statuses may be a round old. A non-voter that died
		// since (its zone lost) would, once a voter, leave a group of four
		// voters with two dead and no quorum until it came back (the
		// zones run found a shard stopped for the whole minute of a
		// zone's loss that way): ask the group again right before.
		fresh := rc.observe(ctx, g, nil)
		if fresh.Leader == nil {
			return false, nil
		}
		if b := placement.Step(g, fresh.decide(), lv); b.Kind != placement.ActPromote || b.Target != a.Target {
			rc.h.Log.Info("promotion called off: the group changed", "group", g.String(), "target_node", a.Target, "now", b.Kind.String(), "reason", b.Reason)
			return false, nil
		}
		if err := rc.changeGroup(ctx, g, fresh, rpc.ReplicaChange_REPLICA_CHANGE_ADD_VOTER, a.Target); err != nil {
			return true, err
		}
		if _, err := rc.updatePlacement(ctx, g, a.Voters, a.Learners); err != nil {
			return true, err
		}
		rc.h.Log.Info("replica promoted to voter", "group", g.String(), "target_node", a.Target)
		return true, nil
	case placement.ActRemove:
		return true, rc.removeFromGroup(ctx, g, obs, a.Target)
	case placement.ActTransferLeader:
		rc.h.Log.Info("moving leadership off a replica to remove", "group", g.String(), "from", a.From, "to", a.Target)
		return true, rc.Transfer(ctx, g, obs, a.Target)
	}
	return false, nil
}

// updatePlacement records voters and learners as g's placement.
func (rc *Reconciler) updatePlacement(ctx context.Context, g placement.Group, voters, learners []string) (bool, error) {
	changed := false
	err := rc.h.Update(ctx, func(s *placement.State) error {
		err := placement.SetPlacement(s, placement.GroupOf(s, g), slices.Clone(voters), slices.Clone(learners))
		changed = err == nil
		return err
	})
	return changed, err
}

// addLearner records node id as a learner of g, then adds it to g's Raft
// configuration as a non-voter.
func (rc *Reconciler) addLearner(ctx context.Context, g placement.Group, obs Observation, id string) error {
	if err := rc.h.Update(ctx, func(s *placement.State) error {
		cur := placement.GroupOf(s, g)
		if slices.Contains(cur.Holders(), id) {
			return errNoChange
		}
		return placement.SetPlacement(s, cur, slices.Clone(cur.Voters), append(slices.Clone(cur.Learners), id))
	}); err != nil {
		return err
	}
	rc.h.Log.Info("adding replica", "group", g.String(), "target_node", id)
	return rc.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, id)
}

// removeFromGroup removes node id from g's Raft configuration, then from
// its placement.
func (rc *Reconciler) removeFromGroup(ctx context.Context, g placement.Group, obs Observation, id string) error {
	if err := rc.changeGroup(ctx, g, obs, rpc.ReplicaChange_REPLICA_CHANGE_REMOVE, id); err != nil {
		return err
	}
	rc.h.Log.Info("replica removed", "group", g.String(), "target_node", id)
	err := rc.h.Update(ctx, func(s *placement.State) error {
		cur := placement.GroupOf(s, g)
		return placement.SetPlacement(s, cur, placement.Without(cur.Voters, id), placement.Without(cur.Learners, id))
	})
	return err
}

// changeGroup asks g's leader to change its configuration.
func (rc *Reconciler) changeGroup(ctx context.Context, g placement.Group, obs Observation, change rpc.ReplicaChange, id string) error {
	raftAddr, ok := rc.h.RaftAddr(id)
	if !ok && change != rpc.ReplicaChange_REPLICA_CHANGE_REMOVE {
		return fmt.Errorf("cluster: no Raft address for node %s", id)
	}
	req := &rpc.ChangeReplicaRequest{Shard: uint32(g.Shard), Meta: g.Meta, Change: change, NodeId: id, RaftAddr: raftAddr}
	if obs.Leader.NodeId == rc.h.ID {
		r := rc.h.Replica(g.Meta, g.Shard)
		if r == nil {
			return ErrNotLeader
		}
		_, err := r.ChangeConfig(ctx, change, id, raftAddr)
		return err
	}
	c, err := rc.h.Admin(obs.Leader.NodeId)
	if err != nil {
		return err
	}
	_, err = c.ChangeReplica(ctx, req)
	return err
}

// Transfer asks g's leader (obs.Leader, not nil) to move its leadership
// to node to (any up-to-date voter when empty).
func (rc *Reconciler) Transfer(ctx context.Context, g placement.Group, obs Observation, to string) error {
	if obs.Leader.NodeId == rc.h.ID {
		r := rc.h.Replica(g.Meta, g.Shard)
		if r == nil {
			return ErrNotLeader
		}
		raftAddr, _ := rc.h.RaftAddr(to)
		return r.TransferLeadership(ctx, to, raftAddr)
	}
	c, err := rc.h.Admin(obs.Leader.NodeId)
	if err != nil {
		return err
	}
	_, err = c.TransferLeader(ctx, &rpc.TransferLeaderRequest{Shard: uint32(g.Shard), Meta: g.Meta, ToNode: to})
	return err
}

// balanceReplicas moves one replica from the most to the least loaded live
// node when their counts differ by two or more (placement.BalanceReplicas),
// in the first shard that has a leader.
func (rc *Reconciler) balanceReplicas(ctx context.Context, lv *placement.Liveness) (bool, error) {
	for _, a := range placement.BalanceReplicas(lv) {
		obs := rc.Observe(ctx, a.Group)
		if obs.Leader == nil {
			continue
		}
		rc.h.Log.Info("rebalancing: moving a replica", "shard", uint32(a.Group.Shard), "from", a.From, "to", a.Target)
		return true, rc.addLearner(ctx, a.Group, obs, a.Target)
	}
	return false, nil
}
