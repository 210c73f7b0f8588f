// Package metrics owns a node's Prometheus registry (one per node, never
// global, so in-process clusters do not collide): the Go and process
// collectors, gRPC request counts and latencies (grpcprom's server
// interceptors), apply latency per shard, Pipeline message counters, and a
// collector that exports the node's raft, Pebble and gossip state at
// scrape time. The node provides that state through a Source; it keeps
// only the glue (cluster/metrics.go: Node.MetricsHandler and the Source,
// cluster/services.go: Node.ObserveApply, Node.CountPipeline).
//
// It is part of the core: it may import cluster/replica, fsm, raftlog,
// hashicorp/raft, pebble, Prometheus and grpcprom; never cluster or
// anything above it (cluster's TestImportsOneWay).
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/raftlog"
)

// Source returns the node's state at scrape time (called once per scrape,
// from the scraping goroutine).
type Source func() Scrape

// Scrape is the node's state the collector exports.
type Scrape struct {
	Replicas []Replica            // the local replicas, the meta group's included
	Cache    *pebble.CacheMetrics // the node's shared block cache; nil: none
	WALFsync *raftlog.FsyncStats  // the shared Raft log store's; nil: none (--log-store bolt) or closed
	Alive    int                  // gossip members alive
	Dead     int                  // and dead
	Ready    bool                 // every local shard has a leader
	// The committed cluster state as this node last synced it (HasState
	// false before the node has one): members by status (active,
	// leaving, removed) and the number of shards.
	HasState bool
	Members  map[string]int
	Shards   int
	// NotZoneSafe and NotHostSafe count the shards whose voters would
	// lose their majority with one zone (host) (placement.State.Safety).
	NotZoneSafe, NotHostSafe int
	// ProtocolVersion is the protocol version the node's cluster runs (0:
	// the node belongs to none yet).
	ProtocolVersion int
	// RaftConns are the Raft port's connections by header (plain or with
	// the group incarnation) and fate (dialed, accepted, refused).
	RaftConns []RaftConns
}

// RaftConns is a count of the Raft port's connections of one header and
// one fate.
type RaftConns struct {
	Header string // "plain", "incarnation", "other_incarnation"
	Result string // "dialed", "accepted", "refused"
	N      uint64
}

// Replica is the state of one local replica (ReadReplica reads it).
type Replica struct {
	Shard       string // the shard label: the shard id, or "meta"
	State       raft.RaftState
	Term        uint64
	Commit      uint64    // commit index
	Applied     uint64    // the state machine's applied index
	LastIndex   uint64    // last index in the Raft log
	LastContact time.Time // the follower last heard from its leader; zero: never
	Stats       replica.Stats
	Storage     *fsm.StorageMetrics // nil once the store is closed
}

// ReadReplica reads r's state for a scrape; shard is its label.
func ReadReplica(r *replica.Replica, shard string) Replica {
	rf := r.Raft()
	out := Replica{
		Shard:       shard,
		State:       rf.State(),
		Term:        rf.CurrentTerm(),
		Commit:      rf.CommitIndex(),
		Applied:     r.FSM().AppliedIndex(),
		LastIndex:   rf.LastIndex(),
		LastContact: rf.LastContact(),
		Stats:       r.Stats(),
	}
	if m, ok := r.FSM().Metrics(); ok {
		out.Storage = &m
	}
	return out
}

// Registry is a node's Prometheus registry.
type Registry struct {
	reg   *prometheus.Registry
	grpc  *grpcprom.ServerMetrics
	apply *prometheus.HistogramVec // seconds from raft.Apply to the FSM's result, by shard
	// Pipeline streams: messages and the calls or results they carried, by
	// direction ("calls" received, "results" sent).
	pipeMsgs, pipeItems *prometheus.CounterVec
	// moveUnavailable: seconds a slot move's slots were unavailable, from
	// the source's freeze committed to the map's publish committed
	// (observed by the meta leader's mover).
	moveUnavailable prometheus.Histogram
	// totals gathers the collectors Totals reads (totals.go).
	totals *prometheus.Registry
}

