// Package faultnet injects network faults into in-process cluster tests:
// partitions, isolation, one-way blocks, latency and connection-killing loss,
// over real loopback TCP.
//
// The test kernel has no netem, so faults are applied in user space: a
// Network wraps both ends of every connection between the nodes of a test.
// Each node's listener goes through Listen, which names the node and
// registers its address; each node dials through Dialer(node). A dialed
// connection therefore knows both its ends (from = the dialing node, to = the
// node owning the dialed address), and the accepted end learns its peer when
// the dialer registers the connection, which happens before Dial returns.
//
// Fault model:
//
//   - Partition, Isolate and Block make nodes unreachable. A dial from a node
//     to one it cannot reach fails at once with ErrUnreachable, and existing
//     connections between them are closed (TCP has no silent loss: a
//     connection either carries bytes or breaks).
//   - Block(from, to) is one-way: from's dials to `to` fail and from's writes
//     on any connection to `to` close that connection, while `to` may still
//     dial from and write to it. Block closes existing connections between the
//     two in either direction.
//   - SetDelay adds latency to writes: each Write from→to waits the delay
//     before it is passed on. The writer is held up, so this also throttles
//     throughput; connection setup is not delayed.
//   - SetDropRate makes each Write from→to kill its connection with the given
//     probability, drawn from the Network's seeded RNG. Writes on a killed
//     connection, on both ends, fail with ErrDropped.
//   - Heal removes partitions, isolation and blocks; delays and drop rates
//     stay until set back to 0. Healing reopens nothing: the application
//     redials, as it would after a real outage.
//
// Rules name nodes; "*" (Any) in SetDelay, SetDropRate and Block matches every
// node. Only TCP connections are supported.
//
// Usage:
//
//	fn := faultnet.New(1)
//	ln, _ := net.Listen("tcp", "127.0.0.1:0")
//	ln = fn.Listen("n1", ln)            // serve n1 on ln
//	dial := fn.Dialer("n2")             // n2 dials through dial; fits cluster.DialFunc
//	conn, err := dial(ctx, "tcp", ln.Addr().String())
//
//	fn.Partition([]string{"n1"}, []string{"n2", "n3"}) // conn is closed; new dials fail
//	fn.Heal()
//	fn.SetDelay("*", "n1", 20*time.Millisecond)        // writes to n1 take 20ms longer
//	fn.SetDropRate("n2", "n3", 0.01)                   // 1% of n2→n3 writes reset the conn
//	st := fn.Stats()
//
// A Network starts no goroutines; every method is safe for concurrent use.
package faultnet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"
)

// Any matches every node in SetDelay, SetDropRate and Block.
const Any = "*"

// attributionGrace bounds how long the accepted end of a connection waits, on
// its first Write, for the dialer to register the connection. Dialers using
// this Network register before their Dial returns, so the wait is normally
// nil; only a connection from a foreign dialer waits the whole grace, after
// which its peer is the unnamed node "".
const attributionGrace = time.Second

// Errors returned by dials and by writes on faulted connections.
var (
	// ErrUnreachable: a partition, isolation or block separates the two nodes.
	ErrUnreachable = errors.New("faultnet: unreachable")
	// ErrDropped: an injected drop reset the connection.
	ErrDropped = errors.New("faultnet: connection reset by injected drop")
	// ErrUnknownAddr: the dialed address belongs to no listener registered
	// with Listen, so the dial cannot be attributed to a node.
	ErrUnknownAddr = errors.New("faultnet: address not registered with Listen")
)

// Stats counts what a Network did. Counters only grow.
type Stats struct {
	// Dials is the number of dials through any Dialer.
	Dials int64
	// RefusedDials is the number of dials failed by a partition, isolation
	// or block (a subset of Dials).
	RefusedDials int64
	// FaultClosed is the number of connections closed by a fault: a
	// partition, isolation, block or drop.
	FaultClosed int64
	// Drops is the number of writes that drew a drop; each also counts one
	// connection in FaultClosed.
	Drops int64
	// DelayedWrites is the number of writes held up by a delay.
	DelayedWrites int64
}

