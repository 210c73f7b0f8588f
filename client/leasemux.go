package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Keep-alive multiplexing: every lease a Client keeps alive on a shard
// shares one KeepAliveStream (rpc/lease.proto) to that shard's leader, so
// one client keeps any number of leases alive with a handful of streams
// (a node serves at most --max-concurrent-streams, 1024, per connection).
//
//	kaMux ── streams[shard] ──> kaStream ── one KeepAliveStream to the leader
//	                              pending[lease id] -> kaCall (one request in flight per lease)
//
// A keep-alive asks for the shard's stream (opened on first use, to the
// leader as the client knows it, else one replica after the other), adds
// its lease to the stream's pending calls and waits for the answer that
// names the lease. A second keep-alive of a lease whose request is in
// flight joins that request: it takes its answer, and its send time,
// which is the earlier one (the lease lives TTL from a moment no earlier
// than that: the safety rule of KeepAlive.TTL), so at most one request
// per lease is ever in flight on a stream and the answers need no order.
// Any error of the stream (the node no longer leads, the slot moved, the
// transport broke, no answer at all for the AttemptTimeout while a call
// waits) ends it: every
// call pending on it fails with that error and is retried by its caller
// on a new stream, after the client updated what it knows of the leader
// or the map, as a call does. A stream no KeepAlive uses is closed after
// kaIdle; Client.Close closes them all.
//
// Threads: each stream has a receiving goroutine (which opens it first)
// and a sending one, joined by Client.Close (and ended with the stream).

// kaIdle is how long a stream no KeepAlive uses stays open (a
// KeepAliveOnceStream caller may come back).
const kaIdle = 10 * time.Second

// errKaIdle ends a stream no one uses.
var errKaIdle = errors.New("swarmkv: keep-alive stream idle")

// kaMux is a Client's keep-alive streams, one per shard.
type kaMux struct {
	c  *Client
	wg sync.WaitGroup // the streams' goroutines

	mu struct {
		sync.Mutex
		streams  map[shard.ID]*kaStream
		attempts map[shard.ID]int // stream openings since the shard last answered (target choice)
		closed   bool
	}
}

func newKaMux(c *Client) *kaMux {
	m := &kaMux{c: c}
	m.mu.streams = map[shard.ID]*kaStream{}
	m.mu.attempts = map[shard.ID]int{}
	return m
}

// kaStream is one keep-alive stream to a shard's leader.
type kaStream struct {
	m      *kaMux
	shard  shard.ID
	addr   string
	ctx    context.Context // ends the gRPC stream
	cancel context.CancelFunc
	dead   chan struct{} // closed when it has failed (err set)
	wake   chan struct{} // cap 1: ids queued to send

	// refs (under m.mu): the holders using it; idle: the timer that closes
	// it once none does.
	refs int
	idle *time.Timer

	mu struct {
		sync.Mutex
		err     error              // why it ended; nil while it runs
		pending map[uint64]*kaCall // by lease id: the request in flight
		queue   []uint64           // ids to send
		answer  time.Time          // the last answer received (zero: none yet)
	}
	// mapOnce: one caller awaits the map a Moved answer names, for all
	// the calls the stream's end failed.
	mapMu   sync.Mutex
	mapDone bool
}

// kaCall is one keep-alive request in flight: done is closed once ttlMs
// or err is set.
type kaCall struct {
	sent    time.Time
	done    chan struct{}
	waiters int // the keep-alives that took it (under the stream's mu; tests)
	ttlMs   int64
	err     error
}

// holder is one user of the mux (a KeepAlive, or one KeepAliveOnceStream
// call): the stream it holds a reference to. Only its goroutine uses it.
type kaHolder struct {
	m   *kaMux
	id  LeaseID
	cur *kaStream
}

// acquire returns shard sid's stream, opening one if none runs, and moves
// h's reference to it.
func (h *kaHolder) acquire(sid shard.ID) (*kaStream, error) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrClosed
	}
	s := m.mu.streams[sid]
	if s == nil {
		addr, ok := m.c.target(sid, m.mu.attempts[sid], false, 0)
		m.mu.attempts[sid]++
		if !ok {
			return nil, errNoReplica
		}
		nc, err := m.c.conn(addr)
		if err != nil {
			return nil, err
		}
		s = &kaStream{m: m, shard: sid, addr: addr, dead: make(chan struct{}), wake: make(chan struct{}, 1)}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.mu.pending = map[uint64]*kaCall{}
		m.mu.streams[sid] = s
		m.wg.Add(1)
		go s.run(rpc.NewLeaseClient(nc.cc))
	}
	if s != h.cur {
		if s.idle != nil {
			s.idle.Stop()
			s.idle = nil
		}
		s.refs++
		h.releaseLocked()
		h.cur = s
	}
	return s, nil
}

