package cluster

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/transport"
)

// TestAdminSecretAuth: a signature made for (method, path, query, time)
// checks out for exactly that request, with that secret, within the skew.
func TestAdminSecretAuth(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Unix(1_800_000_000, 0)
	good := AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)
	if !strings.HasPrefix(good, "SwarmkvSecret 1800000000.") {
		t.Fatalf("header %q", good)
	}
	if !checkAdminSecretAuth(secret, "POST", "/v1/tokens", "", good, now) {
		t.Fatal("a fresh signature refused")
	}
	lower := "swarmkvsecret" + strings.TrimPrefix(good, "SwarmkvSecret")
	if !checkAdminSecretAuth(secret, "POST", "/v1/tokens", "", lower, now) {
		t.Fatal("the scheme is case-sensitive")
	}
	for _, tt := range []struct {
		name                string
		secret              []byte
		method, path, query string
		h                   string
		now                 time.Time
	}{
		{"another secret", []byte(strings.Repeat("t", 32)), "POST", "/v1/tokens", "", good, now},
		{"no secret", nil, "POST", "/v1/tokens", "", good, now},
		{"another method", secret, "GET", "/v1/tokens", "", good, now},
		{"another path", secret, "POST", "/v1/tokens/x/revoke", "", good, now},
		{"another query", secret, "POST", "/v1/tokens", "a=1", good, now},
		{"too old", secret, "POST", "/v1/tokens", "", good, now.Add(transport.CredSkew + time.Second)},
		{"from the future", secret, "POST", "/v1/tokens", "", good, now.Add(-transport.CredSkew - time.Second)},
		{"bearer", secret, "POST", "/v1/tokens", "", "Bearer " + strings.TrimPrefix(good, "SwarmkvSecret "), now},
		{"no scheme", secret, "POST", "/v1/tokens", "", strings.TrimPrefix(good, "SwarmkvSecret "), now},
		{"truncated", secret, "POST", "/v1/tokens", "", good[:len(good)-2], now},
		{"no mac", secret, "POST", "/v1/tokens", "", "SwarmkvSecret 1800000000.", now},
		{"no dot", secret, "POST", "/v1/tokens", "", "SwarmkvSecret 1800000000", now},
		{"empty", secret, "POST", "/v1/tokens", "", "", now},
	} {
		if checkAdminSecretAuth(tt.secret, tt.method, tt.path, tt.query, tt.h, tt.now) {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	// Still good at the edges of the skew window.
	for _, d := range []time.Duration{transport.CredSkew, -transport.CredSkew} {
		if !checkAdminSecretAuth(secret, "POST", "/v1/tokens", "", good, now.Add(d)) {
			t.Errorf("refused at %v", d)
		}
	}
}

// TestAuthHTTPClusterSecret: a node with a cluster secret (--auth without
// TLS) takes a signed admin request as the operator (admin role, audit
// logged, the secret never logged), refuses a bad one with 401 before the
// handler runs, and names the fix when no credential is sent; a node
// without a secret (TLS) refuses every signature.
func TestAuthHTTPClusterSecret(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	var logs bytes.Buffer
	n := &Node{cfg: Config{Auth: true}, secret: secret, log: slog.New(slog.NewTextHandler(&logs, nil))}
	ran := 0
	do := func(n *Node, method, target, authz string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		w := httptest.NewRecorder()
		AdminAuth(n, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ })).ServeHTTP(w, r)
		return w
	}
	now := time.Now()
	if w := do(n, "POST", "/v1/tokens", AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)); w.Code != 200 || ran != 1 {
		t.Fatalf("signed request: %d %q, ran %d", w.Code, w.Body, ran)
	}
	if !strings.Contains(logs.String(), "who=operator:cluster-secret") || !strings.Contains(logs.String(), `what="POST /v1/tokens" allowed=true`) {
		t.Fatalf("no audit record of the signed call:\n%s", logs.String())
	}
	if w := do(n, "GET", "/v1/members?x=1", AdminSecretAuth(secret, "GET", "/v1/members", "x=1", now)); w.Code != 200 || ran != 2 {
		t.Fatalf("signed GET with a query: %d %q", w.Code, w.Body)
	}
	for _, tt := range []struct {
		name, method, target, authz, want string
	}{
		{"no credential", "POST", "/v1/tokens", "", "--cluster-secret-file <data-dir>/cluster-secret"},
		{"another secret", "POST", "/v1/tokens", AdminSecretAuth([]byte(strings.Repeat("x", 32)), "POST", "/v1/tokens", "", now), "bad cluster-secret signature"},
		{"another request", "POST", "/v1/tokens/abc/revoke", AdminSecretAuth(secret, "POST", "/v1/tokens", "", now), "bad cluster-secret signature"},
		{"expired", "POST", "/v1/tokens", AdminSecretAuth(secret, "POST", "/v1/tokens", "", now.Add(-3*time.Minute)), "bad cluster-secret signature"},
		{"garbage", "POST", "/v1/tokens", "SwarmkvSecret zz", "bad cluster-secret signature"},
	} {
		w := do(n, tt.method, tt.target, tt.authz)
		if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s: %d %q, want 401 with %q", tt.name, w.Code, w.Body, tt.want)
		}
	}
	if ran != 2 {
		t.Fatalf("a refused request ran the handler (%d runs)", ran)
	}
	if strings.Contains(logs.String(), string(secret)) {
		t.Fatal("the secret appears in the log")
	}
	// With TLS there is no cluster secret: a signature is refused, and the
	// message says so.
	tlsNode := &Node{cfg: Config{Auth: true}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if w := do(tlsNode, "POST", "/v1/tokens", AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "client certificate") {
		t.Fatalf("signature on a node without a secret: %d %q", w.Code, w.Body)
	}
	if w := do(tlsNode, "POST", "/v1/tokens", ""); strings.Contains(w.Body.String(), "cluster-secret") {
		t.Fatalf("a node without a secret suggests it: %q", w.Body)
	}
	if ran != 2 {
		t.Fatalf("a refused request ran the handler (%d runs)", ran)
	}
}

