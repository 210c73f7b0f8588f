package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/events"
	"github.com/swarmkv/swarmkv/rpc"
)

// fakeNode is a Source whose answers the test sets.
type fakeNode struct {
	mu        sync.Mutex
	status    *cluster.ClusterStatus
	statusErr error
	stats     map[string]*rpc.NodeStatsResponse
	asked     [][]string // NodeStats' ids, per call
	events    []events.Event
}

func (f *fakeNode) ID() string { return "n1" }

func (f *fakeNode) Status(ctx context.Context) (*cluster.ClusterStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, f.statusErr
}

func (f *fakeNode) NodeStats(ctx context.Context, ids []string) []cluster.NodeStatsResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, ids)
	var out []cluster.NodeStatsResult
	for _, id := range ids {
		r := cluster.NodeStatsResult{Node: id}
		if st := f.stats[id]; st != nil {
			r.Stats = st
		} else {
			r.Err = errors.New("unreachable")
		}
		out = append(out, r)
	}
	return out
}

func (f *fakeNode) Events() []events.Event { return f.events }

func (f *fakeNode) set(commands uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = map[string]*rpc.NodeStatsResponse{
		"n1": {NodeId: "n1", Replicas: []*rpc.ReplicaCounters{{Shard: "0", Leader: true, Commands: commands, Reads: 2 * commands}},
			Apply: histOf(0.002), RssBytes: 1 << 20},
		"n2": {NodeId: "n2", Replicas: []*rpc.ReplicaCounters{{Shard: "0", ApplyLag: 4}}},
	}
}

func newFake() *fakeNode {
	f := &fakeNode{status: &cluster.ClusterStatus{ClusterID: "c1", Members: []cluster.MemberInfo{
		{ID: "n1", Status: "active", Gossip: "alive"},
		{ID: "n2", Status: "active", Gossip: "alive"},
		{ID: "n3", Status: "active", Gossip: "dead"},
		{ID: "n4", Status: "removed", Gossip: "unknown"},
	}}}
	for i := range 60 {
		f.events = append(f.events, events.Event{Seq: uint64(i + 1), Kind: events.Leader, Text: "e"})
	}
	f.set(0)
	return f
}

// TestSnapshot: a round asks the live members for their counters, turns
// two rounds into rates and a chart point; a request within MinInterval
// gets the last round again; the series keeps SeriesPoints points; the
// events shown are the last EventsShown.
func TestSnapshot(t *testing.T) {
	f := newFake()
	c := New(f)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()

	v := c.Snapshot(ctx)
	if v.Node != "n1" || v.Status == nil || v.Error != "" || len(v.Series) != 0 {
		t.Fatalf("first view: node %s, status %v, error %q, %d points", v.Node, v.Status, v.Error, len(v.Series))
	}
	if got := f.asked[0]; !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("asked %v, want the members neither dead nor removed", got)
	}
	if len(v.Events) != EventsShown || v.Events[len(v.Events)-1].Seq != 60 {
		t.Errorf("%d events, the last %+v", len(v.Events), v.Events[len(v.Events)-1])
	}
	if v.Nodes[1].ApplyLag != 4 || v.Nodes[0].RSSBytes != 1<<20 {
		t.Errorf("nodes %+v", v.Nodes)
	}

	f.set(500)
	now = now.Add(MinInterval / 2)
	if again := c.Snapshot(ctx); again != v || len(f.asked) != 1 {
		t.Fatal("a request within MinInterval ran a round")
	}
	now = now.Add(2*time.Second - MinInterval/2)
	v = c.Snapshot(ctx)
	if len(v.Series) != 1 {
		t.Fatalf("series %+v after two rounds", v.Series)
	}
	p := v.Series[0]
	if p.Writes != 250 || p.Reads != 500 || p.T != now.UnixMilli() || p.ApplyLag != 4 || p.WriteP99MS != nil {
		t.Errorf("point %+v (no write in the interval: no p99)", p)
	}
	if r := v.ShardRates["0"]; r.Writes != 250 || r.Reads != 500 {
		t.Errorf("shard rates %+v", v.ShardRates)
	}
	if n := v.Nodes[0]; n.Writes != 250 {
		t.Errorf("n1 %+v", n)
	}

	// n1 misses a round: it shows the error, and its next rate spans
	// both rounds.
	f.mu.Lock()
	delete(f.stats, "n1")
	f.mu.Unlock()
	now = now.Add(time.Second)
	if v = c.Snapshot(ctx); v.Nodes[0].Error == "" || v.Nodes[0].Writes != 0 {
		t.Errorf("n1 without an answer: %+v", v.Nodes[0])
	}
	f.set(1000)
	now = now.Add(time.Second)
	if v = c.Snapshot(ctx); v.Nodes[0].Writes != 250 || v.Series[len(v.Series)-1].Writes != 250 {
		t.Errorf("n1 back after a missed round: %+v, point %+v, want 250 writes/s over the 2 s", v.Nodes[0], v.Series[len(v.Series)-1])
	}

	for i := range SeriesPoints + 10 {
		f.set(uint64(2000 + i))
		now = now.Add(time.Second)
		v = c.Snapshot(ctx)
	}
	if len(v.Series) != SeriesPoints || v.Series[len(v.Series)-1].T != now.UnixMilli() {
		t.Errorf("series of %d points, last at %d", len(v.Series), v.Series[len(v.Series)-1].T)
	}

	// Without a cluster status: the error, and this node's own counters.
	f.mu.Lock()
	f.statusErr = errors.New("no meta leader")
	f.mu.Unlock()
	now = now.Add(time.Second)
	v = c.Snapshot(ctx)
	if v.Status != nil || v.Error != "no meta leader" || len(v.Nodes) != 1 || v.Nodes[0].ID != "n1" {
		t.Errorf("view without status: status %v, error %q, nodes %+v", v.Status, v.Error, v.Nodes)
	}
}