// edge is a directed pair of nodes; either may be Any in rules.
type edge struct{ from, to string }

// Network is a set of named nodes whose connections suffer injected faults.
// Create it with New.
type Network struct {
	mu struct {
		sync.Mutex
		rng *rand.Rand
		// addrs maps canonical listen addresses to their listeners.
		addrs map[string]*listener
		// pairing holds links waiting for their other end, keyed by the
		// connection's (dialer address, listener address).
		pairing map[linkKey]*link
		// conns are the open wrapped connection ends.
		conns map[*conn]struct{}

		partitioned bool
		group       map[string]int // node → partition group, when partitioned
		isolated    map[string]bool
		blocked     map[edge]bool
		delay       map[edge]time.Duration
		drop        map[edge]float64

		stats Stats
	}
}

// New returns a Network with no faults whose random draws (for drop rates)
// come from seed.
func New(seed int64) *Network {
	n := &Network{}
	n.mu.rng = rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	n.mu.addrs = make(map[string]*listener)
	n.mu.pairing = make(map[linkKey]*link)
	n.mu.conns = make(map[*conn]struct{})
	n.mu.isolated = make(map[string]bool)
	n.mu.blocked = make(map[edge]bool)
	n.mu.delay = make(map[edge]time.Duration)
	n.mu.drop = make(map[edge]float64)
	return n
}

// Listen wraps ln, a TCP listener, as node's listener: dials to its address
// are attributed to node, and accepted connections suffer node's faults.
// Closing the returned listener unregisters the address.
func (n *Network) Listen(node string, ln net.Listener) net.Listener {
	l := &listener{Listener: ln, n: n, node: node, addr: canonical(ln.Addr().String())}
	n.mu.Lock()
	n.mu.addrs[l.addr] = l
	n.mu.Unlock()
	return l
}

// Dialer returns the dial function of node, with the signature of
// net.Dialer.DialContext (and cluster.DialFunc). It fails with ErrUnreachable
// if node cannot reach the address's owner and with ErrUnknownAddr if no
// listener registered the address.
func (n *Network) Dialer(node string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cands, err := candidates(ctx, addr)
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		n.mu.stats.Dials++
		to, ok := n.ownerLocked(cands)
		if !ok {
			n.mu.Unlock()
			return nil, fmt.Errorf("dial %s from %s: %w", addr, node, ErrUnknownAddr)
		}
		if !n.canTalkLocked(node, to) {
			n.mu.stats.RefusedDials++
			n.mu.Unlock()
			return nil, fmt.Errorf("dial %s from %s to %s: %w", addr, node, to, ErrUnreachable)
		}
		n.mu.Unlock()

		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c, err := n.attachDialer(node, to, raw)
		if err != nil {
			return nil, fmt.Errorf("dial %s from %s to %s: %w", addr, node, to, err)
		}
		return c, nil
	}
}

// Partition splits the nodes into groups: nodes in different groups cannot
// talk, and nodes listed in no group are isolated from everybody. It replaces
// any earlier partition (isolation and blocks stay) and closes the existing
// connections it cuts. A node listed twice belongs to its last group.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	n.mu.partitioned = true
	n.mu.group = make(map[string]int)
	for i, g := range groups {
		for _, node := range g {
			n.mu.group[node] = i
		}
	}
	kill := n.enforceLocked()
	n.mu.Unlock()
	closeAll(kill)
}

// Isolate cuts node off from every other node until Heal, closing its
// existing connections.
func (n *Network) Isolate(node string) {
	n.mu.Lock()
	n.mu.isolated[node] = true
	kill := n.enforceLocked()
	n.mu.Unlock()
	closeAll(kill)
}

