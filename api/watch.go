package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/cluster/watch"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// watchServer serves the Watch service (rpc/watch.proto) from the node's
// replicas through one watch.Hub: one tail per replica, whatever the
// number of watchers (docs/architecture.md, "Watches").
type watchServer struct {
	rpc.UnimplementedWatchServer
	*server
	hub     *watch.Hub
	perConn int
	mu      sync.Mutex
	conns   map[string]int // watchers per client connection (peer address)
}

func newWatchServer(s *server) *watchServer {
	return &watchServer{
		server: s,
		hub: watch.NewHub(watch.Limits{MaxWatchers: s.cfg.MaxWatchers, Buffer: s.cfg.WatchBuffer,
			MaxCatchUps: s.cfg.MaxConcurrentCatchUps, CatchUpBytes: watchPageBytes(s.cfg)}),
		perConn: s.cfg.MaxWatchersPerConn,
		conns:   make(map[string]int),
	}
}

// watchPageBytes bounds a listing message of a watch, and the events a
// catch-up holds between reading and sending them: a page of
// Config.MaxPageBytes less the envelope, like every listing (paging.go).
func watchPageBytes(cfg cluster.Config) int { return max(cfg.MaxPageBytes-pageEnvelope, 1) }

// catchUpRetry is the pause a refused catch-up is told to take.
const catchUpRetry = time.Second

// watchSelect is what a WatchRequest selects: its routing key, the stored
// key prefix, and how to name a stored key to the client.
type watchSelect struct {
	rk, prefix []byte
	perm       auth.Perm
	name       func(stored []byte) []byte
	// everyActor: the table holds every actor's records, private pools
	// and their bots included, unfiltered (the Pools service shows each
	// actor only what it may see): besides perm, the watcher must be
	// trusted to act for any actor (a node, admin, pools:impersonate) and
	// bound to none.
	everyActor bool
}

// ValidateWatch checks a WatchRequest and returns what it selects.
func ValidateWatch(req *rpc.WatchRequest) (*watchSelect, error) {
	rk := req.GetRoutingKey()
	if req.GetList() && (req.GetAfterRevision() != 0 || req.GetAfterMove() != 0) {
		return nil, invalid("a listing watch starts at its listing: after_revision and after_move must be 0")
	}
	if req.GetHasShard() && (req.GetList() || req.GetAfterMove() != 0) {
		return nil, invalid("shard names where after_revision belongs: not with list or after_move")
	}
	if req.GetProgressMs() > 3600_000 {
		return nil, invalid("progress_ms %d: at most 1h", req.GetProgressMs())
	}
	if req.GetTable() != rpc.WatchTable_WATCH_TABLE_KV && len(req.GetKeyPrefix()) > 0 {
		return nil, invalid("key_prefix is for the kv table only")
	}
	strip := func(n int) func([]byte) []byte {
		return func(k []byte) []byte { return k[min(n, len(k)):] }
	}
	switch t := req.GetTable(); t {
	case rpc.WatchTable_WATCH_TABLE_KV:
		if err := validateRoutingKey(rk); err != nil {
			return nil, err
		}
		p := keys.KVPrefix(rk, req.GetKeyPrefix())
		return &watchSelect{rk: rk, prefix: p, perm: auth.Perm{Keyspace: auth.KV}, name: func(k []byte) []byte {
			_, key, err := keys.DecodeKV(k)
			if err != nil {
				return k
			}
			return key
		}}, nil
	case rpc.WatchTable_WATCH_TABLE_POOLS, rpc.WatchTable_WATCH_TABLE_BOTS, rpc.WatchTable_WATCH_TABLE_RUNNERS:
		if len(rk) > 0 && string(rk) != keys.PoolsRoutingKey {
			return nil, invalid("the pool tables' routing key is %q", keys.PoolsRoutingKey)
		}
		tab := map[rpc.WatchTable]byte{rpc.WatchTable_WATCH_TABLE_POOLS: keys.TablePools,
			rpc.WatchTable_WATCH_TABLE_BOTS: keys.TableBots, rpc.WatchTable_WATCH_TABLE_RUNNERS: keys.TableRunners}[t]
		return &watchSelect{rk: []byte(keys.PoolsRoutingKey), prefix: []byte{tab}, perm: auth.Perm{Keyspace: auth.Pools}, name: strip(1),
			everyActor: t != rpc.WatchTable_WATCH_TABLE_RUNNERS}, nil
	case rpc.WatchTable_WATCH_TABLE_AGENTS:
		if len(rk) != len(keys.UserID{}) {
			return nil, invalid("agents are watched by user id: routing key is %d bytes, want %d", len(rk), len(keys.UserID{}))
		}
		return &watchSelect{rk: rk, prefix: keys.AgentPrefix(keys.UserID(rk)), perm: auth.Perm{Keyspace: auth.Registry}, name: strip(1 + len(keys.UserID{}))}, nil
	default:
		return nil, invalid("unknown table %d", t)
	}
}

