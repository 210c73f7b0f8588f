package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/internal/faultnet"
	"github.com/swarmkv/swarmkv/rpc"
)

// syncBuffer collects log output from every node.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.WriteString(string(p))
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAuthTokensRolesAndRefusals(t *testing.T) {
	ca := newTestCA(t)
	var logs syncBuffer
	tc := newTLSCluster(t, 3, ca, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test_node", c.ID)
		c.RedisAddr = freePort(t)
		c.Testing.Faults = faultnet.NewLocal(1)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ops := &tlsHTTP{cfg: ca.client("ops", "admin")}
	plain := &tlsHTTP{cfg: ca.client("")}

	// Tokens are made through any node (a non-leader forwards to the meta leader).
	var secrets []string
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
		_, sec, _ := auth.ParseToken(ti.Token)
		secrets = append(secrets, ti.Token, hexString(sec))
		return ti
	}
	reader, writer := create(0, "reader", "kv:read"), create(1, "writer", "kv:write", "assets:write")
	create(2, "third", "billing:read")
	// Every node learns the tokens through the sync loop.
	waitFor(t, 10*time.Second, "tokens on every node", func() error {
		for _, n := range tc.nodes {
			if _, ok := n.Authn().IdentifyToken(writer.Token); !ok {
				return errors.New(n.ID() + " does not know the token yet")
			}
		}
		return nil
	})

	rk := []byte("alice")
	write := func(c *client.Client, v string) error { return c.Put(ctx, rk, []byte("k"), []byte(v)) }
	admin, err := tlsClient(t, tc, client.Config{TLS: ca.client("ops2", "*:write")})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(admin, "v1"); err != nil {
		t.Fatal(err)
	}
	// No credentials: ClusterMap is refused too, so New fails with the
	// refusal (not as if the cluster were down).
	if _, err := tlsClient(t, tc, client.Config{TLS: plain.cfg}); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("client without credentials: %v", err)
	}
	// Nor can a Pipeline stream be opened without credentials.
	if cc, err := grpc.NewClient(tc.nodes[0].Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(plain.cfg))); err != nil {
		t.Fatal(err)
	} else {
		st, err := rpc.NewPipelineClient(cc).Calls(ctx)
		if err == nil {
			put, _ := proto.Marshal(&rpc.PutRequest{RoutingKey: rk, Key: []byte("k"), Value: []byte("evil")})
			st.Send(&rpc.PipelineCalls{Calls: []*rpc.PipelineCall{{Id: 1, Method: rpc.KV_Put_FullMethodName, Request: put}}})
			_, err = st.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("pipeline stream without credentials: %v", err)
		}
		cc.Close()
	}
	// A bad token.
	if _, err := tlsClient(t, tc, client.Config{TLS: plain.cfg, Token: "swk_0000000000000000_" + strings.Repeat("0", 64)}); err == nil {
		t.Fatal("unknown token accepted")
	}
	// Read-only role: reads work, writes are refused and change nothing.
	rc, err := tlsClient(t, tc, client.Config{TLS: plain.cfg, Token: reader.Token})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rc.Get(ctx, rk, []byte("k")); err != nil || string(v) != "v1" {
		t.Fatalf("reader get: %q %v", v, err)
	}
	if err := write(rc, "evil"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("reader put: %v, want ErrPermissionDenied", err)
	}
	if _, err := rc.Billing().GetAccount(ctx, [16]byte{1}); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("reader on billing: %v, want ErrPermissionDenied", err)
	}
	if v, _ := admin.Get(ctx, rk, []byte("k")); string(v) != "v1" {
		t.Fatalf("value after a refused write: %q", v)
	}
	// Writer, then revoked.
	wc, err := tlsClient(t, tc, client.Config{TLS: plain.cfg, Token: writer.Token})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(wc, "v2"); err != nil {
		t.Fatal(err)
	}
	// Leases need the leases keyspace: kv:write may not grant one, nor
	// open the keep-alive stream; *:write may.
	if _, err := wc.Leases().Grant(ctx, rk, 5*time.Second); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("kv:write grant: %v, want ErrPermissionDenied", err)
	}
	lease, err := admin.Leases().Grant(ctx, rk, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.Leases().KeepAlive(ctx, lease); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "/swarmkv.v1.Lease/KeepAliveStream") {
		t.Fatalf("kv:write keep-alive stream: %v, want ErrPermissionDenied", err)
	}
	if ka, err := admin.Leases().KeepAlive(ctx, lease); err != nil {
		t.Fatalf("*:write keep-alive stream: %v", err)
	} else {
		ka.Stop()
	}
	if code, body, err := ops.do("POST", "https://"+tc.nodes[2].Addrs().HTTPAddr+"/v1/tokens/"+writer.ID+"/revoke", nil); err != nil || code != 200 {
		t.Fatalf("revoke: %d %s %v", code, body, err)
	}
	waitFor(t, 10*time.Second, "revoked everywhere", func() error {
		for _, n := range tc.nodes {
			if _, ok := n.Authn().IdentifyToken(writer.Token); ok {
				return errors.New(n.ID() + " still accepts the token")
			}
		}
		return nil
	})
	if err := write(wc, "v3"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("revoked token put: %v", err)
	}

	// The admin HTTP API: 401 without credentials, 403 without admin.
	url := "https://" + tc.nodes[0].Addrs().HTTPAddr + "/v1/members"
	if code, _ := plain.get(url); code != 401 {
		t.Fatalf("admin API without credentials: %d", code)
	}
	if code, _ := (&tlsHTTP{cfg: plain.cfg, token: reader.Token}).get(url); code != 403 {
		t.Fatalf("admin API with a kv:read token: %d", code)
	}
	if code, _ := plain.get("https://" + tc.nodes[0].Addrs().HTTPAddr + "/readyz"); code != 200 {
		t.Fatalf("readyz must stay open: %d", code)
	}
	// Fault injection (--fault-injection) is admin-only; a bad document
	// is refused and changes nothing.
	faultsURL := "https://" + tc.nodes[2].Addrs().HTTPAddr + "/debug/faults"
	if code, body, _ := (&tlsHTTP{cfg: plain.cfg, token: reader.Token}).do("PUT", faultsURL, strings.NewReader(`{"delay":"1s"}`)); code != 403 {
		t.Fatalf("PUT /debug/faults with a kv:read token: %d %s", code, body)
	}
	if code, body, _ := ops.do("PUT", faultsURL, strings.NewReader(`{"drop_rate":0.5}`)); code != 200 || !strings.Contains(body, `"drop_rate":0.5`) {
		t.Fatalf("PUT /debug/faults as admin: %d %s", code, body)
	}
	if code, body, _ := ops.do("PUT", faultsURL, strings.NewReader(`{"drop_rate":2}`)); code != 400 || !strings.Contains(body, "drop_rate") {
		t.Fatalf("PUT /debug/faults with a bad rate: %d %s", code, body)
	}
	if f := tc.nodes[2].cfg.Testing.Faults.Faults(); f.DropRate != 0.5 {
		t.Fatalf("a refused document changed the faults: %+v", f)
	}
	tc.nodes[2].cfg.Testing.Faults.Set(faultnet.Faults{})
	code, body, _ := ops.do("GET", "https://"+tc.nodes[1].Addrs().HTTPAddr+"/v1/tokens", nil)
	if code != 200 || !strings.Contains(body, reader.ID) || strings.Contains(body, "hash") {
		t.Fatalf("token list: %d %s", code, body)
	}

	// RESP: NOAUTH, WRONGPASS, NOPERM, then allowed.
	rdb := redis.NewClient(&redis.Options{Addr: tc.redisAddr(0), TLSConfig: plain.cfg, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Set(ctx, "asset:1", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("RESP before AUTH: %v", err)
	}
	rdbAs := func(tok string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: tc.redisAddr(1), TLSConfig: plain.cfg, MaxRetries: -1, Username: "u", Password: tok})
	}
	bad := rdbAs(strings.Repeat("x", 20))
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("RESP with a bad token: %v", err)
	}
	ro := rdbAs(reader.Token)
	defer ro.Close()
	if err := ro.Set(ctx, "asset:1", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("RESP SET with kv:read: %v", err)
	}
	full := create(0, "assets", "assets:write")
	waitFor(t, 10*time.Second, "assets token known", func() error {
		if _, ok := tc.nodes[1].Authn().IdentifyToken(full.Token); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	rw := rdbAs(full.Token)
	defer rw.Close()
	for i := range 8 { // keys on every shard: some forwarded to another node
		key := "asset:" + string(rune('a'+i))
		if err := rw.Set(ctx, key, "x", 0).Err(); err != nil {
			t.Fatalf("RESP SET %s with assets:write: %v", key, err)
		}
	}

	// Denials are audit-logged; no token or secret appears in any log.
	out := logs.String()
	if !strings.Contains(out, "audit=true") || !strings.Contains(out, "allowed=false") || !strings.Contains(out, "who=token:"+reader.ID) {
		t.Error("no audit record of the denials")
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatalf("a token or secret appears in the logs")
		}
	}
}