// Block cuts the one-way link from→to until Heal: from's dials to `to` fail,
// and a Write by from on a connection to `to` closes that connection. Existing
// connections between the two, dialed either way, are closed; `to` may dial
// from again afterwards. Either may be Any.
func (n *Network) Block(from, to string) {
	n.mu.Lock()
	n.mu.blocked[edge{from, to}] = true
	kill := n.enforceLocked()
	n.mu.Unlock()
	closeAll(kill)
}

// Heal removes every partition, isolation and block. Delays and drop rates
// stay. Connections closed by faults stay closed.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.partitioned = false
	n.mu.group = nil
	clear(n.mu.isolated)
	clear(n.mu.blocked)
}

// SetDelay makes each Write from→to wait d first; d <= 0 removes the rule.
// Either node may be Any; the most specific rule applies (from→to, then
// from→*, *→to, *→*).
func (n *Network) SetDelay(from, to string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d <= 0 {
		delete(n.mu.delay, edge{from, to})
		return
	}
	n.mu.delay[edge{from, to}] = d
}

// SetDropRate makes each Write from→to kill its connection with probability
// p (clamped to [0, 1]); p = 0 removes the rule. Rules match as in SetDelay.
func (n *Network) SetDropRate(from, to string, p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p <= 0 {
		delete(n.mu.drop, edge{from, to})
		return
	}
	n.mu.drop[edge{from, to}] = min(p, 1)
}

// Stats returns a snapshot of the counters.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.stats
}

// canTalkLocked reports whether bytes may flow from→to.
func (n *Network) canTalkLocked(from, to string) bool {
	if from == to {
		return true
	}
	if n.mu.isolated[from] || n.mu.isolated[to] {
		return false
	}
	if n.mu.partitioned {
		gf, okf := n.mu.group[from]
		gt, okt := n.mu.group[to]
		if !okf || !okt || gf != gt {
			return false
		}
	}
	_, blocked := lookup(n.mu.blocked, from, to)
	return !blocked
}

