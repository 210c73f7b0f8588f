package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// muxHeaderLen is the length of the connection header (see Mux).
	muxHeaderLen = 6
	// muxAcceptBacklog is how many handshaken connections a Layer queues
	// before its handshake goroutines block waiting for Accept.
	muxAcceptBacklog = 16
	// muxDefaultHandshakeTimeout is MuxConfig.HandshakeTimeout's default.
	muxDefaultHandshakeTimeout = 5 * time.Second
)

// muxMagic are the first two bytes of every header.
var muxMagic = [2]byte{'S', 'W'}

// Errors returned by Mux and Layer.
var (
	// ErrMuxConfig wraps every MuxConfig validation error.
	ErrMuxConfig = errors.New("transport: invalid mux config")
	// ErrGroupRegistered is returned by Mux.Layer when the group already has
	// an open Layer.
	ErrGroupRegistered = errors.New("transport: raft group already registered on mux")
	// ErrMuxClosed is returned by Mux.Layer after Mux.Close. It wraps
	// net.ErrClosed.
	ErrMuxClosed = fmt.Errorf("transport: mux closed: %w", net.ErrClosed)
	// ErrLayerClosed is returned by Layer.Accept and Layer.Dial once the
	// Layer or its Mux is closed. It wraps net.ErrClosed, which is what
	// raft's NetworkTransport expects from a closed stream layer.
	ErrLayerClosed = fmt.Errorf("transport: raft stream layer closed: %w", net.ErrClosed)

	errMuxBadMagic = errors.New("transport: mux header: bad magic")
)

// DialFunc dials a node's Raft address; tests inject faults through it
// (see internal/faultnet). It must return when ctx is done.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// MuxConfig configures a Mux.
type MuxConfig struct {
	// Listener is the node's one Raft TCP listener, already bound. The Mux
	// owns it from NewMux on and closes it on Close. Required.
	Listener net.Listener
	// Advertise is the host:port other nodes dial to reach this node; every
	// Layer's Addr returns it. Default Listener.Addr().String(), which is an
	// error if the listener is bound to an unspecified address (0.0.0.0, ::).
	Advertise string
	// Dial dials other nodes. Default (&net.Dialer{}).DialContext.
	Dial DialFunc
	// Logger receives connection-level events (rejected handshakes at debug
	// level, accept failures at warn). Default: discard.
	Logger *slog.Logger
	// HandshakeTimeout bounds how long an accepted connection may take to
	// send its 6-byte header (after the TLS handshake, within the same
	// time) before it is closed. Default 5s.
	HandshakeTimeout time.Duration
	// ServerTLS, if set, makes every accepted connection a TLS server
	// connection (handshake before the header); ClientTLS, if set, makes
	// every dialed connection a TLS client connection. Both or neither
	// (tls.go: both sides present node certificates of the cluster CA).
	ServerTLS *tls.Config
	ClientTLS *tls.Config
	// Secret, if set, is the cluster secret (the node's Config.Auth
	// without TLS): every connection starts with the authenticated preface
	// of mux_auth.go instead of the plain header, and connections without
	// it are closed. Not with ServerTLS/ClientTLS.
	Secret []byte
	// LocalID is this node's id, named in the preface. Required with
	// Secret.
	LocalID string
	// AllowPeer, if set, is asked about the node id of every accepted
	// connection (the TLS node certificate's, or the preface's) once its
	// handshake succeeded; an error closes the connection before any Raft
	// traffic (the node allows members only).
	AllowPeer func(nodeID string) error
	// Incarnations, if set, is asked at every dial and every accepted
	// header whether headers carry the group's incarnation
	// (mux_inc.go); nil: IncarnationAccept.
	Incarnations func() IncarnationMode
}

// withDefaults returns c with zero fields set to their defaults.
func (c MuxConfig) withDefaults() MuxConfig {
	if c.Advertise == "" && c.Listener != nil {
		c.Advertise = c.Listener.Addr().String()
	}
	if c.Dial == nil {
		c.Dial = (&net.Dialer{}).DialContext
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = muxDefaultHandshakeTimeout
	}
	return c
}

