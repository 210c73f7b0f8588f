package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// fakeAdmin answers ReplicaStatus with a node's canned status and records
// TransferLeader calls; any other call panics (the embedded nil).
type fakeAdmin struct {
	rpc.AdminClient
	node string
	f    *fakeNodes
}

type fakeNodes struct {
	mu        sync.Mutex
	status    map[string]*rpc.ReplicaStatusResponse // by node id; nil: unreachable
	asked     map[string]int
	batches   map[string]int  // ReplicaStatuses calls, by node id
	old       map[string]bool // nodes without ReplicaStatuses (Unimplemented)
	transfers []string        // "leader->to"
}

// ReplicaStatuses answers every group with the node's canned status.
func (a fakeAdmin) ReplicaStatuses(ctx context.Context, req *rpc.ReplicaStatusesRequest, _ ...grpc.CallOption) (*rpc.ReplicaStatusesResponse, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if a.f.old[a.node] {
		return nil, grpcstatus.Error(codes.Unimplemented, "unknown method ReplicaStatuses")
	}
	a.f.batches[a.node]++
	st := a.f.status[a.node]
	if st == nil {
		return nil, errors.New("unreachable")
	}
	out := &rpc.ReplicaStatusesResponse{}
	for range req.Groups {
		out.Statuses = append(out.Statuses, st)
	}
	return out, nil
}

func (a fakeAdmin) ReplicaStatus(ctx context.Context, req *rpc.ReplicaStatusRequest, _ ...grpc.CallOption) (*rpc.ReplicaStatusResponse, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	a.f.asked[a.node]++
	st := a.f.status[a.node]
	if st == nil {
		return nil, errors.New("unreachable")
	}
	return st, nil
}

func (a fakeAdmin) TransferLeader(ctx context.Context, req *rpc.TransferLeaderRequest, _ ...grpc.CallOption) (*rpc.TransferLeaderResponse, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	a.f.transfers = append(a.f.transfers, a.node+"->"+req.ToNode)
	return &rpc.TransferLeaderResponse{}, nil
}

// newFake returns a Reconciler of node "me" (which holds no replica) whose
// peers answer from f.
func newFake(f *fakeNodes, members map[string]gossip.Member) *Reconciler {
	f.asked, f.batches = map[string]int{}, map[string]int{}
	return New(Host{
		ID: "me", Log: slog.New(slog.DiscardHandler), Interval: time.Hour, DeadNodeTimeout: time.Minute, LeaderBalanceInterval: time.Hour,
		Leading: func() bool { return false },
		Members: func() map[string]gossip.Member { return members },
		Replica: func(bool, shard.ID) *replica.Replica { return nil },
		Admin:   func(id string) (rpc.AdminClient, error) { return fakeAdmin{node: id, f: f}, nil },
		RaftAddr: func(id string) (string, bool) {
			return id + ":7101", true
		},
	})
}

func voters(ids ...string) []*rpc.RaftServer {
	var out []*rpc.RaftServer
	for _, id := range ids {
		out = append(out, &rpc.RaftServer{Id: id, Suffrage: "voter"})
	}
	return out
}

func status(node, state, leader string, term uint64, servers ...*rpc.RaftServer) *rpc.ReplicaStatusResponse {
	return &rpc.ReplicaStatusResponse{Present: true, NodeId: node, State: state, LeaderId: leader, Term: term, Servers: servers}
}

// TestObserveTrustsConfirmedLeaderOnly: the leader is the replica a
// majority of its configuration's voters confirm (same leader, same
// term); a deposed leader that still says so is not trusted.
func TestObserveTrustsConfirmedLeaderOnly(t *testing.T) {
	g := placement.Group{Shard: 3, Voters: []string{"a", "b", "c"}}
	cfg := voters("a", "b", "c")
	for _, c := range []struct {
		name   string
		status map[string]*rpc.ReplicaStatusResponse
		want   string // "": no leader
	}{
		{"confirmed", map[string]*rpc.ReplicaStatusResponse{
			"a": status("a", "Leader", "a", 2, cfg...), "b": status("b", "Follower", "a", 2), "c": status("c", "Follower", "a", 2),
		}, "a"},
		{"deposed leader of an older term", map[string]*rpc.ReplicaStatusResponse{
			"a": status("a", "Leader", "a", 1, cfg...), "b": status("b", "Leader", "b", 2, cfg...), "c": status("c", "Follower", "b", 2),
		}, "b"},
		{"unconfirmed", map[string]*rpc.ReplicaStatusResponse{
			"a": status("a", "Leader", "a", 2, cfg...), "b": status("b", "Follower", "", 3), "c": status("c", "Candidate", "", 3),
		}, ""},
		{"one voter of three agrees, the others unreachable", map[string]*rpc.ReplicaStatusResponse{
			"a": status("a", "Leader", "a", 2, cfg...),
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := newFake(&fakeNodes{status: c.status}, nil)
			obs := rc.Observe(context.Background(), g)
			got := ""
			if obs.Leader != nil {
				got = obs.Leader.NodeId
			}
			if got != c.want {
				t.Fatalf("leader %q, want %q", got, c.want)
			}
			if len(obs.Replicas) != len(c.status) {
				t.Fatalf("replicas %v, want the %d that answered", obs.Replicas, len(c.status))
			}
		})
	}
}