// lookup returns the most specific rule for from→to.
func lookup[V any](rules map[edge]V, from, to string) (V, bool) {
	for _, e := range [...]edge{{from, to}, {from, Any}, {Any, to}, {Any, Any}} {
		if v, ok := rules[e]; ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// enforceLocked kills every attributed link whose nodes can no longer talk in
// either direction, and returns the connection ends to close once n.mu is
// released.
func (n *Network) enforceLocked() []*conn {
	var kill []*conn
	for c := range n.mu.conns {
		l := c.link
		if l.killed || !l.attributed {
			continue // an unattributed link is checked when its dialer registers
		}
		if !n.canTalkLocked(l.from, l.to) || !n.canTalkLocked(l.to, l.from) {
			kill = append(kill, n.killLocked(l, ErrUnreachable)...)
		}
	}
	return kill
}

// killLocked marks l killed by cause and returns its ends to close.
func (n *Network) killLocked(l *link, cause error) []*conn {
	if !l.killed {
		l.killed = true
		l.cause = cause
		n.mu.stats.FaultClosed++
	}
	var ends []*conn
	for _, c := range [...]*conn{l.dialer, l.acceptor} {
		if c != nil {
			ends = append(ends, c)
		}
	}
	return ends
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// ownerLocked returns the node listening on one of the candidate addresses:
// an exact match first, then a listener on the unspecified address with the
// same port.
func (n *Network) ownerLocked(cands []netip.AddrPort) (string, bool) {
	for _, ap := range cands {
		if l, ok := n.mu.addrs[ap.String()]; ok {
			return l.node, true
		}
	}
	for _, ap := range cands {
		for _, unspec := range [...]netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
			if l, ok := n.mu.addrs[netip.AddrPortFrom(unspec, ap.Port()).String()]; ok {
				return l.node, true
			}
		}
	}
	return "", false
}

// candidates resolves a dial address to canonical address-ports.
func candidates(ctx context.Context, addr string) ([]netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return []netip.AddrPort{unmap(ap)}, nil
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("faultnet: dial %s: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("faultnet: dial %s: bad port: %w", addr, err)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("faultnet: dial %s: %w", addr, err)
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, ip := range ips {
		out = append(out, unmap(netip.AddrPortFrom(ip, uint16(port))))
	}
	return out, nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// canonical returns addr in a form that compares equal for equal TCP
// addresses (IPv4-mapped IPv6 unmapped); other strings are returned as is.
func canonical(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return unmap(ap).String()
	}
	return addr
}

// linkKey names a TCP connection by its two endpoints.
type linkKey struct{ dialer, listener string }

// link is one TCP connection between two nodes, shared by its two wrapped
// ends. Its fields are guarded by Network.mu.
type link struct {
	key linkKey
	// from is the dialing node, to the listening one. from is known once
	// attributed: when the dialer registers, or as "" after the grace.
	from, to   string
	attributed bool
	ready      chan struct{} // closed when attributed
	dialer     *conn
	acceptor   *conn
	killed     bool
	cause      error // why killed: ErrUnreachable or ErrDropped
}

func newLink(key linkKey) *link {
	return &link{key: key, ready: make(chan struct{})}
}

// attributeLocked records from and wakes the acceptor.
func (l *link) attributeLocked(from string) {
	if l.attributed {
		return
	}
	l.from = from
	l.attributed = true
	close(l.ready)
}

// attachDialer wraps a freshly dialed raw connection from node to `to` and
// pairs it with its accepted end. If the nodes were cut apart while dialing,
// it closes the connection and returns ErrUnreachable.
func (n *Network) attachDialer(node, to string, raw net.Conn) (net.Conn, error) {
	key := linkKey{dialer: canonical(raw.LocalAddr().String()), listener: canonical(raw.RemoteAddr().String())}
	n.mu.Lock()
	l := n.mu.pairing[key]
	if l == nil || l.dialer != nil {
		l = newLink(key)
		n.mu.pairing[key] = l
	}
	l.to = to
	l.attributeLocked(node)
	c := newConn(n, l, raw, true)
	l.dialer = c
	n.mu.conns[c] = struct{}{}
	if l.acceptor != nil {
		delete(n.mu.pairing, key)
	}
	var kill []*conn
	if !l.killed && !n.canTalkLocked(node, to) {
		n.mu.stats.RefusedDials++
		kill = n.killLocked(l, ErrUnreachable)
	} else if l.killed {
		kill = n.killLocked(l, l.cause)
	}
	cause := l.cause
	n.mu.Unlock()
	if kill != nil {
		closeAll(kill)
		return nil, cause
	}
	return c, nil
}

// attachAcceptor wraps a raw connection accepted by node's listener and pairs
// it with its dialed end.
func (n *Network) attachAcceptor(node string, raw net.Conn) net.Conn {
	key := linkKey{dialer: canonical(raw.RemoteAddr().String()), listener: canonical(raw.LocalAddr().String())}
	n.mu.Lock()
	l := n.mu.pairing[key]
	if l == nil || l.acceptor != nil {
		l = newLink(key)
		n.mu.pairing[key] = l
	}
	l.to = node
	c := newConn(n, l, raw, false)
	l.acceptor = c
	n.mu.conns[c] = struct{}{}
	if l.dialer != nil {
		delete(n.mu.pairing, key)
	}
	killed := l.killed
	n.mu.Unlock()
	if killed {
		_ = c.Close()
	}
	return c
}

// forget drops a closed end from the registry.
func (n *Network) forget(c *conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.mu.conns, c)
	if n.mu.pairing[c.link.key] == c.link {
		delete(n.mu.pairing, c.link.key)
	}
}

// admitWrite applies the faults for a Write on c: it returns the delay to
// wait, or an error if the write kills or found the connection dead.
func (n *Network) admitWrite(c *conn) (time.Duration, error) {
	n.mu.Lock()
	l := c.link
	if l.killed {
		cause := l.cause
		n.mu.Unlock()
		return 0, cause
	}
	src, dst := l.from, l.to
	if !c.dialSide {
		src, dst = dst, src
	}
	var kill []*conn
	var delay time.Duration
	if !n.canTalkLocked(src, dst) {
		kill = n.killLocked(l, ErrUnreachable)
	} else if p, ok := lookup(n.mu.drop, src, dst); ok && n.mu.rng.Float64() < p {
		n.mu.stats.Drops++
		kill = n.killLocked(l, ErrDropped)
	} else if d, ok := lookup(n.mu.delay, src, dst); ok {
		n.mu.stats.DelayedWrites++
		delay = d
	}
	cause := l.cause
	n.mu.Unlock()
	if kill != nil {
		closeAll(kill)
		return 0, cause
	}
	return delay, nil
}

// listener is a node's wrapped listener.
type listener struct {
	net.Listener
	n         *Network
	node      string
	addr      string
	closeOnce sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.n.attachAcceptor(l.node, raw), nil
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.n.mu.Lock()
		if l.n.mu.addrs[l.addr] == l {
			delete(l.n.mu.addrs, l.addr)
		}
		l.n.mu.Unlock()
	})
	return l.Listener.Close()
}

