package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestTokenNeverInPlaintextOffLoopback: a client with a bearer token and
// no TLS refuses a non-loopback endpoint before dialing, with an error
// naming the fix (TLS), and does not dial a node the map lists off
// loopback; loopback endpoints stay allowed, and TLS allows any.
func TestTokenNeverInPlaintextOffLoopback(t *testing.T) {
	ctx := context.Background()
	for _, ep := range []string{"10.1.2.3:7100", "example.com:7100", "[2001:db8::1]:7100", "0.0.0.0:7100", "dns:///swarm.internal:7100"} {
		_, err := New(ctx, Config{Endpoints: []string{"127.0.0.1:7100", ep}, Token: "secret-token"})
		if !errors.Is(err, ErrPlaintextToken) || !errors.Is(err, ErrInvalidArgument) ||
			!strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "TLS") || strings.Contains(err.Error(), "secret-token") {
			t.Errorf("New(%s) = %v, want ErrPlaintextToken naming the endpoint and TLS", ep, err)
		}
	}
	c := &Client{cfg: Config{Token: "secret-token"}}
	c.mu.conns = map[string]*nodeConn{}
	if _, err := c.conn("192.0.2.7:7100"); !errors.Is(err, ErrPlaintextToken) {
		t.Errorf("dial of a mapped non-loopback node: %v", err)
	}
	for _, ep := range []string{"127.0.0.1:7100", "127.9.8.7:1", "[::1]:7100", "localhost:7100", "LOCALHOST.:7100", "unix:///tmp/s.sock"} {
		if err := c.checkTokenTransport(ep); err != nil {
			t.Errorf("loopback %s refused: %v", ep, err)
		}
	}
	tlsClient := &Client{cfg: Config{Token: "secret-token", TLS: &tls.Config{}}}
	if err := tlsClient.checkTokenTransport("10.1.2.3:7100"); err != nil {
		t.Errorf("TLS client refused: %v", err)
	}
	anon := &Client{cfg: Config{}}
	if err := anon.checkTokenTransport("10.1.2.3:7100"); err != nil {
		t.Errorf("client without a token refused: %v", err)
	}
	// A loopback endpoint passes the check (then fails to connect).
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := New(ctx, Config{Endpoints: []string{"127.0.0.1:1"}, Token: "t", DefaultTimeout: 200 * time.Millisecond}); errors.Is(err, ErrPlaintextToken) {
		t.Errorf("loopback endpoint refused: %v", err)
	}
}

// FuzzIsLoopback: any address is classified without panicking, and an IP
// address with a port is loopback exactly when net says so.
func FuzzIsLoopback(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7100", "[::1]:1", "localhost:1", "10.0.0.1:7100", "dns:///h:1", "unix:///s", "", ":", "[::1", "127.0.0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		got := IsLoopback(addr)
		if h, _, err := net.SplitHostPort(addr); err == nil && !strings.Contains(addr, "://") && !strings.HasPrefix(addr, "unix") {
			if ip := net.ParseIP(h); ip != nil && got != ip.IsLoopback() {
				t.Fatalf("IsLoopback(%q) = %v, IP says %v", addr, got, ip.IsLoopback())
			}
		}
	})
}
