package reconcile

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/rpc"
)

// changingAdmin is fakeAdmin that also records ChangeReplica calls.
type changingAdmin struct {
	fakeAdmin
	changes *[]string
}

func (a changingAdmin) ChangeReplica(ctx context.Context, req *rpc.ChangeReplicaRequest, _ ...grpc.CallOption) (*rpc.ChangeReplicaResponse, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	*a.changes = append(*a.changes, a.node+":"+req.Change.String()+":"+req.NodeId)
	return &rpc.ChangeReplicaResponse{}, nil
}

// TestPromotionAsksAgain: a non-voter the round saw caught up, whose node
// died since (its zone was lost), is not promoted: as a voter it would
// leave the group with two dead voters of four and no quorum until it came
// back (the zones jepsen run, seed 45, stopped a shard for the whole
// minute of a zone's loss that way). Before, the promotion trusted the
// round's statuses.
func TestPromotionAsksAgain(t *testing.T) {
	ctx := context.Background()
	st := &placement.State{ReplicationFactor: 3, Shards: []placement.Placement{
		{Shard: 1, Voters: []string{"n1", "n4", "n5"}, Learners: []string{"n2"}},
	}}
	alive := map[string]bool{}
	for _, id := range []string{"n1", "n2", "n4", "n5"} {
		st.Nodes = append(st.Nodes, placement.NodeAddrs{ID: id, Status: placement.StatusActive})
		alive[id] = true
	}
	lv := placement.NewLiveness(st, alive, map[string]time.Duration{}, time.Minute)
	g := placement.Group{Shard: 1, Voters: []string{"n1", "n4", "n5"}, Learners: []string{"n2"}}
	cfg := append(voters("n1", "n4", "n5"), &rpc.RaftServer{Id: "n2", Suffrage: "nonvoter"})
	leader := status("n5", "Leader", "n5", 3, cfg...)
	leader.CommitIndex, leader.AppliedIndex = 100, 100
	f := &fakeNodes{status: map[string]*rpc.ReplicaStatusResponse{
		"n5": leader, "n4": status("n4", "Follower", "n5", 3), "n1": status("n1", "Follower", "n5", 3),
		"n2": status("n2", "Follower", "n5", 3),
	}}
	for _, s := range f.status {
		s.AppliedIndex, s.CommitIndex = 100, 100
	}
	rc := newFake(f, nil)
	var changes []string
	rc.h.Admin = func(id string) (rpc.AdminClient, error) {
		return changingAdmin{fakeAdmin: fakeAdmin{node: id, f: f}, changes: &changes}, nil
	}
	rc.h.Update = func(context.Context, func(*placement.State) error) error { return nil }
	rc.h.Read = func(context.Context) (*placement.State, error) { return st, nil }

	obs := rc.Observe(ctx, g)
	a := placement.Step(g, obs.decide(), lv)
	if a.Kind != placement.ActPromote || a.Target != "n2" {
		t.Fatalf("the round decided %v %s (%s), want promote n2", a.Kind, a.Target, a.Reason)
	}
	// n2's zone is lost between the round's statuses and the promotion.
	f.mu.Lock()
	f.status["n2"], f.status["n1"] = nil, nil
	f.mu.Unlock()
	did, err := rc.act(ctx, a, obs, lv)
	if err != nil || did {
		t.Fatalf("act: did %v, err %v; want nothing done", did, err)
	}
	if len(changes) != 0 {
		t.Fatalf("configuration changes %v after n2 died: want none", changes)
	}

	// Alive, it is promoted.
	f.mu.Lock()
	f.status["n2"], f.status["n1"] = status("n2", "Follower", "n5", 3), status("n1", "Follower", "n5", 3)
	f.status["n2"].AppliedIndex, f.status["n1"].AppliedIndex = 100, 100
	f.mu.Unlock()
	obs = rc.Observe(ctx, g)
	a = placement.Step(g, obs.decide(), lv)
	// The promotion makes n2 a voter: the leader now reports it so.
	after := voters("n1", "n2", "n4", "n5")
	promoted := status("n5", "Leader", "n5", 3, after...)
	promoted.CommitIndex, promoted.AppliedIndex = 101, 101
	rc.h.Read = func(context.Context) (*placement.State, error) {
		f.mu.Lock()
		f.status["n5"] = promoted
		f.mu.Unlock()
		return &placement.State{ReplicationFactor: 3, Nodes: st.Nodes, Shards: []placement.Placement{
			{Shard: 1, Voters: []string{"n1", "n2", "n4", "n5"}}}}, nil
	}
	did, err = rc.act(ctx, a, obs, lv)
	if err != nil || !did {
		t.Fatalf("act: did %v, err %v; want the promotion", did, err)
	}
	if len(changes) == 0 || changes[0] != "n5:REPLICA_CHANGE_ADD_VOTER:n2" {
		t.Fatalf("configuration changes %v: want n2 promoted", changes)
	}
}
