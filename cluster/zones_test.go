package cluster

import (
	"fmt"
	"testing"
	"time"
)

// TestZonesLabelledUnderLoad (issue 41 item 5): a cluster of nodes
// without zone labels places and reports as before labels (every node its
// own zone: every group zone-safe); labelling it node by node under load
// (each restarted with --zone) moves the replicas one at a time until every
// group has its voters in distinct zones, and no acknowledged write is
// lost.
func TestZonesLabelledUnderLoad(t *testing.T) {
	tc := newTestCluster(t, 4, 2, fastMembership)
	c := tc.client()
	ctx := ctxT(t, 150*time.Second)
	waitFor(t, 30*time.Second, "settled", func() error { _, err := settled(ctx, tc.nodes[0], 3, 3); return err })
	st, err := tc.nodes[0].Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Shards {
		if !s.ZoneSafe {
			t.Fatalf("unlabelled: group %s with voters %v not zone-safe", s.Shard, s.Voters)
		}
	}
	for _, m := range st.Members {
		if m.Zone != "" {
			t.Fatalf("unlabelled: member %s has zone %q", m.ID, m.Zone)
		}
	}
	// The initial placement puts every group on n1 n2 n3; n1 and n2 end
	// in one zone, so each group must move a replica to n4.
	load := startWrites(t, c, 4)
	for i, zone := range []string{"a", "a", "b", "c"} {
		tc.stop(i)
		tc.cfgs[i].Zone = zone
		tc.start(i)
		tc.waitReady()
	}
	waitFor(t, 90*time.Second, "every group zone-safe", func() error {
		st, err := settled(ctx, tc.nodes[3], 3, 3)
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if want := map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "c"}[m.ID]; m.Zone != want {
				return fmt.Errorf("member %s: zone %q, want %q", m.ID, m.Zone, want)
			}
		}
		for _, s := range st.Shards {
			if !s.ZoneSafe {
				return fmt.Errorf("group %s: voters %v not zone-safe", s.Shard, s.Voters)
			}
		}
		return nil
	})
	load.finish(t, c)
}
