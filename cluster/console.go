package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/cluster/metrics"
	"github.com/swarmkv/swarmkv/rpc"
)

// The node's side of the console (package console, GET /v1/console): its
// counters (LocalStats), served to the other nodes by the Console gRPC
// service, and the fan-out that gathers every member's (NodeStats).

// consoleServer serves the Console service (nodes only: api's permission
// table).
type consoleServer struct {
	rpc.UnimplementedConsoleServer
	node *Node
}

func (s *consoleServer) NodeStats(ctx context.Context, _ *rpc.NodeStatsRequest) (*rpc.NodeStatsResponse, error) {
	return s.node.LocalStats(), nil
}

// LocalStats returns the node's counters: each local replica's
// cumulative commands, reads and leader changes and its apply lag, the
// node's latency histograms and its resident memory.
func (n *Node) LocalStats() *rpc.NodeStatsResponse {
	out := &rpc.NodeStatsResponse{NodeId: n.cfg.ID}
	for _, r := range n.scrapeReplicas() {
		out.Replicas = append(out.Replicas, &rpc.ReplicaCounters{
			Shard: r.Shard, Leader: r.State == raft.Leader,
			Commands: r.Stats.Commands, Reads: r.Stats.Reads, LeaderChanges: r.Stats.LeaderChanges,
			ApplyLag: max(r.Commit, r.Applied) - r.Applied,
		})
	}
	t := n.metrics.Totals()
	out.Apply, out.Requests, out.RssBytes = histogramPB(t.Apply), histogramPB(t.Requests), t.RSS
	return out
}

func histogramPB(h metrics.Histogram) *rpc.Histogram {
	return &rpc.Histogram{Bounds: h.Bounds, Counts: h.Counts, Count: h.Count}
}

// NodeStatsResult is one node's answer to NodeStats.
type NodeStatsResult struct {
	Node  string
	Stats *rpc.NodeStatsResponse // nil when Err is set
	Err   error
}

// nodeStatsTimeout bounds each node's answer: a node down or partitioned
// costs the console a second, not a stalled page.
const nodeStatsTimeout = time.Second

// NodeStats gathers the counters of the nodes ids (this node's without a
// call), in parallel, each bounded by a second; the answers are in the
// order of ids.
func (n *Node) NodeStats(ctx context.Context, ids []string) []NodeStatsResult {
	out := make([]NodeStatsResult, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		out[i].Node = id
		if id == n.cfg.ID {
			out[i].Stats = n.LocalStats()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, ok := n.nodeAddrs(id)
			if !ok || a.GRPCAddr == "" {
				out[i].Err = fmt.Errorf("cluster: no address known for node %s", id)
				return
			}
			conn, err := n.peers.Conn(a.GRPCAddr)
			if err != nil {
				out[i].Err = err
				return
			}
			cctx, cancel := context.WithTimeout(ctx, nodeStatsTimeout)
			defer cancel()
			out[i].Stats, out[i].Err = rpc.NewConsoleClient(conn).NodeStats(cctx, &rpc.NodeStatsRequest{})
		}()
	}
	wg.Wait()
	return out
}
