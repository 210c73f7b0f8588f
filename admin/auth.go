package admin

import (
	"net/http"
	"path"
	"strings"

	"github.com/swarmkv/swarmkv/auth"
)

// Authorize guards the admin HTTP API of node n (package auth/authn has the
// rules of callers): /healthz, /readyz and /metrics are open, and so are
// the GETs of the console page's files (/ui/, and / and /ui that redirect
// to it: they hold no data, and a browser sends no token when it opens a
// page; the page sends one on its calls); everything else (the admin
// API /v1, /v1/console included, /debug/pprof) needs the admin role (or a node
// certificate, or, with Auth without TLS, a request signed with the
// cluster secret), checked with the node's authenticator (n.Authn():
// IdentifyHTTP and Allows). A caller without a good credential gets 401,
// one without the role 403, before next runs. Admin calls other than GETs,
// backups (they copy every record) and every refusal are audit-logged
// (Audit). Without auth (On false)
// every request passes.
func Authorize(n Node, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/healthz", p == "/readyz", p == "/metrics",
			r.Method == http.MethodGet && consolePage(p):
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
		if (r.Method != http.MethodGet || strings.HasPrefix(r.URL.Path, "/v1/backup/")) && !id.IsNode() {
			a.Audit("http", id, what, true, "")
		}
		next.ServeHTTP(w, r)
	})
}

// consolePage reports whether path p names the console page's files (or
// its redirects): /, /ui, /ui/...; a path that is not clean (/ui/../v1)
// is not one (the mux would redirect it, but the check does not rely on
// that).
func consolePage(p string) bool {
	return p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/") && path.Clean(p) == strings.TrimSuffix(p, "/")
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
