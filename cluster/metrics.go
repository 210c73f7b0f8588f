package cluster

import (
	"net/http"
	"strconv"

	"github.com/swarmkv/swarmkv/cluster/metrics"
	"github.com/swarmkv/swarmkv/cluster/replica"
)

// MetricsHandler serves the node's Prometheus metrics (package admin's
// GET /metrics).
func (n *Node) MetricsHandler() http.Handler { return n.metrics.Handler() }

// scrape is the node's metrics.Source: the state package cluster/metrics
// exports at scrape time.
func (n *Node) scrape() metrics.Scrape {
	n.mu.RLock()
	st := n.mu.state
	n.mu.RUnlock()
	sc := metrics.Scrape{Replicas: n.scrapeReplicas()}
	if st != nil {
		sc.HasState, sc.Members, sc.Shards = true, map[string]int{}, len(st.Shards)
		sc.NotZoneSafe, sc.NotHostSafe = st.Safety()
		for _, m := range st.Nodes {
			sc.Members[st.Status(m.ID)]++
		}
	}
	if n.cache != nil {
		cm := n.cache.Metrics()
		sc.Cache = &cm
	}
	if ls := n.cfg.logStore; ls != nil {
		if st, err := ls.FsyncStats(); err == nil { // ErrClosed while the node closes
			sc.WALFsync = &st
		}
	}
	sc.Alive, sc.Dead = n.members.Count()
	sc.Ready = n.Ready() == nil
	sc.ProtocolVersion = n.ActiveVersion()
	if n.mux != nil {
		ms := n.mux.Stats()
		sc.RaftConns = []metrics.RaftConns{
			{Header: "plain", Result: "dialed", N: ms.DialedPlain},
			{Header: "incarnation", Result: "dialed", N: ms.DialedIncarnation},
			{Header: "plain", Result: "accepted", N: ms.AcceptedPlain},
			{Header: "incarnation", Result: "accepted", N: ms.AcceptedIncarnation},
			{Header: "plain", Result: "refused", N: ms.RefusedPlain},
			{Header: "incarnation", Result: "refused", N: ms.RefusedWithIncarnation},
			{Header: "other_incarnation", Result: "refused", N: ms.RefusedIncarnation},
		}
	}
	return sc
}

// scrapeReplicas reads the state of every local replica, the meta
// group's included (its label "meta"), outside the node's lock.
func (n *Node) scrapeReplicas() []metrics.Replica {
	n.mu.RLock()
	replicas := make([]*replica.Replica, 0, len(n.mu.replicas)+1)
	for _, r := range n.mu.replicas {
		replicas = append(replicas, r)
	}
	if n.mu.meta != nil {
		replicas = append(replicas, n.mu.meta)
	}
	n.mu.RUnlock()
	out := make([]metrics.Replica, 0, len(replicas))
	for _, r := range replicas {
		s := strconv.FormatUint(uint64(r.ID()), 10)
		if r.ID() == metaShardID {
			s = "meta"
		}
		out = append(out, metrics.ReadReplica(r, s))
	}
	return out
}
