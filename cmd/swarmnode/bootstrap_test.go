package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLIClusterSecretBootstrap: a node with --auth without TLS (loopback)
// refuses admin calls without a credential, naming the fix; the operator
// makes the first admin token with `token create --cluster-secret-file
// <data-dir>/cluster-secret`, and uses it; a signature with another
// secret, or an open secret file, is refused and makes nothing.
func TestCLIClusterSecretBootstrap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	httpAddr := freeAddr(t)
	var serveOut, serveErr lockedBuffer
	serveCtx, stop := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() {
		exited <- run(serveCtx, []string{"serve", "--auth", "--id", "t1", "--data-dir", dataDir,
			"--grpc-addr", freeAddr(t), "--raft-addr", freeAddr(t), "--http-addr", httpAddr, "--gossip-addr", freeAddr(t),
			"--redis-addr", freeAddr(t), "--shards", "1", "--gossip-profile", "local", "--log-level", "info",
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms"}, &serveOut, &serveErr)
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pollUntil(t, 30*time.Second, "node ready", func() error {
		_, _, err := runCmd(ctx, "health", "--ready", "--quiet", "--http-addr", httpAddr)
		return err
	})
	secretFile := filepath.Join(dataDir, "cluster-secret")
	secret, err := os.ReadFile(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"SWARM_TOKEN", "SWARM_TLS_CA", "SWARM_TLS_CERT", "SWARM_TLS_KEY", "SWARM_ADMIN", "SWARM_CLUSTER_SECRET_FILE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}

	// No credential: refused, and the error names the fix.
	create := []string{"token", "create", "--admin", httpAddr, "--name", "ops", "--role", "admin"}
	if _, _, err := runCmd(ctx, create...); err == nil || !strings.Contains(err.Error(), "authentication required") ||
		!strings.Contains(err.Error(), "--cluster-secret-file <data-dir>/cluster-secret") {
		t.Fatalf("token create without credentials: %v", err)
	}
	// Another secret: 401, nothing made.
	other := filepath.Join(dir, "other-secret")
	if err := os.WriteFile(other, []byte(strings.Repeat("x", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(ctx, append(create, "--cluster-secret-file", other)...); err == nil || !strings.Contains(err.Error(), "bad cluster-secret signature") {
		t.Fatalf("token create with another secret: %v", err)
	}
	// A group-readable copy of the right secret: refused by the CLI (the
	// node's own permission check), before anything is sent.
	open := filepath.Join(dir, "open-secret")
	if err := os.WriteFile(open, secret, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if _, _, err := runCmd(ctx, append(create, "--cluster-secret-file", open)...); exitCode(err) != 2 || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("token create with a group-readable secret: %v (exit %d)", err, exitCode(err))
	}
	// With TLS flags the secret is a usage error (use a client certificate).
	if _, _, err := runCmd(ctx, append(create, "--cluster-secret-file", secretFile, "--tls-ca", filepath.Join(dir, "ca.pem"))...); exitCode(err) != 2 {
		t.Fatalf("--cluster-secret-file with --tls-ca: %v (exit %d)", err, exitCode(err))
	}
	var list string
	pollUntil(t, 20*time.Second, "token list (the meta group known)", func() error {
		var err error
		list, _, err = runCmd(ctx, "token", "list", "--admin", httpAddr, "--cluster-secret-file", secretFile)
		return err
	})
	if strings.Contains(list, "ops") {
		t.Fatalf("tokens after the refused creates: %q", list)
	}

	// The right secret: the first admin token.
	out, _, err := runCmd(ctx, append(create, "--cluster-secret-file", secretFile)...)
	if err != nil {
		t.Fatalf("token create --cluster-secret-file: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tok := lines[len(lines)-1]
	if !strings.HasPrefix(tok, "swk_") {
		t.Fatalf("token create printed %q", out)
	}
	// The secret from the environment works for the other admin commands.
	t.Setenv("SWARM_CLUSTER_SECRET_FILE", secretFile)
	if out, _, err := runCmd(ctx, "members", "--admin", httpAddr); err != nil || !strings.Contains(out, "t1") {
		t.Fatalf("members with SWARM_CLUSTER_SECRET_FILE: %v %q", err, out)
	}
	if out, _, err := runCmd(ctx, "token", "list", "--admin", httpAddr); err != nil || !strings.Contains(out, tok[4:20]) {
		t.Fatalf("token list with SWARM_CLUSTER_SECRET_FILE: %v %q", err, out)
	}
	os.Unsetenv("SWARM_CLUSTER_SECRET_FILE")

	// The token works on its own: admin calls and a second token.
	t.Setenv("SWARM_TOKEN", tok)
	pollUntil(t, 10*time.Second, "token known", func() error {
		_, _, err := runCmd(ctx, "members", "--admin", httpAddr)
		return err
	})
	if out, _, err := runCmd(ctx, "token", "create", "--admin", httpAddr, "--name", "ci", "--role", "kv:read"); err != nil || !strings.Contains(out, "(ci, roles kv:read)") {
		t.Fatalf("token create with the admin token: %v %q", err, out)
	}
	logs := serveErr.String()
	if strings.Contains(logs, strings.TrimSpace(string(secret))) || strings.Contains(logs, tok[21:]) {
		t.Fatal("the cluster secret or the token's secret appears in the node's log")
	}
	if !strings.Contains(logs, "who=operator:cluster-secret") {
		t.Errorf("no audit record of the signed calls:\n%s", logs)
	}
}