// Validate reports whether c, after defaults, describes a usable Mux. Errors
// wrap ErrMuxConfig.
func (c MuxConfig) Validate() error {
	c = c.withDefaults()
	if c.Listener == nil {
		return fmt.Errorf("%w: Listener is nil", ErrMuxConfig)
	}
	if (c.ServerTLS == nil) != (c.ClientTLS == nil) {
		return fmt.Errorf("%w: ServerTLS and ClientTLS go together", ErrMuxConfig)
	}
	if len(c.Secret) > 0 && c.ServerTLS != nil {
		return fmt.Errorf("%w: Secret is for connections without TLS", ErrMuxConfig)
	}
	if len(c.Secret) > 0 && !ValidNodeID(c.LocalID) {
		return fmt.Errorf("%w: Secret needs a valid LocalID, got %q", ErrMuxConfig, c.LocalID)
	}
	if c.HandshakeTimeout < 0 {
		return fmt.Errorf("%w: HandshakeTimeout %s is negative", ErrMuxConfig, c.HandshakeTimeout)
	}
	host, port, err := net.SplitHostPort(c.Advertise)
	if err != nil {
		return fmt.Errorf("%w: Advertise %q: %v", ErrMuxConfig, c.Advertise, err)
	}
	if host == "" || port == "" || port == "0" {
		return fmt.Errorf("%w: Advertise %q is not dialable", ErrMuxConfig, c.Advertise)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: Advertise %q is an unspecified address; set Advertise", ErrMuxConfig, c.Advertise)
	}
	return nil
}

// Mux shares a node's one Raft TCP port among its Raft groups: one per shard
// replica plus the meta group (and the leadership checks, readcheck.go). Every connection starts with a header naming
// the Raft group it belongs to, and the Mux hands it to that group's Layer,
// the raft.StreamLayer of the group's raft.NetworkTransport.
//
// Wire format. The dialer writes a 6-byte header before anything else; after
// it, the connection belongs to the group's NetworkTransport unchanged:
//
//	  0      1      2      3      4      5
//	+------+------+------+------+------+------+---------------------------
//	| 'S'  | 'W'  |  group id, uint32 big-endian  | raft NetworkTransport
//	| 0x53 | 0x57 |                               | bytes ...
//	+------+------+------+------+------+------+---------------------------
//
// A header may instead carry the group's incarnation ('S' 'I', 14 bytes:
// mux_inc.go), as MuxConfig.Incarnations decides; the acceptor then hands
// the connection only to the group's Layer of that incarnation.
// With MuxConfig.Secret (a cluster secret, without TLS) the header is the
// authenticated preface of mux_auth.go instead, and a plain header is
// refused. With TLS or a secret, MuxConfig.AllowPeer vets the peer's node id.
//
// The acceptor must receive the whole header within MuxConfig.HandshakeTimeout.
// A connection with a bad magic, a short header, or a group with no open Layer
// is closed and logged at debug level: a node may receive traffic for a shard
// it no longer hosts or does not host yet, and the sender's Raft retries. One
// refused for its incarnation (another incarnation of the group, or none
// where one is required) is logged at warn level.
//
// Threads. A Mux runs one accept goroutine, plus one short-lived handshake
// goroutine per accepted connection, which reads the header and then hands the
// connection to its Layer (blocking until the Layer accepts it or closes).
// Mux.Close joins all of them.
//
// Usage, with one group per shard (the node puts its meta group on
// cluster.MetaGroup):
//
//	ln, _ := net.Listen("tcp", cfg.RaftAddr)
//	mux, err := transport.NewMux(transport.MuxConfig{Listener: ln, Logger: log})
//	layer, err := mux.Layer(uint32(shardID), incarnation)
//	trans := raft.NewNetworkTransport(layer, 3, 10*time.Second, logOut)
//	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
//	...
//	r.Shutdown().Error(); trans.Close() // closes the layer, unregistering the group
//	mux.Close()                         // after every transport
type Mux struct {
	ln               net.Listener
	addr             muxAddr
	dial             DialFunc
	log              *slog.Logger
	handshakeTimeout time.Duration
	serverTLS        *tls.Config
	clientTLS        *tls.Config
	secret           []byte
	localID          string
	allowPeer        func(string) error
	incarnations     func() IncarnationMode
	stats            muxStats // mux_inc.go

	done chan struct{}  // closed by Close
	wg   sync.WaitGroup // the accept goroutine and every handshake goroutine

	mu struct {
		sync.Mutex
		closed bool
		layers map[uint32]*Layer
		// pending are accepted connections still in their handshake;
		// Close closes them to unblock their goroutines.
		pending map[net.Conn]struct{}
	}
}

