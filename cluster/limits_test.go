package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

// isReset reports a connection closed by the peer (not a timeout).
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestRedisConnLimitPerIP: the RESP listener refuses the N+1th connection
// of one IP; the first N keep working.
func TestRedisConnLimitPerIP(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.RedisAddr = "127.0.0.1:0"
		c.MaxConnsPerIP = 2
	})
	defer tc.closeAll()
	tc.waitReady()
	addr := tc.redisAddr(0)
	ping := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if line != "+PONG\r\n" {
			return errors.New("reply " + line)
		}
		return nil
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i, c := range conns[:2] {
		if err := ping(c); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	if err := ping(conns[2]); err == nil {
		t.Fatal("third connection from one IP answered PING, want it refused")
	}
}

// TestMaxConcurrentStreams: the gRPC server announces the configured
// SETTINGS_MAX_CONCURRENT_STREAMS (read from its first HTTP/2 SETTINGS
// frame).
func TestMaxConcurrentStreams(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.MaxConcurrentStreams = 7 })
	defer tc.closeAll()
	c, err := net.Dial("tcp", tc.nodes[0].Addrs().GRPCAddr)
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
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		payload := make([]byte, length)
		if _, err := io.ReadFull(r, payload); err != nil {
			t.Fatal(err)
		}
		if h[3] != 4 || h[4]&1 != 0 { // not SETTINGS, or an ACK
			continue
		}
		for p := payload; len(p) >= 6; p = p[6:] { // id u16 | value u32
			if binary.BigEndian.Uint16(p) == 3 { // SETTINGS_MAX_CONCURRENT_STREAMS
				if v := binary.BigEndian.Uint32(p[2:]); v != 7 {
					t.Fatalf("max concurrent streams = %d, want 7", v)
				}
				return
			}
		}
		t.Fatal("server SETTINGS without SETTINGS_MAX_CONCURRENT_STREAMS")
	}
}

// TestDeadlineUnary: a call without a deadline gets the request timeout;
// a client's own deadline is kept.
func TestDeadlineUnary(t *testing.T) {
	n := &Node{cfg: Config{RequestTimeout: 50 * time.Millisecond}}
	wait := func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	start := time.Now()
	_, err := n.deadlineUnary(context.Background(), nil, &grpc.UnaryServerInfo{}, wait)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("no client deadline: %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err = n.deadlineUnary(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		dl, _ := ctx.Deadline()
		if time.Until(dl) < time.Minute {
			return nil, errors.New("client deadline replaced")
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoDeadlineWithoutQuorum: a client that sends no deadline, against a
// leader cut off from its followers (it keeps its lease for a while),
// gets DeadlineExceeded within the request timeout instead of waiting for
// the leader to step down.
func TestNoDeadlineWithoutQuorum(t *testing.T) {
	const reqTimeout = 300 * time.Millisecond
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		c.RequestTimeout = reqTimeout
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 3*time.Second
	})
	defer tc.closeAll()
	tc.waitReady()
	li := tc.leaderOf(0)
	if li < 0 {
		t.Fatal("no leader of shard 0")
	}
	leader := tc.nodes[li]
	conn, err := grpc.NewClient(leader.Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := rpc.NewKVClient(conn)
	tc.net.Isolate(leader.ID())
	defer tc.net.Heal()

	calls := map[string]func() error{
		"put": func() error {
			_, err := kv.Put(context.Background(), &rpc.PutRequest{RoutingKey: []byte("u"), Key: []byte("k"), Value: []byte("v")})
			return err
		},
		"linearizable get": func() error {
			_, err := kv.Get(context.Background(), &rpc.GetRequest{RoutingKey: []byte("u"), Key: []byte("k"), Consistency: rpc.Consistency_CONSISTENCY_LINEARIZABLE})
			return err
		},
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		took := time.Since(start)
		switch status.Code(err) {
		case codes.DeadlineExceeded, codes.Unavailable:
		default:
			t.Fatalf("%s without quorum: %v, want DeadlineExceeded or Unavailable", name, err)
		}
		if took > reqTimeout+time.Second {
			t.Fatalf("%s took %v, request timeout %v", name, took, reqTimeout)
		}
		t.Logf("%s: %v after %v", name, status.Code(err), took)
	}
}

// TestRedisIdleTimeout: a RESP connection that sends nothing is closed
// after the idle timeout.
func TestRedisIdleTimeout(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.RedisAddr = "127.0.0.1:0"
		c.RedisIdleTimeout = time.Second
	})
	defer tc.closeAll()
	c, err := net.Dial("tcp", tc.redisAddr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("idle connection: read %v, want it closed", err)
	}
	if took := time.Since(start); took < 900*time.Millisecond || took > 5*time.Second {
		t.Fatalf("idle connection closed after %v, idle timeout 1s", took)
	}
}
