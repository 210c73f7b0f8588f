package admin

import (
	"net/http"
	"strings"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/cluster"
)

// Authorize guards the admin HTTP API of node n (package auth/authn has the
// rules of callers): /healthz, /readyz and /metrics are open; everything
// else (the admin API /v1, /debug/pprof) needs the admin role (or a node
// certificate, or, with Auth without TLS, a request signed with the
// cluster secret), checked with the node's authenticator (n.Authn():
// IdentifyHTTP and Allows). A caller without a good credential gets 401,
// one without the role 403, before next runs. Admin calls other than GETs
// and every refusal are audit-logged (Audit). Without auth (On false)
// every request passes.
func Authorize(n *cluster.Node, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			next.ServeHTTP(w, r)
			return
		}
		a := n.Authn()
		if !a.On() {
			next.ServeHTTP(w, r)
			return
		}
		what := r.Method + " " + r.URL.Path
		id, msg := a.IdentifyHTTP(r)
		w.Header().Set("Content-Type", "application/json")
		if id == nil {
			a.Audit("http", nil, what, false, msg)
			w.WriteHeader(http.StatusUnauthorized)
			writeJSONError(w, msg)
			return
		}
		if allowed, why := a.Allows(id, auth.Perm{Keyspace: auth.Admin}); !allowed {
			a.Audit("http", id, what, false, why)
			w.WriteHeader(http.StatusForbidden)
			if id.IsNode() {
				writeJSONError(w, why)
			} else {
				writeJSONError(w, "swarmkv: "+id.Name()+" may not use the admin API (needs the admin role)")
			}
			return
		}
		if r.Method != http.MethodGet && !id.IsNode() {
			a.Audit("http", id, what, true, "")
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSONError writes {"error": msg} (the status is the caller's).
func writeJSONError(w http.ResponseWriter, msg string) {
	w.Write([]byte(`{"error": ` + jsonString(msg) + "}\n"))
}

// jsonString quotes s as a JSON string, control characters as spaces.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < ' ':
			b.WriteString(" ")
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