func (ws *watchServer) Watch(req *rpc.WatchRequest, stream rpc.Watch_WatchServer) error {
	ctx := stream.Context()
	sel, err := ValidateWatch(req)
	if err != nil {
		return ws.statusErr(0, err)
	}
	who := ""
	if a := ws.node.Authn(); a.On() {
		id, msg := a.IdentifyGRPC(ctx, rpc.Watch_Watch_FullMethodName)
		if id == nil {
			return status.Error(codes.PermissionDenied, msg)
		}
		who = id.Name()
		if ok, why := a.Allows(id, sel.perm); !ok {
			a.Audit("grpc", id, rpc.Watch_Watch_FullMethodName, false, why)
			return status.Errorf(codes.PermissionDenied, "swarmkv: %s may not watch (needs %s)", id.Name(), sel.perm)
		}
		if sel.everyActor {
			trusted := id.IsNode()
			if !trusted {
				trusted, _ = a.Allows(id, auth.Perm{Keyspace: auth.PoolsImpersonate})
			}
			if id.Actor() != "" || !trusted {
				a.Audit("grpc", id, rpc.Watch_Watch_FullMethodName, false, "pool tables need pools:impersonate")
				return status.Errorf(codes.PermissionDenied, "swarmkv: %s may not watch the %s table: it streams every pool's records, private ones included (needs %s and no bound actor)",
					id.Name(), strings.ToLower(strings.TrimPrefix(req.GetTable().String(), "WATCH_TABLE_")), auth.PoolsImpersonate)
			}
		}
	}
	var sid shard.ID
	var r *replica.Replica
	if req.GetHasShard() {
		// A resume on the shard its revisions belong to: its history
		// answers, up to the slot's freeze if the slot has moved since.
		if sid, r, err = ws.shardReplica(req.GetShard()); err != nil {
			return err
		}
		if err := ws.checkSlot(r, sel.rk); err != nil && !hadSlot(r.FSM(), shard.SlotOf(sel.rk)) {
			return err
		}
	} else {
		if sid, r, err = ws.route(sel.rk); err != nil {
			return err
		}
		if err := ws.checkSlot(r, sel.rk); err != nil {
			return err
		}
	}
	conn := ""
	if p, ok := peer.FromContext(ctx); ok {
		conn = p.Addr.String()
	}
	if who == "" {
		who = ws.streamIdentity(ctx, rpc.Watch_Watch_FullMethodName)
	}
	release, err := ws.watchersOf.admit(who)
	if err != nil {
		return err
	}
	defer release()
	if err := ws.admit(conn); err != nil {
		return err
	}
	defer ws.release(conn)

	f := r.FSM()
	after := req.GetAfterRevision()
	if req.GetAfterMove() != 0 {
		if after, err = adoptedAt(f, req.GetAfterMove(), shard.SlotOf(sel.rk)); err != nil {
			return ws.watchErr(sid, err)
		}
	}
	follower := !r.IsLeader()
	if req.GetList() {
		rev, err := ws.sendListing(stream, f, sel, sid, follower, who)
		if err != nil {
			return err
		}
		after = rev
	} else if err := stream.Send(&rpc.WatchResponse{Revision: after, Created: &rpc.WatchCreated{Shard: uint32(sid), Follower: follower, AfterRevision: after}}); err != nil {
		return err
	}

	filt := watch.Filter{RoutingKey: sel.rk, Prefix: sel.prefix, Slot: shard.SlotOf(sel.rk)}
	last := after
	// The watch memory budget (watchMemory): a catch-up page is reserved
	// by the hub before it is read (inPage, while its items are sent); an
	// item of the tail is reserved here for its send.
	inPage := false
	reserve := func(ctx context.Context, n int) (func(), error) {
		release, err := ws.watchMem.reserve(ctx, who, int64(n))
		if err != nil {
			return nil, err
		}
		inPage = true
		return func() { inPage = false; release() }, nil
	}
	send := func(it watch.Item) error {
		msg := &rpc.WatchResponse{Revision: it.Revision}
		for _, e := range it.Events {
			ev := &rpc.WatchEvent{Key: sel.name(e.Key)}
			if e.Kind == fsm.EventPut {
				ev.Value = e.Value
			} else {
				ev.Type = rpc.WatchEventType_WATCH_EVENT_DELETE
			}
			msg.Events = append(msg.Events, ev)
		}
		if it.Moved != nil {
			msg.Moved = &rpc.WatchMoved{MoveId: it.Moved.MoveID, FreezeRevision: it.Revision, TargetShard: uint32(movedTarget(f, it.Moved.MoveID))}
		}
		last = it.Revision
		if !inPage {
			release, err := ws.watchMem.reserve(ctx, who, int64(proto.Size(msg)))
			if err != nil {
				return err
			}
			defer release()
		}
		return stream.Send(msg)
	}
	w, moved, err := ws.hub.WatchReserving(ctx, f, filt, after, send, reserve)
	if err != nil {
		return ws.watchErr(sid, err)
	}
	if moved != nil {
		return send(*moved)
	}
	defer w.Close()
	every := time.Duration(req.GetProgressMs()) * time.Millisecond
	if every == 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-w.Ready():
			for _, it := range w.Take() {
				if err := send(it); err != nil {
					return err
				}
				if it.Moved != nil {
					return nil
				}
			}
		case <-tick.C:
			p := w.Progress()
			if w.Pending() == 0 && p > last {
				if err := stream.Send(&rpc.WatchResponse{Revision: p, Progress: true}); err != nil {
					return err
				}
				last = p
			}
		case <-w.Done():
			return ws.watchErr(sid, w.Err())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sendListing sends the created message and the listing of what sel
// selects, page by page from one snapshot of f (fsm.Listing): each page
// within --max-page-bytes and --max-scan-page, one in memory at a time,
// the last marked list_done. It returns the revision listed.
func (ws *watchServer) sendListing(stream rpc.Watch_WatchServer, f *fsm.FSM, sel *watchSelect, sid shard.ID, follower bool, who string) (uint64, error) {
	l, err := f.OpenListing(sel.prefix, keys.PrefixEnd(sel.prefix))
	if err != nil {
		return 0, ws.watchErr(sid, err)
	}
	defer l.Close()
	rev := l.Revision()
	if err := stream.Send(&rpc.WatchResponse{Revision: rev, Created: &rpc.WatchCreated{Shard: uint32(sid), Follower: follower, AfterRevision: rev}}); err != nil {
		return 0, err
	}
	for {
		done, err := ws.sendPage(stream, l, sel, sid, rev, who)
		if err != nil || done {
			return rev, err
		}
	}
}

// sendPage reads and sends the next page of a listing, its bytes reserved
// in the watch memory budget from before the read until it is sent.
func (ws *watchServer) sendPage(stream rpc.Watch_WatchServer, l *fsm.Listing, sel *watchSelect, sid shard.ID, rev uint64, who string) (bool, error) {
	release, err := ws.watchMem.reserve(stream.Context(), who, int64(ws.cfg.MaxPageBytes))
	if err != nil {
		return false, err
	}
	defer release()
	kvs, done, err := l.Next(ws.cfg.MaxScanPage, watchPageBytes(ws.cfg))
	if err != nil {
		return false, ws.watchErr(sid, err)
	}
	msg := &rpc.WatchResponse{Revision: rev, Listing: true, ListDone: done}
	for _, kv := range kvs {
		msg.Events = append(msg.Events, &rpc.WatchEvent{Type: rpc.WatchEventType_WATCH_EVENT_PUT, Key: sel.name(kv.Key), Value: kv.Value})
	}
	return done, stream.Send(msg)
}

// admit counts a watcher of connection conn, refusing one over the cap.
func (ws *watchServer) admit(conn string) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.conns[conn] >= ws.perConn {
		return status.Errorf(codes.ResourceExhausted, "swarmkv: too many watchers on this connection (limit %d)", ws.perConn)
	}
	ws.conns[conn]++
	return nil
}

