package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Noticer carries the notices of quiet groups (cluster/replica/quiet.go,
// docs/architecture.md "Quiet groups") between nodes, over one Layer of
// the Mux (the node reserves a group id for it, cluster.NoticeGroup), so
// every notice connection has passed the Mux's node authentication
// (TLS node certificate or cluster-secret preface) and MuxConfig.AllowPeer
// (members only) before its first frame.
//
// A notice is one request and one response on the sender's connection to
// the peer node (one per peer, one exchange at a time):
//
//   - quiet (leader to follower): "group G, term t, leader L, my last index
//     I: go quiet". The follower's replica accepts it only from the leader
//     it knows at term t, and answers with its own last log index; the
//     leader goes quiet only once every follower answered with I.
//   - wake (leader to follower): "group G is awake". Always harmless to
//     accept.
//
// A notice never answers anything on a group's behalf that Raft counts:
// leader leases, commits and read rounds still rest on Raft's own replies
// (and the LeaderChecker's). A forged or stale notice can at worst wake a
// group or make one follower wait the quiet election timeout.
//
// Frames, each a big-endian uint32 length and that many bytes (protocol
// version 2 of the node's side channels; the LeaderChecker's frames are
// version 1):
//
//	request:  version (2) | kind (1) | to length (1) | to | from length (1) | from
//	          | group uint32 | term uint64 | index uint64
//	response: version (2) | status (1: done, 0: refused) | last index uint64
//
// to is the node the sender expects to answer (a node with another id
// refuses); from is the leader the sender speaks for.
//
// A node of an earlier version has no Layer for the notices: its Mux
// closes the connection, or (a peer that takes the stream and never
// answers) the exchange times out. Either way Notify returns
// ErrNotQuietCapable, and keeps returning it at once for a while
// (noticeIncapableFor); the replica then keeps the group awake.
type Noticer struct {
	layer   *Layer
	localID string
	handle  func(Notice) NoticeReply
	log     *slog.Logger

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  chan struct{} // a token per connection being served

	mu    sync.Mutex
	peers map[string]*noticePeer // by ID and address
}

// NoticeKind is what a notice asks.
type NoticeKind uint8

const (
	// NoticeQuiet asks a follower to go quiet (the leader's last index in
	// Notice.Index).
	NoticeQuiet NoticeKind = 1
	// NoticeWake tells a follower that its group is awake.
	NoticeWake NoticeKind = 2
)

// Notice is one request.
type Notice struct {
	Kind  NoticeKind
	Group uint32
	Term  uint64
	// Index is the leader's last log index (NoticeQuiet).
	Index uint64
	// From is the leader the notice speaks for.
	From string
}

// NoticeReply is a peer's answer.
type NoticeReply struct {
	// Done: the peer's replica did what the notice asked.
	Done bool
	// LastIndex is the peer replica's last log index.
	LastIndex uint64
}

// ErrNotQuietCapable: the peer does not answer notices (a node of an
// earlier version, or one that did not answer within noticeTimeout).
var ErrNotQuietCapable = errors.New("transport: peer does not answer quiet notices")

const (
	noticeVersion = 2
	// maxNoticeFrame is the largest request body (two ids of 255 bytes).
	maxNoticeFrame    = 2 + 1 + 255 + 1 + 255 + 20
	noticeResponseLen = 2 + 8
	// noticeTimeout bounds a dial and one exchange; noticeIncapableFor is
	// how long a peer that did not answer is refused at once.
	noticeTimeout      = time.Second
	noticeIncapableFor = 10 * time.Second
	// noticeIdle closes a served connection that sent nothing for this
	// long; maxNoticeConns bounds the connections served at once.
	noticeIdle     = 2 * time.Minute
	maxNoticeConns = 256
)

// NewNoticer starts a noticer that sends notices to peers and answers
// theirs on layer with handle (called once per request, on the
// connection's goroutine; it must return promptly). The noticer owns
// layer from here on.
func NewNoticer(layer *Layer, localID string, handle func(Notice) NoticeReply, log *slog.Logger) *Noticer {
	n := &Noticer{layer: layer, localID: localID, handle: handle, log: log,
		peers: map[string]*noticePeer{}, conns: make(chan struct{}, maxNoticeConns)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1)
	go n.serve()
	return n
}

// Close stops the noticer: pending Notify calls fail, the layer and its
// connections are closed, and every goroutine is joined.
func (n *Noticer) Close() {
	n.cancel()
	n.layer.Close()
	n.wg.Wait() // the layer closed every connection it dialed too
}

// noticePeer is the sender's connection to one peer node.
type noticePeer struct {
	sem chan struct{} // cap 1: held for an exchange
	// Guarded by sem:
	conn          net.Conn
	rd            *bufio.Reader
	incapableTill time.Time
}

func (p *noticePeer) close() {
	if p.conn != nil {
		p.conn.Close()
		p.conn, p.rd = nil, nil
	}
}

func (n *Noticer) peer(id, addr string) *noticePeer {
	key := id + "\x00" + addr
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.peers[key]
	if p == nil {
		p = &noticePeer{sem: make(chan struct{}, 1)}
		n.peers[key] = p
	}
	return p
}

// Notify sends notice to node to and returns its answer. Errors: the
// context's, ErrNotQuietCapable (the peer does not answer notices), a
// closed layer, or the dial's.
func (n *Noticer) Notify(ctx context.Context, to raft.Server, notice Notice) (NoticeReply, error) {
	frame, err := appendNoticeRequest(nil, string(to.ID), notice)
	if err != nil {
		return NoticeReply{}, err
	}
	p := n.peer(string(to.ID), string(to.Address))
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return NoticeReply{}, ctx.Err()
	case <-n.ctx.Done():
		return NoticeReply{}, ErrLayerClosed
	}
	defer func() { <-p.sem }()
	if n.ctx.Err() != nil {
		return NoticeReply{}, ErrLayerClosed
	}
	if time.Now().Before(p.incapableTill) {
		return NoticeReply{}, ErrNotQuietCapable
	}
	// A reused connection may have been closed by the peer (idle, or a
	// restart): one more try on a fresh one before judging the peer.
	reused := p.conn != nil
	for {
		if p.conn == nil {
			conn, err := n.layer.Dial(to.Address, noticeTimeout)
			if err != nil {
				return NoticeReply{}, err
			}
			p.conn, p.rd = conn, bufio.NewReader(conn)
		}
		reply, err := n.exchange(ctx, p, frame)
		if err == nil {
			return reply, nil
		}
		p.close()
		if ctx.Err() != nil || n.ctx.Err() != nil {
			return NoticeReply{}, err
		}
		if reused {
			reused = false
			continue
		}
		if noAnswer(err) {
			n.log.Debug("quiet notice: no answer; peer taken as not quiet-capable", "peer", to.ID, "err", err)
			p.incapableTill = time.Now().Add(noticeIncapableFor)
			return NoticeReply{}, fmt.Errorf("%w: %v", ErrNotQuietCapable, err)
		}
		return NoticeReply{}, err
	}
}

