package transport

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// LeaderChecker confirms the read rounds of a node's leader groups with
// the peer nodes, all groups at once, over one Layer of the Mux (the node
// reserves a group id for it, cluster.ReadCheckGroup).
//
// A linearizable read needs its leader to learn, after the read arrived,
// that no other leader has been elected: the ReadIndex protocol of the
// Raft thesis (6.4). hashicorp/raft's VerifyLeader does that with a
// heartbeat to every follower, per group and per call. Under a read load
// that was a third of the nodes' CPU (docs/performance-log.md, round 8): every
// read round of each of a node's leader groups cost two AppendEntries
// round trips through the Raft transport, msgpack-encoded.
//
// The LeaderChecker asks the same question once for all of a node's
// groups: it sends each peer node one frame listing (group, term) pairs,
// and the peer answers, for each, whether its replica of the group is at
// that term or an older one. A voter whose term is not above T has not
// voted in any later term (hashicorp/raft raises, and persists, its term
// before it grants a vote), so once a majority of the group's voters
// (the leader counting itself) answered yes, no leader of a later term
// existed when they answered: the commit index the leader captured before
// asking covers every write acknowledged before the read. That is the
// condition a heartbeat acknowledgement gives VerifyLeader, which counts
// any successful heartbeat response; the frame asks it of every group at
// once, without the Raft transport and its encoding. A round that is not
// confirmed (a peer that is down, slow, or behind a partition, or that
// says no) falls back to VerifyLeader, so the check never answers a read
// that VerifyLeader would refuse for want of an answer.
//
// Frames, each a big-endian uint32 length and that many bytes:
//
//	request:  version (1) | id length (1) | id | n x (group uint32, term uint64)
//	response: version (1) | n x answer (1: confirmed, 0: not)
//
// id is the node the sender expects to answer (the voter's ID in the
// group's configuration); a node with another ID answers no to every pair.
type LeaderChecker struct {
	layer   *Layer
	localID string
	// lookup returns the local replica's Raft instance of a group, nil if
	// the node has none.
	lookup func(group uint32) TermReader
	log    *slog.Logger

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[string]*checkPeer // by ID and address
}

const (
	readCheckVersion = 1
	// maxChecksPerFrame bounds a frame's pairs (a node leads at most a few
	// hundred groups); maxCheckFrame the frame a reader accepts.
	maxChecksPerFrame = 4096
	checkPairLen      = 12
	maxCheckFrame     = 2 + 255 + maxChecksPerFrame*checkPairLen
	// checkDialTimeout bounds connecting to a peer and checkTimeout one
	// exchange; checkWait bounds a round's wait for a quorum, after which
	// it falls back to VerifyLeader.
	checkDialTimeout = time.Second
	checkTimeout     = 2 * time.Second
	checkWait        = 500 * time.Millisecond
	// checkPeerPenalty: a peer whose exchange failed is asked last for
	// this long.
	checkPeerPenalty = time.Second
)

// TermReader is what an answer reads of a replica (a *raft.Raft).
type TermReader interface {
	State() raft.RaftState
	CurrentTerm() uint64
}

// groupTerm is one pair of a request.
type groupTerm struct {
	group uint32
	term  uint64
}

// NewLeaderChecker starts a checker that dials the peers and answers them
// on layer. localID is this node's id; lookup returns the local replica's
// Raft instance of a group (nil if none): the answers read its state and
// term. The checker owns layer from here on.
func NewLeaderChecker(layer *Layer, localID string, lookup func(uint32) TermReader, log *slog.Logger) *LeaderChecker {
	c := &LeaderChecker{layer: layer, localID: localID, lookup: lookup, log: log, peers: map[string]*checkPeer{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.serve()
	return c
}

// Close stops the checker: pending checks are not confirmed, the layer and
// its connections are closed, and every goroutine is joined.
func (c *LeaderChecker) Close() {
	c.cancel()
	c.layer.Close()
	c.wg.Wait()
}

// Confirm reports whether a majority of cfg's voters, counting this node
// if it is one, confirmed after the call that none of them is past term
// in group. false means not confirmed (not necessarily deposed).
func (c *LeaderChecker) Confirm(group uint32, term uint64, cfg raft.Configuration) bool {
	voters, self := 0, false
	var others []raft.Server
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(s.ID) == c.localID {
			self = true
		} else {
			others = append(others, s)
		}
	}
	need := voters/2 + 1
	if self {
		need--
	}
	if need <= 0 {
		return true
	}
	if len(others) < need {
		return false
	}
	// Ask only as many peers as the quorum needs, the same ones for every
	// group (so that their pairs share frames), in ring order from this
	// node (so that each node answers about as many as it asks), healthy
	// ones first. A round they do not confirm falls back to VerifyLeader.
	ask := c.order(others)[:need]
	v := &checkVote{need: need, left: len(ask), done: make(chan struct{})}
	for _, p := range ask {
		p.submit(checkReq{groupTerm{group, term}, v})
	}
	t := time.NewTimer(checkWait)
	defer t.Stop()
	select {
	case <-v.done:
		return v.confirmed()
	case <-t.C:
	case <-c.ctx.Done():
	}
	return false
}

// checkVote collects the answers of one group's check.
type checkVote struct {
	mu        sync.Mutex
	need      int // yes answers still needed
	left      int // answers still to come
	yes       bool
	done      chan struct{}
	closeOnce sync.Once
}

func (v *checkVote) add(ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.left--
	if ok {
		v.need--
	}
	if v.need <= 0 {
		v.yes = true
	}
	if v.need <= 0 || v.left < v.need {
		v.closeOnce.Do(func() { close(v.done) })
	}
}

func (v *checkVote) confirmed() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.yes
}