// TestObserveAsksServersThePlacementLacks: a server of the leader's
// configuration that the placement does not name is asked too.
func TestObserveAsksServersThePlacementLacks(t *testing.T) {
	g := placement.Group{Shard: 1, Voters: []string{"a", "b", "c"}}
	cfg := append(voters("a", "b", "c"), &rpc.RaftServer{Id: "d", Suffrage: "nonvoter"})
	f := &fakeNodes{status: map[string]*rpc.ReplicaStatusResponse{
		"a": status("a", "Leader", "a", 5, cfg...), "b": status("b", "Follower", "a", 5), "c": status("c", "Follower", "a", 5),
		"d": status("d", "Follower", "a", 5),
	}}
	obs := newFake(f, nil).Observe(context.Background(), g)
	if obs.Leader == nil || obs.Leader.NodeId != "a" {
		t.Fatalf("leader %v, want a", obs.Leader)
	}
	if obs.Replicas["d"] == nil || f.asked["d"] != 1 {
		t.Fatalf("d not observed once (asked %d times): %v", f.asked["d"], obs.Replicas)
	}
	d := obs.decide()
	if len(d.Voters) != 3 || len(d.NonVoters) != 1 || d.NonVoters[0] != "d" {
		t.Fatalf("decided configuration voters %v nonvoters %v", d.Voters, d.NonVoters)
	}
}

// TestLivenessRemembersDown: a member gossip reports dead is down since
// gossip first saw it down, this node is always up, a member back with
// another incarnation is down, and one seen alive again is forgotten.
func TestLivenessRemembersDown(t *testing.T) {
	st := &placement.State{Nodes: []placement.NodeAddrs{
		{ID: "me", Incarnation: "i0"}, {ID: "x", Incarnation: "i1"}, {ID: "y", Incarnation: "i2"},
	}}
	members := map[string]gossip.Member{
		"x": {Meta: gossip.Meta{ID: "x", Inc: "i1"}, Alive: false, Since: time.Now().Add(-10 * time.Minute)},
		"y": {Meta: gossip.Meta{ID: "y", Inc: "other"}, Alive: true, Since: time.Now()},
	}
	rc := newFake(&fakeNodes{}, members)
	lv := rc.liveness(st)
	if !lv.Alive["me"] || lv.Alive["x"] || lv.Alive["y"] {
		t.Fatalf("alive %v, want only me", lv.Alive)
	}
	if lv.DownFor["x"] < 10*time.Minute || lv.DownFor["y"] > time.Minute {
		t.Fatalf("down for %v, want x >= 10m (gossip's Since), y just now", lv.DownFor)
	}
	members["y"] = gossip.Member{Meta: gossip.Meta{ID: "y", Inc: "i2"}, Alive: true}
	lv = rc.liveness(st)
	if !lv.Alive["y"] || rc.downSince["y"] != (time.Time{}) || rc.downSince["x"].IsZero() {
		t.Fatalf("alive %v, memory %v: y back and forgotten, x remembered", lv.Alive, rc.downSince)
	}
	rc.reset()
	if rc.downSince != nil {
		t.Fatalf("reset kept %v", rc.downSince)
	}
}

