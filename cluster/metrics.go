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
	replicas := make([]*replica.Replica, 0, len(n.mu.replicas)+1)
	for _, r := range n.mu.replicas {
		replicas = append(replicas, r)
	}
	if n.mu.meta != nil {
		replicas = append(replicas, n.mu.meta)
	}
	n.mu.RUnlock()
	var sc metrics.Scrape
	for _, r := range replicas {
		s := strconv.FormatUint(uint64(r.ID()), 10)
		if r.ID() == metaShardID {
			s = "meta"
		}
		sc.Replicas = append(sc.Replicas, metrics.ReadReplica(r, s))
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
	return sc
}