// NewMux validates cfg and starts accepting on cfg.Listener. On error the
// listener is left open and still belongs to the caller.
func NewMux(cfg MuxConfig) (*Mux, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Mux{
		ln:               cfg.Listener,
		addr:             muxAddr(cfg.Advertise),
		dial:             cfg.Dial,
		log:              cfg.Logger.With("raft_addr", cfg.Advertise),
		handshakeTimeout: cfg.HandshakeTimeout,
		serverTLS:        cfg.ServerTLS,
		clientTLS:        cfg.ClientTLS,
		secret:           cfg.Secret,
		localID:          cfg.LocalID,
		allowPeer:        cfg.AllowPeer,
		incarnations:     cfg.Incarnations,
		done:             make(chan struct{}),
	}
	m.mu.layers = make(map[uint32]*Layer)
	m.mu.pending = make(map[net.Conn]struct{})
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr returns the advertised address, the one every Layer's Addr returns.
func (m *Mux) Addr() net.Addr { return m.addr }

// Layer registers group, of incarnation incarnation (mux_inc.go; 0 for a
// group whose id is never reused), and returns its stream layer, to be
// passed to raft.NewNetworkTransport. A group has at most one open Layer:
// registering it again returns an error wrapping ErrGroupRegistered until
// the first Layer is closed (raft's NetworkTransport closes its stream
// layer on Close). After Mux.Close it returns ErrMuxClosed.
func (m *Mux) Layer(group uint32, incarnation uint64) (*Layer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrMuxClosed
	}
	if _, ok := m.mu.layers[group]; ok {
		return nil, fmt.Errorf("%w: group %d", ErrGroupRegistered, group)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Layer{
		m:           m,
		group:       group,
		incarnation: incarnation,
		log:         m.log.With("group", group),
		acceptCh:    make(chan net.Conn, muxAcceptBacklog),
		ctx:         ctx,
		cancel:      cancel,
	}
	l.mu.conns = make(map[*muxConn]struct{})
	m.mu.layers[group] = l
	return l, nil
}

// Close closes the listener and every Layer (and with them every connection
// they hold), then waits for the accept and handshake goroutines to exit. It
// is idempotent; every call returns only once those goroutines are gone.
// Close transports before the Mux: a transport whose layer closes under it
// logs accept errors until its own Close.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.mu.closed = true
	close(m.done)
	layers := make([]*Layer, 0, len(m.mu.layers))
	for _, l := range m.mu.layers {
		layers = append(layers, l)
	}
	pending := make([]net.Conn, 0, len(m.mu.pending))
	for c := range m.mu.pending {
		pending = append(pending, c)
	}
	m.mu.Unlock()

	err := m.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	for _, c := range pending {
		_ = c.Close()
	}
	for _, l := range layers {
		_ = l.Close()
	}
	m.wg.Wait()
	return err
}

// acceptLoop accepts connections until the listener fails for good, starting
// one handshake goroutine per connection.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	const baseDelay, maxDelay = 5 * time.Millisecond, time.Second
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.log.Error("raft mux: listener closed before the mux; no longer accepting", "err", err)
				return
			}
			delay = min(max(2*delay, baseDelay), maxDelay)
			m.log.Warn("raft mux: accept failed", "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-m.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		m.mu.Lock()
		if m.mu.closed {
			m.mu.Unlock()
			_ = c.Close()
			return
		}
		m.mu.pending[c] = struct{}{}
		m.wg.Add(1) // the counter is positive: this goroutine holds one
		m.mu.Unlock()
		go m.handshake(c)
	}
}

