package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// statuses are a round's answers of the other nodes about their replicas,
// each node asked once (ReplicaStatuses) for every group the placement
// gives it. A nil *statuses holds nothing.
type statuses struct {
	at time.Time
	// by is node id -> group -> status; a node is absent when its call
	// failed (a node of an older version, or down): it is asked per group.
	by map[string]map[groupKey]*rpc.ReplicaStatusResponse
}

type groupKey struct {
	meta  bool
	shard shard.ID
}

func keyOf(g placement.Group) groupKey { return groupKey{meta: g.Meta, shard: g.Shard} }

// get returns node id's status of g; ok is false when s does not hold it.
func (s *statuses) get(id string, g placement.Group) (st *rpc.ReplicaStatusResponse, ok bool) {
	if s == nil {
		return nil, false
	}
	m, ok := s.by[id]
	if !ok {
		return nil, false
	}
	st, ok = m[keyOf(g)]
	return st, ok
}

// stale reports whether s is older than maxAge (a slow round): its
// answers are not used then.
func (s *statuses) stale(maxAge time.Duration) bool {
	return s != nil && time.Since(s.at) > maxAge
}

// fetchStatuses asks every other holder of groups, in parallel, about all
// of its replicas of them in one call each.
func (rc *Reconciler) fetchStatuses(ctx context.Context, groups []placement.Group) *statuses {
	asks := map[string][]placement.Group{}
	for _, g := range groups {
		for _, id := range g.Holders() {
			if id != rc.h.ID {
				asks[id] = append(asks[id], g)
			}
		}
	}
	s := &statuses{at: time.Now(), by: make(map[string]map[groupKey]*rpc.ReplicaStatusResponse, len(asks))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, gs := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := rc.nodeStatuses(ctx, id, gs)
			if m == nil {
				return
			}
			mu.Lock()
			s.by[id] = m
			mu.Unlock()
		}()
	}
	wg.Wait()
	return s
}

// nodeStatuses returns node id's statuses of its replicas of gs, or nil
// when the call fails.
func (rc *Reconciler) nodeStatuses(ctx context.Context, id string, gs []placement.Group) map[groupKey]*rpc.ReplicaStatusResponse {
	c, err := rc.h.Admin(id)
	if err != nil {
		return nil
	}
	req := &rpc.ReplicaStatusesRequest{Groups: make([]*rpc.ReplicaStatusRequest, len(gs))}
	for i, g := range gs {
		req.Groups[i] = &rpc.ReplicaStatusRequest{Shard: uint32(g.Shard), Meta: g.Meta}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.ReplicaStatuses(cctx, req)
	if err != nil || len(resp.Statuses) != len(gs) {
		return nil
	}
	m := make(map[groupKey]*rpc.ReplicaStatusResponse, len(gs))
	for i, g := range gs {
		m[keyOf(g)] = resp.Statuses[i]
	}
	return m
}

// Leaders returns the status of each group's confirmed leader (nil: none),
// in the order of groups, as Observe finds it, asking each node about
// all its replicas of groups in one call (the shard policy's round).
func (rc *Reconciler) Leaders(ctx context.Context, groups []placement.Group) []*rpc.ReplicaStatusResponse {
	snap := rc.fetchStatuses(ctx, groups)
	out := make([]*rpc.ReplicaStatusResponse, len(groups))
	for i, g := range groups {
		out[i] = rc.observe(ctx, g, snap).Leader
	}
	return out
}
