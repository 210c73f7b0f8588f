package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/freeport"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
)

// oneNode starts a one-node, one-shard cluster with this package's
// services and returns it once ready, with the server its handlers run on
// (called directly here, without gRPC or its auth interceptors).
func oneNode(t *testing.T) (*cluster.Node, *server) {
	t.Helper()
	addr := func() string {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cfg := cluster.Config{ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), BootstrapExpect: 1, Shards: 1,
		RaftAddr: addr(), GRPCAddr: addr(), GossipAddr: addr(), GossipProfile: "local",
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, err := cluster.New(cfg, func(n *cluster.Node) cluster.Services { return Services(n) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for n.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", n.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n, &server{node: n, cfg: n.Config()}
}

// retryWrite calls write until it succeeds, for the first writes of a
// new leader (which answers Unavailable until it committed an entry of its
// term).
func retryWrite(t *testing.T, write func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := write()
		if err == nil {
			return
		}
		if status.Code(err) == codes.InvalidArgument || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListByStatusOneState: a shard's listing of agents by status reads
// the status index and then each agent's record; while writers move
// agents between two statuses, every agent it answers has the status it
// listed (the index and the records come from one state). On a path that
// reads the records from the live state after the index (before
// fsm.FSM.Read), a listing answers an agent whose record already has the
// other status within a few hundred listings.
func TestListByStatusOneState(t *testing.T) {
	_, srv := oneNode(t)
	reg := &registryServer{server: srv}
	ctx := context.Background()
	const agents = 64
	user := make([]byte, len(keys.UserID{}))
	user[0] = 7
	ids := make([][]byte, agents)
	for i := range ids {
		ids[i] = make([]byte, len(keys.AgentID{}))
		ids[i][0], ids[i][31] = 1, byte(i)
		a := &rpc.Agent{AgentId: ids[i], UserId: user, Name: fmt.Sprintf("a%d", i), Status: uint32(records.AgentRunning), CreatedAt: 1, UpdatedAt: 1}
		retryWrite(t, func() error { _, err := reg.PutAgent(ctx, &rpc.PutAgentRequest{Agent: a}); return err })
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := records.AgentRunning
				if rng.IntN(2) == 0 {
					st = records.AgentStopped
				}
				_, _ = reg.UpdateAgentStatus(ctx, &rpc.UpdateAgentStatusRequest{UserId: user, AgentId: ids[rng.IntN(agents)], Status: uint32(st)})
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	deadline := time.Now().Add(5 * time.Second)
	listings, seen := 0, 0
	for ; listings < 2000 && time.Now().Before(deadline); listings++ {
		want := records.AgentRunning
		if listings%2 == 1 {
			want = records.AgentStopped
		}
		resp, err := reg.ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: 0, ByStatus: true, Status: uint32(want),
			Consistency: rpc.Consistency_CONSISTENCY_STALE})
		if err != nil {
			t.Fatalf("listing %d: %v", listings, err)
		}
		for _, a := range resp.GetAgents() {
			seen++
			if got := records.AgentState(a.GetStatus()); got != want {
				t.Fatalf("listing %d of status %v answered agent %x with status %v: torn between the index and the records",
					listings, want, a.GetAgentId(), got)
			}
		}
	}
	if seen == 0 {
		t.Fatalf("%d listings saw no agent", listings)
	}
	t.Logf("%d listings, %d agents, none torn", listings, seen)
}