// handshake reads c's header and hands c to its group's Layer, or closes it.
func (m *Mux) handshake(raw net.Conn) {
	defer m.wg.Done()
	c := raw
	if m.serverTLS != nil {
		c = tls.Server(raw, m.serverTLS)
	}
	h, err := m.readHeader(c)
	group := h.group

	m.mu.Lock()
	delete(m.mu.pending, raw)
	closed := m.mu.closed
	l := m.mu.layers[group]
	m.mu.Unlock()
	if err == nil && l != nil {
		err = m.checkIncarnation(h, l) // mux_inc.go
	}

	switch {
	case closed:
		_ = c.Close()
	case errors.As(err, new(*tlsHandshakeError)):
		m.log.Warn("raft mux: refused connection: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
	case errors.As(err, new(*peerRefusedError)):
		m.log.Warn("raft mux: refused connection", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
	case errors.As(err, new(*incarnationError)):
		m.log.Warn("raft mux: refused connection", "remote", c.RemoteAddr().String(), "group", group, "err", err)
		_ = c.Close()
	case err != nil:
		m.log.Debug("raft mux: rejected connection", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
	case l == nil:
		m.log.Debug("raft mux: rejected connection for unknown group", "remote", c.RemoteAddr().String(), "group", group)
		_ = c.Close()
	default:
		m.stats.accepted(h.hasInc)
		l.deliver(c, !h.hasInc)
	}
}

// muxHeader is what an accepted connection's header says.
type muxHeader struct {
	group uint32
	// inc is the group's incarnation when hasInc (an 'S' 'I' header or
	// an 'S' 'B' preface: mux_inc.go).
	inc    uint64
	hasInc bool
}

// readHeader reads and parses c's header within the handshake timeout.
func (m *Mux) readHeader(c net.Conn) (muxHeader, error) {
	if err := c.SetDeadline(time.Now().Add(m.handshakeTimeout)); err != nil {
		return muxHeader{}, err
	}
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return muxHeader{}, &tlsHandshakeError{err}
		}
	}
	var hdr [muxHeaderLen]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return muxHeader{}, fmt.Errorf("transport: mux header: %w", err)
	}
	var h muxHeader
	var peerID string
	var err error
	if m.secret != nil {
		h, peerID, err = m.acceptAuth(c, hdr) // mux_auth.go
	} else {
		h, err = readMuxHeader(c, hdr) // mux_inc.go
	}
	if err != nil {
		return muxHeader{}, err
	}
	if err := m.checkPeer(c, peerID); err != nil {
		return muxHeader{}, err
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return muxHeader{}, err
	}
	return h, nil
}

// tlsHandshakeError is a failed TLS handshake on the Raft port (a peer
// without a node certificate of the cluster CA).
type tlsHandshakeError struct{ err error }

func (e *tlsHandshakeError) Error() string { return "transport: mux tls handshake: " + e.err.Error() }
func (e *tlsHandshakeError) Unwrap() error { return e.err }

// unregister removes l from the group table if it is still registered.
func (m *Mux) unregister(l *Layer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.layers[l.group] == l {
		delete(m.mu.layers, l.group)
	}
}

// appendMuxHeader appends the header for group to b.
func appendMuxHeader(b []byte, group uint32) []byte {
	b = append(b, muxMagic[:]...)
	return binary.BigEndian.AppendUint32(b, group)
}

// parseMuxHeader returns the group of a header, or errMuxBadMagic.
func parseMuxHeader(hdr [muxHeaderLen]byte) (uint32, error) {
	if hdr[0] != muxMagic[0] || hdr[1] != muxMagic[1] {
		return 0, fmt.Errorf("%w %#02x %#02x", errMuxBadMagic, hdr[0], hdr[1])
	}
	return binary.BigEndian.Uint32(hdr[2:]), nil
}

// Layer is one Raft group's view of the Mux: a raft.StreamLayer whose Accept
// returns the connections whose header names the group and whose Dial
// prefixes new connections with that header. Closing the Layer unregisters
// the group and closes every connection it dialed or accepted, so the
// transport's connection goroutines exit.
type Layer struct {
	m     *Mux
	group uint32
	// incarnation is the group's (Mux.Layer); headers that carry another
	// are refused.
	incarnation uint64
	log         *slog.Logger
	acceptCh    chan net.Conn
	// ctx is cancelled by Close; it bounds Accept and every Dial.
	ctx    context.Context
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		closed bool
		conns  map[*muxConn]struct{} // open connections, dialed or accepted
	}
}

var _ raft.StreamLayer = (*Layer)(nil)

// Group returns the Raft group id the Layer serves.
func (l *Layer) Group() uint32 { return l.group }

// Incarnation returns the group incarnation the Layer was registered with.
func (l *Layer) Incarnation() uint64 { return l.incarnation }

// Accept waits for the next connection for this group. After Close (of the
// Layer or its Mux) it returns an error wrapping ErrLayerClosed and
// net.ErrClosed.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.acceptCh:
		if l.ctx.Err() != nil { // closed while queued: Close closed it
			return nil, ErrLayerClosed
		}
		return c, nil
	case <-l.ctx.Done():
		return nil, ErrLayerClosed
	}
}

