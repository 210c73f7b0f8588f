// Package console is the cluster console every node serves on its admin
// HTTP address: a page (/ui/: plain HTML, CSS and JavaScript embedded in
// the binary, no build step, no CDN) that polls one JSON route
// (GET /v1/console) every second and draws the cluster: members, the
// shard x node grid of replicas (leader, voters, learners, lag), each
// shard's slots, size and rates, the moves in progress, the recent events
// the node saw, and live charts of writes/s, reads/s, p99 latencies and
// the Raft apply lag.
//
// The rates are computed here, on the node serving the page, from two
// rounds of every member's cumulative counters (cluster.Node.NodeStats,
// the Console gRPC service): one round a second at most, whatever the
// number of pages polling (a round younger than MinInterval is answered
// again). The console keeps the last SeriesPoints points of the charts
// (5 minutes), so a page opened later starts with a history.
//
// Package admin mounts Routes behind its Host/Origin check and auth
// rules: /ui/ is open (it holds no data; a browser cannot send a token
// on a navigation), /v1/console needs what every /v1 route needs (the
// admin role; the page asks for a token and sends it).
//
// It may import cluster and its sub-packages, rpc; cluster never imports
// it.
//
// Usage:
//
//	c := console.New(node)
//	c.Routes(mux) // GET /v1/console, GET /ui/
package console

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/events"
)

// Source is what the console reads of its node, declared here where it is
// used; *cluster.Node satisfies it (checked in package server).
type Source interface {
	ID() string
	Status(ctx context.Context) (*cluster.ClusterStatus, error)
	NodeStats(ctx context.Context, ids []string) []cluster.NodeStatsResult
	Events() []events.Event
}

const (
	// MinInterval is the least time between two rounds of counters: a
	// request within it of the last round gets that round's view.
	MinInterval = 900 * time.Millisecond
	// SeriesPoints is the length of the charts' history (one point per
	// round: 5 minutes at one round a second).
	SeriesPoints = 300
	// EventsShown is how many of the node's recent events a view holds.
	EventsShown = 50
	// statusTimeout bounds the cluster status of a round: without a meta
	// leader the view says so within it rather than stall the page.
	statusTimeout = 3 * time.Second
)

// View is GET /v1/console's answer.
type View struct {
	Node string    `json:"node"` // the node that answered
	Time time.Time `json:"time"`
	// Error says why Status is missing (no meta leader reachable, ...):
	// the rest is still the node's.
	Error  string                 `json:"error,omitempty"`
	Status *cluster.ClusterStatus `json:"status,omitempty"`
	// Nodes are the counters of each member asked (not removed, not
	// dead in gossip), by id order of Status.Members.
	Nodes []NodeView `json:"nodes"`
	// ShardRates are each group's writes and reads per second over the
	// last interval ("meta" and shard numbers).
	ShardRates map[string]Rate `json:"shard_rates"`
	// Series are the charts' points, oldest first.
	Series []Point `json:"series"`
	// Events are the node's recent events, oldest first.
	Events []events.Event `json:"events"`
}

// NodeView is one member's numbers.
type NodeView struct {
	ID    string `json:"id"`
	Error string `json:"error,omitempty"` // it did not answer
	Rate
	ApplyLag uint64 `json:"apply_lag"` // its replicas' largest
	RSSBytes uint64 `json:"rss_bytes"`
}

// Rate is writes (commands proposed by leaders) and linearizable reads
// per second.
type Rate struct {
	Writes float64 `json:"writes_per_sec"`
	Reads  float64 `json:"reads_per_sec"`
}

// Point is one round's cluster-wide numbers.
type Point struct {
	T      int64   `json:"t"` // Unix milliseconds
	Writes float64 `json:"writes_per_sec"`
	Reads  float64 `json:"reads_per_sec"`
	// WriteP99MS is the p99 of the writes' apply latency (proposal to
	// result on the leader), RequestP99MS that of the client requests'
	// handling, in milliseconds; null without a request in the interval.
	WriteP99MS   *float64 `json:"write_p99_ms"`
	RequestP99MS *float64 `json:"request_p99_ms"`
	// ApplyLag is the largest commit index minus applied index of any
	// replica (entries committed, not yet applied).
	ApplyLag uint64 `json:"apply_lag"`
}

// Console samples a node's cluster for its page. Safe for concurrent use;
// it starts no goroutine (rounds run in the requests that need them).
type Console struct {
	src Source
	now func() time.Time

	// mu serializes rounds; the fields are the last round's.
	mu     sync.Mutex
	last   *View
	prev   sample // each node's last answer (of a node asked in the last round)
	rounds int
	series []Point
}

