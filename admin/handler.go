package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"time"

	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/console"
	"github.com/swarmkv/swarmkv/internal/faultnet"
)

// Handler serves the node's admin API (JSON, see docs/operations.md) and
// health endpoints, behind the Host check (checkHost) and the auth rules
// (Authorize):
//
//	GET  /v1/status                      cluster overview: members and every shard's replicas
//	GET  /v1/members                     members with gossip state, version, replicas, leaderships
//	POST /v1/members/{id}/join           admit a node gossip sees (idempotent)
//	POST /v1/members/{id}/remove         decommission a node: move its replicas, then remove it (idempotent)
//	GET  /v1/shards                      voters, leader, applied index and lag of every replica; each
//	                                     shard's slots, size (disk space) and load (commands/s)
//	POST /v1/shards/{shard}/transfer-leader?to=<id>  move a shard's ("meta": the meta group's) leadership
//	POST /v1/shards/{shard}/snapshot     every replica of the shard takes a snapshot
//	POST /v1/shards/{shard}/split, POST /v1/shards/merge?into=A&from=B, GET /v1/moves,
//	DELETE /v1/moves/{id}, GET|POST /v1/shards/policy   elastic shards (shards.go)
//	GET  /v1/state                       the committed cluster state document
//	POST /v1/tokens, GET /v1/tokens, POST /v1/tokens/{id}/revoke  tokens (tokens.go)
//	GET  /v1/console                     the console's view: status, every member's rates,
//	                                     the charts' series, recent events (package console)
//	GET  /ui/                            the console page (package console; / and /ui redirect to it)
//	GET  /v1/backup/state, GET /v1/backup/shards/{shard}  backups (backup.go)
//	GET /healthz  200 "ok" while the process runs
//	GET /readyz   200 "ready" when every local shard has a leader and the
//	              node can serve; 503 with the reason otherwise
//	GET /metrics  Prometheus metrics (raft, state machine, Pebble, gossip,
//	              gRPC, Go runtime)
//	/debug/pprof/ Go profiles
//	GET|PUT /debug/faults  injected Raft-port faults (only with Config.Faults:
//	              swarmnode serve --fault-injection); PUT replaces them with
//	              {"delay":"50ms","drop_rate":0.01,"block":["<peer IP>"]}
func Handler(n Node) http.Handler {
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
	mux.Handle("GET /metrics", n.MetricsHandler())
	routes(n, mux)
	tokenRoutes(n, mux)
	console.New(n).Routes(mux)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if f := n.Config().Testing.Faults; f != nil {
		faultRoutes(n, f, mux)
	}
	return checkHost(n, Authorize(n, mux))
}

func faultRoutes(n Node, f *faultnet.Local, mux *http.ServeMux) {
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
		n.Logger().Warn("injected faults set", "delay", time.Duration(fs.Delay), "drop_rate", fs.DropRate, "block", fs.Block)
		json.NewEncoder(w).Encode(f.Faults())
	})
}

// routes registers the cluster admin routes on mux (see Handler); errors
// answer their status from the node's one table (cluster.HTTPStatus).
func routes(n Node, mux *http.ServeMux) {
	const timeout = 30 * time.Second
	handle := func(pattern string, fn func(ctx context.Context, r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			v, err := fn(ctx, r)
			w.Header().Set("Content-Type", "application/json")
			if err != nil {
				w.WriteHeader(cluster.HTTPStatus(err))
				json.NewEncoder(w).Encode(map[string]string{"error": status.Convert(err).Message()})
				return
			}
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(v)
		})
	}
	handle("GET /v1/status", func(ctx context.Context, r *http.Request) (any, error) { return n.Status(ctx) })
	handle("GET /v1/members", func(ctx context.Context, r *http.Request) (any, error) {
		st, err := n.Status(ctx)
		if err != nil {
			return nil, err
		}
		return st.Members, nil
	})
	handle("GET /v1/shards", func(ctx context.Context, r *http.Request) (any, error) {
		st, err := n.Status(ctx)
		if err != nil {
			return nil, err
		}
		return st.Shards, nil
	})
	handle("GET /v1/state", func(ctx context.Context, r *http.Request) (any, error) { return n.ClusterState(ctx) })
	memberResult := func(st *cluster.State, id string, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id, "status": st.Status(id), "epoch": st.Epoch}, nil
	}
	handle("POST /v1/members/{id}/join", func(ctx context.Context, r *http.Request) (any, error) {
		id := r.PathValue("id")
		st, err := n.JoinNode(ctx, id)
		return memberResult(st, id, err)
	})
	handle("POST /v1/members/{id}/remove", func(ctx context.Context, r *http.Request) (any, error) {
		id := r.PathValue("id")
		st, err := n.RemoveNode(ctx, id)
		return memberResult(st, id, err)
	})
	handle("POST /v1/shards/{shard}/transfer-leader", func(ctx context.Context, r *http.Request) (any, error) {
		leader, err := n.TransferLeader(ctx, r.PathValue("shard"), r.URL.Query().Get("to"))
		if err != nil {
			return nil, err
		}
		return map[string]string{"shard": r.PathValue("shard"), "leader": leader}, nil
	})
	handle("POST /v1/shards/{shard}/snapshot", func(ctx context.Context, r *http.Request) (any, error) {
		return n.Snapshot(ctx, r.PathValue("shard"))
	})
	shardRoutes(n, handle)
	backupRoutes(n, handle, mux)
}
