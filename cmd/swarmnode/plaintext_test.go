package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/internal/pki"
)

// TestAdminTokenNeverInPlaintextOffLoopback (issue 37 item 5): the admin
// commands apply the Go client's rule to their bearer token: over http
// only to a loopback address. To any other address (192.0.2.1, TEST-NET:
// nothing answers there, so a request sent would fail otherwise) the
// command fails at once with client.ErrPlaintextToken naming --tls-ca,
// before any request, also with --tls-ca given and an http:// --admin URL.
// To loopback the token is sent.
func TestAdminTokenNeverInPlaintextOffLoopback(t *testing.T) {
	const tok = "swk_0123456789abcdef_0123456789abcdef0123456789abcdef0123456789abcdef"
	t.Setenv("SWARM_TOKEN", tok)
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")

	var mu sync.Mutex
	var seen []string // the Authorization headers the loopback server got
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("[]"))
	}))
	defer srv.Close()

	out := filepath.Join(t.TempDir(), "backup.swb")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"members", []string{"members", "--admin", "192.0.2.1:7102"}},
		{"token list", []string{"token", "list", "--admin", "192.0.2.1:7102"}},
		{"backup", []string{"backup", "--out", out, "--backup-key-file", filepath.Join(filepath.Dir(out), "backup.key"), "--admin", "192.0.2.1:7102"}},
		{"http URL with --tls-ca", []string{"members", "--tls-ca", caFile, "--admin", "http://192.0.2.1:7102"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, _, err := runCmd(ctx, tc.args...)
			if !errors.Is(err, client.ErrPlaintextToken) || !strings.Contains(err.Error(), "--tls-ca") {
				t.Fatalf("%v: %v (after %v), want ErrPlaintextToken naming --tls-ca", tc.args, err, time.Since(start))
			}
			if strings.Contains(err.Error(), tok) {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("backup file %s: %v, want none", out, err)
	}

	// Loopback: the token is sent over http.
	mu.Lock()
	seen = nil
	mu.Unlock()
	port := srv.Listener.Addr().String()[strings.LastIndex(srv.Listener.Addr().String(), ":"):]
	for _, admin := range []string{srv.Listener.Addr().String(), "localhost" + port, "http://127.0.0.1" + port} {
		if _, _, err := runCmd(context.Background(), "members", "--admin", admin); err != nil {
			t.Fatalf("members --admin %s: %v", admin, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != "Bearer "+tok || seen[2] != "Bearer "+tok {
		t.Fatalf("loopback server got %d requests, Authorization %q", len(seen), seen)
	}
}

// TestCheckRedirectKeepsTokenOffPlaintext: a redirect that would carry the
// Authorization header over http off loopback is refused (net/http keeps
// the header on a redirect to the same host, from https to http too; to
// another host it drops it); to https or loopback, or without the header,
// it is followed.
func TestCheckRedirectKeepsTokenOffPlaintext(t *testing.T) {
	for _, tc := range []struct {
		url    string
		header bool
		refuse bool
	}{
		{"http://10.0.0.5:7102/v1/members", true, true},
		{"http://node1.example:7102/v1/members", true, true},
		{"http://[2001:db8::1]:7102/v1/members", true, true},
		{"http://10.0.0.5:7102/v1/members", false, false},
		{"https://10.0.0.5:7102/v1/members", true, false},
		{"http://127.0.0.1:7102/v1/members", true, false},
		{"http://[::1]:7102/v1/members", true, false},
		{"http://localhost/v1/members", true, false},
	} {
		req, err := http.NewRequest("GET", tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.header {
			req.Header.Set("Authorization", "Bearer x")
		}
		err = checkRedirect(req, nil)
		if refused := errors.Is(err, client.ErrPlaintextToken); refused != tc.refuse || (err != nil && !refused) {
			t.Errorf("redirect to %s (Authorization %v): %v, want refused %v", tc.url, tc.header, err, tc.refuse)
		}
	}
}

// FuzzPlaintextToken: the admin CLI's check of where a credential may go
// never panics, and lets a request through only over https or to an
// address the Go client counts as loopback; a refusal is always
// ErrPlaintextToken and never quotes more than the URL's host.
func FuzzPlaintextToken(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:7102/v1/members", "http://10.0.0.5:7102", "https://10.0.0.5:7102",
		"http://[::1]:7102", "http://localhost./x", "http://127.0.0.1.example.com", "HTTP://10.0.0.1", "http://%31%30.0.0.1", "//x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		err = plaintextToken(u)
		if err == nil {
			if u.Scheme != "https" && !client.IsLoopback(u.Hostname()) {
				t.Fatalf("%q let through: scheme %q, host %q", raw, u.Scheme, u.Hostname())
			}
			return
		}
		if !errors.Is(err, client.ErrPlaintextToken) || u.Scheme == "https" || client.IsLoopback(u.Hostname()) {
			t.Fatalf("%q: %v", raw, err)
		}
	})
}
