package etcdfront

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
)

// The Watch service (etcdserverpb.Watch), served from the namespace's
// history in the state machine (fsm/etcd_watch.go).
//
// A Watch stream belongs to one namespace (its metadata's, as every call)
// and to the local replica of that namespace's shard, leader or follower:
// a watch is served from the replica's applied state, as etcd serves it
// from any member's store, so its events are in revision order, each
// once, without gaps, and every header carries the namespace's revision
// as that replica has applied it (never ahead of the leader; behind it by
// the replica's apply lag). A stream with etcd's require-leader metadata
// (clientv3.WithRequireLeader) is refused with etcd's "no leader" while
// the replica knows no leader.
//
// Threads, per stream: the handler's goroutine sends (the only caller of
// Send); one goroutine receives requests (create, cancel, progress); one
// goroutine per watcher reads the history and queues responses. A watcher
// is pull-driven: it reads the history only once the stream may hold its
// page (Limits below), so a client slow to read makes its watchers read
// later, from the history, instead of buffering: nothing is dropped, and
// a watcher whose start is compacted before it reads gets etcd's
// compacted cancel. The watcher goroutines are joined before the handler
// returns; the receiving goroutine ends when the stream does (grpc-go
// unblocks its Recv once the handler has returned), as does a Send left
// blocked by a client that stopped reading (the send timeout).
//
// Bounds (docs/security.md, "The etcd front"): Config.MaxWatchers on the
// node and Config.MaxWatchersPerConn per client connection (a create over
// either is cancelled with a reason the client returns as its error);
// each watcher holds at most one page (Config.MaxRequestBytes of events,
// or one larger revision) between reading and sending it; a stream at
// most watchStreamPages of them; the node at most watchNodeBytes(cfg) of
// read-but-unsent events in all; a Send blocked longer than
// Config.WatchSendTimeout ends the stream (Unavailable: the official
// client resumes every watcher from its last revision).

// watchStreamPages is how many pages one stream's watchers may hold read
// and not yet sent.
const watchStreamPages = 2

// watchNodeBytes bounds the events the node's watchers hold read and not
// yet sent, in all.
func watchNodeBytes(cfg Config) int64 {
	return max(64<<20, int64(watchStreamPages)*2*int64(cfg.MaxRequestBytes))
}

// Watch defaults.
const (
	DefaultMaxWatchers           = 10000
	DefaultMaxWatchersPerConn    = 1000
	DefaultWatchProgressInterval = 10 * time.Minute // etcd's --experimental-watch-progress-notify-interval
	DefaultWatchSendTimeout      = time.Minute
)

func (c Config) watchDefaults() Config {
	if c.MaxWatchers == 0 {
		c.MaxWatchers = DefaultMaxWatchers
	}
	if c.MaxWatchersPerConn == 0 {
		c.MaxWatchersPerConn = DefaultMaxWatchersPerConn
	}
	if c.WatchProgressInterval == 0 {
		c.WatchProgressInterval = DefaultWatchProgressInterval
	}
	if c.WatchSendTimeout == 0 {
		c.WatchSendTimeout = DefaultWatchSendTimeout
	}
	return c
}

func (c Config) validateWatch() error {
	switch {
	case c.MaxWatchers < 1:
		return fmt.Errorf("etcdfront: max watchers %d, want >= 1", c.MaxWatchers)
	case c.MaxWatchersPerConn < 1:
		return fmt.Errorf("etcdfront: max watchers per connection %d, want >= 1", c.MaxWatchersPerConn)
	case c.WatchProgressInterval < 0 || c.WatchSendTimeout < 0:
		return errors.New("etcdfront: negative watch progress interval or send timeout")
	}
	return nil
}

// Errors of a watch create (its cancel reason), as etcd words the first
// two (mvcc.ErrWatcherDuplicateID, mvcc.ErrEmptyWatcherRange).
var (
	errWatchDuplicateID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	errWatchEmptyRange  = errors.New("mvcc: watcher range is empty")
	errWatchBadRequest  = errors.New("swarmkv: invalid watch request")
	errTooManyWatchers  = errors.New("swarmkv: too many watchers")
)

// watchSpec is a validated create request.
type watchSpec struct {
	id       int64 // 0: the server picks
	key, end []byte
	fromKey  bool  // every key from key (range_end "\0")
	start    int64 // 0: after the current revision
	noPut    bool
	noDelete bool
	prevKV   bool
	progress bool
	fragment bool
}

