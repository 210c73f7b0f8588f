package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// rawRedis sends in on a new connection to node 0's RESP front and
// returns everything the node sends back until it closes the connection
// (closed false when it is still open after 5 s).
func rawRedis(t *testing.T, tc *testCluster, in string) (reply string, closed bool) {
	t.Helper()
	nc, err := net.Dial("tcp", tc.redisAddr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	go func() { _, _ = io.WriteString(nc, in) }()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(nc)
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, syscall.ECONNRESET):
		return string(b), true
	case errors.As(err, &ne) && ne.Timeout():
		return string(b), false
	}
	t.Fatalf("read: %v", err)
	return "", false
}

// TestRedisProtocolBounds: a command over a RESP bound is refused as its
// header arrives, with Redis's error text, and the connection is closed;
// HTTP sent to the port is dropped without a reply and logged.
func TestRedisProtocolBounds(t *testing.T) {
	var logs syncBuffer
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.RedisAddr = "127.0.0.1:0"
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.RedisMaxArgs = 64
		c.RedisMaxBulk = 4096
		c.RedisMaxCommandBytes = 3 * 4096
	})
	bulk := func(n int) string { return fmt.Sprintf("$%d\r\n%s\r\n", n, strings.Repeat("x", n)) }
	for _, tt := range []struct{ name, in, reply string }{
		{"args", "*65\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"args after a good command", "PING\r\n*100000000\r\n", "+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"},
		{"bulk", "*2\r\n$3\r\nGET\r\n$4097\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"huge bulk", "*1\r\n$4000000000\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"command bytes", "*4\r\n$3\r\nSET\r\n" + bulk(4096) + bulk(4096) + "$4096\r\n", "-ERR Protocol error: too big command\r\n"},
		{"inline", strings.Repeat("a", 70<<10), "-ERR Protocol error: too big inline request\r\n"},
		{"framing", "*1\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"quotes", "SET k \"v\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"POST", "POST / HTTP/1.1\r\nHost: localhost\r\n\r\n{}", ""},
		{"GET", "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", ""},
		{"Host after a command", "PING\r\nHost: localhost\r\n", "+PONG\r\n"},
	} {
		reply, closed := rawRedis(t, tc, tt.in)
		if reply != tt.reply || !closed {
			t.Errorf("%s: reply %q closed %v, want %q and closed", tt.name, reply, closed, tt.reply)
		}
	}
	if !strings.Contains(logs.String(), "SECURITY ATTACK") {
		t.Error("HTTP on the RESP port not logged")
	}
	// Within the bounds all is well.
	rdb := redisClient(t, tc, 0, 2)
	ctx := ctxT(t, 10*time.Second)
	if err := rdb.Set(ctx, "k", strings.Repeat("v", 4096), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "SET", "k", strings.Repeat("v", 4097)).Err(); err == nil {
		t.Fatal("a bulk over --redis-max-bulk accepted")
	}
}

// TestRedisHugeBulkBeforeAuth: "$4000000000" from a client that has not
// authenticated is refused at once ("invalid bulk length", the connection
// closed) and the node does not buffer what follows: its heap stays flat
// while the client sends 32 MiB. Before AUTH a command is bounded as
// Redis bounds it (10 arguments of 16 KiB).
func TestRedisHugeBulkBeforeAuth(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.RedisAddr = "127.0.0.1:0"; c.Auth = true })
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	nc, err := net.Dial("tcp", tc.redisAddr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if _, err := io.WriteString(nc, "*1\r\n$4000000000\r\n"); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for range 32 {
			if _, err := nc.Write(chunk); err != nil {
				return
			}
		}
	}()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if line != "-ERR Protocol error: invalid bulk length\r\n" {
		t.Fatalf("reply %q, %v", line, err)
	}
	<-sent // the node closed the connection: the writes stopped
	if grown := int64(heap()) - int64(before); grown > 4<<20 {
		t.Fatalf("heap grew by %d bytes", grown)
	}

	// Before AUTH: more than 10 arguments, or one of more than 16 KiB.
	for _, in := range []string{"*11\r\n", "*2\r\n$4\r\nAUTH\r\n$16385\r\n"} {
		reply, closed := rawRedis(t, tc, in)
		if !strings.HasPrefix(reply, "-ERR Protocol error: invalid") || !closed {
			t.Errorf("%q before AUTH: %q closed %v", in, reply, closed)
		}
	}
	// A small command before AUTH gets NOAUTH, the connection kept (QUIT
	// is answered after them).
	reply, closed := rawRedis(t, tc, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nQUIT\r\n")
	if reply != "-"+redisNoAuth+"\r\n-"+redisNoAuth+"\r\n+OK\r\n" || !closed {
		t.Errorf("GET before AUTH: %q closed %v", reply, closed)
	}
}

// TestRedisMultiBounds: a MULTI block is bounded in commands and bytes;
// over a bound the command gets an error, the block is dropped and EXEC
// aborts without writing anything, and the connection stays usable.
func TestRedisMultiBounds(t *testing.T) {
	tc := newTestCluster(t, 1, 1, func(c *Config) { c.RedisAddr = "127.0.0.1:0"; c.RedisMaxMultiCommands = 3 })
	ctx := ctxT(t, 30*time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: tc.redisAddr(0), PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	do := func(args ...any) error { return rdb.Do(ctx, args...).Err() }

	must(0, do("MULTI"))
	for i := range 3 {
		must(0, do("SET", fmt.Sprint("c", i), "v"))
	}
	wantRedisErr(t, "4th queued command", do("SET", "c3", "v"), "ERR swarmkv: transaction too long (more than 3 commands)")
	must(0, do("SET", "c4", "v")) // QUEUED, kept nowhere
	wantRedisErr(t, "EXEC", do("EXEC"), "EXECABORT Transaction discarded because of previous errors.")

	// Bytes: the default bound is 2 × --max-value-size + 64 KiB.
	big := strings.Repeat("v", tc.nodes[0].cfg.Limits.MaxValueSize)
	must(0, do("MULTI"))
	must(0, do("SET", "b0", big))
	must(0, do("SET", "b1", big))
	wantRedisErr(t, "3rd big command", do("SET", "b2", big), fmt.Sprintf("ERR swarmkv: transaction too big (more than %d bytes)", tc.nodes[0].cfg.RedisMaxMultiBytes))
	wantRedisErr(t, "EXEC", do("EXEC"), "EXECABORT Transaction discarded because of previous errors.")

	n := must(rdb.Exists(ctx, "c0", "c3", "c4", "b0", "b2").Result())
	eq(t, "keys written by aborted blocks", n, 0)
	eq(t, "PING after", must(rdb.Ping(ctx).Result()), "PONG")
}
