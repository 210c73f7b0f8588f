package cluster

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/internal/lograte"
	"github.com/swarmkv/swarmkv/rpc"
)

// closedWithin reports whether c is closed by the peer within d (a read
// returns EOF or a reset), failing the test on data or a timeout.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			continue // a response before the close (408, 431) is fine
		}
		if errors.Is(err, io.EOF) || isReset(err) {
			return
		}
		t.Fatalf("connection not closed within %v: %v", d, err)
	}
}

// stillOpen reports whether c is open: a read times out after d.
func stillOpen(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHTTPConnTimeouts: the admin HTTP listener disconnects a client that
// sends nothing, one that sends its headers too slowly, and an idle
// keep-alive connection; it refuses oversized headers.
func TestHTTPConnTimeouts(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.HTTPReadHeaderTimeout = 300 * time.Millisecond
		c.HTTPReadTimeout = time.Second
		c.HTTPIdleTimeout = 300 * time.Millisecond
	})
	addr := tc.nodes[0].Addrs().HTTPAddr
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The defaults were 5s to read headers and no idle timeout: each
	// case waits well below that.
	const bound = 3 * time.Second
	t.Run("silent", func(t *testing.T) {
		closedWithin(t, dial(t), bound)
	})
	t.Run("slow header", func(t *testing.T) {
		c := dial(t)
		done := make(chan struct{})
		defer close(done)
		go func() {
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
				return
			}
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				if _, err := io.WriteString(c, "X-Slow: a\r\n"); err != nil {
					return
				}
			}
		}()
		closedWithin(t, c, bound)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("status %d, close %v: want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		closedWithin(t, c, bound)
	})
	t.Run("large header", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("100 KiB header: status %d, want 431", resp.StatusCode)
		}
	})
}

// TestHTTPConnLimitPerIP: the admin HTTP listener has the per-IP
// connection limit of the gRPC and RESP listeners (it had none).
func TestHTTPConnLimitPerIP(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.MaxConnsPerIP = 3
	})
	addr := tc.nodes[0].Addrs().HTTPAddr
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := []net.Conn{dial(), dial(), dial()}
	closedWithin(t, dial(), 3*time.Second) // the header timeout is 5s
	for i, c := range held {
		if !stillOpen(c, 100*time.Millisecond) {
			t.Fatalf("connection %d within the limit was closed", i+1)
		}
	}
}

// TestGRPCMaxConnIdle: a gRPC connection without calls is sent GOAWAY
// after Config.GRPCMaxConnIdle (there was no idle limit), and the Go
// client reconnects for its next call.
func TestGRPCMaxConnIdle(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.GRPCMaxConnIdle = 300 * time.Millisecond })
	addr := tc.nodes[0].Addrs().GRPCAddr

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// Client preface and an empty SETTINGS frame (RFC 9113 §3.4).
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for {
		// Frame header: length u24 | type u8 | flags u8 | stream u32.
		var h [9]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			t.Fatalf("no GOAWAY on an idle connection: %v", err)
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			t.Fatal(err)
		}
		typ, flags := h[3], h[4]
		if typ == 4 && flags&1 == 0 { // SETTINGS: acknowledge it
			if _, err := c.Write([]byte{0, 0, 0, 4, 1, 0, 0, 0, 0}); err != nil {
				t.Fatal(err)
			}
		}
		if typ == 7 { // GOAWAY
			break
		}
	}

	// A Go client's connection is closed the same way and redialed.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), client.Keepalive())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := rpc.NewClusterClient(cc)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cl.ClusterMap(ctx, &rpc.ClusterMapRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	call()
	waitFor(t, 5*time.Second, "idle client connection closed", func() error {
		if s := cc.GetState().String(); s == "READY" {
			return errors.New(s)
		}
		return nil
	})
	call()
}

