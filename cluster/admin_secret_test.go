package cluster

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
)

// TestAuthHTTPClusterSecret: a node with a cluster secret (--auth without
// TLS) takes a signed admin request as the operator (admin role, audit
// logged, the secret never logged), refuses a bad one with 401 before the
// handler runs, and names the fix when no credential is sent; a node
// without a secret (TLS) refuses every signature.
func TestAuthHTTPClusterSecret(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	var logs bytes.Buffer
	n := &Node{cfg: Config{Auth: true}, secret: secret, log: slog.New(slog.NewTextHandler(&logs, nil))}
	n.authn = n.newAuthn()
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
	if w := do(n, "POST", "/v1/tokens", authn.AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)); w.Code != 200 || ran != 1 {
		t.Fatalf("signed request: %d %q, ran %d", w.Code, w.Body, ran)
	}
	if !strings.Contains(logs.String(), "who=operator:cluster-secret") || !strings.Contains(logs.String(), `what="POST /v1/tokens" allowed=true`) {
		t.Fatalf("no audit record of the signed call:\n%s", logs.String())
	}
	if w := do(n, "GET", "/v1/members?x=1", authn.AdminSecretAuth(secret, "GET", "/v1/members", "x=1", now)); w.Code != 200 || ran != 2 {
		t.Fatalf("signed GET with a query: %d %q", w.Code, w.Body)
	}
	for _, tt := range []struct {
		name, method, target, authz, want string
	}{
		{"no credential", "POST", "/v1/tokens", "", "--cluster-secret-file <data-dir>/cluster-secret"},
		{"another secret", "POST", "/v1/tokens", authn.AdminSecretAuth([]byte(strings.Repeat("x", 32)), "POST", "/v1/tokens", "", now), "bad cluster-secret signature"},
		{"another request", "POST", "/v1/tokens/abc/revoke", authn.AdminSecretAuth(secret, "POST", "/v1/tokens", "", now), "bad cluster-secret signature"},
		{"expired", "POST", "/v1/tokens", authn.AdminSecretAuth(secret, "POST", "/v1/tokens", "", now.Add(-3*time.Minute)), "bad cluster-secret signature"},
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
	tlsNode.authn = tlsNode.newAuthn()
	if w := do(tlsNode, "POST", "/v1/tokens", authn.AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "client certificate") {
		t.Fatalf("signature on a node without a secret: %d %q", w.Code, w.Body)
	}
	if w := do(tlsNode, "POST", "/v1/tokens", ""); strings.Contains(w.Body.String(), "cluster-secret") {
		t.Fatalf("a node without a secret suggests it: %q", w.Body)
	}
	if ran != 2 {
		t.Fatalf("a refused request ran the handler (%d runs)", ran)
	}
}