// validateCreate checks a create request as etcd does: an empty key is
// "\x00" (the smallest key); range_end "\0" is every key from key; a
// range_end not above key is an empty range (etcd's error). Beyond etcd:
// a negative watch id or start revision, an unknown filter and keys over
// fsm's key size are refused.
func validateCreate(req *pb.WatchCreateRequest) (*watchSpec, error) {
	s := &watchSpec{id: req.WatchId, key: req.Key, start: req.StartRevision,
		prevKV: req.PrevKv, progress: req.ProgressNotify, fragment: req.Fragment}
	max := fsm.Limits{}.WithDefaults().MaxKeySize
	switch {
	case req.WatchId < 0:
		return nil, fmt.Errorf("%w: watch id %d is negative", errWatchBadRequest, req.WatchId)
	case req.StartRevision < 0:
		return nil, fmt.Errorf("%w: start revision %d is negative", errWatchBadRequest, req.StartRevision)
	case len(req.Key) > max || len(req.RangeEnd) > max:
		return nil, fmt.Errorf("%w: key or range end over %d bytes", errWatchBadRequest, max)
	}
	if len(s.key) == 0 {
		s.key = []byte{0}
	}
	switch {
	case len(req.RangeEnd) == 1 && req.RangeEnd[0] == 0:
		s.fromKey = true
	case len(req.RangeEnd) > 0:
		if string(s.key) >= string(req.RangeEnd) {
			return nil, errWatchEmptyRange
		}
		s.end = req.RangeEnd
	}
	for _, f := range req.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			s.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			s.noDelete = true
		default:
			return nil, fmt.Errorf("%w: unknown filter %d", errWatchBadRequest, f)
		}
	}
	return s, nil
}

// matches reports whether the watcher selects event e.
func (s *watchSpec) matches(e *fsm.EtcdEvent) bool {
	if e.Delete && s.noDelete || !e.Delete && s.noPut {
		return false
	}
	k := string(e.KV.Key)
	switch {
	case s.fromKey:
		return k >= string(s.key)
	case s.end != nil:
		return k >= string(s.key) && k < string(s.end)
	}
	return k == string(s.key)
}

// watchCounts counts the front's watchers: on the node, per connection.
type watchCounts struct {
	mu    sync.Mutex
	node  int
	conns map[string]int
	// bytes bounds the events read and not yet sent (watchNodeBytes,
	// total).
	bytes *semaphore.Weighted
	total int64
	held  atomic.Int64 // bytes acquired now (tests, metrics)
}

func newWatchCounts(cfg Config) *watchCounts {
	n := watchNodeBytes(cfg)
	return &watchCounts{conns: make(map[string]int), bytes: semaphore.NewWeighted(n), total: n}
}

func (c *watchCounts) admit(conn string, maxNode, maxConn int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.node >= maxNode {
		return fmt.Errorf("%w on this node (limit %d, --etcd-max-watchers)", errTooManyWatchers, maxNode)
	}
	if c.conns[conn] >= maxConn {
		return fmt.Errorf("%w on this connection (limit %d, --etcd-max-watchers-per-conn)", errTooManyWatchers, maxConn)
	}
	c.node++
	c.conns[conn]++
	return nil
}

func (c *watchCounts) release(conn string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.node--
	if c.conns[conn]--; c.conns[conn] <= 0 {
		delete(c.conns, conn)
	}
}

// Watchers is the number of watchers the front serves now.
func (f *Front) Watchers() int {
	f.watches.mu.Lock()
	defer f.watches.mu.Unlock()
	return f.watches.node
}

// WatchBytesHeld is the bytes of events the front's watchers hold read
// and not yet sent (at most watchNodeBytes).
func (f *Front) WatchBytesHeld() int64 { return f.watches.held.Load() }

// watchServer serves etcdserverpb.Watch.
type watchServer struct {
	pb.UnimplementedWatchServer
	f *Front
}

// outMsg is what the sender sends, in the order queued.
type outMsg struct {
	resp *pb.WatchResponse // nil: a marker (upTo only)
	w    *watcher          // the watcher it belongs to (nil: the stream's)
	// upTo, when > 0: once this is sent, w has sent every event of its
	// up to revision upTo.
	upTo    int64
	events  bool   // resp carries events of w
	release func() // after the send: the page's bytes and slot
	// progress, when > 0: a RequestProgress asked at this revision.
	progress int64
}

// watcher is one watch of a stream.
type watcher struct {
	spec   *watchSpec
	id     int64
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// Sender's own (read and written by the sending goroutine alone):
	sent       int64 // every event up to it has been sent
	eventsSent bool  // events sent since the last progress tick
}

