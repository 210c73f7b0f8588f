package cluster

import (
	"net/http"
	"strconv"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/swarmkv/swarmkv/cluster/replica"
)

// metrics is a node's Prometheus registry (one per node, never global, so
// in-process clusters do not collide): gRPC request counts and latencies,
// apply latency per shard, and a collector that reads raft, Pebble and
// gossip state at scrape time.
type metrics struct {
	reg   *prometheus.Registry
	grpc  *grpcprom.ServerMetrics
	apply *prometheus.HistogramVec // seconds from raft.Apply to the FSM's result, by shard
	// Pipeline streams: messages and the calls or results they carried, by
	// direction ("calls" received, "results" sent).
	pipeMsgs, pipeItems *prometheus.CounterVec
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}))),
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "swarmkv", Name: "apply_duration_seconds",
			Help:    "Time from proposing a command to its state machine result, by shard.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"shard"}),
		pipeMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "swarmkv", Name: "pipeline_messages_total",
			Help: "Messages on Pipeline streams, by direction (calls received, results sent)."}, []string{"direction"}),
		pipeItems: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "swarmkv", Name: "pipeline_items_total",
			Help: "Calls received and results sent on Pipeline streams, by direction."}, []string{"direction"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc, m.apply, m.pipeMsgs, m.pipeItems, &nodeCollector{n: n},
	)
	return m
}

func (m *metrics) observeApply(shardID uint32, d time.Duration) {
	m.apply.WithLabelValues(strconv.FormatUint(uint64(shardID), 10)).Observe(d.Seconds())
}

// MetricsHandler serves the node's Prometheus metrics (package admin's
// GET /metrics).
func (n *Node) MetricsHandler() http.Handler { return n.metrics.handler() }

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

var (
	descRaftState = prometheus.NewDesc("swarmkv_raft_state",
		"Raft state of the local replica: 0 follower, 1 candidate, 2 leader, 3 shutdown.", []string{"shard"}, nil)
	descRaftTerm  = prometheus.NewDesc("swarmkv_raft_term", "Current Raft term of the local replica.", []string{"shard"}, nil)
	descCommit    = prometheus.NewDesc("swarmkv_raft_commit_index", "Commit index known to the local replica.", []string{"shard"}, nil)
	descApplied   = prometheus.NewDesc("swarmkv_fsm_applied_index", "Last log index applied by the state machine.", []string{"shard"}, nil)
	descApplyLag  = prometheus.NewDesc("swarmkv_fsm_apply_lag", "Commit index minus the state machine's applied index.", []string{"shard"}, nil)
	descLastIndex = prometheus.NewDesc("swarmkv_raft_last_index", "Last index in the replica's Raft log.", []string{"shard"}, nil)
	descContact   = prometheus.NewDesc("swarmkv_raft_last_contact_seconds", "Seconds since a follower last heard from its leader (0 on the leader).", []string{"shard"}, nil)
	descDisk      = prometheus.NewDesc("swarmkv_pebble_disk_bytes", "On-disk size of the replica's Pebble store.", []string{"shard"}, nil)
	descMemtable  = prometheus.NewDesc("swarmkv_pebble_memtable_bytes", "Memtable memory of the replica's Pebble store.", []string{"shard"}, nil)
	descL0        = prometheus.NewDesc("swarmkv_pebble_l0_files", "Files in Pebble's level 0.", []string{"shard"}, nil)
	descDebt      = prometheus.NewDesc("swarmkv_pebble_compaction_debt_bytes", "Estimated bytes Pebble's compactions still have to write.", []string{"shard"}, nil)
	descReadAmp   = prometheus.NewDesc("swarmkv_pebble_read_amplification", "Pebble read amplification.", []string{"shard"}, nil)
	descCacheHits = prometheus.NewDesc("swarmkv_pebble_block_cache_hits_total", "Hits of the node's Pebble block cache (shared by its replicas).", nil, nil)
	descCacheMiss = prometheus.NewDesc("swarmkv_pebble_block_cache_misses_total", "Misses of the node's Pebble block cache (shared by its replicas).", nil, nil)
	descCacheSize = prometheus.NewDesc("swarmkv_pebble_block_cache_bytes", "Bytes held by the node's Pebble block cache.", nil, nil)
	descWALFsync  = prometheus.NewDesc("swarmkv_raftlog_wal_fsync_seconds",
		"Latency of the Raft log store's WAL fsyncs, which every Raft append waits for (the node's shared log store; absent with --log-store bolt).", nil, nil)
	descPropEntries = prometheus.NewDesc("swarmkv_proposal_entries_total",
		"Raft entries the replica's proposal coalescer proposed as leader.", []string{"shard"}, nil)
	descPropCmds = prometheus.NewDesc("swarmkv_proposal_commands_total",
		"Commands those entries carried (over swarmkv_proposal_entries_total: commands per entry).", []string{"shard"}, nil)
	descReadRounds = prometheus.NewDesc("swarmkv_read_rounds_total",
		"Linearizable read rounds the replica ran as leader, by how leadership was confirmed: batched (the nodes' batched check) or verify_leader (Raft heartbeats).", []string{"shard", "check"}, nil)
	descReads = prometheus.NewDesc("swarmkv_read_round_reads_total",
		"Linearizable reads served by those rounds (over swarmkv_read_rounds_total: reads per round).", []string{"shard"}, nil)
	descMembers = prometheus.NewDesc("swarmkv_gossip_members", "Gossip members known to this node, by liveness.", []string{"state"}, nil)
	descReady   = prometheus.NewDesc("swarmkv_node_ready", "1 when every local shard has a leader.", nil, nil)
)

