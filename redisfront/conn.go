package redisfront

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/resp"
)

// The RESP front's connections: an accept loop and one goroutine per
// connection that reads a command (resp.Reader, within the bounds below),
// runs it, and writes its reply; replies are flushed when the client's
// pipeline is drained. Bounds (docs/security.md, "Limits"):
//
//	one argument        Config.RedisMaxBulk          "$<len>" header
//	arguments           Config.RedisMaxArgs          "*<n>" header
//	one command         Config.RedisMaxCommandBytes  each header
//	before AUTH         10 arguments of 16 KiB, 64 KiB (as Redis)
//	a MULTI block       Config.RedisMaxMultiCommands, RedisMaxMultiBytes
//
// Each is checked when the header announcing the size arrives, before
// anything it announces is buffered. Over one, or on bad framing, the
// client gets Redis's "-ERR Protocol error: ..." and the connection is
// closed (as Redis does); a MULTI block over its bounds is aborted
// instead (EXECABORT), the connection kept. HTTP sent to the port (a
// command named POST or Host:, an inline "GET / HTTP/1.1") closes the
// connection without a reply, logged at most once a second.

// Before a connection authenticates (with auth on) it may send only
// small commands: Redis's own bounds for unauthenticated clients.
var redisPreAuthLimits = resp.Limits{MaxArgs: 10, MaxBulk: 16 << 10, MaxCommand: 64 << 10}

// readLimits returns the bounds of st's next command.
func (f *Front) readLimits(st *redisConn) resp.Limits {
	cfg := &f.cfg
	lim := resp.Limits{MaxArgs: cfg.RedisMaxArgs, MaxBulk: cfg.RedisMaxBulk, MaxCommand: cfg.RedisMaxCommandBytes}
	if f.n.Authn().On() && st.auth.id == nil {
		lim.MaxArgs = min(lim.MaxArgs, redisPreAuthLimits.MaxArgs)
		lim.MaxBulk = min(lim.MaxBulk, redisPreAuthLimits.MaxBulk)
		lim.MaxCommand = min(lim.MaxCommand, redisPreAuthLimits.MaxCommand)
	}
	return lim
}

// serve accepts connections until the listener is closed.
func (f *Front) serve() {
	defer close(f.served)
	var backoff time.Duration
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || f.ctx.Err() != nil {
				return
			}
			// A temporary failure (out of file descriptors): back off as
			// net/http does rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			f.log.Warn("redis accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-f.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		f.mu.Lock()
		if f.mu.closed {
			f.mu.Unlock()
			_ = nc.Close()
			return
		}
		f.mu.open[nc] = struct{}{}
		f.conns.Add(1)
		f.mu.Unlock()
		go f.serveConn(nc)
	}
}

// serveConn runs one connection's commands in order until it closes.
func (f *Front) serveConn(nc net.Conn) {
	defer func() {
		f.mu.Lock()
		delete(f.mu.open, nc)
		f.mu.Unlock()
		_ = nc.Close()
		f.conns.Done()
	}()
	st := &redisConn{id: f.ids.Add(1), proto: 2}
	idle := f.cfg.RedisIdleTimeout
	if tc, ok := nc.(*tls.Conn); ok {
		// Handshake first, so a client certificate's identity (and its
		// bounds) applies from the first command.
		_ = tc.SetReadDeadline(time.Now().Add(idle))
		if err := tc.HandshakeContext(f.ctx); err != nil {
			return
		}
		cs := tc.ConnectionState()
		st.auth.id = authn.IdentifyCert(&cs)
	}
	rd := resp.NewReader(nc, f.readLimits(st))
	wr := bufio.NewWriterSize(nc, 16<<10)
	var out []byte
	var deadline time.Time // the read deadline set last
	for {
		now := time.Now()
		if rd.Buffered() == 0 {
			if err := wr.Flush(); err != nil {
				return
			}
			now = time.Now()
		}
		// The idle timeout runs from here when the next read may block;
		// while a pipeline is buffered, a deadline at least idle/2 away
		// is kept (fewer timer updates).
		if rd.Buffered() == 0 || deadline.Sub(now) < idle/2 {
			deadline = now.Add(idle)
			_ = nc.SetReadDeadline(deadline)
		}
		rd.Limits = f.readLimits(st)
		argv, err := rd.ReadCommand()
		if err != nil {
			f.readFailed(nc, wr, err)
			return
		}
		v, quit := f.handle(st, argv)
		out = v.Append(out[:0], st.proto)
		if _, err := wr.Write(out); err != nil {
			return
		}
		if cap(out) > 64<<10 {
			out = nil // do not keep a large reply's buffer
		}
		if quit {
			_ = wr.Flush()
			return
		}
	}
}

// readFailed sends the replies of the commands before the one that
// failed, answers a protocol error (Redis's text) before the connection
// closes, and logs HTTP sent to the port.
func (f *Front) readFailed(nc net.Conn, wr *bufio.Writer, err error) {
	var pe *resp.ProtocolError
	switch {
	case errors.As(err, &pe):
		_, _ = wr.WriteString("-ERR " + pe.Error() + "\r\n")
		f.log.Debug("redis protocol error", "remote", nc.RemoteAddr().String(), "err", pe.Error())
	case errors.Is(err, resp.ErrCrossProtocol):
		f.attack.seen(f, nc.RemoteAddr())
	}
	_ = wr.Flush()
}

// attackLog logs HTTP requests on the RESP port at most once a second.
type attackLog struct {
	last  atomic.Int64 // unix nanoseconds of the last record
	count atomic.Int64 // seen since the last record
}

func (g *attackLog) seen(f *Front, remote net.Addr) {
	g.count.Add(1)
	now := time.Now().UnixNano()
	last := g.last.Load()
	if now-last < int64(time.Second) || !g.last.CompareAndSwap(last, now) {
		return
	}
	f.log.Warn("Possible SECURITY ATTACK detected: an HTTP request (POST, Host: or GET ... HTTP/1.x) was sent to the RESP port, "+
		"as in a cross-protocol attack from a browser. Connection aborted.", "remote", remote.String(), "count", g.count.Swap(0))
}

// writeTimeoutListener sets a write deadline before each write of its
// connections, so a client that stops reading cannot hold a connection's
// goroutine forever.
type writeTimeoutListener struct {
	net.Listener
	timeout time.Duration
}

func (l writeTimeoutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeTimeoutConn{Conn: c, timeout: l.timeout}, nil
}

type writeTimeoutConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeTimeoutConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
