package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
)

// The token admin API (package auth/authn has the rules, cluster/tokens.go
// the tokens):
//
//	POST /v1/tokens               {"name": "ci", "roles": ["registry:read"], "actor": "u1"}
//	                              -> {"id", "name", "roles", "actor", "created", "token"}; the
//	                                 token is shown this once, the cluster keeps only its hash;
//	                                 "actor" (optional) binds the token to a user id (Pools)
//	GET  /v1/tokens               -> [{"id", "name", "roles", "actor", "created", "revoked"}]
//	POST /v1/tokens/{id}/revoke   -> the record; idempotent
//
// Changes run on the meta leader; a node that does not lead the meta
// group forwards the request to the leader's HTTP address (with its node
// certificate, and the caller's Authorization). Every node learns the
// tokens through its sync loop (within about a second), so a new token
// works, and a revoked one stops working, on every node shortly after the
// call returns.

// forwardedHeader marks an admin request one node forwarded to the meta
// leader.
const forwardedHeader = "X-Swarmkv-Forwarded"

func tokenRoutes(n Node, mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tokens", tokenHandler(n, func(ctx context.Context, r *http.Request) (any, error) {
		var req struct {
			Name  string   `json:"name"`
			Roles []string `json:"roles"`
			Actor string   `json:"actor"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
			return nil, fmt.Errorf("%w: body: want {\"name\": ..., \"roles\": [...], \"actor\": ... (optional)}", cluster.ErrInvalidArgument)
		}
		return n.CreateToken(ctx, req.Name, req.Roles, req.Actor)
	}))
	mux.HandleFunc("GET /v1/tokens", tokenHandler(n, func(ctx context.Context, r *http.Request) (any, error) {
		return n.Tokens(ctx)
	}))
	mux.HandleFunc("POST /v1/tokens/{id}/revoke", tokenHandler(n, func(ctx context.Context, r *http.Request) (any, error) {
		return n.RevokeToken(ctx, r.PathValue("id"))
	}))
}

// tokenHandler runs fn, forwarding to the meta leader when fn answers
// cluster.ErrMetaNotLeader. An error answers the status the node's error
// table gives it (cluster.HTTPStatus: a bad request 400, an unknown token
// 404, no meta leader reached 409, a leader not ready yet 503...) and
// {"error": its text}.
func tokenHandler(n Node, fn func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		w.Header().Set("Content-Type", "application/json")
		var v any
		var err error
		// Run here when this node leads the meta group, else on the
		// leader; retry for a few seconds while leadership settles.
		for try := 0; ; try++ {
			r.Body = io.NopCloser(bytes.NewReader(body))
			v, err = fn(ctx, r)
			if errors.Is(err, cluster.ErrLeaderNotReady) && try < 50 {
				// A new meta leader that has not read the state yet:
				// nothing was proposed, so running fn again is safe.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if !errors.Is(err, cluster.ErrMetaNotLeader) || r.Header.Get(forwardedHeader) != "" || try >= 50 {
				break
			}
			if a, ok := n.MetaLeader(ctx); ok && a.ID != n.ID() && a.HTTPAddr != "" {
				forwardToMetaLeader(ctx, n, w, r, a, body)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			w.WriteHeader(cluster.HTTPStatus(err)) // the node's one table, as routes
			writeJSONError(w, err.Error())
			return
		}
		if r.Method == http.MethodPost {
			what := r.Method + " " + r.URL.Path
			if ti, ok := v.(*authn.TokenInfo); ok {
				what += " id=" + ti.ID + " name=" + ti.Name + " roles=" + strings.Join(ti.Roles, ",")
				if ti.Actor != "" {
					what += " actor=" + ti.Actor
				}
			}
			n.Logger().Info("audit", "audit", true, "via", "http", "what", what, "done", true)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	}
}

// forwardToMetaLeader replays r on the meta leader a and copies its answer.
func forwardToMetaLeader(ctx context.Context, n Node, w http.ResponseWriter, r *http.Request, a cluster.NodeAddrs, body []byte) {
	fail := func(msg string) {
		w.WriteHeader(http.StatusServiceUnavailable)
		writeJSONError(w, msg)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	scheme := "http"
	if tc := n.PeerTLS(); tc != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		hc.Transport, scheme = tr, "https"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+"://"+httpDialAddr(a)+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		fail(err.Error())
		return
	}
	req.Header.Set(forwardedHeader, n.ID())
	req.Header.Set("Content-Type", "application/json")
	if h := r.Header.Get("Authorization"); h != "" {
		req.Header.Set("Authorization", h)
	}
	resp, err := hc.Do(req)
	if err != nil {
		fail("cluster: forwarding to the meta leader " + a.ID + " failed")
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, 1<<20))
}

// httpDialAddr is where another node reaches a's HTTP server: its
// announced HTTP address, or, when that is bound to every interface
// (0.0.0.0:7102, [::]:7102), its advertised gRPC host with the HTTP port.
func httpDialAddr(a cluster.NodeAddrs) string {
	h, p, err := net.SplitHostPort(a.HTTPAddr)
	if err != nil {
		return a.HTTPAddr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		if gh, _, err := net.SplitHostPort(a.GRPCAddr); err == nil {
			return net.JoinHostPort(gh, p)
		}
	}
	return a.HTTPAddr
}
