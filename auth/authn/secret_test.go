package authn

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
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

// TestReadClusterSecret: the secret file must be private and long enough;
// a made one is kept.
func TestReadClusterSecret(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(strings.Repeat("s", 32)+"\n"), 0o600)
	if b, err := ReadClusterSecret(good); err != nil || len(b) != 32 {
		t.Fatalf("good secret: %d bytes, %v", len(b), err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte(strings.Repeat("s", 40)), 0o640)
	if _, err := ReadClusterSecret(open); !errors.Is(err, ErrClusterSecret) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable secret: %v", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("  tooshort-secret-value  \n"), 0o600)
	if _, err := ReadClusterSecret(short); !errors.Is(err, ErrClusterSecret) || strings.Contains(err.Error(), "tooshort") {
		t.Fatalf("short secret: %v (must not quote it)", err)
	}
	// Made once, then reused.
	gen := filepath.Join(dir, "gen")
	if err := makeClusterSecret(gen); err != nil {
		t.Fatal(err)
	}
	a, err := ReadClusterSecret(gen)
	if err != nil {
		t.Fatal(err)
	}
	if err := makeClusterSecret(gen); err != nil {
		t.Fatal(err)
	}
	if b, _ := ReadClusterSecret(gen); !slices.Equal(a, b) {
		t.Fatal("the generated secret changed")
	}

	// A lone node makes its own; a node that joins others needs a file.
	data := t.TempDir()
	if b, err := LoadClusterSecret("", data, false); err != nil || len(b) != 64 {
		t.Fatalf("made secret: %d bytes, %v", len(b), err)
	}
	if _, err := os.Stat(filepath.Join(data, "cluster-secret")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadClusterSecret("", t.TempDir(), true); !errors.Is(err, ErrClusterSecret) || !strings.Contains(err.Error(), "--cluster-secret-file") {
		t.Fatalf("joining without a file: %v", err)
	}
	if b, err := LoadClusterSecret(good, data, true); err != nil || len(b) != 32 {
		t.Fatalf("named file: %d bytes, %v", len(b), err)
	}
}