type checkReq struct {
	groupTerm
	vote *checkVote
}

// checkPeer sends one peer node the checks queued for it, all of them in
// one frame per exchange, one exchange at a time, over one connection.
type checkPeer struct {
	c        *LeaderChecker
	id, addr string
	wake     chan struct{} // cap 1: the queue is not empty
	// failedAt is when an exchange last failed (unix ns; 0: never).
	failedAt atomic.Int64
	mu       sync.Mutex
	queue    []checkReq
}

// order returns the peers of servers: those whose last exchange did not
// fail within checkPeerPenalty first, each part in ring order of IDs
// starting after this node's.
func (c *LeaderChecker) order(servers []raft.Server) []*checkPeer {
	slices.SortFunc(servers, func(a, b raft.Server) int {
		return cmp.Compare(a.ID, b.ID)
	})
	i, _ := slices.BinarySearchFunc(servers, raft.ServerID(c.localID), func(s raft.Server, id raft.ServerID) int {
		return cmp.Compare(s.ID, id)
	})
	now := time.Now().UnixNano()
	healthy := make([]*checkPeer, 0, len(servers))
	var failing []*checkPeer
	for j := range servers {
		s := servers[(i+j)%len(servers)]
		p := c.peer(string(s.ID), string(s.Address))
		if now-p.failedAt.Load() < int64(checkPeerPenalty) {
			failing = append(failing, p)
		} else {
			healthy = append(healthy, p)
		}
	}
	return append(healthy, failing...)
}

func (c *LeaderChecker) peer(id, addr string) *checkPeer {
	key := id + "\x00" + addr
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[key]
	if p == nil {
		p = &checkPeer{c: c, id: id, addr: addr, wake: make(chan struct{}, 1)}
		c.peers[key] = p
		c.wg.Add(1)
		go p.loop()
	}
	return p
}

func (p *checkPeer) submit(r checkReq) {
	p.mu.Lock()
	p.queue = append(p.queue, r)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *checkPeer) loop() {
	defer p.c.wg.Done()
	var conn net.Conn
	var rd *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-p.wake:
		case <-p.c.ctx.Done():
			p.mu.Lock()
			batch := p.queue
			p.queue = nil
			p.mu.Unlock()
			for _, r := range batch {
				r.vote.add(false)
			}
			return
		}
		for {
			p.mu.Lock()
			n := min(len(p.queue), maxChecksPerFrame)
			batch := p.queue[:n:n]
			p.queue = p.queue[n:]
			if len(p.queue) == 0 {
				p.queue = nil
			}
			p.mu.Unlock()
			if n == 0 {
				break
			}
			if conn == nil {
				var err error
				if conn, err = p.c.layer.Dial(raft.ServerAddress(p.addr), checkDialTimeout); err != nil {
					p.c.log.Debug("read check: dial", "peer", p.id, "err", err)
					conn = nil
				} else {
					rd = bufio.NewReader(conn)
				}
			}
			var answers []bool
			err := errors.New("not connected")
			if conn != nil {
				answers, err = p.exchange(conn, rd, batch)
			}
			if err != nil {
				p.failedAt.Store(time.Now().UnixNano())
				if conn != nil {
					p.c.log.Debug("read check: exchange", "peer", p.id, "err", err)
					conn.Close()
					conn = nil
				}
				for _, r := range batch {
					r.vote.add(false)
				}
				continue
			}
			for i, r := range batch {
				r.vote.add(answers[i])
			}
		}
	}
}