// watchStream is one Watch call.
type watchStream struct {
	f      *Front
	ns     string
	rk     []byte
	fsm    *fsm.FSM
	conn   string
	ctx    context.Context
	cancel context.CancelCauseFunc
	out    chan outMsg
	pages  chan struct{} // a token per page held (watchStreamPages)
	wg     sync.WaitGroup
	closed chan struct{} // closed once the watchers have ended
	// sending is when the current Send began (unix ns), 0 between sends.
	sending atomic.Int64
	mu      struct {
		sync.Mutex
		watchers map[int64]*watcher
		nextID   int64
		closed   bool
	}
}

// Watch serves one stream.
func (s *watchServer) Watch(stream pb.Watch_WatchServer) error {
	f := s.f
	ctx := stream.Context()
	ns, err := f.namespace(ctx)
	if err != nil {
		return err
	}
	r, err := f.shardOf(ns)
	if err != nil {
		return err
	}
	if requireLeader(ctx) && r.Leader() == "" {
		return rpctypes.ErrGRPCNoLeader
	}
	ws := &watchStream{f: f, ns: ns, rk: keys.EtcdRoutingKey(ns), fsm: r.FSM(),
		out: make(chan outMsg, 64), pages: make(chan struct{}, watchStreamPages), closed: make(chan struct{})}
	if p, ok := peer.FromContext(ctx); ok {
		ws.conn = p.Addr.String()
	}
	ws.mu.watchers = make(map[int64]*watcher)
	ws.ctx, ws.cancel = context.WithCancelCause(ctx)
	defer ws.cancel(context.Canceled)
	go ws.recvLoop(stream)
	loopErr := make(chan error, 1)
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		loopErr <- ws.sendLoop(stream)
		<-ws.closed // the watchers have ended: nothing more is queued
		ws.drain()
	}()
	stopWatchdog := ws.watchdog(r, requireLeader(ctx))
	select {
	case err = <-loopErr:
	case <-ws.ctx.Done():
		err = ws.endErr()
	}
	stopWatchdog()
	ws.close()
	// The sender ends on its own unless a Send is blocked by a client
	// that reads nothing: that one returns once the handler has (grpc-go
	// ends a blocked Send when its stream is done).
	select {
	case <-senderDone:
	case <-time.After(f.cfg.WatchSendTimeout):
	}
	return err
}