// noAnswer reports whether an exchange's error means that the peer took
// the connection and did not answer the frame: it closed it (the Mux of a
// node without the notice layer closes a connection for an unknown group,
// with a reset when the frame is unread) or let it time out.
func noAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// exchange writes frame on p's connection and reads the answer, within
// noticeTimeout and ctx's deadline.
func (n *Noticer) exchange(ctx context.Context, p *noticePeer, frame []byte) (NoticeReply, error) {
	dl := time.Now().Add(noticeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	if err := p.conn.SetDeadline(dl); err != nil {
		return NoticeReply{}, err
	}
	if _, err := p.conn.Write(frame); err != nil {
		return NoticeReply{}, err
	}
	body, err := readNoticeFrame(p.rd, noticeResponseLen)
	if err != nil {
		return NoticeReply{}, err
	}
	return parseNoticeResponse(body)
}

// serve answers the notices of other nodes.
func (n *Noticer) serve() {
	defer n.wg.Done()
	for {
		conn, err := n.layer.Accept()
		if err != nil {
			return // closed
		}
		select {
		case n.conns <- struct{}{}:
		default:
			n.log.Warn("quiet notice: too many connections; closing one", "remote", conn.RemoteAddr().String(), "max", maxNoticeConns)
			conn.Close()
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() { <-n.conns }()
			defer conn.Close()
			if err := n.answer(conn); err != nil && !errors.Is(err, io.EOF) && n.ctx.Err() == nil {
				n.log.Debug("quiet notice: serving", "remote", conn.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// answer serves one connection's requests until it ends, idles for
// noticeIdle, or sends a bad frame.
func (n *Noticer) answer(conn net.Conn) error {
	rd := bufio.NewReader(conn)
	var out []byte
	for {
		if err := conn.SetReadDeadline(time.Now().Add(noticeIdle)); err != nil {
			return err
		}
		body, err := readNoticeFrame(rd, maxNoticeFrame)
		if err != nil {
			return err
		}
		to, notice, err := parseNoticeRequest(body)
		if err != nil {
			return err
		}
		var reply NoticeReply
		if to == n.localID {
			reply = n.handle(notice)
		}
		out = appendNoticeResponse(out[:0], reply)
		if err := conn.SetWriteDeadline(time.Now().Add(noticeTimeout)); err != nil {
			return err
		}
		if _, err := conn.Write(out); err != nil {
			return err
		}
	}
}

var errNoticeFrame = errors.New("transport: malformed quiet notice frame")

// readNoticeFrame reads one length-prefixed frame of at most max bytes.
func readNoticeFrame(rd *bufio.Reader, max uint32) ([]byte, error) {
	return readFrame(rd, max, errNoticeFrame)
}

func validNoticeKind(k NoticeKind) bool { return k == NoticeQuiet || k == NoticeWake }

// appendNoticeRequest appends the request frame sending notice to node to.
func appendNoticeRequest(b []byte, to string, notice Notice) ([]byte, error) {
	if len(to) == 0 || len(to) > 255 || len(notice.From) == 0 || len(notice.From) > 255 || !validNoticeKind(notice.Kind) {
		return nil, fmt.Errorf("%w: to of %d bytes, from of %d, kind %d", errNoticeFrame, len(to), len(notice.From), notice.Kind)
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0, noticeVersion, byte(notice.Kind), byte(len(to)))
	b = append(b, to...)
	b = append(b, byte(len(notice.From)))
	b = append(b, notice.From...)
	b = binary.BigEndian.AppendUint32(b, notice.Group)
	b = binary.BigEndian.AppendUint64(b, notice.Term)
	b = binary.BigEndian.AppendUint64(b, notice.Index)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b, nil
}

// parseNoticeRequest decodes a request frame's body.
func parseNoticeRequest(body []byte) (string, Notice, error) {
	bad := func(what string) (string, Notice, error) {
		return "", Notice{}, fmt.Errorf("%w: request %s", errNoticeFrame, what)
	}
	if len(body) < 3 || body[0] != noticeVersion {
		return bad("header")
	}
	kind := NoticeKind(body[1])
	if !validNoticeKind(kind) {
		return bad("kind")
	}
	rest := body[2:]
	toLen := int(rest[0])
	if toLen == 0 || len(rest) < 1+toLen+1 {
		return bad("to")
	}
	to := string(rest[1 : 1+toLen])
	rest = rest[1+toLen:]
	fromLen := int(rest[0])
	if fromLen == 0 || len(rest) != 1+fromLen+20 {
		return bad("from")
	}
	from := string(rest[1 : 1+fromLen])
	rest = rest[1+fromLen:]
	return to, Notice{
		Kind:  kind,
		From:  from,
		Group: binary.BigEndian.Uint32(rest),
		Term:  binary.BigEndian.Uint64(rest[4:]),
		Index: binary.BigEndian.Uint64(rest[12:]),
	}, nil
}

// appendNoticeResponse appends the response frame of reply.
func appendNoticeResponse(b []byte, reply NoticeReply) []byte {
	status := byte(0)
	if reply.Done {
		status = 1
	}
	b = append(b, 0, 0, 0, noticeResponseLen, noticeVersion, status)
	return binary.BigEndian.AppendUint64(b, reply.LastIndex)
}

// parseNoticeResponse decodes a response frame's body.
func parseNoticeResponse(body []byte) (NoticeReply, error) {
	if len(body) != noticeResponseLen || body[0] != noticeVersion || body[1] > 1 {
		return NoticeReply{}, fmt.Errorf("%w: response of %d bytes", errNoticeFrame, len(body))
	}
	return NoticeReply{Done: body[1] == 1, LastIndex: binary.BigEndian.Uint64(body[2:])}, nil
}