// New returns a node's registry; its collector reads src at each scrape.
func New(src Source) *Registry {
	m := &Registry{
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
		moveUnavailable: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "swarmkv", Name: "move_unavailable_seconds",
			Help:    "Time a slot move's slots were unavailable: from the source's freeze committed to the new map's publish committed.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc, m.apply, m.pipeMsgs, m.pipeItems, m.moveUnavailable, &nodeCollector{src: src},
	)
	m.totals = totalsRegistry(m)
	return m
}

// ObserveApply records the time a proposal to shard took
// (swarmkv_apply_duration_seconds).
func (m *Registry) ObserveApply(shard uint32, d time.Duration) {
	m.apply.WithLabelValues(strconv.FormatUint(uint64(shard), 10)).Observe(d.Seconds())
}

// ObserveMoveUnavailable records a slot move's unavailability window
// (swarmkv_move_unavailable_seconds).
func (m *Registry) ObserveMoveUnavailable(d time.Duration) { m.moveUnavailable.Observe(d.Seconds()) }

// CountPipeline counts one Pipeline message in direction dir carrying
// items calls or results.
func (m *Registry) CountPipeline(dir string, items int) {
	m.pipeMsgs.WithLabelValues(dir).Inc()
	m.pipeItems.WithLabelValues(dir).Add(float64(items))
}

// UnaryServerInterceptor and StreamServerInterceptor count and time the
// gRPC server's calls.
func (m *Registry) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return m.grpc.UnaryServerInterceptor()
}

func (m *Registry) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return m.grpc.StreamServerInterceptor()
}

// InitializeMetrics creates the gRPC series of every method registered on
// s (at zero), once the services are registered.
func (m *Registry) InitializeMetrics(s *grpc.Server) { m.grpc.InitializeMetrics(s) }

// Handler serves the registry in Prometheus' exposition formats.
func (m *Registry) Handler() http.Handler {
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
	descLeaders = prometheus.NewDesc("swarmkv_raft_leader_changes_total",
		"Leaders of the group the local replica learned of (each election it saw won, its own included).", []string{"shard"}, nil)
	descLeases = prometheus.NewDesc("swarmkv_leases",
		"Leases the replica keeps as its shard's leader (0 on a follower).", []string{"shard"}, nil)
	descQuiet = prometheus.NewDesc("swarmkv_raft_quiet",
		"1 while the replica runs the quiet groups' timeouts (--quiet-after), else 0.", []string{"shard"}, nil)
	descMembers = prometheus.NewDesc("swarmkv_gossip_members", "Gossip members known to this node, by liveness.", []string{"state"}, nil)
	descReady   = prometheus.NewDesc("swarmkv_node_ready", "1 when every local shard has a leader.", nil, nil)
	descCluster = prometheus.NewDesc("swarmkv_cluster_members",
		"Members of the cluster by membership status (active, leaving, removed), in the committed cluster state this node last synced.", []string{"status"}, nil)
	descShards  = prometheus.NewDesc("swarmkv_cluster_shards", "Shards in the committed cluster state this node last synced.", nil, nil)
	descUnsafe  = prometheus.NewDesc("swarmkv_shards_not_safe", "Shards of the committed cluster state this node last synced whose voters would lose their majority with any one failure domain (zone or host) lost.", []string{"domain"}, nil)
	descVersion = prometheus.NewDesc("swarmkv_protocol_version", "The protocol version the node's cluster runs (0: none yet).", nil, nil)
	descConns   = prometheus.NewDesc("swarmkv_raft_conns_total",
		"Raft port connections by header (plain, incarnation: with the group incarnation; other_incarnation: naming another than the node's replica) and result (dialed, accepted, refused).", []string{"header", "result"}, nil)
)