// endErr is why the stream ended: the cause of its cancellation (a
// watcher's read error, the send timeout), or the call's own end.
func (ws *watchStream) endErr() error {
	if err := context.Cause(ws.ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ws.ctx.Err()
}

// drain releases what is left queued.
func (ws *watchStream) drain() {
	for {
		select {
		case m := <-ws.out:
			if m.release != nil {
				m.release()
			}
		default:
			return
		}
	}
}

// requireLeader reports etcd's require-leader metadata
// (clientv3.WithRequireLeader: "hasleader" = "true").
func requireLeader(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	v := md.Get(rpctypes.MetadataRequireLeaderKey)
	return len(v) > 0 && v[0] == rpctypes.MetadataHasLeader
}

// close ends every watcher and waits for their goroutines.
func (ws *watchStream) close() {
	ws.cancel(context.Canceled)
	ws.mu.Lock()
	ws.mu.closed = true
	ws.mu.Unlock()
	ws.wg.Wait()
	close(ws.closed)
}

// fail ends the stream with err (in etcd's terms).
func (ws *watchStream) fail(err error) {
	ws.cancel(ws.f.watchStatus(ws.ns, err))
}

// watchStatus is err, a read error of a watcher, as the stream's end: the
// namespace no longer served here (moved, the replica closed or
// restoring) is Unavailable, which the official client retries,
// resuming every watcher from its last revision (not etcd's "no leader":
// the client gives up on that one).
func (f *Front) watchStatus(ns string, err error) error {
	var moved *fsm.MovedError
	switch {
	case errors.As(err, &moved):
		return status.Errorf(codes.Unavailable, "swarmkv: namespace %q moved off this node's shard (%v): watch again", ns, moved)
	case errors.Is(err, fsm.ErrClosed), errors.Is(err, fsm.ErrRestoring):
		return status.Errorf(codes.Unavailable, "swarmkv: the replica of namespace %q stopped serving here (%v): watch again", ns, err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "swarmkv: watch: %v", err)
}

// enqueue queues m for the sender; false when the stream (or ctx) ended.
func (ws *watchStream) enqueue(ctx context.Context, m outMsg) bool {
	select {
	case ws.out <- m:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendLoop sends the queued responses until the stream ends, answers
// RequestProgress once every watcher has sent up to its revision, and
// sends the periodic progress notifications.
func (ws *watchStream) sendLoop(stream pb.Watch_WatchServer) error {
	tick := time.NewTicker(ws.f.cfg.WatchProgressInterval)
	defer tick.Stop()
	var progress int64 // a RequestProgress waits at this revision
	send := func(resp *pb.WatchResponse) error {
		ws.sending.Store(time.Now().UnixNano())
		err := sendWatch(stream, resp, ws.f.cfg.MaxRequestBytes)
		ws.sending.Store(0)
		return err
	}
	for {
		if ws.ctx.Err() != nil {
			return ws.endErr()
		}
		select {
		case m := <-ws.out:
			var err error
			if m.resp != nil {
				err = send(m.resp)
			}
			if m.release != nil {
				m.release()
			}
			if err != nil {
				return err
			}
			if m.w != nil {
				if m.upTo > m.w.sent {
					m.w.sent = m.upTo
				}
				m.w.eventsSent = m.w.eventsSent || m.events
			}
			if m.progress > 0 && progress == 0 {
				progress = m.progress
			}
			if progress > 0 {
				if rev, ok := ws.progressReady(progress); ok {
					if err := send(&pb.WatchResponse{Header: ws.f.header(rev), WatchId: -1}); err != nil {
						return err
					}
					progress = 0
				}
			}
		case <-tick.C:
			for _, w := range ws.watchers() {
				if w.spec.progress && !w.eventsSent && w.sent > 0 {
					if err := send(&pb.WatchResponse{Header: ws.f.header(w.sent), WatchId: w.id}); err != nil {
						return err
					}
				}
				w.eventsSent = false
			}
		case <-ws.ctx.Done():
			return ws.endErr()
		}
	}
}

// watchdog ends the stream when a Send has been blocked longer than the
// send timeout (a client that stopped reading), and, for a stream that
// requires a leader (clientv3.WithRequireLeader), when the replica has
// known no leader at two checks in a row (etcd's "no leader", which the
// official client returns to the watcher instead of resuming); it
// returns its stop.
func (ws *watchStream) watchdog(r leaderKnower, needLeader bool) (stop func()) {
	timeout := ws.f.cfg.WatchSendTimeout
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(min(max(timeout/4, time.Millisecond), time.Second))
		defer t.Stop()
		leaderless := 0
		for {
			select {
			case <-t.C:
				if needLeader {
					if leaderless++; r.Leader() != "" {
						leaderless = 0
					}
					if leaderless >= 2 {
						ws.cancel(rpctypes.ErrGRPCNoLeader)
						return
					}
				}
				if since := ws.sending.Load(); since != 0 && time.Since(time.Unix(0, since)) > timeout {
					ws.f.log.Warn("etcd watch: a client stopped reading; ending its stream", "conn", ws.conn, "namespace", ws.ns, "timeout", timeout)
					err := status.Errorf(codes.Unavailable, "swarmkv: watch stream ended: the client read nothing for %v (slow consumer): watch again", timeout)
					ws.cancel(err)
					return
				}
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// leaderKnower is what the watchdog asks a replica (*replica.Replica).
type leaderKnower interface{ Leader() string }

// watchers returns the stream's watchers.
func (ws *watchStream) watchers() []*watcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*watcher, 0, len(ws.mu.watchers))
	for _, w := range ws.mu.watchers {
		out = append(out, w)
	}
	return out
}

// progressReady reports whether every watcher has sent up to rev, and
// the revision to report: the lowest every watcher has sent up to (rev
// when there are none). Called by the sender (w.sent is its own).
func (ws *watchStream) progressReady(rev int64) (int64, bool) {
	lowest := int64(-1)
	for _, w := range ws.watchers() {
		if w.sent < rev {
			return 0, false
		}
		if lowest < 0 || w.sent < lowest {
			lowest = w.sent
		}
	}
	if lowest < 0 {
		lowest = rev
	}
	return lowest, true
}

// sendWatch sends resp, in fragments when the watcher asked for them and
// it is over maxBytes (etcd's sendFragments: each fragment but the last
// has Fragment set; each holds at least one event).
func sendWatch(stream pb.Watch_WatchServer, resp *pb.WatchResponse, maxBytes int) error {
	if !resp.Fragment || resp.Size() <= maxBytes || len(resp.Events) < 2 {
		resp.Fragment = false
		return stream.Send(resp)
	}
	events := resp.Events
	for len(events) > 0 {
		part := &pb.WatchResponse{Header: resp.Header, WatchId: resp.WatchId}
		size := part.Size()
		n := 0
		for n < len(events) && (n == 0 || size+events[n].Size()+8 <= maxBytes) {
			size += events[n].Size() + 8
			n++
		}
		part.Events, events = events[:n], events[n:]
		part.Fragment = len(events) > 0
		if err := stream.Send(part); err != nil {
			return err
		}
	}
	return nil
}

// recvLoop reads the client's requests until the stream ends.
func (ws *watchStream) recvLoop(stream pb.Watch_WatchServer) {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The client closed its send side: its watchers go on until
			// it cancels the call, as on etcd.
			return
		}
		if err != nil {
			ws.cancel(context.Canceled)
			return
		}
		switch u := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if u.CreateRequest != nil {
				ws.create(u.CreateRequest)
			}
		case *pb.WatchRequest_CancelRequest:
			if u.CancelRequest != nil {
				ws.cancelWatch(u.CancelRequest.WatchId)
			}
		case *pb.WatchRequest_ProgressRequest:
			if u.ProgressRequest != nil {
				rev, _, err := ws.revisions()
				if err != nil {
					ws.fail(err)
					return
				}
				ws.enqueue(ws.ctx, outMsg{progress: max(rev, 1)})
			}
		}
		if ws.ctx.Err() != nil {
			return
		}
	}
}

// revisions reads the namespace's current and compacted revisions.
func (ws *watchStream) revisions() (cur, compacted int64, err error) {
	err = ws.fsm.Read(ws.rk, func(v fsm.View) error {
		cur, compacted, err = v.EtcdRevision(ws.ns)
		return err
	})
	return cur, compacted, err
}

// create answers a create request: Created with the watch id, or Created
// and Canceled with the reason (etcd's answer to a refused create, which
// the official client returns as the watch's error).
func (ws *watchStream) create(req *pb.WatchCreateRequest) {
	cur, _, err := ws.revisions()
	if err != nil {
		ws.fail(err)
		return
	}
	refuse := func(err error) {
		ws.enqueue(ws.ctx, outMsg{resp: &pb.WatchResponse{Header: ws.f.header(cur), WatchId: -1, Created: true, Canceled: true, CancelReason: err.Error()}})
	}
	spec, err := validateCreate(req)
	if err != nil {
		refuse(err)
		return
	}
	ws.mu.Lock()
	if ws.mu.closed {
		ws.mu.Unlock()
		return
	}
	id := spec.id
	if id == 0 {
		for ws.mu.watchers[ws.mu.nextID] != nil {
			ws.mu.nextID++
		}
		id = ws.mu.nextID
		ws.mu.nextID++
	} else if ws.mu.watchers[id] != nil {
		ws.mu.Unlock()
		refuse(errWatchDuplicateID)
		return
	}
	if err := ws.f.watches.admit(ws.conn, ws.f.cfg.MaxWatchers, ws.f.cfg.MaxWatchersPerConn); err != nil {
		ws.mu.Unlock()
		refuse(err)
		return
	}
	start := spec.start
	if start == 0 {
		start = cur + 1
	}
	w := &watcher{spec: spec, id: id, done: make(chan struct{}), sent: min(start-1, cur)}
	w.ctx, w.cancel = context.WithCancel(ws.ctx)
	ws.mu.watchers[id] = w
	ws.wg.Add(1)
	ws.mu.Unlock()
	// Created first, then the watcher's events (the queue's order).
	if !ws.enqueue(ws.ctx, outMsg{resp: &pb.WatchResponse{Header: ws.f.header(cur), WatchId: id, Created: true}}) {
		w.cancel()
	}
	go ws.run(w, start)
}

// cancelWatch cancels watcher id: its goroutine ends before the Canceled
// answer is queued, so no event of it follows. An unknown id is ignored,
// as etcd does.
func (ws *watchStream) cancelWatch(id int64) {
	ws.mu.Lock()
	w := ws.mu.watchers[id]
	ws.mu.Unlock()
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
	if !ws.remove(w) {
		return // it ended itself meanwhile (compacted), and said so
	}
	cur, _, err := ws.revisions()
	if err != nil {
		ws.fail(err)
		return
	}
	ws.enqueue(ws.ctx, outMsg{resp: &pb.WatchResponse{Header: ws.f.header(cur), WatchId: id, Canceled: true}})
}

// remove takes w out of the stream; false if it was not in it.
func (ws *watchStream) remove(w *watcher) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.mu.watchers[w.id] != w {
		return false
	}
	delete(ws.mu.watchers, w.id)
	return true
}

// run is watcher w's goroutine: it reads the namespace's history from
// start on, page by page, each time the stream may hold a page, and
// queues what w selects; at the end of the history it waits for the
// state machine's next change of the namespace.
func (ws *watchStream) run(w *watcher, start int64) {
	defer ws.wg.Done()
	defer close(w.done)
	defer ws.f.watches.release(ws.conn)
	counts := ws.f.watches
	pageBytes := int64(ws.f.cfg.MaxRequestBytes)
	next := start
	for {
		changed := ws.fsm.EtcdChanged(ws.ns) // before the read: no change is missed
		// A page slot of the stream, then the page's bytes on the node.
		select {
		case ws.pages <- struct{}{}:
		case <-w.ctx.Done():
			return
		}
		if err := counts.bytes.Acquire(w.ctx, pageBytes); err != nil {
			<-ws.pages
			return
		}
		counts.held.Add(pageBytes)
		held := pageBytes
		releaseAll := func() {
			counts.bytes.Release(held)
			counts.held.Add(-held)
			<-ws.pages
		}
		var page *fsm.EtcdHistoryPage
		err := ws.fsm.Read(ws.rk, func(v fsm.View) error {
			var err error
			page, err = v.EtcdHistory(ws.ns, next, int(pageBytes))
			return err
		})
		if err != nil {
			releaseAll()
			if errors.Is(err, fsm.ErrEtcdCompacted) && page != nil {
				ws.compacted(w, page)
				return
			}
			ws.fail(err)
			return
		}
		var events []*mvccpb.Event
		size := int64(0)
		for i := range page.Events {
			e := &page.Events[i]
			size += int64(e.Size())
			if w.spec.matches(e) {
				events = append(events, eventOf(e, w.spec.prevKV))
			}
		}
		// Hold what the page holds: its size (more than the page when
		// one revision is larger, less when it is small).
		// (A revision larger than the node's whole budget, a txn replacing
		// many large values with prev_kv, takes the whole budget: asking
		// for more would wait forever.)
		switch want := min(size, counts.total); {
		case want > held:
			if err := counts.bytes.Acquire(w.ctx, want-held); err != nil {
				releaseAll()
				return
			}
			counts.held.Add(want - held)
			held = want
		case want < held && len(events) > 0:
			counts.bytes.Release(held - want)
			counts.held.Add(want - held)
			held = want
		}
		upTo := min(page.Next-1, page.Current)
		m := outMsg{w: w, upTo: upTo}
		if len(events) > 0 {
			m.resp = &pb.WatchResponse{Header: ws.f.header(page.Current), WatchId: w.id, Events: events, Fragment: w.spec.fragment}
			m.events, m.release = true, releaseAll
		} else {
			releaseAll()
		}
		if (m.resp != nil || upTo > 0) && !ws.enqueue(w.ctx, m) {
			if m.release != nil {
				m.release()
			}
			return
		}
		next = page.Next
		if next <= page.Current {
			continue // more history to read
		}
		select {
		case <-changed:
		case <-w.ctx.Done():
			return
		}
	}
}

// compacted ends w as etcd ends a watcher whose start is compacted: a
// response with CompactRevision, Canceled. CompactRevision is the lowest
// revision a watch can start from here, the compacted revision plus one
// (swarmkv's compaction drops the events at the compacted revision too;
// etcd's keeps them and reports the compacted revision).
func (ws *watchStream) compacted(w *watcher, page *fsm.EtcdHistoryPage) {
	if !ws.remove(w) {
		return
	}
	ws.enqueue(w.ctx, outMsg{resp: &pb.WatchResponse{Header: ws.f.header(page.Current), WatchId: w.id,
		CompactRevision: page.Compacted + 1, Canceled: true,
		CancelReason: rpctypes.ErrGRPCCompacted.Error()}})
}

// eventOf is e as etcd sends it.
func eventOf(e *fsm.EtcdEvent, prev bool) *mvccpb.Event {
	out := &mvccpb.Event{Type: mvccpb.PUT, Kv: kvOf(&e.KV)}
	if e.Delete {
		out.Type = mvccpb.DELETE
	}
	if prev && e.Prev != nil {
		out.PrevKv = kvOf(e.Prev)
	}
	return out
}
