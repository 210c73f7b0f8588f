package metrics

import (
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/raftlog"
)

// scrapeText serves r's handler once and parses the text it returns.
func scrapeText(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// series lists a family's samples as `name{label="v",...} value` (labels
// sorted; histograms as their count).
func series(fams map[string]*dto.MetricFamily, prefix string) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range f.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			key := name
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// TestCollectorSeries: the collector exports exactly the series of the
// node's state a Source reports, with their labels and values, and the
// registry the apply, Pipeline, gRPC, Go and process series.
func TestCollectorSeries(t *testing.T) {
	src := func() Scrape {
		return Scrape{
			Replicas: []Replica{
				{
					Shard: "0", State: raft.Leader, Term: 3, Commit: 10, Applied: 10, LastIndex: 11,
					LastContact: time.Now().Add(-time.Hour), // ignored on the leader
					Stats:       replica.Stats{Entries: 4, Commands: 9, ReadsChecked: 5, ReadsVerified: 1, Reads: 12, LeaderChanges: 2, Leases: 7, Quiet: true},
					Storage:     &fsm.StorageMetrics{DiskBytes: 4096, MemTableBytes: 512, L0Files: 2, CompactionDebt: 7, ReadAmplification: 3},
				},
				{Shard: "meta", State: raft.Follower, Term: 2, Commit: 8, Applied: 5, LastIndex: 8}, // store closed: no Pebble series
			},
			Cache:    &pebble.CacheMetrics{Size: 1 << 20, Hits: 30, Misses: 6},
			WALFsync: &raftlog.FsyncStats{Count: 5, Sum: 10 * time.Millisecond, Buckets: map[float64]uint64{0.0001: 1, 0.01: 5}},
			Alive:    3, Dead: 1, Ready: true,
			HasState: true, Members: map[string]int{"active": 3, "removed": 1}, Shards: 2, NotZoneSafe: 1, NotHostSafe: 2,
			ProtocolVersion: 2,
			RaftConns:       []RaftConns{{"plain", "accepted", 4}, {"incarnation", "refused", 1}},
		}
	}
	r := New(src)
	r.ObserveApply(0, 2*time.Millisecond)
	r.CountPipeline("calls", 4)
	r.CountPipeline("calls", 2)
	r.CountPipeline("results", 6)
	r.ObserveMoveUnavailable(300 * time.Millisecond)
	fams := scrapeText(t, r)
	want := map[string]float64{
		`swarmkv_raft_state{shard="0"}`:                                   2,
		`swarmkv_raft_state{shard="meta"}`:                                0,
		`swarmkv_raft_quiet{shard="0"}`:                                   1,
		`swarmkv_raft_quiet{shard="meta"}`:                                0,
		`swarmkv_raft_term{shard="0"}`:                                    3,
		`swarmkv_raft_term{shard="meta"}`:                                 2,
		`swarmkv_raft_commit_index{shard="0"}`:                            10,
		`swarmkv_raft_commit_index{shard="meta"}`:                         8,
		`swarmkv_fsm_applied_index{shard="0"}`:                            10,
		`swarmkv_fsm_applied_index{shard="meta"}`:                         5,
		`swarmkv_fsm_apply_lag{shard="0"}`:                                0,
		`swarmkv_fsm_apply_lag{shard="meta"}`:                             3,
		`swarmkv_raft_last_index{shard="0"}`:                              11,
		`swarmkv_raft_last_index{shard="meta"}`:                           8,
		`swarmkv_raft_last_contact_seconds{shard="0"}`:                    0,
		`swarmkv_raft_last_contact_seconds{shard="meta"}`:                 0, // never heard from a leader
		`swarmkv_proposal_entries_total{shard="0"}`:                       4,
		`swarmkv_proposal_entries_total{shard="meta"}`:                    0,
		`swarmkv_proposal_commands_total{shard="0"}`:                      9,
		`swarmkv_proposal_commands_total{shard="meta"}`:                   0,
		`swarmkv_read_rounds_total{check="batched",shard="0"}`:            5,
		`swarmkv_read_rounds_total{check="verify_leader",shard="0"}`:      1,
		`swarmkv_read_rounds_total{check="batched",shard="meta"}`:         0,
		`swarmkv_read_rounds_total{check="verify_leader",shard="meta"}`:   0,
		`swarmkv_read_round_reads_total{shard="0"}`:                       12,
		`swarmkv_read_round_reads_total{shard="meta"}`:                    0,
		`swarmkv_raft_leader_changes_total{shard="0"}`:                    2,
		`swarmkv_raft_leader_changes_total{shard="meta"}`:                 0,
		`swarmkv_cluster_members{status="active"}`:                        3,
		`swarmkv_cluster_members{status="leaving"}`:                       0,
		`swarmkv_cluster_members{status="removed"}`:                       1,
		`swarmkv_cluster_shards`:                                          2,
		`swarmkv_shards_not_safe{domain="zone"}`:                          1,
		`swarmkv_shards_not_safe{domain="host"}`:                          2,
		`swarmkv_pebble_disk_bytes{shard="0"}`:                            4096,
		`swarmkv_pebble_memtable_bytes{shard="0"}`:                        512,
		`swarmkv_pebble_l0_files{shard="0"}`:                              2,
		`swarmkv_pebble_compaction_debt_bytes{shard="0"}`:                 7,
		`swarmkv_pebble_read_amplification{shard="0"}`:                    3,
		`swarmkv_pebble_block_cache_hits_total`:                           30,
		`swarmkv_pebble_block_cache_misses_total`:                         6,
		`swarmkv_pebble_block_cache_bytes`:                                1 << 20,
		`swarmkv_raftlog_wal_fsync_seconds_count`:                         5,
		`swarmkv_gossip_members{state="alive"}`:                           3,
		`swarmkv_gossip_members{state="dead"}`:                            1,
		`swarmkv_node_ready`:                                              1,
		`swarmkv_apply_duration_seconds{shard="0"}_count`:                 1,
		`swarmkv_move_unavailable_seconds_count`:                          1,
		`swarmkv_pipeline_messages_total{direction="calls"}`:              2,
		`swarmkv_pipeline_messages_total{direction="results"}`:            1,
		`swarmkv_pipeline_items_total{direction="calls"}`:                 6,
		`swarmkv_pipeline_items_total{direction="results"}`:               6,
		`swarmkv_protocol_version`:                                        2,
		`swarmkv_raft_conns_total{header="plain",result="accepted"}`:      4,
		`swarmkv_raft_conns_total{header="incarnation",result="refused"}`: 1,
		`swarmkv_leases{shard="0"}`:                                       7,
	}
	got := series(fams, "swarmkv_")
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("missing series %s", k)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s", k)
		}
	}
	if h := fams["swarmkv_raftlog_wal_fsync_seconds"]; h != nil {
		if s := h.Metric[0].Histogram.GetSampleSum(); s != 0.01 {
			t.Errorf("wal fsync sum %v, want 0.01", s)
		}
		if b := h.Metric[0].Histogram.Bucket; len(b) != 3 || b[0].GetUpperBound() != 0.0001 || b[0].GetCumulativeCount() != 1 {
			t.Errorf("wal fsync buckets %v, want le=0.0001 -> 1, le=0.01 -> 5, +Inf", b)
		}
	}
	// Help texts are part of the exported names (dashboards, docs).
	if h := fams["swarmkv_node_ready"].GetHelp(); h != "1 when every local shard has a leader." {
		t.Errorf("swarmkv_node_ready help %q", h)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("missing %s", name)
		}
	}
}

// TestCollectorAbsent: without a block cache, a shared log store or
// replicas, only the gossip, readiness and protocol version series remain
// (and the move histogram, empty: it is the node's own, not a scraped one).
func TestCollectorAbsent(t *testing.T) {
	r := New(func() Scrape { return Scrape{Alive: 1} })
	got := series(scrapeText(t, r), "swarmkv_")
	want := map[string]float64{
		`swarmkv_gossip_members{state="alive"}`:  1,
		`swarmkv_gossip_members{state="dead"}`:   0,
		`swarmkv_node_ready`:                     0,
		`swarmkv_protocol_version`:               0,
		`swarmkv_move_unavailable_seconds_count`: 0,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("series %v, want %v", got, want)
	}
}
