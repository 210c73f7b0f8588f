package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The sync loop makes a node follow the committed cluster state: every
// node, every half second (and right after a change it made), fetches the
// state from the meta leader, records it in cluster.json, and opens the
// replicas placed on it and closes (and deletes) the ones no longer placed
// on it. The reconciler only drops a node from a placement after the
// shard's Raft configuration no longer has it, so a replica is deleted only
// once its group has moved on.

const syncInterval = 500 * time.Millisecond

func (n *Node) kickSync() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Node) syncLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(syncInterval)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.kick:
		}
		n.requireIncarnations() // version.go
		if h := n.cfg.Testing.HoldSync; h != nil && h() {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
		st, err := n.fetchMeta(ctx)
		if err == nil {
			err = n.applyMeta(st)
		}
		if r := n.metaReplica(); err == nil && r != nil && r.IsLeader() {
			n.raiseVersion(ctx, st) // version.go
		}
		cancel()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != lastErr && n.ctx.Err() == nil {
			if err != nil {
				n.log.Info("cluster state sync", "status", msg)
			}
			lastErr = msg
		}
	}
}

// fetchMeta returns the committed cluster state from the meta leader: the
// local meta replica when it leads, else through a peer's Admin.MetaState
// (a meta voter forwards to its leader).
func (n *Node) fetchMeta(ctx context.Context) (*State, error) {
	st, _, err := n.metaRead(ctx)
	if err == nil || !errors.Is(err, errMetaNotLeader) {
		return st, err
	}
	var tried []string
	var lastErr error
	for _, id := range n.metaCandidates() {
		if slices.Contains(tried, id) || id == n.cfg.ID {
			continue
		}
		tried = append(tried, id)
		c, err := n.adminClient(id)
		if err != nil {
			lastErr = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.MetaState(cctx, &rpc.MetaStateRequest{})
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		return decodeState(resp.StateJson)
	}
	if lastErr == nil {
		lastErr = errors.New("no meta group member known yet")
	}
	return nil, fmt.Errorf("cluster: cannot reach the meta group: %w", lastErr)
}

// metaCandidates lists nodes to ask for the cluster state: the local meta
// replica's leader, the meta voters this node knows, then live gossip
// members that belong to a cluster.
func (n *Node) metaCandidates() []string {
	var out []string
	if r := n.metaReplica(); r != nil {
		if l := r.Leader(); l != "" {
			out = append(out, l)
		}
	}
	n.mu.RLock()
	if n.mu.state != nil {
		out = append(out, n.mu.state.MetaVoters...)
	}
	n.mu.RUnlock()
	for _, m := range n.members.Alive() {
		if m.Cluster != "" {
			out = append(out, m.ID)
		}
	}
	return out
}

// errRefused is wrapped by the reason a node refuses to serve: the cluster
// state says its data dir is stale (removed member, replaced data dir, other
// cluster).
var errRefused = errors.New("cluster: node refused")

// applyMeta makes the node follow st.
func (n *Node) applyMeta(st *State) error {
	n.adoptMu.Lock()
	defer n.adoptMu.Unlock()
	n.mu.RLock()
	local, refused := n.mu.state, n.mu.refused
	n.mu.RUnlock()
	if refused != nil {
		return refused
	}
	if local != nil && local.ClusterID != st.ClusterID {
		return n.refuse(fmt.Errorf("%w: this data dir belongs to cluster %s, the cluster it gossips with is %s", errRefused, local.ClusterID, st.ClusterID))
	}
	me := st.Member(n.cfg.ID)
	switch {
	case me == nil && local == nil:
		return fmt.Errorf("waiting to be admitted into cluster %s: run `swarmnode join %s` against any member", st.ClusterID, n.cfg.ID)
	case me == nil:
		return n.refuse(fmt.Errorf("%w: node %s is not a member of cluster %s; wipe %s and join it again", errRefused, n.cfg.ID, st.ClusterID, n.cfg.DataDir))
	case me.Status == StatusRemoved && local == nil && me.Incarnation != n.inc:
		// A wiped data dir under a removed member's id, not admitted yet:
		// it waits for its join like any new node (refusing here for
		// good would outlive the join that admits it).
		return fmt.Errorf("waiting to be admitted into cluster %s: node %s was removed; this data dir is new: run `swarmnode join %s` against any member", st.ClusterID, n.cfg.ID, n.cfg.ID)
	case me.Status == StatusRemoved:
		return n.refuse(fmt.Errorf("%w: node %s was removed from cluster %s; to add it again, wipe %s, start it and run `swarmnode join %s`", errRefused, n.cfg.ID, st.ClusterID, n.cfg.DataDir, n.cfg.ID))
	case me.Incarnation != n.inc:
		return n.refuse(fmt.Errorf("%w: node id %s belongs to another data dir in cluster %s (this one is stale or copied); wipe %s and start it under a new id", errRefused, n.cfg.ID, st.ClusterID, n.cfg.DataDir))
	}
	if err := n.checkOwnVersion(st); err != nil { // version.go
		return n.refuse(fmt.Errorf("%w: %w", errRefused, err))
	}
	if local == nil || st.Epoch > local.Epoch {
		next := st.Clone()
		next.Bootstrapped = true
		if err := saveState(n.cfg.DataDir, next); err != nil {
			return fmt.Errorf("cluster: record cluster state: %w", err)
		}
		smap, err := next.Map()
		if err != nil {
			return err
		}
		n.mu.Lock()
		n.mu.state, n.mu.smap = next, smap
		n.mu.Unlock()
		n.stateEvents(local, next)
		raised := n.noteVersion(next.ActiveVersion()) // version.go
		if local == nil {
			n.log.Info("admitted into cluster", "cluster", st.ClusterID, "epoch", st.Epoch)
		}
		if local == nil || raised {
			n.ml.UpdateNode(5 * time.Second) // announce the cluster id, the version it runs
		}
	}
	return n.placeLocal(st)
}

// placeLocal opens the replicas st places on this node and closes and
// deletes the ones it no longer does, or of an older incarnation than st
// places (a dead group's that had the same shard id), opening the new
// group's instead.
func (n *Node) placeLocal(st *State) error {
	var errs []error
	inMeta := slices.Contains(st.MetaVoters, n.cfg.ID) || slices.Contains(st.MetaLearners, n.cfg.ID)
	if inMeta {
		if err := n.openMeta(st, false); err != nil {
			errs = append(errs, err)
		}
	} else if r := n.metaReplica(); r != nil && st.Epoch > 0 {
		n.mu.Lock()
		n.mu.meta = nil
		n.mu.Unlock()
		n.log.Info("leaving the meta group: closing and deleting its replica")
		errs = append(errs, r.Close(), os.RemoveAll(n.metaDir()), n.dropReplicaLog(metaShardID))
	}
	for _, p := range st.Shards {
		if !p.Holds(n.cfg.ID) {
			continue
		}
		if r := n.localReplica(p.Shard); r != nil {
			if r.Incarnation() >= p.Incarnation {
				continue
			}
			// The open replica is of a dead group that had this id (the
			// node missed its removal and the id's reuse): it must not
			// take part in the new group with its log.
			n.log.Warn("open replica is of a dead group with this shard id: deleting it", "shard", uint32(p.Shard),
				"incarnation", r.Incarnation(), "placed", p.Incarnation)
			if err := n.dropShard(p.Shard); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		n.log.Info("opening replica placed on this node", "shard", uint32(p.Shard), "incarnation", p.Incarnation)
		if err := n.openShard(st, p, false); err != nil {
			errs = append(errs, err)
		}
	}
	n.mu.RLock()
	var drop []shard.ID
	for id := range n.mu.replicas {
		if p := st.Placement(id); p == nil || !p.Holds(n.cfg.ID) {
			drop = append(drop, id)
		}
	}
	n.mu.RUnlock()
	for _, id := range drop {
		errs = append(errs, n.dropShard(id))
	}
	return errors.Join(errs...)
}

// dropShard closes the local replica of shard id and deletes its data.
func (n *Node) dropShard(id shard.ID) error {
	n.mu.Lock()
	r := n.mu.replicas[id]
	delete(n.mu.replicas, id)
	n.mu.Unlock()
	if r == nil {
		return nil
	}
	n.log.Info("replica moved off this node: closing and deleting it", "shard", uint32(id))
	// The folder goes first: a replica folder that is missing at open has
	// its stale log state dropped, so a crash between the two steps is safe.
	return errors.Join(r.Close(), os.RemoveAll(n.shardDir(id)), n.dropReplicaLog(id))
}

func (n *Node) shardDir(id shard.ID) string {
	return filepath.Join(n.cfg.DataDir, "shards", fmt.Sprintf("%03d", id))
}

// refuse closes every local replica and makes the node refuse to serve
// with reason (Ready reports it). Its data dir is left as it is.
func (n *Node) refuse(reason error) error {
	n.mu.Lock()
	if n.mu.refused != nil {
		n.mu.Unlock()
		return reason
	}
	n.mu.refused = reason
	replicas := n.mu.replicas
	meta := n.mu.meta
	n.mu.replicas = map[shard.ID]*replica.Replica{}
	n.mu.meta = nil
	n.mu.Unlock()
	n.log.Error("refusing to serve", "reason", reason)
	for _, r := range replicas {
		r.Close()
	}
	if meta != nil {
		meta.Close()
	}
	return reason
}
