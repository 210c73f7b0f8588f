package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The automatic shard policy (State.Policy, placement.DecideShards): a
// loop on the meta leader that, every PolicyInterval, asks each shard's
// replicas for their status (the confirmed leader's disk space and load,
// as the reconciler observes them), decides, and plans at most one split
// or merge, which the mover (move.go) carries out. It plans only while no
// move is in progress (checked in the same guarded meta update that
// records the move) and not before PolicyCooldown has passed since a
// move was last seen in progress or this node became meta leader.

// policyText is a bootstrap policy's form in gossip: nodes bootstrap
// together only with the same one.
func policyText(p placement.ShardPolicy) string {
	return "auto=" + strconv.FormatBool(p.Auto) + ",nodes_per_shard=" + strconv.Itoa(p.NodesPerShard) +
		",max_shard_bytes=" + strconv.FormatUint(p.MaxShardBytes, 10) + ",max_shard_load=" + strconv.FormatFloat(p.MaxShardLoad, 'g', -1, 64)
}

// policyLoop runs the policy while this node leads the meta group.
func (n *Node) policyLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(min(n.cfg.PolicyInterval, time.Second))
	defer tick.Stop()
	var term uint64          // the meta term the loop last saw this node lead
	var last, eval time.Time // a move last seen; the last evaluation
	lastWhy := ""
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		r := n.metaReplica()
		if r == nil || r.Raft().State() != raft.Leader || r.ReadyTerm() == 0 {
			term = 0
			continue
		}
		now := time.Now()
		if t := r.ReadyTerm(); t != term {
			term, last = t, now // a new meta leader waits a cooldown
		}
		if now.Sub(eval) < n.cfg.PolicyInterval {
			continue
		}
		eval = now
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		d, err := n.policyStep(ctx, &last)
		cancel()
		why := d.Reason
		if err != nil {
			why = err.Error()
		}
		if d.Kind == "" && why != lastWhy && n.ctx.Err() == nil {
			if err != nil {
				n.log.Info("policy: waiting", "reason", why)
			} else {
				n.log.Debug("policy: no move", "reason", why)
			}
		}
		lastWhy = why
	}
}

// policyStep evaluates the policy once and plans its move, if any. last
// is when a move was last seen (updated here).
func (n *Node) policyStep(ctx context.Context, last *time.Time) (placement.Decision, error) {
	st, _, err := n.metaRead(ctx)
	if err != nil {
		return placement.Decision{}, err
	}
	now := time.Now()
	if len(st.Moves) > 0 {
		*last = now
		return placement.Decision{Reason: "a move is in progress"}, nil
	}
	if st.Policy == nil {
		return placement.Decision{Reason: "no shard policy in the cluster state"}, nil
	}
	in := placement.PolicyInput{Policy: *st.Policy, ActiveNodes: st.ActiveMembers(), Now: now, LastMove: *last, Cooldown: n.cfg.PolicyCooldown}
	if d := placement.DecideShards(in); d.Kind == "" && now.Before(last.Add(n.cfg.PolicyCooldown)) {
		return d, nil // the cooldown: no need to ask the shards
	}
	stats, err := n.shardStats(ctx, st)
	if err != nil {
		return placement.Decision{}, err
	}
	in.Shards = stats
	d := placement.DecideShards(in)
	if d.Kind == "" {
		return d, nil
	}
	var m placement.Move
	*last = now
	_, err = n.metaUpdate(ctx, func(s *State) error {
		m = placement.Move{} // fn runs again after a conflicting change
		if len(s.Moves) > 0 || s.Policy == nil || *s.Policy != *st.Policy {
			return errNoChange // one move at a time (an operator's included), and only under the policy decided with
		}
		var err error
		if d.Kind == placement.MoveSplit {
			m, err = placement.PlanSplit(s, d.Shard, nil, now)
		} else {
			m, err = placement.PlanMerge(s, d.Shard, d.From, now)
		}
		return err
	})
	if err != nil {
		return d, fmt.Errorf("policy: %s: %w", d.Reason, err)
	}
	if m.ID == 0 {
		return placement.Decision{Reason: "a move was planned or the policy changed meanwhile"}, nil
	}
	n.kickMove()
	n.log.Info("policy: move planned", "move", m.ID, "kind", m.Kind, "source", uint32(m.Source), "target", uint32(m.Target),
		"slots", m.Slots.String(), "reason", d.Reason)
	return d, nil
}