// TestRoutes: GET /v1/console answers the view as JSON; /ui/ serves the
// embedded page and its files; / and /ui redirect to it.
func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	New(newFake()).Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		resp, err := noRedirect.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/v1/console")
	var v View
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &v) != nil || v.Status.ClusterID != "c1" {
		t.Fatalf("GET /v1/console: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, `"series":[]`) || !strings.Contains(body, `"shard_rates":{}`) {
		t.Errorf("a first view's series and rates are not empty lists and maps: %s", body)
	}
	for path, want := range map[string]string{
		"/ui/":          "<title>swarmkv console</title>",
		"/ui/app.js":    "fetch('/v1/console'",
		"/ui/style.css": "#members tr.dead",
	} {
		resp, body := get(path)
		if resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want a body with %q", path, resp.StatusCode, want)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q", path, cc)
		}
	}
	// Every response of the page's routes carries the security headers:
	// its own files only, no inline script or style, never framed.
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css", "/ui/nope.js", "/ui", "/"} {
		resp, _ := get(path)
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q, want %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("GET %s: Content-Security-Policy %q allows unsafe sources", path, csp)
		}
		if xfo := resp.Header.Get("X-Frame-Options"); xfo != "DENY" {
			t.Errorf("GET %s: X-Frame-Options %q, want DENY", path, xfo)
		}
		if ns := resp.Header.Get("X-Content-Type-Options"); ns != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", path, ns)
		}
	}
	// Nothing but the page's own files: no script, style or font from
	// elsewhere, and nothing inline the policy would block (a script or
	// style element with content, a style attribute, an event handler).
	_, page := get("/ui/")
	for _, inline := range []string{"<style", " style=", " onclick=", " onload=", " onsubmit=", " onerror=", "javascript:"} {
		if strings.Contains(strings.ToLower(page), inline) {
			t.Errorf("the page has %q, which its policy blocks", inline)
		}
	}
	if strings.Count(page, "<script") != strings.Count(page, "<script src=") {
		t.Error("the page has an inline script, which its policy blocks")
	}
	for _, ref := range []string{"http://", "https://", "//cdn"} {
		if strings.Contains(page, ref) {
			t.Errorf("the page refers to %q", ref)
		}
	}
	for path, loc := range map[string]string{"/": "/ui/", "/ui": "/ui/"} {
		if resp, _ := get(path); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != loc {
			t.Errorf("GET %s: %d to %q, want a redirect to %s", path, resp.StatusCode, resp.Header.Get("Location"), loc)
		}
	}
	if resp, _ := get("/ui/nope.js"); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nope.js: %d", resp.StatusCode)
	}
}
