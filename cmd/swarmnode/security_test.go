package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
)

func TestServeRefusesInsecureListener(t *testing.T) {
	_, _, err := runCmd(context.Background(), "serve", "--data-dir", t.TempDir(), "--grpc-addr", "0.0.0.0:0")
	if err == nil || exitCode(err) != 2 || !errors.Is(err, cluster.ErrInsecure) {
		t.Fatalf("serve on 0.0.0.0 without TLS: %v (exit %d)", err, exitCode(err))
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "--insecure") || !strings.Contains(msg, "0.0.0.0:0") {
		t.Fatalf("want one line naming the address and --insecure: %q", msg)
	}
}

// TestServeRefusesInsecureAuth: --insecure --auth on a network address
// does not start (one line naming --auth), and never logs auth=true; the
// same through the environment.
func TestServeRefusesInsecureAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a node that starts stops then
	defer cancel()
	_, stderr, err := runCmd(ctx, "serve", "--data-dir", t.TempDir(), "--insecure", "--auth", "--grpc-addr", "0.0.0.0:0")
	if err == nil || exitCode(err) != 2 || !errors.Is(err, cluster.ErrInsecure) {
		t.Fatalf("serve --insecure --auth on 0.0.0.0: %v (exit %d)", err, exitCode(err))
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "--auth") || !strings.Contains(msg, "0.0.0.0:0") {
		t.Fatalf("want one line naming the address and --auth: %q", msg)
	}
	if strings.Contains(stderr, "auth=true") {
		t.Fatalf("logged auth=true: %s", stderr)
	}
	t.Setenv("SWARM_AUTH", "true")
	t.Setenv("SWARM_INSECURE", "true")
	t.Setenv("SWARM_RAFT_ADDR", "0.0.0.0:0")
	if _, _, err := runCmd(ctx, "serve", "--data-dir", t.TempDir()); !errors.Is(err, cluster.ErrInsecure) {
		t.Fatalf("SWARM_AUTH with SWARM_INSECURE on 0.0.0.0: %v", err)
	}
}

func TestCertsCommand(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if _, _, err := runCmd(ctx, "certs", "node", "--dir", dir, "--id", "n1"); err == nil {
		t.Fatal("node certificate without a CA")
	}
	if out, _, err := runCmd(ctx, "certs", "ca", "--dir", dir); err != nil || !strings.Contains(out, "ca.pem") {
		t.Fatalf("certs ca: %v %q", err, out)
	}
	if _, _, err := runCmd(ctx, "certs", "ca", "--dir", dir); err == nil {
		t.Fatal("certs ca overwrote a CA")
	}
	out, _, err := runCmd(ctx, "certs", "node", "--dir", dir, "--id", "n1", "--addr", "n1,10.0.0.1")
	if err != nil || !strings.Contains(out, "node n1 hosts n1,localhost,10.0.0.1,127.0.0.1") {
		t.Fatalf("certs node: %v %q", err, out)
	}
	if out, _, err := runCmd(ctx, "certs", "client", "--dir", dir, "--name", "alice", "--role", "registry:read"); err != nil || !strings.Contains(out, "client alice roles registry:read") {
		t.Fatalf("certs client: %v %q", err, out)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "gossip.key", "n1.pem", "n1-key.pem", "alice.pem", "alice-key.pem"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, "key.pem") || f == "gossip.key" {
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
			}
		}
	}
	if _, err := authn.LoadGossipKeys(filepath.Join(dir, "gossip.key")); err != nil {
		t.Fatal(err)
	}
}

// startTLSNode runs `serve` with certificates from `certs` in dir and
// returns its gRPC and HTTP addresses; extra flags are appended.
func startTLSNode(t *testing.T, dir string, extra ...string) (grpcAddr, httpAddr, redisAddr string) {
	grpcAddr, httpAddr, redisAddr, _ = startTLSNodeLog(t, dir, extra...)
	return
}

func startTLSNodeLog(t *testing.T, dir string, extra ...string) (grpcAddr, httpAddr, redisAddr string, logs *lockedBuffer) {
	t.Helper()
	ctx := context.Background()
	for _, args := range [][]string{{"certs", "ca", "--dir", dir}, {"certs", "node", "--dir", dir, "--id", "t1"}} {
		if _, _, err := runCmd(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr, httpAddr, redisAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	var serveOut, serveErr lockedBuffer
	serveCtx, stop := context.WithCancel(ctx)
	exited := make(chan error, 1)
	go func() {
		exited <- run(serveCtx, append([]string{"serve", "--id", "t1", "--data-dir", filepath.Join(dir, "data"),
			"--grpc-addr", grpcAddr, "--raft-addr", freeAddr(t), "--http-addr", httpAddr, "--gossip-addr", freeAddr(t),
			"--redis-addr", redisAddr, "--shards", "2", "--gossip-profile", "local", "--log-level", "info",
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms",
			"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "t1.pem"), "--tls-key", filepath.Join(dir, "t1-key.pem"),
			"--gossip-key-file", filepath.Join(dir, "gossip.key")}, extra...), &serveOut, &serveErr)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("serve stderr:\n%s", serveErr.String())
		}
	})
	pollUntil(t, 30*time.Second, "TLS node ready", func() error {
		_, _, err := runCmd(ctx, "health", "--ready", "--quiet", "--http-addr", httpAddr, "--tls-ca", filepath.Join(dir, "ca.pem"))
		return err
	})
	return grpcAddr, httpAddr, redisAddr, &serveErr
}

func TestCLIOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	dir := t.TempDir()
	grpcAddr, httpAddr, _, serveLog := startTLSNodeLog(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := runCmd(ctx, "certs", "client", "--dir", dir, "--name", "ops", "--role", "admin,*:write"); err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "ops.pem"), "--tls-key", filepath.Join(dir, "ops-key.pem")}
	kv := func(args ...string) (string, error) {
		out, _, err := runCmd(ctx, append(append([]string{"kv", args[0], "--endpoints", grpcAddr, "--user", "alice", "--timeout", "5s"}, tlsArgs...), args[1:]...)...)
		return out, err
	}
	if out, err := kv("put", "k", "v"); err != nil || out != "OK\n" {
		t.Fatalf("kv put over TLS: %v %q", err, out)
	}
	if out, err := kv("get", "k"); err != nil || out != "v\n" {
		t.Fatalf("kv get over TLS: %v %q", err, out)
	}
	// Plaintext against a TLS node fails.
	if _, _, err := runCmd(ctx, "kv", "get", "k", "--endpoints", grpcAddr, "--user", "alice", "--timeout", "2s"); err == nil {
		t.Fatal("plaintext kv get served")
	}
	// The admin CLI over https; the CA may also come from the environment.
	t.Setenv("SWARM_TLS_CA", filepath.Join(dir, "ca.pem"))
	t.Setenv("SWARM_TLS_CERT", filepath.Join(dir, "ops.pem"))
	t.Setenv("SWARM_TLS_KEY", filepath.Join(dir, "ops-key.pem"))
	if out, _, err := runCmd(ctx, "members", "--admin", httpAddr); err != nil || !strings.Contains(out, "t1") {
		t.Fatalf("members over https: %v %q", err, out)
	}

	// Tokens: made by the admin, refused once revoked, read-only refused on writes.
	out, _, err := runCmd(ctx, "token", "create", "--admin", httpAddr, "--name", "ci", "--role", "kv:read")
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tok := lines[len(lines)-1]
	if !strings.HasPrefix(tok, "swk_") {
		t.Fatalf("token create printed %q", out)
	}
	id := tok[4:20]
	if out, _, err := runCmd(ctx, "token", "list", "--admin", httpAddr); err != nil || !strings.Contains(out, id) || strings.Contains(out, tok) {
		t.Fatalf("token list: %v %q", err, out)
	}
	if _, _, err := runCmd(ctx, "token", "create", "--admin", httpAddr, "--name", "x", "--role", "root"); err == nil || exitCode(err) != 2 {
		t.Fatalf("bad role: %v", err)
	}
	// From here on the client has no certificate: only the token.
	t.Setenv("SWARM_TLS_CERT", "")
	t.Setenv("SWARM_TLS_KEY", "")
	kvTok := func(args ...string) (string, error) {
		out, _, err := runCmd(ctx, append([]string{"kv", args[0], "--endpoints", grpcAddr, "--user", "alice", "--timeout", "5s"}, args[1:]...)...)
		return out, err
	}
	if _, err := kvTok("get", "k"); err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("kv get without credentials: %v", err)
	}
	t.Setenv("SWARM_TOKEN", tok)
	pollUntil(t, 10*time.Second, "token known", func() error { _, err := kvTok("get", "k"); return err })
	if _, err := kvTok("put", "k", "evil"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("read-only token put: %v", err)
	}
	if out, err := kvTok("get", "k"); err != nil || out != "v\n" {
		t.Fatalf("value after a refused put: %q %v", out, err)
	}
	if _, _, err := runCmd(ctx, "members", "--admin", httpAddr); err == nil {
		t.Fatal("admin API with a kv:read token")
	}
	t.Setenv("SWARM_TLS_CERT", filepath.Join(dir, "ops.pem"))
	t.Setenv("SWARM_TLS_KEY", filepath.Join(dir, "ops-key.pem"))
	if out, _, err := runCmd(ctx, "token", "revoke", "--admin", httpAddr, id); err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("token revoke: %v %q", err, out)
	}
	t.Setenv("SWARM_TLS_CERT", "")
	t.Setenv("SWARM_TLS_KEY", "")
	pollUntil(t, 10*time.Second, "token revoked", func() error {
		if _, err := kvTok("get", "k"); err == nil {
			return errString("still accepted")
		}
		return nil
	})
	if _, err := kvTok("get", "k"); err == nil || strings.Contains(err.Error(), tok[21:]) {
		t.Fatalf("revoked token: %v", err)
	}
	if strings.Contains(serveLog.String(), tok[21:]) {
		t.Fatal("the token's secret appears in the node's log")
	}
	if !strings.Contains(serveLog.String(), "audit=true") {
		t.Error("no audit records in the node's log")
	}
}