// shardStats observes every shard that owns slots: its slots, and its
// confirmed leader's disk space and load. An error names a shard without
// a leader (the policy waits).
func (n *Node) shardStats(ctx context.Context, st *State) ([]placement.ShardStats, error) {
	smap, err := st.Map()
	if err != nil {
		return nil, err
	}
	ids := smap.Shards()
	out := make([]placement.ShardStats, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		p := st.Placement(id)
		if p == nil {
			return nil, fmt.Errorf("shard %d has no placement", id)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs := n.observe(ctx, placement.Group{Shard: id, Voters: p.Voters, Learners: p.Learners})
			if obs.leader == nil {
				errs[i] = fmt.Errorf("shard %d has no confirmed leader", id)
				return
			}
			out[i] = placement.ShardStats{Shard: id, Slots: st.SlotsOf(id).Len(), Bytes: obs.leader.DiskBytes, Load: obs.leader.Load}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ShardPolicy returns the automatic shard policy as the committed cluster
// state records it; ok is false for a state without one (the defaults are
// returned, with no rule acting).
func (n *Node) ShardPolicy(ctx context.Context) (p placement.ShardPolicy, ok bool, err error) {
	st, err := n.adminMeta(ctx)
	if err != nil {
		return p, false, err
	}
	p, ok = placement.PolicyOf(st)
	return p, ok, nil
}

// SetShardPolicy changes the automatic shard policy (the fields patch
// sets) and returns it. A policy that does not validate is refused
// (InvalidArgument) and nothing changes; runs on the meta leader
// (forwarded). A state without a policy starts from placement.PolicyOf's
// defaults.
func (n *Node) SetShardPolicy(ctx context.Context, patch placement.PolicyPatch) (placement.ShardPolicy, error) {
	var out placement.ShardPolicy
	err := n.onMetaLeader(ctx, func() error {
		_, err := n.metaUpdate(ctx, func(s *State) error {
			cur, _ := placement.PolicyOf(s)
			next := patch.Apply(cur)
			if err := next.Validate(); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
			}
			out = next
			if s.Policy != nil && *s.Policy == next {
				return errNoChange
			}
			s.Policy = &next
			return nil
		})
		if err == nil {
			n.log.Info("policy: changed", "auto", out.Auto, "nodes_per_shard", out.NodesPerShard,
				"max_shard_bytes", out.MaxShardBytes, "max_shard_load", out.MaxShardLoad)
		}
		return err
	}, func(ctx context.Context, c rpc.AdminClient) error {
		b, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		resp, err := c.ShardPolicy(ctx, &rpc.ShardPolicyRequest{PatchJson: b})
		if err != nil {
			return err
		}
		return json.Unmarshal(resp.PolicyJson, &out)
	})
	return out, err
}

func (s *adminServer) ShardPolicy(ctx context.Context, req *rpc.ShardPolicyRequest) (*rpc.ShardPolicyResponse, error) {
	patch, err := placement.DecodePolicyPatch(req.PatchJson)
	if err != nil {
		return nil, StatusError(fmt.Errorf("%w: %v", ErrInvalidArgument, err), 0, nil)
	}
	var p placement.ShardPolicy
	if patch.IsEmpty() {
		p, _, err = s.node.ShardPolicy(ctx)
	} else {
		p, err = s.node.SetShardPolicy(ctx, patch)
	}
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	return &rpc.ShardPolicyResponse{PolicyJson: b}, nil
}

// shardSlots is a shard's slots in the map: count and text form.
func shardSlots(st *State, id shard.ID) (int, string) {
	s := st.SlotsOf(id)
	return s.Len(), s.String()
}
