// Package connlimit caps the connections a listener holds open: per
// remote IP and, optionally, in all. A refused connection is closed at
// once and never returned by Accept, so servers keep serving. It owns only
// that (the node decides the limits and logs refusals: cluster/limits.go);
// it imports the standard library alone, so any listener of the node (gRPC,
// RESP, admin HTTP, the Raft port) can be wrapped.
//
// Usage:
//
//	ln = connlimit.New(ln, 64, func(ip string) { log.Warn("refused", "ip", ip) }).
//		WithTotal(1024, func(ip string) { log.Warn("refused: full", "ip", ip) })
package connlimit

import (
	"net"
	"sync"
)

// Listener refuses (closes at once) a connection from a remote IP that
// already holds max open connections accepted by it, or any connection
// once the open connections of every IP together reach the total cap (if
// set).
type Listener struct {
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

// New wraps ln: at most max open connections from one remote IP; onLimit
// (may be nil) is called with the IP of each connection refused.
func New(ln net.Listener, max int, onLimit func(ip string)) *Listener {
	return &Listener{Listener: ln, max: max, onLimit: onLimit, conns: map[string]int{}}
}

// WithTotal also caps the open connections of every IP together at max
// (none when max is 0); onTotal (may be nil) is called with the IP of each
// connection this cap refuses. Call it before the first Accept.
func (l *Listener) WithTotal(max int, onTotal func(ip string)) *Listener {
	l.maxTotal, l.onTotal = max, onTotal
	return l
}

// Accept returns the next connection within the limits; the connection
// gives its slot back when closed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := RemoteIP(c.RemoteAddr())
		l.mu.Lock()
		full := l.maxTotal > 0 && l.total >= l.maxTotal
		ok := !full && l.conns[ip] < l.max
		if ok {
			l.conns[ip]++
			l.total++
		}
		l.mu.Unlock()
		if ok {
			return &conn{Conn: c, l: l, ip: ip}, nil
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

// Open returns the number of open connections from ip.
func (l *Listener) Open(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[ip]
}

func (l *Listener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.conns[ip]--; l.conns[ip] <= 0 {
		delete(l.conns, ip)
	}
}

// RemoteIP returns the IP of a remote address (the address itself when it
// has no host:port form).
func RemoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn gives its slot back once, on the first Close.
type conn struct {
	net.Conn
	l    *Listener
	ip   string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
