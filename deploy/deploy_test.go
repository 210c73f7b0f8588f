// Package deploy checks the monitoring files in deploy/: the Grafana
// dashboard (grafana/swarmkv.json) is a dashboard Grafana can import, and
// every metric its queries name is one a running node exports; the
// Prometheus example (prometheus/prometheus.yml) scrapes three nodes'
// /metrics. The directory holds no Go code but this test.
package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/freeport"
	"github.com/swarmkv/swarmkv/internal/leakcheck"
	"github.com/swarmkv/swarmkv/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "swarmkv.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/swarmkv.json: %v", err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// Pieces of PromQL that are not metric names: strings (label values),
// label matchers, range and subquery selectors, the label lists of
// grouping and matching clauses, Grafana variables.
var (
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	reMatchers = regexp.MustCompile(`\{[^}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reVariable = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	reIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true}
)

// metricNames returns the metric names a PromQL expression selects:
// identifiers that are not function or aggregation names (followed by
// "("), keywords, label names or values.
func metricNames(expr string) []string {
	s := reString.ReplaceAllString(expr, `""`)
	s = reMatchers.ReplaceAllString(s, " ")
	s = reRange.ReplaceAllString(s, " ")
	s = reGrouping.ReplaceAllString(s, " ")
	s = reVariable.ReplaceAllString(s, " ")
	var out []string
	for _, m := range reIdent.FindAllStringIndex(s, -1) {
		name := s[m[0]:m[1]]
		if m[0] > 0 && strings.ContainsRune("0123456789.", rune(s[m[0]-1])) { // 5m, 1e3, 0.99
			continue
		}
		if call := strings.HasPrefix(strings.TrimLeft(s[m[1]:], " \t\n"), "("); call || keywords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// TestMetricNames: the extraction of metric names from PromQL.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`max by (status) (swarmkv_cluster_members)`: {"swarmkv_cluster_members"},
		`histogram_quantile(0.99, sum by (shard, le) (rate(swarmkv_apply_duration_seconds_bucket{instance=~"$instance",shard=~"a(b)"}[$__rate_interval])))`: {"swarmkv_apply_duration_seconds_bucket"},
		`max by (shard) (x_total{a="}"}) - on (shard) group_right y_total offset 5m`:                                                                        {"x_total", "y_total"},
		`rate(a[5m]) / (rate(b[1m:10s]) + c) > bool 0.5 and d unless e{f="g"}`:                                                                              {"a", "b", "c", "d", "e"},
		`count by (instance) (swarmkv_raft_state{shard!="meta"} == 2)`:                                                                                      {"swarmkv_raft_state"},
		`sum without (le) (rate(h_bucket[${__range}]))`:                                                                                                     {"h_bucket"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// balanced checks that an expression's brackets pair up (outside
// strings): a cheap guard, not a PromQL parser.
func balanced(expr string) error {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range reString.ReplaceAllString(expr, `""`) {
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pair[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return nil
}

// exported starts a one-node cluster, writes and reads through it (so
// the series that appear on first use exist), and returns the names its
// /metrics exports: every family, and a histogram's or summary's
// _bucket, _sum and _count series.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	addr := func() string {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	s, err := server.New(cluster.Config{
		ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), BootstrapExpect: 1, Shards: 1,
		RaftAddr: addr(), GRPCAddr: addr(), GossipAddr: addr(), HTTPAddr: "127.0.0.1:0",
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, GossipProfile: "local",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer http.DefaultClient.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var c *client.Client
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c == nil {
			c, err = client.New(ctx, client.Config{Endpoints: []string{s.Node().Addrs().GRPCAddr}})
		}
		if err == nil {
			if err = c.Put(ctx, []byte("u"), []byte("k"), []byte("v")); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("put: %v", err)
		}
	}
	defer c.Close()
	if _, err := c.Get(ctx, []byte("u"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	names := map[string]bool{}
	for name, f := range fams {
		names[name] = true
		if f.Type != nil && (f.GetType().String() == "HISTOGRAM" || f.GetType().String() == "SUMMARY") {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

// TestDashboard: grafana/swarmkv.json is a Grafana dashboard (title, uid,
// schema version; a Prometheus datasource variable every panel and query
// uses; unique panel ids; every panel placed and with a query, each with
// a refId of its own), and every metric its queries name is one a
// running node exports.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("title %q, uid %q, schemaVersion %d", d.Title, d.UID, d.SchemaVersion)
	}
	var dsVar string
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			dsVar = "${" + v.Name + "}"
		}
		if v.Type == "query" && (v.Datasource == nil || !strings.HasPrefix(v.Datasource.UID, "$")) {
			t.Errorf("variable %s does not use the datasource variable", v.Name)
		}
	}
	if dsVar == "" {
		t.Fatal("no Prometheus datasource variable")
	}
	ids := map[int]string{}
	used := map[string][]string{} // metric -> panels
	queries := 0
	for _, p := range allPanels(d.Panels) {
		if p.ID <= 0 || ids[p.ID] != "" {
			t.Errorf("panel %q: id %d missing or taken by %q", p.Title, p.ID, ids[p.ID])
		}
		ids[p.ID] = p.Title
		if p.Type == "" || p.Title == "" || p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q: type %q, gridPos %+v", p.ID, p.Title, p.Type, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsVar {
			t.Errorf("panel %q: datasource %+v, want %s", p.Title, p.Datasource, dsVar)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] || tg.Expr == "" || tg.Datasource == nil || tg.Datasource.UID != dsVar {
				t.Errorf("panel %q: query %+v", p.Title, tg)
			}
			refs[tg.RefID] = true
			if err := balanced(tg.Expr); err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
			}
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
			for _, n := range names {
				used[n] = append(used[n], p.Title)
			}
			queries++
		}
	}
	t.Logf("%d panels, %d queries over %d metrics", len(ids), queries, len(used))
	have := exported(t)
	for name, panels := range used {
		if !have[name] {
			t.Errorf("metric %s (panels %q) is not exported by a running node", name, panels)
		}
	}
	// What the issue asks the dashboard to show.
	for _, want := range []string{"swarmkv_raft_leader_changes_total", "swarmkv_apply_duration_seconds_bucket", "swarmkv_raft_commit_index",
		"swarmkv_proposal_commands_total", "swarmkv_proposal_entries_total", "process_resident_memory_bytes",
		"swarmkv_pebble_compaction_debt_bytes", "grpc_server_handling_seconds_bucket", "swarmkv_cluster_members", "swarmkv_cluster_shards"} {
		if used[want] == nil {
			t.Errorf("no panel shows %s", want)
		}
	}
}

// TestPrometheusConfig: prometheus/prometheus.yml scrapes /metrics of
// the three nodes of docs/usage.md's loopback cluster.
func TestPrometheusConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"scrape_configs:", "job_name: swarmkv", "metrics_path: /metrics"} {
		if !strings.Contains(s, want) {
			t.Errorf("prometheus.yml lacks %q", want)
		}
	}
	var targets []string
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "- 127.0.0.1:") {
			targets = append(targets, strings.TrimPrefix(t, "- "))
		}
	}
	if want := []string{"127.0.0.1:17102", "127.0.0.1:27102", "127.0.0.1:37102"}; !slices.Equal(targets, want) {
		t.Errorf("targets %q, want %q", targets, want)
	}
	if strings.Contains(s, "\t") {
		t.Error("tabs in YAML")
	}
}