func (ws *watchServer) release(conn string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.conns[conn]--; ws.conns[conn] <= 0 {
		delete(ws.conns, conn)
	}
}

// watchErr maps the watch errors to statuses (others through the table).
func (ws *watchServer) watchErr(id shard.ID, err error) error {
	var ce *fsm.CompactedError
	switch {
	case errors.As(err, &ce):
		st, derr := status.New(codes.OutOfRange, "swarmkv: "+ce.Error()).WithDetails(&rpc.Compacted{Oldest: ce.Oldest, Current: ce.Current})
		if derr != nil {
			return status.Error(codes.OutOfRange, "swarmkv: "+ce.Error())
		}
		return st.Err()
	case errors.Is(err, watch.ErrSlow):
		return status.Error(codes.Aborted, "swarmkv: "+err.Error())
	case errors.Is(err, watch.ErrTooManyNode):
		return status.Error(codes.ResourceExhausted, "swarmkv: "+err.Error()+" (--max-watchers)")
	case errors.Is(err, watch.ErrTooManyCatchUps):
		// Refused before anything was registered: the client retries
		// after the hint (client/watch.go).
		msg := fmt.Sprintf("swarmkv: %v (--max-concurrent-catchups); retry after %v", err, catchUpRetry)
		st, derr := status.New(codes.ResourceExhausted, msg).WithDetails(&rpc.RetryInfo{Shard: uint32(id), RetryAfterMs: uint32(catchUpRetry.Milliseconds())})
		if derr != nil {
			return status.Error(codes.ResourceExhausted, msg)
		}
		return st.Err()
	case errors.Is(err, watch.ErrClosed), errors.Is(err, fsm.ErrClosed), errors.Is(err, fsm.ErrRestoring), errors.Is(err, errNotAdopted):
		return status.Error(codes.Unavailable, "swarmkv: "+err.Error()+"; watch again")
	}
	return ws.statusErr(id, err)
}

