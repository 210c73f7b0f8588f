package admin

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/lograte"
)

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
func checkHost(n Node, next http.Handler) http.Handler {
	cfg, a := n.Config(), n.Addrs()
	return hostGuard(cfg.HTTPAddr, []string{a.HTTPAddr, a.GRPCAddr, a.RaftAddr, a.GossipAddr,
		cfg.GRPCAdvertise, cfg.RaftAdvertise, cfg.GossipAdvertise, cfg.RedisAddr}, n.Logger(), next)
}

// hostGuard is checkHost for a listener on listen whose node is also
// named by the hosts of addrs.
func hostGuard(listen string, addrs []string, logger *slog.Logger, next http.Handler) http.Handler {
	if !cluster.IsLoopback(listen) {
		return next
	}
	allowed := map[string]bool{}
	for _, a := range append([]string{listen}, addrs...) {
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
	log := lograte.New(logger, lograte.Every)
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