// TestLeaderMoveDue: the first call of a leadership starts the interval,
// a move is due only once it has passed, and a move restarts it.
func TestLeaderMoveDue(t *testing.T) {
	rc := newFake(&fakeNodes{}, nil)
	if rc.leaderMoveDue(time.Hour) {
		t.Fatal("due at once after becoming leader")
	}
	if !rc.leaderMoveDue(0) {
		t.Fatal("not due after the interval")
	}
	if rc.leaderMoveDue(time.Hour) {
		t.Fatal("due again right after a move")
	}
}

// TestTransferAsksTheLeader: Transfer goes to the observed leader's node.
func TestTransferAsksTheLeader(t *testing.T) {
	f := &fakeNodes{}
	rc := newFake(f, nil)
	obs := Observation{Leader: status("b", "Leader", "b", 1)}
	if err := rc.Transfer(context.Background(), placement.Group{Shard: 2}, obs, "c"); err != nil {
		t.Fatal(err)
	}
	if len(f.transfers) != 1 || f.transfers[0] != "b->c" {
		t.Fatalf("transfers %v, want b->c", f.transfers)
	}
	// Led locally with no local replica: not the leader.
	obs.Leader = status("me", "Leader", "me", 1)
	if err := rc.Transfer(context.Background(), placement.Group{Shard: 2}, obs, "c"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("err %v, want ErrNotLeader", err)
	}
}

// TestRoundAsksEachNodeOnce: a round's statuses ask each node about all
// of its replicas in one call (it asked per group: two calls per group a
// second on the meta leader of a 3-node cluster), and a node that does
// not know the call is asked per group, as before; every group is
// observed as the per-group calls observe it.
func TestRoundAsksEachNodeOnce(t *testing.T) {
	cfg := voters("a", "b", "c")
	f := &fakeNodes{
		status: map[string]*rpc.ReplicaStatusResponse{
			"a": status("a", "Leader", "a", 2, cfg...), "b": status("b", "Follower", "a", 2), "c": status("c", "Follower", "a", 2),
		},
		old: map[string]bool{"c": true},
	}
	rc := newFake(f, nil)
	var groups []placement.Group
	for i := range 64 {
		groups = append(groups, placement.Group{Shard: shard.ID(i + 1), Voters: []string{"a", "b", "c"}})
	}
	ctx := context.Background()
	snap := rc.fetchStatuses(ctx, groups)
	for _, g := range groups {
		obs := rc.observe(ctx, g, snap)
		if obs.Leader == nil || obs.Leader.NodeId != "a" || len(obs.Replicas) != 3 {
			t.Fatalf("%s: leader %v, replicas %d; want a of 3", g, obs.Leader, len(obs.Replicas))
		}
	}
	if f.batches["a"] != 1 || f.batches["b"] != 1 || f.asked["a"] != 0 || f.asked["b"] != 0 {
		t.Fatalf("a and b asked %v in batches and %v per group; want once, in one batch each", f.batches, f.asked)
	}
	if f.asked["c"] != len(groups) {
		t.Fatalf("c (no batch call) asked %d times per group, want %d", f.asked["c"], len(groups))
	}
	// A stale round's statuses are not used.
	snap.at = time.Now().Add(-2 * time.Hour)
	if !snap.stale(time.Hour) || (*statuses)(nil).stale(time.Hour) {
		t.Fatal("stale")
	}
}

// TestLeadersAsksEachNodeOnce: the shard policy's Leaders finds each
// group's confirmed leader with one call to each node.
func TestLeadersAsksEachNodeOnce(t *testing.T) {
	cfg := voters("a", "b", "c")
	f := &fakeNodes{status: map[string]*rpc.ReplicaStatusResponse{
		"a": status("a", "Leader", "a", 2, cfg...), "b": status("b", "Follower", "a", 2), "c": status("c", "Follower", "a", 2),
	}}
	rc := newFake(f, nil)
	var groups []placement.Group
	for i := range 8 {
		groups = append(groups, placement.Group{Shard: shard.ID(i + 1), Voters: []string{"a", "b", "c"}})
	}
	ls := rc.Leaders(context.Background(), groups)
	if len(ls) != len(groups) {
		t.Fatalf("%d leaders for %d groups", len(ls), len(groups))
	}
	for i, l := range ls {
		if l == nil || l.NodeId != "a" {
			t.Fatalf("group %d: leader %v, want a", i, l)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if f.batches[id] != 1 || f.asked[id] != 0 {
			t.Fatalf("%s asked in %d batches and %d times per group, want one batch", id, f.batches[id], f.asked[id])
		}
	}
}