// memberStatuses are the label values of swarmkv_cluster_members, each
// exported (0 when none).
var memberStatuses = []string{"active", "leaving", "removed"}

// nodeCollector exports the node's state, read from its Source at scrape
// time.
type nodeCollector struct{ src Source }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descCommit, descApplied, descApplyLag, descLastIndex,
		descContact, descDisk, descMemtable, descL0, descDebt, descReadAmp, descCacheHits, descCacheMiss, descCacheSize,
		descWALFsync, descPropEntries, descPropCmds, descReadRounds, descReads, descLeaders, descLeases, descQuiet, descMembers, descReady,
		descCluster, descShards, descUnsafe, descVersion, descConns} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	sc := c.src()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range sc.Replicas {
		s := r.Shard
		gauge(descRaftState, float64(r.State), s)
		gauge(descRaftTerm, float64(r.Term), s)
		gauge(descCommit, float64(r.Commit), s)
		gauge(descApplied, float64(r.Applied), s)
		gauge(descApplyLag, float64(max(r.Commit, r.Applied)-r.Applied), s)
		gauge(descLastIndex, float64(r.LastIndex), s)
		contact := 0.0
		if r.State != raft.Leader && !r.LastContact.IsZero() {
			contact = time.Since(r.LastContact).Seconds()
		}
		gauge(descContact, contact, s)
		st := r.Stats
		ch <- prometheus.MustNewConstMetric(descPropEntries, prometheus.CounterValue, float64(st.Entries), s)
		ch <- prometheus.MustNewConstMetric(descPropCmds, prometheus.CounterValue, float64(st.Commands), s)
		ch <- prometheus.MustNewConstMetric(descReadRounds, prometheus.CounterValue, float64(st.ReadsChecked), s, "batched")
		ch <- prometheus.MustNewConstMetric(descReadRounds, prometheus.CounterValue, float64(st.ReadsVerified), s, "verify_leader")
		ch <- prometheus.MustNewConstMetric(descReads, prometheus.CounterValue, float64(st.Reads), s)
		ch <- prometheus.MustNewConstMetric(descLeaders, prometheus.CounterValue, float64(st.LeaderChanges), s)
		if s != "meta" {
			gauge(descLeases, float64(st.Leases), s)
		}
		quiet := 0.0
		if st.Quiet {
			quiet = 1
		}
		gauge(descQuiet, quiet, s)
		if m := r.Storage; m != nil {
			gauge(descDisk, float64(m.DiskBytes), s)
			gauge(descMemtable, float64(m.MemTableBytes), s)
			gauge(descL0, float64(m.L0Files), s)
			gauge(descDebt, float64(m.CompactionDebt), s)
			gauge(descReadAmp, float64(m.ReadAmplification), s)
		}
	}
	if cm := sc.Cache; cm != nil {
		ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(cm.Hits))
		ch <- prometheus.MustNewConstMetric(descCacheMiss, prometheus.CounterValue, float64(cm.Misses))
		gauge(descCacheSize, float64(cm.Size))
	}
	if st := sc.WALFsync; st != nil {
		ch <- prometheus.MustNewConstHistogram(descWALFsync, st.Count, st.Sum.Seconds(), st.Buckets)
	}
	gauge(descMembers, float64(sc.Alive), "alive")
	gauge(descMembers, float64(sc.Dead), "dead")
	ready := 0.0
	if sc.Ready {
		ready = 1
	}
	gauge(descReady, ready)
	if sc.HasState {
		for _, status := range memberStatuses {
			gauge(descCluster, float64(sc.Members[status]), status)
		}
		gauge(descShards, float64(sc.Shards))
		gauge(descUnsafe, float64(sc.NotZoneSafe), "zone")
		gauge(descUnsafe, float64(sc.NotHostSafe), "host")
	}
	gauge(descVersion, float64(sc.ProtocolVersion))
	for _, c := range sc.RaftConns {
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.CounterValue, float64(c.N), c.Header, c.Result)
	}
}