// errNotAdopted: the replica has not (yet) adopted the move's slot.
var errNotAdopted = errors.New("watch: this replica has not adopted the move's slots (yet); retry")

// adoptedAt finds the revision at which f adopted slot in move id (the
// watch continues after it), scanning the retained history.
func adoptedAt(f *fsm.FSM, id uint64, slot shard.Slot) (uint64, error) {
	floor, cur, err := f.HistoryFloor()
	if err != nil {
		return 0, err
	}
	var at uint64
	found := errors.New("found")
	// Markers only: the puts and deletes are parsed, never copied.
	err = f.ReadHistorySelected(floor, cur, fsm.SelectNone, func(rev uint64, evs []fsm.Event) error {
		for _, e := range evs {
			if e.Kind == fsm.EventAdopted && e.MoveID == id && e.Slots.Has(slot) {
				at = rev
				return found
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, found):
		return at, nil
	case err != nil:
		return 0, err
	}
	for _, m := range f.Moves() {
		if m.ID == id && m.State == fsm.MoveAdopted {
			// Adopted before the retained history began.
			return 0, &fsm.CompactedError{Oldest: floor, Current: cur}
		}
	}
	// Not adopted here yet: a replica that ingests the slots records the
	// move (MoveIncoming) before it applies the adoption (a follower
	// behind its leader; the jepsen watch checker caught such a replica
	// answering "compacted" to a watch following a split).
	return 0, fmt.Errorf("%w (move %d)", errNotAdopted, id)
}

// hadSlot says f records a move of slot away (frozen or moved): its
// history ends with the slot's freeze.
func hadSlot(f *fsm.FSM, slot shard.Slot) bool {
	for _, m := range f.Moves() {
		if m.Slots.Has(slot) && (m.State == fsm.MoveFrozen || m.State == fsm.MoveMoved) {
			return true
		}
	}
	return false
}

// movedTarget is the target shard of move id as f records it (0 unknown).
func movedTarget(f *fsm.FSM, id uint64) shard.ID {
	for _, m := range f.Moves() {
		if m.ID == id {
			return m.Peer
		}
	}
	return 0
}
