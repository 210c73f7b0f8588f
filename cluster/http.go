package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/internal/faultnet"
	"github.com/swarmkv/swarmkv/internal/lograte"
)

// httpHandler serves the node's admin API (admin.go; JSON, see
// docs/operations.md) and health endpoints:
//
//	GET  /v1/status                      cluster overview: members and every shard's replicas
//	GET  /v1/members                     members with gossip state, version, replicas, leaderships
//	POST /v1/members/{id}/join           admit a node gossip sees (idempotent)
//	POST /v1/members/{id}/remove         decommission a node: move its replicas, then remove it (idempotent)
//	GET  /v1/shards                      voters, leader, applied index and lag of every replica
//	POST /v1/shards/{shard}/transfer-leader?to=<id>  move a shard's ("meta": the meta group's) leadership
//	POST /v1/shards/{shard}/snapshot     every replica of the shard takes a snapshot
//	GET  /v1/state                       the committed cluster state document
//	GET /healthz  200 "ok" while the process runs
//	GET /readyz   200 "ready" when every local shard has a leader and the
//	              node can serve; 503 with the reason otherwise
//	GET /metrics  Prometheus metrics (raft, state machine, Pebble, gossip,
//	              gRPC, Go runtime)
//	/debug/pprof/ Go profiles
//	GET|PUT /debug/faults  injected Raft-port faults (only with Config.Faults:
//	              swarmnode serve --fault-injection); PUT replaces them with
//	              {"delay":"50ms","drop_rate":0.01,"block":["<peer IP>"]}
func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", n.metrics.handler())
	n.adminRoutes(mux)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if f := n.cfg.Faults; f != nil {
		mux.HandleFunc("GET /debug/faults", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(f.Faults())
		})
		mux.HandleFunc("PUT /debug/faults", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			var fs faultnet.Faults
			if err == nil {
				fs, err = faultnet.ParseFaults(body)
			}
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				writeJSONError(w, err.Error())
				return
			}
			f.Set(fs)
			n.log.Warn("injected faults set", "delay", time.Duration(fs.Delay), "drop_rate", fs.DropRate, "block", fs.Block)
			json.NewEncoder(w).Encode(f.Faults())
		})
	}
	return mux
}

// checkHost guards an admin HTTP listener bound to loopback against DNS
// rebinding: a web page the operator opens could point a name of its own
// at 127.0.0.1 and have the browser call the admin API. Browsers send
// that name as Host, so every request (health and metrics included) whose
// Host is not localhost (or a name under .localhost), a loopback IP, or
// the host of one of the node's configured or advertised addresses or
// the machine's host name is
// refused with 421 Misdirected Request. The port is not checked. A
// request without Host (HTTP/1.0) cannot come from a browser and passes.
// A request with an Origin header (a browser's cross-site fetch or form,
// whose Host may well be 127.0.0.1) must name the node the same way, or is
// refused with 403: command-line clients send none.
// On other listen addresses the handler is next itself: their names are
// not known, and they need TLS or --insecure (docs/security.md).
func (n *Node) checkHost(next http.Handler) http.Handler {
	if !isLoopback(n.cfg.HTTPAddr) {
		return next
	}
	allowed := map[string]bool{}
	for _, a := range []string{n.cfg.HTTPAddr, n.addrs.HTTPAddr, n.addrs.GRPCAddr, n.addrs.RaftAddr,
		n.addrs.GossipAddr, n.cfg.GRPCAdvertise, n.cfg.RaftAdvertise, n.cfg.GossipAdvertise, n.cfg.RedisAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				allowed[normHost(h)] = true
			}
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		// The machine's own name (Debian maps it to 127.0.1.1); a web
		// page is not served under it.
		allowed[normHost(h)] = true
	}
	log := lograte.New(n.log, lograte.Every)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "" && !hostAllowed(r.Host, allowed) {
			log.Warn("admin HTTP: refused a request for another host (DNS rebinding?)", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMisdirectedRequest)
			writeJSONError(w, fmt.Sprintf("swarmkv: Host %q is not a name of this node: its admin API on a loopback address "+
				"answers only to localhost, loopback IPs and the node's configured addresses (DNS rebinding protection)", r.Host))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !originAllowed(o, allowed) {
			log.Warn("admin HTTP: refused a cross-site request", "origin", o, "remote", r.RemoteAddr, "path", r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			writeJSONError(w, fmt.Sprintf("swarmkv: a request from the web page %q is refused: "+
				"the admin API on a loopback address is not for browsers of other sites", o))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed reports whether an Origin header (scheme://host[:port],
// which browsers send on cross-site requests) names the node on loopback.
func originAllowed(origin string, allowed map[string]bool) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") && hostAllowed(u.Host, allowed)
}

// hostAllowed reports whether the Host header host[:port] names the node
// on loopback: localhost, *.localhost, a loopback IP, or one of allowed.
func hostAllowed(host string, allowed map[string]bool) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = normHost(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || allowed[host] {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // an IPv6 zone
		host = host[:i]
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// normHost lower-cases a host name and drops a final dot.
func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
