package reconcile

import (
	"context"
	"slices"

	"github.com/swarmkv/swarmkv/cluster/placement"
)

// recordLabels records in the cluster state the zone and host labels the
// members announce in gossip (cluster/placement, zones.go), and returns the
// state as committed. A member's labels are recorded when the state has
// no zone for it (a new member, one upgraded from a binary without labels,
// or one that ran with its hostname as its only label) or when it holds no
// replica and no meta seat (drained); a member with a recorded zone that
// holds replicas and announces other labels keeps the recorded ones, and the change is logged once: a node changes
// zone by being drained first (docs/operations.md, "Failure domains"), so
// replicas never move because of a typo in a restart.
func (rc *Reconciler) recordLabels(ctx context.Context, st *placement.State) (*placement.State, error) {
	gossiped := rc.h.Members()
	type labels struct{ zone, host string }
	want := map[string]labels{}
	for _, m := range st.Nodes {
		g, ok := gossiped[m.ID]
		if !ok || !g.Alive || g.Meta.Inc != m.Incarnation || st.Status(m.ID) == placement.StatusRemoved {
			continue
		}
		l := labels{g.Meta.Zone, g.Meta.Host}
		if l == (labels{m.Zone, m.Host}) {
			rc.forgetRelabel(m.ID)
			continue
		}
		drained := st.ReplicaCount(m.ID) == 0 && !slices.Contains(st.MetaVoters, m.ID) && !slices.Contains(st.MetaLearners, m.ID)
		if m.Zone == "" || drained {
			want[m.ID] = l
			continue
		}
		if rc.noteRelabel(m.ID, l.zone+"/"+l.host) {
			rc.h.Log.Warn("node announces other labels than recorded; keeping the recorded ones until it is drained (docs/operations.md, Failure domains)",
				"member", m.ID, "zone", l.zone, "host", l.host, "recorded_zone", m.Zone, "recorded_host", m.Host)
		}
	}
	if len(want) == 0 {
		return st, nil
	}
	if err := rc.h.Update(ctx, func(s *placement.State) error {
		changed := false
		for id, l := range want {
			if placement.SetLabels(s, id, l.zone, l.host) == nil {
				changed = true
			}
		}
		if !changed {
			return errNoChange
		}
		return nil
	}); err != nil {
		return st, err
	}
	for id, l := range want {
		rc.h.Log.Info("node labels recorded", "member", id, "zone", l.zone, "host", l.host)
	}
	return rc.h.Read(ctx)
}

// noteRelabel records that node id announces labels l other than its
// recorded ones; it reports whether that is news (to log).
func (rc *Reconciler) noteRelabel(id, l string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.relabel == nil {
		rc.relabel = map[string]string{}
	}
	if rc.relabel[id] == l {
		return false
	}
	rc.relabel[id] = l
	return true
}

func (rc *Reconciler) forgetRelabel(id string) {
	rc.mu.Lock()
	delete(rc.relabel, id)
	rc.mu.Unlock()
}