// New returns the console of the node src.
func New(src Source) *Console {
	return &Console{src: src, now: time.Now}
}

// Snapshot returns the current view: the last round's if it is younger
// than MinInterval, else a new round's. The round does not end with ctx
// (a page that went away): its own bounds end it, and its counters serve
// the next round.
func (c *Console) Snapshot(ctx context.Context) *View {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.now().Sub(c.last.Time) < MinInterval {
		return c.last
	}
	ctx = context.WithoutCancel(ctx)
	v := &View{Node: c.src.ID(), ShardRates: map[string]Rate{}}
	sctx, cancel := context.WithTimeout(ctx, statusTimeout)
	st, err := c.src.Status(sctx)
	cancel()
	if err != nil {
		v.Error, st = err.Error(), nil
	} else {
		v.Status = st
	}
	ids := c.askIDs(st)
	res := c.src.NodeStats(ctx, ids)
	now := c.now()
	cur := sample{}
	for _, r := range res {
		if r.Err == nil && r.Stats != nil {
			cur[r.Node] = answer{at: now, stats: r.Stats}
		}
	}
	v.Time = now
	rt := computeRates(c.prev, cur)
	for _, r := range res {
		nv := NodeView{ID: r.Node}
		if r.Err != nil {
			nv.Error = r.Err.Error()
		} else {
			p := rt.nodes[r.Node]
			nv.Rate = Rate{Writes: round(p.writes), Reads: round(p.reads)}
			nv.RSSBytes = r.Stats.RssBytes
			for _, rc := range r.Stats.Replicas {
				nv.ApplyLag = max(nv.ApplyLag, rc.ApplyLag)
			}
		}
		v.Nodes = append(v.Nodes, nv)
	}
	for s, p := range rt.shards {
		v.ShardRates[s] = Rate{Writes: round(p.writes), Reads: round(p.reads)}
	}
	if c.rounds > 0 {
		c.series = append(c.series, Point{T: now.UnixMilli(), Writes: round(rt.writes), Reads: round(rt.reads),
			WriteP99MS: ms(rt.writeP99, rt.writeP99ok), RequestP99MS: ms(rt.requestP99, rt.requestP99ok),
			ApplyLag: maxApplyLag(cur)})
		if len(c.series) > SeriesPoints {
			c.series = append(c.series[:0], c.series[len(c.series)-SeriesPoints:]...)
		}
	}
	v.Series = append([]Point{}, c.series...)
	ev := c.src.Events()
	v.Events = append([]events.Event{}, ev[max(0, len(ev)-EventsShown):]...)
	next := sample{}
	for _, id := range ids { // a node not asked any more is forgotten
		if a, ok := cur[id]; ok {
			next[id] = a
		} else if a, ok := c.prev[id]; ok {
			next[id] = a
		}
	}
	c.prev, c.last = next, v
	c.rounds++
	return v
}

// askIDs returns the members whose counters a round asks for: every
// member not removed and not dead in gossip (a dead node would only cost
// the round its timeout); only this node without a status.
func (c *Console) askIDs(st *cluster.ClusterStatus) []string {
	if st == nil {
		return []string{c.src.ID()}
	}
	var ids []string
	for _, m := range st.Members {
		if m.Status != "removed" && m.Gossip != "dead" {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// round rounds a rate to a hundredth.
func round(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// Routes registers GET /v1/console and the page (GET /ui/, and / and /ui
// redirecting to it) on mux.
func (c *Console) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/console", func(w http.ResponseWriter, r *http.Request) {
		v := c.Snapshot(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(v)
	})
	ui := http.FileServerFS(assets())
	mux.Handle("GET /ui/", pageHeaders(http.StripPrefix("/ui/", noCache(ui))))
	mux.Handle("GET /ui", pageHeaders(http.RedirectHandler("/ui/", http.StatusMovedPermanently)))
	mux.Handle("GET /{$}", pageHeaders(http.RedirectHandler("/ui/", http.StatusFound)))
}

// ContentSecurityPolicy is the console page's policy: its own files only
// (app.js, style.css; no inline script or style, no eval), its data from
// its own node (/v1/console), no plugin, no <base>, no form submission
// (the login form is handled by app.js), and no framing by any page
// (frame-ancestors; X-Frame-Options DENY for browsers without it).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// pageHeaders sets the console page's security headers on every response
// of its routes: ContentSecurityPolicy, X-Frame-Options DENY (a page of
// another site cannot frame the console to click on it), and nosniff (a
// file is run or styled only as its Content-Type says).
func pageHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// noCache makes browsers revalidate the page's files (a node upgraded
// in place serves its own).
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}