// nodeCollector reads the node's state at scrape time.
type nodeCollector struct{ n *Node }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descCommit, descApplied, descApplyLag, descLastIndex,
		descContact, descDisk, descMemtable, descL0, descDebt, descReadAmp, descCacheHits, descCacheMiss, descCacheSize,
		descWALFsync, descPropEntries, descPropCmds, descReadRounds, descReads, descMembers, descReady} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.RLock()
	replicas := make([]*replica.Replica, 0, len(n.mu.replicas))
	for _, r := range n.mu.replicas {
		replicas = append(replicas, r)
	}
	if n.mu.meta != nil {
		replicas = append(replicas, n.mu.meta)
	}
	n.mu.RUnlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range replicas {
		s := strconv.FormatUint(uint64(r.ID()), 10)
		if r.ID() == metaShardID {
			s = "meta"
		}
		rf, st := r.Raft(), r.Stats()
		state := rf.State()
		gauge(descRaftState, float64(state), s)
		gauge(descRaftTerm, float64(rf.CurrentTerm()), s)
		commit, applied := rf.CommitIndex(), r.FSM().AppliedIndex()
		gauge(descCommit, float64(commit), s)
		gauge(descApplied, float64(applied), s)
		gauge(descApplyLag, float64(max(commit, applied)-applied), s)
		gauge(descLastIndex, float64(rf.LastIndex()), s)
		contact := 0.0
		if state != raft.Leader {
			if lc := rf.LastContact(); !lc.IsZero() {
				contact = time.Since(lc).Seconds()
			}
		}
		gauge(descContact, contact, s)
		ch <- prometheus.MustNewConstMetric(descPropEntries, prometheus.CounterValue, float64(st.Entries), s)
		ch <- prometheus.MustNewConstMetric(descPropCmds, prometheus.CounterValue, float64(st.Commands), s)
		ch <- prometheus.MustNewConstMetric(descReadRounds, prometheus.CounterValue, float64(st.ReadsChecked), s, "batched")
		ch <- prometheus.MustNewConstMetric(descReadRounds, prometheus.CounterValue, float64(st.ReadsVerified), s, "verify_leader")
		ch <- prometheus.MustNewConstMetric(descReads, prometheus.CounterValue, float64(st.Reads), s)
		if m, ok := r.FSM().Metrics(); ok {
			gauge(descDisk, float64(m.DiskBytes), s)
			gauge(descMemtable, float64(m.MemTableBytes), s)
			gauge(descL0, float64(m.L0Files), s)
			gauge(descDebt, float64(m.CompactionDebt), s)
			gauge(descReadAmp, float64(m.ReadAmplification), s)
		}
	}
	if n.cache != nil {
		cm := n.cache.Metrics()
		ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(cm.Hits))
		ch <- prometheus.MustNewConstMetric(descCacheMiss, prometheus.CounterValue, float64(cm.Misses))
		gauge(descCacheSize, float64(cm.Size))
	}
	if ls := n.cfg.logStore; ls != nil {
		if st, err := ls.FsyncStats(); err == nil { // ErrClosed while the node closes
			ch <- prometheus.MustNewConstHistogram(descWALFsync, st.Count, st.Sum.Seconds(), st.Buckets)
		}
	}
	alive, dead := n.members.Count()
	gauge(descMembers, float64(alive), "alive")
	gauge(descMembers, float64(dead), "dead")
	ready := 0.0
	if n.Ready() == nil {
		ready = 1
	}
	gauge(descReady, ready)
}
