package admin

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/internal/leakcheck"

	"github.com/swarmkv/swarmkv/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// The admin API's tests that need a running cluster are in package
// cluster (cluster/auth_test.go, conns_test.go, tls_test.go,
// metrics_test.go...), which starts this package's Server through its
// harness (cluster/fronts_test.go); server/server_test.go starts it
// through server.New.

func TestHTTPDialAddr(t *testing.T) {
	for _, tt := range [][3]string{
		{"[::]:7102", "10.0.0.2:7100", "10.0.0.2:7102"},
		{"0.0.0.0:7102", "n2:7100", "n2:7102"},
		{":7102", "n2:7100", "n2:7102"},
		{"127.0.0.1:17102", "127.0.0.1:17100", "127.0.0.1:17102"},
	} {
		if got := httpDialAddr(cluster.NodeAddrs{HTTPAddr: tt[0], GRPCAddr: tt[1]}); got != tt[2] {
			t.Errorf("%s / %s: %s, want %s", tt[0], tt[1], got, tt[2])
		}
	}
}

// TestAdminHostCheckOffLoopback: a listener on another address does not
// check Host (its names are not known; it needs TLS or --insecure).
func TestAdminHostCheckOffLoopback(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for addr, want := range map[string]int{"10.0.0.1:7102": http.StatusOK, "127.0.0.1:7102": http.StatusMisdirectedRequest} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Host = "evil.example"
		hostGuard(addr, nil, slog.New(slog.DiscardHandler), ok).ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("listener %s, Host evil.example: %d, want %d", addr, rec.Code, want)
		}
	}
}

// FuzzHostAllowed: the admin API's Host check (DNS rebinding) passes only
// localhost, names under .localhost, loopback IPs and the configured
// hosts, with or without a port; never a panic.
func FuzzHostAllowed(f *testing.F) {
	for _, s := range []string{"localhost:7102", "[::1]:7102", "127.0.0.1", "evil.example", "node1.lan:7102", "[::1", "[]:1", "x.localhost.", "::ffff:127.0.0.1", "%", "[fe80::1%lo]:1"} {
		f.Add(s)
	}
	allowed := map[string]bool{"node1.lan": true}
	f.Fuzz(func(t *testing.T, host string) {
		if !hostAllowed(host, allowed) {
			return
		}
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = normHost(strings.Trim(h, "[]"))
		if i := strings.IndexByte(h, '%'); i >= 0 {
			h = h[:i]
		}
		ip := net.ParseIP(h)
		if h != "localhost" && !strings.HasSuffix(h, ".localhost") && h != "node1.lan" && (ip == nil || !ip.IsLoopback()) {
			t.Fatalf("allowed Host %q (%q)", host, h)
		}
	})
}

// TestConsolePage: the console page's files (and its redirects) are open;
// a path that only starts like them is not.
func TestConsolePage(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/ui": true, "/ui/": true, "/ui/app.js": true, "/ui/style.css": true,
		"/ui/../v1/status": false, "/ui/./app.js": false, "/ui//app.js": false, "/uix": false,
		"/v1/console": false, "/v1/status": false, "/ui/a/../../v1/state": false,
	} {
		if got := consolePage(p); got != want {
			t.Errorf("consolePage(%q) = %v, want %v", p, got, want)
		}
	}
}

// FuzzConsolePage: a path the auth rules open for the console page never
// names anything outside the page once cleaned (the admin API stays
// behind its credential).
func FuzzConsolePage(f *testing.F) {
	for _, s := range []string{"/", "/ui", "/ui/", "/ui/app.js", "/ui/../v1/status", "/ui/%2e%2e/v1", "/ui/..", "//ui/", "/ui/a/b/../c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !consolePage(p) {
			return
		}
		c := path.Clean(p)
		if c != "/" && c != "/ui" && !strings.HasPrefix(c, "/ui/") {
			t.Fatalf("consolePage(%q) opens %q", p, c)
		}
	})
}
