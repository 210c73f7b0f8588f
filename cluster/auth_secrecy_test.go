package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/client"
)

// TestAuthTokenSecrecy: a TLS cluster with auth; tokens are created (HTTP,
// through a non-leader too), used over gRPC and RESP (AUTH, commands
// forwarded to other nodes), one is revoked and used again; then no token
// nor its secret (as text, hex or base64) is in any log record, in the
// admin API's /v1/state, or in any file of any node's data dir.
func TestAuthTokenSecrecy(t *testing.T) {
	ca := newTestCA(t)
	var logs syncBuffer
	tc := newTLSCluster(t, 3, ca, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test_node", c.ID)
		c.RedisAddr = freePort(t)
	})
	defer tc.closeAll()
	tc.waitReady()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ops := &tlsHTTP{cfg: ca.client("ops", "admin")}
	plain := ca.client("")

	secrets := map[string]string{} // what must never be found: tokens and raw secrets
	create := func(node int, name string, roles ...string) authn.TokenInfo {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"name": name, "roles": roles})
		code, body, err := ops.do("POST", "https://"+tc.nodes[node].Addrs().HTTPAddr+"/v1/tokens", strings.NewReader(string(b)))
		if err != nil || code != 200 {
			t.Fatalf("create token on %d: %d %s %v", node, code, body, err)
		}
		var ti authn.TokenInfo
		if err := json.Unmarshal([]byte(body), &ti); err != nil || ti.Token == "" {
			t.Fatalf("create answer %q: %v", body, err)
		}
		_, sec, err := auth.ParseToken(ti.Token)
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = ti.Token
		secrets[name+" secret"] = string(sec)
		return ti
	}
	kvw := create(0, "kv-writer", "kv:write")
	assets := create(1, "assets-writer", "assets:write")
	revoked := create(2, "revoked", "kv:write", "assets:write")
	waitFor(t, 10*time.Second, "tokens on every node", func() error {
		for _, n := range tc.nodes {
			for _, ti := range []authn.TokenInfo{kvw, assets, revoked} {
				if _, ok := n.Authn().IdentifyToken(ti.Token); !ok {
					return errors.New(n.ID() + " does not know a token yet")
				}
			}
		}
		return nil
	})

	// gRPC with tokens; a value in the clear proves the data dir walk sees data.
	const canary = "secrecy-canary-value"
	c, err := tlsClient(t, tc, client.Config{TLS: plain, Token: kvw.Token})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := putUntilKnown(ctx, c, []byte{'u', byte('a' + i)}, []byte("k"), []byte(canary)); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := tlsClient(t, tc, client.Config{TLS: plain, Token: revoked.Token})
	if err != nil {
		t.Fatal(err)
	}
	if err := putUntilKnown(ctx, rc, []byte("ua"), []byte("k2"), []byte(canary)); err != nil {
		t.Fatal(err)
	}
	// RESP AUTH on every node, keys on every shard (some forwarded).
	rdb := func(node int, tok string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: tc.redisAddr(node), TLSConfig: plain, MaxRetries: -1, Username: "u", Password: tok})
		t.Cleanup(func() { r.Close() })
		return r
	}
	for node := range tc.nodes {
		r := rdb(node, assets.Token)
		for i := range 8 {
			if err := r.Set(ctx, "asset:"+string(rune('a'+i)), canary, 0).Err(); err != nil {
				t.Fatalf("RESP SET on node %d: %v", node, err)
			}
		}
		// An explicit AUTH command too, and a wrong one.
		if err := r.Do(ctx, "AUTH", "someone", assets.Token).Err(); err != nil {
			t.Fatalf("AUTH: %v", err)
		}
		if err := r.Do(ctx, "AUTH", "someone", assets.Token+"0").Err(); err == nil {
			t.Fatal("AUTH with a mangled token accepted")
		}
	}
	rr := rdb(0, revoked.Token)
	if err := rr.Set(ctx, "asset:z", canary, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// Revoke one; it is refused everywhere, over gRPC and RESP.
	if code, body, err := ops.do("POST", "https://"+tc.nodes[1].Addrs().HTTPAddr+"/v1/tokens/"+revoked.ID+"/revoke", nil); err != nil || code != 200 {
		t.Fatalf("revoke: %d %s %v", code, body, err)
	}
	waitFor(t, 10*time.Second, "revoked everywhere", func() error {
		for _, n := range tc.nodes {
			if _, ok := n.Authn().IdentifyToken(revoked.Token); ok {
				return errors.New(n.ID() + " still accepts the token")
			}
		}
		return nil
	})
	if err := rc.Put(ctx, []byte("ua"), []byte("k3"), []byte("x")); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("revoked token over gRPC: %v", err)
	}
	if err := rdb(2, revoked.Token).Ping(ctx).Err(); err == nil {
		t.Fatal("revoked token accepted by RESP AUTH")
	} else {
		poolsCheckNoLeak(t, "RESP error", []byte(err.Error()), secrets)
	}
	if _, err := tlsClient(t, tc, client.Config{TLS: plain, Token: revoked.Token + "0"}); err == nil {
		t.Fatal("malformed token accepted")
	} else {
		poolsCheckNoLeak(t, "gRPC error", []byte(err.Error()), secrets)
	}

	// /v1/state shows the tokens without their hashes; the list never had them.
	for _, path := range []string{"/v1/state", "/v1/tokens"} {
		code, body, err := ops.do("GET", "https://"+tc.nodes[0].Addrs().HTTPAddr+path, nil)
		if err != nil || code != 200 || !strings.Contains(body, revoked.ID) {
			t.Fatalf("GET %s: %d %s %v", path, code, body, err)
		}
		if strings.Contains(body, `"hash"`) {
			t.Errorf("GET %s shows token hashes", path)
		}
		poolsCheckNoLeak(t, path, []byte(body), secrets)
	}

	tc.closeAll()
	poolsCheckNoLeak(t, "logs", []byte(logs.String()), secrets)
	if !strings.Contains(logs.String(), revoked.ID) || !strings.Contains(logs.String(), "audit=true") {
		t.Error("the logs name neither the revoked token's id nor any audit record (the scan may see nothing)")
	}
	found, files := poolsCheckDataDirs(t, tc, secrets, canary)
	if found == 0 || files < 10 {
		t.Fatalf("data dir walk: %d files, %d with the canary: it does not see the data", files, found)
	}
	t.Logf("scanned %d files (%d with the canary) and %d bytes of logs for %d secrets", files, found, len(logs.String()), len(secrets))
}
