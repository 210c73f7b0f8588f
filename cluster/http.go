package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/swarmkv/swarmkv/internal/faultnet"
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