var errNoReplica = errors.New("no known replica")

// release drops h's reference (a KeepAlive stopped, a call done).
func (h *kaHolder) release() {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	h.releaseLocked()
	h.cur = nil
}

func (h *kaHolder) releaseLocked() {
	s := h.cur
	if s == nil {
		return
	}
	s.refs--
	if s.refs == 0 && h.m.mu.streams[s.shard] == s && !h.m.mu.closed {
		s.idle = time.AfterFunc(kaIdle, func() { h.m.closeIdle(s) })
	}
}

// closeIdle ends s if no one has used it since it became idle.
func (m *kaMux) closeIdle(s *kaStream) {
	m.mu.Lock()
	idle := s.refs == 0 && m.mu.streams[s.shard] == s
	if idle {
		delete(m.mu.streams, s.shard)
	}
	m.mu.Unlock()
	if idle {
		s.fail(errKaIdle)
	}
}

// close ends every stream and waits for their goroutines (Client.Close).
func (m *kaMux) close() {
	m.mu.Lock()
	m.mu.closed = true
	var all []*kaStream
	for _, s := range m.mu.streams {
		if s.idle != nil {
			s.idle.Stop()
		}
		all = append(all, s)
	}
	clear(m.mu.streams)
	m.mu.Unlock()
	for _, s := range all {
		s.fail(ErrClosed)
	}
	m.wg.Wait()
}

// run opens the stream, starts its sender, and receives its answers until
// it ends.
func (s *kaStream) run(lc rpc.LeaseClient) {
	defer s.m.wg.Done()
	st, err := lc.KeepAliveStream(s.ctx)
	if err != nil {
		s.fail(err)
		return
	}
	s.m.wg.Add(1)
	go s.send(st)
	for {
		resp, err := st.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		call := s.mu.pending[resp.GetId()]
		delete(s.mu.pending, resp.GetId())
		s.mu.answer = time.Now()
		s.mu.Unlock()
		if call != nil {
			call.ttlMs = resp.GetTtlMs()
			close(call.done)
		}
	}
}

// send sends the queued keep-alives until the stream ends.
func (s *kaStream) send(st rpc.Lease_KeepAliveStreamClient) {
	defer s.m.wg.Done()
	for {
		select {
		case <-s.dead:
			return
		case <-s.wake:
		}
		s.mu.Lock()
		ids := s.mu.queue
		s.mu.queue = nil
		s.mu.Unlock()
		for _, id := range ids {
			if err := st.Send(&rpc.LeaseKeepAliveRequest{Id: id}); err != nil {
				if !errors.Is(err, io.EOF) {
					s.fail(err)
				}
				// io.EOF: the node ended the stream; the receiver gets
				// its status (a NotLeader hint, say) and ends it with that.
				return
			}
		}
	}
}

// fail ends the stream with err (the first error wins): its pending calls
// fail with it, and the shard gets a new stream on next use.
func (s *kaStream) fail(err error) {
	s.mu.Lock()
	if s.mu.err != nil {
		s.mu.Unlock()
		return
	}
	s.mu.err = err
	pending := s.mu.pending
	s.mu.pending, s.mu.queue = nil, nil
	close(s.dead)
	s.mu.Unlock()
	s.cancel()
	for _, call := range pending {
		call.err = err
		close(call.done)
	}
	m := s.m
	m.mu.Lock()
	if m.mu.streams[s.shard] == s {
		delete(m.mu.streams, s.shard)
	}
	if s.idle != nil {
		s.idle.Stop()
	}
	m.mu.Unlock()
}

// call returns the request in flight for lease id on s, sending one if
// none is; an error if s has ended.
func (s *kaStream) call(id LeaseID) (*kaCall, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.err != nil {
		return nil, s.mu.err
	}
	if c := s.mu.pending[uint64(id)]; c != nil {
		c.waiters++
		return c, nil
	}
	c := &kaCall{sent: time.Now(), done: make(chan struct{}), waiters: 1}
	s.mu.pending[uint64(id)] = c
	s.mu.queue = append(s.mu.queue, uint64(id))
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return c, nil
}

var errKaSilent = errors.New("keep-alive stream silent")

// await waits for call's answer (its error, nil when answered), ctx's end
// (ctx.Err()), or for s to have answered nothing for timeout since the
// wait began (errKaSilent).
func (s *kaStream) await(ctx context.Context, call *kaCall, timeout time.Duration) error {
	began := time.Now()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-call.done:
			return call.err
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		s.mu.Lock()
		last := s.mu.answer
		s.mu.Unlock()
		if last.Before(began) {
			last = began
		}
		silent := time.Since(last)
		if silent >= timeout {
			return errKaSilent
		}
		t.Reset(timeout - silent)
	}
}

