package reconcile

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/cluster/placement"
)

// TestRecordLabels: the meta leader records the labels gossip announces
// for members without any and for drained members; a member that holds
// replicas keeps its recorded labels whatever it announces; nodes dead or
// of another incarnation are not read; nothing is committed when nothing
// changes.
func TestRecordLabels(t *testing.T) {
	st := &placement.State{ReplicationFactor: 3, MetaVoters: []string{"n1"},
		Shards: []placement.Placement{{Shard: 0, Voters: []string{"n1", "n2", "n7"}}},
		Nodes: []placement.NodeAddrs{
			{ID: "n1", Incarnation: "i1"},                         // unlabelled, holds replicas: recorded
			{ID: "n2", Incarnation: "i2", Zone: "z1", Host: "h1"}, // holds replicas, announces z9: kept
			{ID: "n3", Incarnation: "i3", Zone: "z1", Host: "h3"}, // drained, announces z2: recorded
			{ID: "n4", Incarnation: "i4"},                         // dead: not read
			{ID: "n5", Incarnation: "i5"},                         // another incarnation: not read
			{ID: "n6", Incarnation: "i6", Zone: "z3", Host: "h6"}, // as recorded
			{ID: "n7", Incarnation: "i7", Host: "h7"},             // its hostname only, now a zone: recorded
		}}
	meta := func(id, inc, zone, host string) gossip.Meta {
		return gossip.Meta{Version: 1, ID: id, Raft: "r", GRPC: "g", Inc: inc, Zone: zone, Host: host}
	}
	members := map[string]gossip.Member{
		"n1": {Meta: meta("n1", "i1", "z1", "h1"), Alive: true},
		"n2": {Meta: meta("n2", "i2", "z9", "h1"), Alive: true},
		"n3": {Meta: meta("n3", "i3", "z2", "h3"), Alive: true},
		"n4": {Meta: meta("n4", "i4", "z2", "h4"), Alive: false},
		"n5": {Meta: meta("n5", "other", "z2", "h5"), Alive: true},
		"n6": {Meta: meta("n6", "i6", "z3", "h6"), Alive: true},
		"n7": {Meta: meta("n7", "i7", "z1", "h7"), Alive: true},
	}
	var mu sync.Mutex
	commits := 0
	rc := New(Host{ID: "n1", Log: slog.New(slog.DiscardHandler),
		Members: func() map[string]gossip.Member { return members },
		Read: func(context.Context) (*placement.State, error) {
			mu.Lock()
			defer mu.Unlock()
			return st.Clone(), nil
		},
		Update: func(_ context.Context, fn func(*placement.State) error) error {
			mu.Lock()
			defer mu.Unlock()
			next := st.Clone()
			if err := fn(next); err != nil {
				if err == placement.ErrNoChange {
					return nil
				}
				return err
			}
			st = next
			commits++
			return nil
		},
	})
	got, err := rc.recordLabels(context.Background(), st.Clone())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, zone, host string }{
		{"n1", "z1", "h1"}, {"n2", "z1", "h1"}, {"n3", "z2", "h3"}, {"n4", "", ""}, {"n5", "", ""}, {"n6", "z3", "h6"}, {"n7", "z1", "h7"},
	} {
		m := got.Member(c.id)
		if m.Zone != c.zone || m.Host != c.host {
			t.Errorf("%s: zone %q host %q, want %q %q", c.id, m.Zone, m.Host, c.zone, c.host)
		}
	}
	if commits != 1 {
		t.Errorf("%d commits, want 1", commits)
	}
	if _, err := rc.recordLabels(context.Background(), got); err != nil || commits != 1 {
		t.Errorf("again: %v, %d commits, want still 1", err, commits)
	}
}
