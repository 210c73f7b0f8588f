package shardmove

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/rpc"
)

// The automatic shard policy (State.Policy, placement.DecideShards): a
// loop on the meta leader that, every PolicyInterval, asks each shard's
// replicas for their status (the confirmed leader's disk space and load,
// as the reconciler observes them), decides, and plans at most one split
// or merge, which the mover (mover.go) carries out. It plans only while no
// move is in progress (checked in the same guarded meta update that
// records the move) and not before PolicyCooldown has passed since a
// move was last seen in progress or this node became meta leader.

// RunPolicy runs the policy while this node leads the meta group, until
// ctx ends.
func (mr *Mover) RunPolicy(ctx context.Context) {
	tick := time.NewTicker(min(mr.h.PolicyInterval, time.Second))
	defer tick.Stop()
	var term uint64          // the meta term the loop last saw this node lead
	var last, eval time.Time // a move last seen; the last evaluation
	lastWhy := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t := mr.h.MetaTerm()
		if t == 0 {
			term = 0
			continue
		}
		now := time.Now()
		if t != term {
			term, last = t, now // a new meta leader waits a cooldown
		}
		if now.Sub(eval) < mr.h.PolicyInterval {
			continue
		}
		eval = now
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		d, err := mr.policyStep(sctx, &last)
		cancel()
		why := d.Reason
		if err != nil {
			why = err.Error()
		}
		if d.Kind == "" && why != lastWhy && ctx.Err() == nil {
			if err != nil {
				mr.h.Log.Info("policy: waiting", "reason", why)
			} else {
				mr.h.Log.Debug("policy: no move", "reason", why)
			}
		}
		lastWhy = why
	}
}

// policyStep evaluates the policy once and plans its move, if any. last
// is when a move was last seen (updated here).
func (mr *Mover) policyStep(ctx context.Context, last *time.Time) (placement.Decision, error) {
	st, err := mr.h.Read(ctx)
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
	in := placement.PolicyInput{Policy: *st.Policy, ActiveNodes: st.ActiveMembers(), Now: now, LastMove: *last, Cooldown: mr.h.PolicyCooldown}
	if d := placement.DecideShards(in); d.Kind == "" && now.Before(last.Add(mr.h.PolicyCooldown)) {
		return d, nil // the cooldown: no need to ask the shards
	}
	stats, err := mr.shardStats(ctx, st)
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
	err = mr.h.Update(ctx, func(s *placement.State) error {
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
	mr.Kick()
	mr.h.Log.Info("policy: move planned", "move", m.ID, "kind", m.Kind, "source", uint32(m.Source), "target", uint32(m.Target),
		"slots", m.Slots.String(), "reason", d.Reason)
	return d, nil
}

// shardStats observes every shard that owns slots: its slots, and its
// confirmed leader's disk space and load. An error names a shard without
// a leader (the policy waits).
func (mr *Mover) shardStats(ctx context.Context, st *placement.State) ([]placement.ShardStats, error) {
	smap, err := st.Map()
	if err != nil {
		return nil, err
	}
	ids := smap.Shards()
	out := make([]placement.ShardStats, len(ids))
	errs := make([]error, len(ids))
	groups := make([]placement.Group, len(ids))
	for i, id := range ids {
		p := st.Placement(id)
		if p == nil {
			return nil, fmt.Errorf("shard %d has no placement", id)
		}
		groups[i] = placement.Group{Shard: id, Voters: p.Voters, Learners: p.Learners}
	}
	stat := func(i int, l *rpc.ReplicaStatusResponse) {
		if l == nil {
			errs[i] = fmt.Errorf("shard %d has no confirmed leader", ids[i])
			return
		}
		out[i] = placement.ShardStats{Shard: ids[i], Slots: st.SlotsOf(ids[i]).Len(), Bytes: l.DiskBytes, Load: l.Load}
	}
	var wg sync.WaitGroup
	if mr.h.Leaders != nil {
		for i, l := range mr.h.Leaders(ctx, groups) {
			stat(i, l)
		}
	} else {
		for i, g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stat(i, mr.h.Leader(ctx, g))
			}()
		}
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
func (mr *Mover) ShardPolicy(ctx context.Context) (p placement.ShardPolicy, ok bool, err error) {
	st, err := mr.h.Committed(ctx)
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
func (mr *Mover) SetShardPolicy(ctx context.Context, patch placement.PolicyPatch) (placement.ShardPolicy, error) {
	var out placement.ShardPolicy
	err := mr.h.OnMetaLeader(ctx, func() error {
		err := mr.h.Update(ctx, func(s *placement.State) error {
			cur, _ := placement.PolicyOf(s)
			next := patch.Apply(cur)
			if err := next.Validate(); err != nil {
				return fmt.Errorf("%w: %v", errInvalidArgument, err)
			}
			out = next
			if s.Policy != nil && *s.Policy == next {
				return errNoChange
			}
			s.Policy = &next
			return nil
		})
		if err == nil {
			mr.h.Log.Info("policy: changed", "auto", out.Auto, "nodes_per_shard", out.NodesPerShard,
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

// PolicyAdmin reads the policy, or changes it (on the meta leader) if the
// request carries a patch (Admin.ShardPolicy).
func (mr *Mover) PolicyAdmin(ctx context.Context, req *rpc.ShardPolicyRequest) (*rpc.ShardPolicyResponse, error) {
	patch, err := placement.DecodePolicyPatch(req.PatchJson)
	if err != nil {
		return nil, mr.h.Status(fmt.Errorf("%w: %v", errInvalidArgument, err), 0, nil)
	}
	var p placement.ShardPolicy
	if patch.IsEmpty() {
		p, _, err = mr.ShardPolicy(ctx)
	} else {
		p, err = mr.SetShardPolicy(ctx, patch)
	}
	if err != nil {
		return nil, mr.h.Status(err, 0, nil)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, mr.h.Status(err, 0, nil)
	}
	return &rpc.ShardPolicyResponse{PolicyJson: b}, nil
}