// TestKeepaliveWithinPolicy: the Go client's (and the nodes') keepalive
// pings are never more frequent than a node's enforcement policy allows,
// whatever --grpc-keepalive-min-time is (GOAWAY too_many_pings otherwise).
func TestKeepaliveWithinPolicy(t *testing.T) {
	if client.KeepaliveTime < 2*maxKeepaliveMinTime {
		t.Fatalf("client pings every %v, nodes may require %v between pings", client.KeepaliveTime, maxKeepaliveMinTime)
	}
	c := Config{ID: "n1", DataDir: t.TempDir()}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.GRPCKeepaliveMinTime = maxKeepaliveMinTime + time.Second
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("min time %v accepted: %v", c.GRPCKeepaliveMinTime, err)
	}
}

// TestRaftConnCaps: the Raft port refuses connections over its total cap
// and over its per-IP cap (it had none), as they are accepted; those
// within keep waiting for their header.
func TestRaftConnCaps(t *testing.T) {
	for _, tt := range []struct {
		name         string
		total, perIP int
	}{
		{"total", 3, 100},
		{"per IP", 100, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCluster(t, 1, 1, func(c *Config) {
				c.RaftMaxConns, c.RaftMaxConnsPerIP = tt.total, tt.perIP
				c.RaftHandshakeTimeout = time.Minute // held connections stay
			})
			addr := tc.nodes[0].Addrs().RaftAddr
			dial := func() net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			held := []net.Conn{dial(), dial(), dial()}
			closedWithin(t, dial(), 3*time.Second) // the old handshake timeout was 5s
			for i, c := range held {
				if !stillOpen(c, 100*time.Millisecond) {
					t.Fatalf("connection %d within the cap was closed", i+1)
				}
			}
			// Closing one frees its slot once the mux sees the close.
			held[0].Close()
			waitFor(t, 5*time.Second, "a connection after a close accepted", func() error {
				c := dial()
				if stillOpen(c, 200*time.Millisecond) {
					return nil
				}
				c.Close()
				return errors.New("refused")
			})
		})
	}
}

// TestRaftHandshakeFloodLogs: a flood of connections with bad headers on
// the Raft port logs a bounded number of lines (it logged one each), with
// the count of those left out.
func TestRaftHandshakeFloodLogs(t *testing.T) {
	var logs syncBuffer
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	addr := tc.nodes[0].Addrs().RaftAddr
	const flood = 200
	const msg = "raft mux: rejected connection"
	start := time.Now()
	for range flood {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("XXXXXX")); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, c, 5*time.Second) // rejected (and logged) by now
		c.Close()
	}
	elapsed := time.Since(start)
	lines := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) {
			lines++
		}
	}
	if max := int(elapsed/lograte.Every) + 2; lines < 1 || lines > max {
		t.Fatalf("%d rejected handshakes in %v logged %d lines, want 1..%d", flood, elapsed, lines, max)
	}
}

// TestAdminHostCheck: the admin API on a loopback listener refuses a Host
// that is not a loopback name or address of the node (DNS rebinding), and
// a cross-site Origin; loopback names and IPs with or without port pass,
// health endpoints included.
func TestAdminHostCheck(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	addr := tc.nodes[0].Addrs().HTTPAddr
	_, port, _ := net.SplitHostPort(addr)
	get := func(path, host, origin string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/v1/status", "/metrics"} {
		for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example", "localhost.evil.example:" + port, "10.0.0.1"} {
			code, body := get(path, host, "")
			if code != http.StatusMisdirectedRequest || !strings.Contains(body, "DNS rebinding") {
				t.Errorf("GET %s Host %s: %d %s, want 421", path, host, code, body)
			}
		}
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "localhost", "127.0.0.1", "[::1]",
			"LocalHost.:" + port, "node.localhost:" + port, "127.1.2.3:" + port} {
			if code, body := get(path, host, ""); code != http.StatusOK {
				t.Errorf("GET %s Host %s: %d %s, want 200", path, host, code, body)
			}
		}
	}
	if code, body := get("/v1/status", "127.0.0.1:"+port, "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("Origin evil.example: %d %s, want 403", code, body)
	}
	if code, body := get("/v1/status", "127.0.0.1:"+port, "null"); code != http.StatusForbidden {
		t.Errorf("Origin null: %d %s, want 403", code, body)
	}
	if code, body := get("/v1/status", "127.0.0.1:"+port, "http://localhost:"+port); code != http.StatusOK {
		t.Errorf("Origin localhost: %d %s, want 200", code, body)
	}
}