// TestComposeTLSMountsOwnKeysOnly (issue 22 item 3): every node of
// docker-compose.tls.yml mounts the CA certificate, the gossip keyring and
// its own certificate and key, file by file: never the certs folder, the
// CA key or another node's key.
func TestComposeTLSMountsOwnKeysOnly(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.tls.yml"))
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string][]string{}
	svc := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && strings.HasSuffix(line, ":") {
			svc = strings.TrimSuffix(strings.TrimSpace(line), ":")
			mounts[svc] = nil
			continue
		}
		if svc != "" && strings.Contains(line, "certs") && (strings.Contains(line, "- ") || strings.Contains(line, "volumes:")) {
			mounts[svc] = append(mounts[svc], strings.TrimSpace(line))
		}
	}
	if len(mounts) != 5 {
		t.Fatalf("services %v, want n1..n5", mounts)
	}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("n%d", i)
		var want []string
		for _, f := range []string{"ca.pem", "gossip.key", id + ".pem", id + "-key.pem"} {
			want = append(want, "- ./certs/"+f+":/certs/"+f+":ro")
		}
		got := mounts[id]
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s mounts %q, want %q", id, got, want)
		}
	}
}

// TestCLITokenActor: `token create --actor` binds a token to a user id;
// the answer, `token list` and `token list --json` show it; a bad actor,
// or an actor with pools:impersonate, is a usage error.
func TestCLITokenActor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	dir := t.TempDir()
	_, httpAddr, _ := startTLSNode(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := runCmd(ctx, "certs", "client", "--dir", dir, "--name", "ops", "--role", "admin"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SWARM_TLS_CA", filepath.Join(dir, "ca.pem"))
	t.Setenv("SWARM_TLS_CERT", filepath.Join(dir, "ops.pem"))
	t.Setenv("SWARM_TLS_KEY", filepath.Join(dir, "ops-key.pem"))

	out, _, err := runCmd(ctx, "token", "create", "--admin", httpAddr, "--name", "pools-ui", "--role", "pools:write,pools:secrets", "--actor", "u-1")
	if err != nil || !strings.Contains(out, "roles pools:secrets,pools:write, acts for u-1)") {
		t.Fatalf("token create --actor: %v %q", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	id := strings.TrimPrefix(lines[len(lines)-1], "swk_")[:16]
	if _, _, err := runCmd(ctx, "token", "create", "--admin", httpAddr, "--name", "unbound", "--role", "pools:impersonate,pools:write"); err != nil {
		t.Fatalf("unbound token: %v", err)
	}
	out, _, err = runCmd(ctx, "token", "list", "--admin", httpAddr)
	if err != nil || !strings.Contains(out, "ACTOR") {
		t.Fatalf("token list: %v %q", err, out)
	}
	found := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 4 && f[0] == id:
			found = f[3] == "u-1"
		case len(f) >= 4 && f[1] == "unbound" && f[3] != "-":
			t.Errorf("unbound token listed with actor %q", f[3])
		}
	}
	if !found {
		t.Fatalf("token list does not show actor u-1 for %s:\n%s", id, out)
	}
	out, _, err = runCmd(ctx, "token", "list", "--admin", httpAddr, "--json")
	var ts []struct{ ID, Actor string }
	if err != nil || json.Unmarshal([]byte(out), &ts) != nil {
		t.Fatalf("token list --json: %v %q", err, out)
	}
	if i := slices.IndexFunc(ts, func(x struct{ ID, Actor string }) bool { return x.ID == id }); i < 0 || ts[i].Actor != "u-1" {
		t.Fatalf("token list --json: %q", out)
	}
	for _, bad := range [][]string{
		{"--role", "pools:write", "--actor", "has space"},
		{"--role", "pools:write,pools:impersonate", "--actor", "u-1"},
		{"--role", "*:secrets"},
	} {
		if _, _, err := runCmd(ctx, append([]string{"token", "create", "--admin", httpAddr, "--name", "bad"}, bad...)...); exitCode(err) != 2 {
			t.Errorf("token create %v: %v, want a usage error", bad, err)
		}
	}
}