func (p *checkPeer) exchange(conn net.Conn, rd *bufio.Reader, batch []checkReq) ([]bool, error) {
	pairs := make([]groupTerm, len(batch))
	for i, r := range batch {
		pairs[i] = r.groupTerm
	}
	frame, err := appendCheckRequest(nil, p.id, pairs)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(time.Now().Add(checkTimeout)); err != nil {
		return nil, err
	}
	if _, err := conn.Write(frame); err != nil {
		return nil, err
	}
	body, err := readCheckFrame(rd)
	if err != nil {
		return nil, err
	}
	return parseCheckResponse(body, len(batch))
}

// serve answers the checks of other nodes.
func (c *LeaderChecker) serve() {
	defer c.wg.Done()
	for {
		conn, err := c.layer.Accept()
		if err != nil {
			return // closed
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer conn.Close()
			if err := c.answer(conn); err != nil && !errors.Is(err, io.EOF) && c.ctx.Err() == nil {
				c.log.Debug("read check: serving", "remote", conn.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// answer serves one connection's requests until it ends or sends a bad
// frame.
func (c *LeaderChecker) answer(conn net.Conn) error {
	rd := bufio.NewReader(conn)
	var out []byte
	for {
		body, err := readCheckFrame(rd)
		if err != nil {
			return err
		}
		id, pairs, err := parseCheckRequest(body)
		if err != nil {
			return err
		}
		out = append(out[:0], 0, 0, 0, 0, readCheckVersion)
		for _, gt := range pairs {
			out = append(out, c.answerOne(id, gt))
		}
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		if _, err := conn.Write(out); err != nil {
			return err
		}
	}
}

// answerOne: 1 when this node is id and its replica of the group is at
// term gt.term or before.
func (c *LeaderChecker) answerOne(id string, gt groupTerm) byte {
	if id != c.localID {
		return 0
	}
	r := c.lookup(gt.group)
	if r == nil || r.State() == raft.Shutdown || r.CurrentTerm() > gt.term {
		return 0
	}
	return 1
}

var errCheckFrame = errors.New("transport: malformed read check frame")

// readCheckFrame reads one length-prefixed frame.
func readCheckFrame(rd *bufio.Reader) ([]byte, error) {
	return readFrame(rd, maxCheckFrame, errCheckFrame)
}

// readFrame reads one length-prefixed frame (u32 big-endian length, then
// the body) of 1..max bytes: the framing of the read-check and notice
// side channels; a bad length is errFrame.
func readFrame(rd *bufio.Reader, max uint32, errFrame error) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > max {
		return nil, fmt.Errorf("%w: length %d", errFrame, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return nil, err
	}
	return body, nil
}

// appendCheckRequest appends the request frame asking node id about pairs.
func appendCheckRequest(b []byte, id string, pairs []groupTerm) ([]byte, error) {
	if len(id) == 0 || len(id) > 255 || len(pairs) == 0 || len(pairs) > maxChecksPerFrame {
		return nil, fmt.Errorf("%w: id of %d bytes, %d pairs", errCheckFrame, len(id), len(pairs))
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0, readCheckVersion, byte(len(id)))
	b = append(b, id...)
	for _, gt := range pairs {
		b = binary.BigEndian.AppendUint32(b, gt.group)
		b = binary.BigEndian.AppendUint64(b, gt.term)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b, nil
}

// parseCheckRequest decodes a request frame's body.
func parseCheckRequest(body []byte) (string, []groupTerm, error) {
	if len(body) < 2 || body[0] != readCheckVersion {
		return "", nil, fmt.Errorf("%w: request header", errCheckFrame)
	}
	idLen := int(body[1])
	rest := body[2:]
	if idLen == 0 || len(rest) < idLen {
		return "", nil, fmt.Errorf("%w: request id", errCheckFrame)
	}
	id := string(rest[:idLen])
	rest = rest[idLen:]
	if len(rest) == 0 || len(rest)%checkPairLen != 0 || len(rest)/checkPairLen > maxChecksPerFrame {
		return "", nil, fmt.Errorf("%w: %d bytes of pairs", errCheckFrame, len(rest))
	}
	pairs := make([]groupTerm, len(rest)/checkPairLen)
	for i := range pairs {
		p := rest[i*checkPairLen:]
		pairs[i] = groupTerm{binary.BigEndian.Uint32(p), binary.BigEndian.Uint64(p[4:])}
	}
	return id, pairs, nil
}

// parseCheckResponse decodes a response frame's body that answers n pairs.
func parseCheckResponse(body []byte, n int) ([]bool, error) {
	if len(body) != 1+n || body[0] != readCheckVersion {
		return nil, fmt.Errorf("%w: response of %d bytes for %d pairs", errCheckFrame, len(body), n)
	}
	out := make([]bool, n)
	for i, a := range body[1:] {
		switch a {
		case 1:
			out[i] = true
		case 0:
		default:
			return nil, fmt.Errorf("%w: answer %d", errCheckFrame, a)
		}
	}
	return out, nil
}