// FuzzAdminSecretAuth: a signed admin request checks out for exactly its
// method, path and query; a fuzzed Authorization value never panics the
// check and is accepted only if it is that signature (up to the scheme's
// case).
func FuzzAdminSecretAuth(f *testing.F) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Unix(1_800_000_000, 0)
	good := AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)
	f.Add("POST", "/v1/tokens", "", good)
	f.Add("GET", "/v1/tokens", "", good)
	f.Add("POST", "/v1/tokens", "a=1", good)
	f.Add("POST", "/v1/tokens", "", "SwarmkvSecret 1800000000.00")
	f.Add("POST", "/v1/tokens", "", "SwarmkvSecret -9223372036854775808.")
	f.Add("POST", "/v1/tokens", "", "Bearer swk_x")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, method, path, query, h string) {
		ok := checkAdminSecretAuth(secret, method, path, query, h, now) // no panic
		if ok {
			_, cred, _ := strings.Cut(h, " ")
			_, want, _ := strings.Cut(AdminSecretAuth(secret, method, path, query, now), " ")
			ts, _, _ := strings.Cut(cred, ".")
			_, wantMAC, _ := strings.Cut(want, ".")
			// The time may differ within the skew; the MAC then differs
			// too, so only the exact time's MAC is comparable.
			if ts == "1800000000" && !strings.EqualFold(cred, "1800000000."+wantMAC) {
				t.Fatalf("%q accepted for %q %q %q", h, method, path, query)
			}
		}
		if got := checkAdminSecretAuth(secret, method, path, query, good, now); got != (method == "POST" && path == "/v1/tokens" && query == "") {
			t.Fatalf("the POST /v1/tokens signature for %q %q %q: %v", method, path, query, got)
		}
		if !checkAdminSecretAuth(secret, method, path, query, AdminSecretAuth(secret, method, path, query, now), now) {
			t.Fatalf("round trip failed for %q %q %q", method, path, query)
		}
	})
}