// awaitMap awaits the map version a Moved end of s names, once for all
// the calls it failed.
func (s *kaStream) awaitMap(ctx context.Context, me *MovedError) error {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.mapDone {
		return nil
	}
	if err := s.m.c.awaitMap(ctx, me); err != nil {
		return err
	}
	s.mapDone = true
	return nil
}

// renew keeps the lease alive once on its shard's stream, following the
// shard's leader (NotLeader hints, moved slots, elections) as CallShard
// does, until it is answered or ctx ends. It returns the lease's TTL and
// when the keep-alive that renewed it was sent. ErrLeaseNotFound (with
// ErrNotFound) when the lease is gone.
func (h *kaHolder) renew(ctx context.Context) (time.Duration, time.Time, error) {
	backoff := callBackoff.Backoff()
	var hints hintPacer // as Client.call: a hint that waited ends the row
	for {
		ttl, sent, class, addr, err := h.once(ctx)
		if err == nil || class == classFatal {
			return ttl, sent, err
		}
		if ctx.Err() != nil {
			return 0, sent, err
		}
		var nl *NotLeaderError
		if errors.As(err, &nl) && nl.LeaderAddr != "" && nl.LeaderAddr != addr {
			if hints.now() {
				continue // go to the leader it names now
			}
			hints.reset() // this one waits
		}
		backoff.Wait(ctx)
	}
}

// once is one attempt of renew on the shard's stream (opened if none is).
// It waits for its answer as long as the stream answers something at
// least every AttemptTimeout: a stream that answers nothing for that long
// while this call waits is ended (the node may hang) for every call on it,
// but a busy one that keeps answering is not (ending it would fail all
// its calls; each renewal is bounded by its lease's TTL anyway). A
// stream's error updates what the client knows of the shard's leader or
// map. It returns the address of the stream's node too.
func (h *kaHolder) once(ctx context.Context) (time.Duration, time.Time, errClass, string, error) {
	c := h.m.c
	sid := c.slotOwner(h.id.slot())
	s, err := h.acquire(sid)
	if errors.Is(err, errNoReplica) {
		c.RefreshMap(ctx)
		return 0, time.Time{}, classRetry, "", fmt.Errorf("%w: no known replica of shard %d", ErrUnavailable, sid)
	}
	if err != nil {
		return 0, time.Time{}, classFatal, "", err
	}
	call, err := s.call(h.id)
	if err == nil {
		err = s.await(ctx, call, c.cfg.AttemptTimeout)
		if errors.Is(err, errKaSilent) {
			err = fmt.Errorf("%w: shard %d: no keep-alive answer from %s within %v", ErrUnavailable, sid, s.addr, c.cfg.AttemptTimeout)
			s.fail(err)
			c.setLeader(sid, "")
			return 0, call.sent, classRetry, s.addr, err
		}
		if ctx.Err() != nil && err == ctx.Err() {
			return 0, call.sent, classFatal, s.addr, err
		}
	}
	if err != nil {
		class, cerr := h.classify(ctx, s, err)
		return 0, time.Time{}, class, s.addr, cerr
	}
	h.m.mu.Lock()
	h.m.mu.attempts[sid] = 0
	h.m.mu.Unlock()
	if call.ttlMs == 0 {
		return 0, call.sent, classFatal, s.addr, leaseErr(h.id, ErrNotFound)
	}
	return time.Duration(call.ttlMs) * time.Millisecond, call.sent, 0, s.addr, nil
}

// classify classes the error that ended stream s and updates what the
// client knows of its shard's leader or map.
func (h *kaHolder) classify(ctx context.Context, s *kaStream, err error) (errClass, error) {
	c := h.m.c
	if errors.Is(err, ErrClosed) {
		return classFatal, err
	}
	if errors.Is(err, errKaIdle) {
		return classRetry, err // closed as this call came: open another
	}
	cerr, class, hint := classify(err)
	if _, ok := status.FromError(err); !ok {
		class = classAmbiguous // the stream ended without a status (EOF)
	}
	switch class {
	case classNotLeader:
		c.setLeader(s.shard, hint.GetLeaderAddr())
		if hint.GetLeaderAddr() == s.addr { // a stale hint: try the others
			c.setLeader(s.shard, "")
		}
	case classMoved:
		var me *MovedError
		if errors.As(cerr, &me) {
			if err := s.awaitMap(ctx, me); err != nil {
				return classFatal, err
			}
		}
	case classRetry:
		// Not executed (no leader yet, leader not ready): the same
		// node again after a pause.
	case classAmbiguous: // the transport failed, or the stream ended: any replica
		c.setLeader(s.shard, "")
		class = classRetry
	}
	return class, cerr // classFatal: a definite answer (refused, invalid)
}