// conn is one wrapped end of a link. Reads pass through; Writes suffer the
// faults of their direction.
type conn struct {
	net.Conn
	n        *Network
	link     *link
	dialSide bool
	done     chan struct{} // closed by Close

	closeOnce sync.Once
	mu        struct {
		sync.Mutex
		writeDeadline time.Time
	}
}

func newConn(n *Network, l *link, raw net.Conn, dialSide bool) *conn {
	return &conn{Conn: raw, n: n, link: l, dialSide: dialSide, done: make(chan struct{})}
}

// Write applies the faults of its direction, then writes p.
func (c *conn) Write(p []byte) (int, error) {
	if !c.dialSide {
		if err := c.awaitAttribution(); err != nil {
			return 0, c.opErr(err)
		}
	}
	d, err := c.n.admitWrite(c)
	if err != nil {
		return 0, c.opErr(err)
	}
	if d > 0 {
		if err := c.wait(d); err != nil {
			return 0, c.opErr(err)
		}
	}
	return c.Conn.Write(p)
}

// awaitAttribution waits until the accepted end knows its dialing node.
func (c *conn) awaitAttribution() error {
	select {
	case <-c.link.ready:
		return nil
	default:
	}
	t := time.NewTimer(attributionGrace)
	defer t.Stop()
	select {
	case <-c.link.ready:
	case <-c.done:
		return net.ErrClosed
	case <-t.C:
		c.n.mu.Lock()
		c.link.attributeLocked("")
		c.n.mu.Unlock()
	}
	return nil
}

// wait sleeps d, returning early with an error if c closes or its write
// deadline passes.
func (c *conn) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var deadline <-chan time.Time
	c.mu.Lock()
	wd := c.mu.writeDeadline
	c.mu.Unlock()
	if !wd.IsZero() {
		if left := time.Until(wd); left < d {
			dt := time.NewTimer(left)
			defer dt.Stop()
			deadline = dt.C
		}
	}
	select {
	case <-t.C:
		return nil
	case <-c.done:
		if cause := c.cause(); cause != nil {
			return cause
		}
		return net.ErrClosed
	case <-deadline:
		return os.ErrDeadlineExceeded
	}
}

// cause returns why c's link was killed, or nil.
func (c *conn) cause() error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	return c.link.cause
}

func (c *conn) opErr(err error) error {
	return &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

func (c *conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.mu.writeDeadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.mu.writeDeadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the connection end; the peer sees EOF or a reset.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.n.forget(c)
	})
	return c.Conn.Close()
}