func hexString(b []byte) string {
	const d = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, d[c>>4], d[c&15])
	}
	return string(out)
}

// TestRedisRevokedTokenOnOpenConn: a token revoked through the admin API
// stops working on a RESP connection that authenticated with it before:
// once the node has the revocation, the next command on that same open
// connection answers NOAUTH and runs nothing; AUTH with a live token
// works again on it.
func TestRedisRevokedTokenOnOpenConn(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 1, ca, func(c *Config) { c.RedisAddr = freePort(t) })
	ctx := ctxT(t, 60*time.Second)
	ops := &tlsHTTP{cfg: ca.client("ops", "admin")}
	plain := ca.client("")
	n := tc.nodes[0]
	create := func(name string) authn.TokenInfo {
		t.Helper()
		code, body, err := ops.do("POST", "https://"+n.Addrs().HTTPAddr+"/v1/tokens", strings.NewReader(`{"name":"`+name+`","roles":["assets:write"]}`))
		var ti authn.TokenInfo
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &ti) != nil {
			t.Fatalf("create token: %d %s %v", code, body, err)
		}
		waitFor(t, 10*time.Second, "token known", func() error {
			if _, ok := n.Authn().IdentifyToken(ti.Token); !ok {
				return errors.New("not yet")
			}
			return nil
		})
		return ti
	}
	tok, other := create("rw"), create("rw2")

	// One connection (PoolSize 1), authenticated once.
	rdb := redis.NewClient(&redis.Options{Addr: tc.redisAddr(0), TLSConfig: plain, MaxRetries: -1, PoolSize: 1,
		Username: "u", Password: tok.Token})
	defer rdb.Close()
	id := must(rdb.ClientID(ctx).Result())
	if err := rdb.Set(ctx, "asset:k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "MULTI").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "SET", "asset:k", "queued").Err(); err != nil {
		t.Fatal(err)
	}

	if code, body, err := ops.do("POST", "https://"+n.Addrs().HTTPAddr+"/v1/tokens/"+tok.ID+"/revoke", nil); err != nil || code != 200 {
		t.Fatalf("revoke: %d %s %v", code, body, err)
	}
	waitFor(t, 10*time.Second, "revocation applied", func() error {
		if _, ok := n.Authn().IdentifyToken(tok.Token); ok {
			return errors.New("not yet")
		}
		return nil
	})
	// The queued block is gone with the login: EXEC and SET refused.
	wantRedisErr(t, "EXEC after revocation", rdb.Do(ctx, "EXEC").Err(), redisNoAuth)
	wantRedisErr(t, "SET after revocation", rdb.Set(ctx, "asset:k", "after", 0).Err(), redisNoAuth)
	wantRedisErr(t, "GET after revocation", rdb.Get(ctx, "asset:k").Err(), redisNoAuth)

	// Same connection, another live token: allowed again, and nothing of
	// the refused commands ran.
	if err := rdb.Do(ctx, "AUTH", "u", other.Token).Err(); err != nil {
		t.Fatal(err)
	}
	eq(t, "connection id", must(rdb.ClientID(ctx).Result()), id)
	eq(t, "value", must(rdb.Get(ctx, "asset:k").Result()), "before")
	if err := rdb.Do(ctx, "AUTH", "u", tok.Token).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("AUTH with the revoked token: %v", err)
	}
}
