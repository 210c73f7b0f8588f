package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/internal/leakcheck"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/freeport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

func addr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestServerComposesRedisFront: New starts a one-node cluster with its
// RESP front, which answers PING and serves a SET/GET once the node is
// ready; Close stops the front (its port refuses connections) and the
// node, joining every goroutine (goleak), and is idempotent.
func TestServerComposesRedisFront(t *testing.T) {
	cfg := cluster.Config{
		ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), BootstrapExpect: 1, Shards: 1,
		RaftAddr: addr(t), GRPCAddr: addr(t), GossipAddr: addr(t), RedisAddr: "127.0.0.1:0",
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, GossipProfile: "local",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ra := s.RedisAddr()
	if ra == "" || ra == cfg.RedisAddr {
		t.Fatalf("RedisAddr = %q, want the bound address", ra)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Node().Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", s.Node().Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	nc, err := net.Dial("tcp", ra)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rd := bufio.NewReader(nc)
	roundTrip := func(cmd, want string) {
		t.Helper()
		for {
			if _, err := io.WriteString(nc, cmd); err != nil {
				t.Fatal(err)
			}
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			// A leader that has not yet committed an entry of its term
			// answers TRYAGAIN: Redis clients retry it.
			if len(line) > 9 && line[:9] == "-TRYAGAIN" && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if line != want {
				t.Fatalf("%q: reply %q, want %q", cmd, line, want)
			}
			return
		}
	}
	roundTrip("PING\r\n", "+PONG\r\n")
	roundTrip("*3\r\n$3\r\nSET\r\n$5\r\nasset\r\n$1\r\nv\r\n", "+OK\r\n")
	roundTrip("*2\r\n$3\r\nGET\r\n$5\r\nasset\r\n", "$1\r\n")
	if line, err := rd.ReadString('\n'); err != nil || line != "v\r\n" {
		t.Fatalf("GET value: %q %v", line, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", ra, time.Second); err == nil {
		c.Close()
		t.Fatal("the RESP port still accepts connections after Close")
	}
}

// TestServerComposesAdmin: New serves the admin HTTP API on the address
// the node bound and announces (Node.Addrs().HTTPAddr): /healthz at once,
// /readyz 200 once the node is ready, the /v1 routes; Close stops it (its
// port refuses connections) before the node, joining every goroutine
// (goleak).
func TestServerComposesAdmin(t *testing.T) {
	cfg := cluster.Config{
		ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), BootstrapExpect: 1, Shards: 1,
		RaftAddr: addr(t), GRPCAddr: addr(t), GossipAddr: addr(t), HTTPAddr: "127.0.0.1:0",
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, GossipProfile: "local",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ha := s.HTTPAddr()
	if ha == "" || ha != s.Node().Addrs().HTTPAddr {
		t.Fatalf("HTTPAddr = %q, want the node's bound address %q", ha, s.Node().Addrs().HTTPAddr)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ha + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/readyz")
		if code == 200 && body == "ready\n" {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get("/v1/members"); code != 200 || !strings.Contains(body, `"id": "n1"`) {
		t.Fatalf("/v1/members: %d %q", code, body)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", ha, time.Second); err == nil {
		c.Close()
		t.Fatal("the HTTP port still accepts connections after Close")
	}
}
