package cluster

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsEndpoint: /metrics exports raft, state machine, Pebble, gossip
// and gRPC series, and /debug/pprof answers.
func TestMetricsEndpoint(t *testing.T) {
	tc := newTestCluster(t, 1, 2, func(c *Config) { c.HTTPAddr = freePort(t) })
	c := tc.client()
	ctx := ctxT(t, 30*time.Second)
	if err := putUntilKnown(ctx, c, []byte("u"), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + tc.nodes[0].Addrs().HTTPAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	// The meta group elects its leader on its own schedule.
	waitFor(t, 10*time.Second, "meta group leader", func() error {
		if r := tc.nodes[0].metaReplica(); r == nil || r.ReadyTerm() == 0 {
			return fmt.Errorf("meta replica not a ready leader")
		}
		return nil
	})
	body := get("/metrics")
	// A Prometheus scraper's parser reads all of it.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	if f := fams["swarmkv_raft_commit_index"]; f == nil || len(f.Metric) != 3 {
		t.Errorf("swarmkv_raft_commit_index: %v, want 3 series (2 shards and the meta group)", f)
	}
	for _, want := range []string{
		`swarmkv_raft_state{shard="0"} 2`,
		`swarmkv_raft_state{shard="1"} 2`,
		`swarmkv_raft_state{shard="meta"} 2`,
		`swarmkv_fsm_apply_lag{shard="0"} 0`,
		`swarmkv_apply_duration_seconds_count{shard="`,
		`swarmkv_pebble_disk_bytes{shard="0"}`,
		`swarmkv_gossip_members{state="alive"} 1`,
		`swarmkv_node_ready 1`,
		`swarmkv_raft_leader_changes_total{shard="meta"} 1`,
		`swarmkv_cluster_members{status="active"} 1`,
		`swarmkv_cluster_shards 2`,
		`swarmkv_pebble_block_cache_hits_total`,
		`swarmkv_pebble_block_cache_bytes`,
		`swarmkv_raftlog_wal_fsync_seconds_bucket{le="0.0001"}`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="swarmkv.v1.KV",grpc_type="unary"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Every Raft append so far was fsync'd: the histogram counts them.
	if f := fams["swarmkv_raftlog_wal_fsync_seconds"]; f == nil || len(f.Metric) != 1 || f.Metric[0].GetHistogram().GetSampleCount() == 0 {
		t.Errorf("swarmkv_raftlog_wal_fsync_seconds: %v, want one histogram with fsyncs counted", f)
	}
	// The put (and the node's own writes, such as the default pool) went
	// through their shards' coalescers: at least one entry, and every
	// entry carries at least one command.
	sum := func(name string) (n float64) {
		if f := fams[name]; f != nil {
			for _, m := range f.Metric {
				n += m.GetCounter().GetValue()
			}
		}
		return n
	}
	if e, c := sum("swarmkv_proposal_entries_total"), sum("swarmkv_proposal_commands_total"); e < 1 || c < e {
		t.Errorf("proposal entries %v, commands %v; want at least one entry and a command per entry", e, c)
	}
	if !strings.Contains(get("/debug/pprof/"), "goroutine") {
		t.Error("/debug/pprof/ does not list profiles")
	}
}

// TestBlockCacheHoldsBlocks: the node's Pebble cache keeps blocks even
// though every store charges its memtables against it. Sized as
// BlockCacheSize alone, the cache was all memtable reservation (the Raft
// log store's memtable alone exceeds the 1 MiB here, and the default
// 64 MiB went the same way): it cached nothing and every read of a table missed.
func TestBlockCacheHoldsBlocks(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.BlockCacheSize = 1 << 20
		c.MemTableSize = 256 << 10 // flushes after a few hundred KiB
	})
	c := tc.client()
	ctx := ctxT(t, 60*time.Second)
	const n = 2000 // 2000 x 256 B: several memtable flushes
	value := make([]byte, 256)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	errs := make(chan error, 16)
	for w := range 16 {
		go func() {
			for i := w; i < n; i += 16 {
				if err := putUntilKnown(ctx, c, []byte("u"), key(i), value); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The first keys are in tables by now: read them twice.
	for range 2 {
		for i := range 200 {
			if _, err := c.Get(ctx, []byte("u"), key(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	m := tc.nodes[0].cache.Metrics()
	if m.Size == 0 || m.Hits == 0 {
		t.Fatalf("block cache holds %d bytes, %d hits, %d misses: reads of tables are not cached", m.Size, m.Hits, m.Misses)
	}
	t.Logf("block cache: %d bytes, %d hits, %d misses", m.Size, m.Hits, m.Misses)
}