// Addr returns the Mux's advertised address.
func (l *Layer) Addr() net.Addr { return l.m.addr }

// Close unregisters the group, unblocks Accept and pending Dials, and closes
// every connection the Layer dialed or accepted. It is idempotent.
func (l *Layer) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	conns := l.mu.conns
	l.mu.conns = nil
	l.mu.Unlock()

	l.cancel()
	for c := range conns {
		_ = c.Conn.Close()
	}
	l.m.unregister(l)
	return nil
}

// Dial connects to the node at address and writes this group's header. The
// dial and the header write are bounded by timeout (none if timeout <= 0) and
// abandoned if the Layer closes.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx := l.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if l.ctx.Err() != nil {
		return nil, ErrLayerClosed
	}
	raw, err := l.m.dial(ctx, "tcp", string(address))
	if err != nil {
		if l.ctx.Err() != nil {
			return nil, ErrLayerClosed
		}
		return nil, fmt.Errorf("transport: mux dial group %d at %s: %w", l.group, address, err)
	}
	if l.m.clientTLS != nil {
		raw = tls.Client(raw, l.m.clientTLS)
	}
	withInc := l.m.mode().sends()
	c := l.track(raw, !withInc) // from here on Close aborts the handshake and the header write
	if c == nil {
		_ = raw.Close()
		return nil, ErrLayerClosed
	}
	if tc, ok := raw.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			if l.ctx.Err() != nil {
				return nil, ErrLayerClosed
			}
			return nil, fmt.Errorf("transport: mux dial group %d at %s: tls: %w", l.group, address, err)
		}
	}
	write := func(ctx context.Context, c net.Conn) error { return l.writeHeader(ctx, c, withInc) }
	if l.m.secret != nil {
		write = func(ctx context.Context, c net.Conn) error {
			return l.m.dialAuth(ctx, c, l.group, l.incarnation, withInc)
		} // mux_auth.go
	}
	if err := write(ctx, c); err != nil {
		_ = c.Close()
		if l.ctx.Err() != nil {
			return nil, ErrLayerClosed
		}
		return nil, fmt.Errorf("transport: mux dial group %d at %s: header: %w", l.group, address, err)
	}
	l.m.stats.dialed(withInc)
	return c, nil
}

// writeHeader writes the group's header to c within ctx's deadline, with
// the group's incarnation when withInc.
func (l *Layer) writeHeader(ctx context.Context, c net.Conn, withInc bool) error {
	dl, _ := ctx.Deadline() // zero: no deadline
	if err := c.SetWriteDeadline(dl); err != nil {
		return err
	}
	hdr := appendMuxHeader(make([]byte, 0, muxIncHeaderLen), l.group)
	if withInc {
		hdr = appendMuxIncHeader(hdr[:0], l.group, l.incarnation)
	}
	if _, err := c.Write(hdr); err != nil {
		return err
	}
	return c.SetWriteDeadline(time.Time{})
}

// deliver queues an accepted, handshaken connection for Accept, blocking
// until Accept takes it or the Layer closes. plain: its header carried no
// incarnation.
func (l *Layer) deliver(raw net.Conn, plain bool) {
	c := l.track(raw, plain)
	if c == nil {
		l.log.Debug("raft mux: rejected connection for closed group", "remote", raw.RemoteAddr().String())
		_ = raw.Close()
		return
	}
	select {
	case l.acceptCh <- c:
	case <-l.ctx.Done(): // Close closed c
	}
}

// track wraps raw so the Layer closes it on Close; it returns nil if the
// Layer is already closed. plain: its header carries no incarnation
// (Mux.ClosePlain closes it).
func (l *Layer) track(raw net.Conn, plain bool) *muxConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil
	}
	c := &muxConn{Conn: raw, l: l, plain: plain}
	l.mu.conns[c] = struct{}{}
	return c
}

// muxConn is a connection owned by a Layer; closing it forgets it.
type muxConn struct {
	net.Conn
	l     *Layer
	plain bool // its header carried no group incarnation
}

func (c *muxConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.mu.conns, c) // no-op once the Layer closed (nil map)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// muxAddr is the advertised address as a net.Addr.
type muxAddr string

func (a muxAddr) Network() string { return "tcp" }
func (a muxAddr) String() string  { return string(a) }
