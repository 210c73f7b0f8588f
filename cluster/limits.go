package cluster

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/internal/lograte"
)

// Limits against abuse (docs/security.md, "Limits"): besides the request
// size, batch size and scan page limits (Config.Limits, MaxScanPage;
// api/validate.go),
//
//	connections per client IP   ipLimitListener on the gRPC and RESP
//	                            listeners (Config.MaxConnsPerIP)
//	streams per gRPC connection grpc.MaxConcurrentStreams (Config.MaxConcurrentStreams)
//	server-side deadlines       deadlineUnary: a gRPC call without a
//	                            deadline gets Config.RequestTimeout, so
//	                            every read barrier, proposal and forward
//	                            it makes ends; RESP commands get the same
//	                            timeout (redisfront)
//	idle and slow RESP clients  Config.RedisIdleTimeout (read) and
//	                            Config.RedisWriteTimeout (each write)
//	admin HTTP connections      http.Server timeouts and header bytes
//	                            (Config.HTTP*), the per-IP limit
//	idle and dead gRPC clients  keepalive: Config.GRPCMaxConnIdle,
//	                            GRPCKeepaliveTime/Timeout; pings at most
//	                            every Config.GRPCKeepaliveMinTime
//	Raft port connections       limitRaftConns (Config.RaftMaxConns,
//	                            RaftMaxConnsPerIP), the mux's handshake
//	                            timeout (Config.RaftHandshakeTimeout)
//	log floods                  internal/lograte
//	RESP commands, MULTI blocks Config.RedisMax* (redisfront/conn.go): checked
//	                            as each header arrives

// deadlineUnary gives a call without a deadline the node's request
// timeout. A client's own deadline is kept.
func (n *Node) deadlineUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, ok := ctx.Deadline(); ok {
		return handler(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	return handler(ctx, req)
}

// ipLimitListener refuses (closes at once) a connection from a remote IP
// that already holds max open connections accepted by it. Accept never
// returns the refused ones, so servers keep serving.
type ipLimitListener struct {
	net.Listener
	max     int
	onLimit func(ip string) // called for each refused connection (may be nil)
	// maxTotal, if positive, also caps the open connections of every IP
	// together; onTotal is called for each connection it refuses.
	maxTotal int
	onTotal  func(ip string)

	mu    sync.Mutex
	conns map[string]int // open connections by remote IP
	total int            // open connections
}

func newIPLimitListener(ln net.Listener, max int, onLimit func(ip string)) *ipLimitListener {
	return &ipLimitListener{Listener: ln, max: max, onLimit: onLimit, conns: map[string]int{}}
}

func (l *ipLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		l.mu.Lock()
		full := l.maxTotal > 0 && l.total >= l.maxTotal
		ok := !full && l.conns[ip] < l.max
		if ok {
			l.conns[ip]++
			l.total++
		}
		l.mu.Unlock()
		if ok {
			return &ipLimitConn{Conn: c, l: l, ip: ip}, nil
		}
		_ = c.Close()
		on := l.onLimit
		if full {
			on = l.onTotal
		}
		if on != nil {
			on(ip)
		}
	}
}

// open returns the number of open connections from ip (tests).
func (l *ipLimitListener) open(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[ip]
}

func (l *ipLimitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.conns[ip]--; l.conns[ip] <= 0 {
		delete(l.conns, ip)
	}
}

func remoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// ipLimitConn gives its slot back once, on the first Close.
type ipLimitConn struct {
	net.Conn
	l    *ipLimitListener
	ip   string
	once sync.Once
}

func (c *ipLimitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// limitRaftConns wraps the Raft listener with its caps: open connections
// in all (Config.RaftMaxConns) and from one IP (Config.RaftMaxConnsPerIP),
// those still in their handshake included. Refused connections are logged
// at most once a second.
func (n *Node) limitRaftConns(ln net.Listener) net.Listener {
	log := lograte.New(n.log, lograte.Every).With("listener", "raft")
	l := newIPLimitListener(ln, n.cfg.RaftMaxConnsPerIP, func(ip string) {
		log.Warn("connection refused: too many connections from one IP", "ip", ip, "raft_max_conns_per_ip", n.cfg.RaftMaxConnsPerIP)
	})
	l.maxTotal = n.cfg.RaftMaxConns
	l.onTotal = func(ip string) {
		log.Warn("connection refused: too many connections", "ip", ip, "raft_max_conns", n.cfg.RaftMaxConns)
	}
	return l
}

// LimitConns wraps a listener with the per-IP connection limit; refused
// connections are logged at most once a second (internal/lograte).
func (n *Node) LimitConns(ln net.Listener, what string) net.Listener {
	log := lograte.New(n.log, lograte.Every).With("listener", what, "max_conns_per_ip", n.cfg.MaxConnsPerIP)
	return newIPLimitListener(ln, n.cfg.MaxConnsPerIP, func(ip string) {
		log.Warn("connection refused: too many connections from one IP", "ip", ip)
	})
}
