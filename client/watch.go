package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// EventType is what a watch event records.
type EventType int

const (
	EventPut    EventType = 0
	EventDelete EventType = 1
)

func (t EventType) String() string {
	if t == EventDelete {
		return "delete"
	}
	return "put"
}

// WatchEvent is one change: the key as the watch names it (the kv key
// under the routing key, or a typed record's id) and, for a put, its new
// stored value.
type WatchEvent struct {
	Type       EventType
	Key, Value []byte
}

// WatchResponse is one message of a watch, in order: the events of one
// revision, a progress notification, a listing's page, or the error that
// ended the watch (the last message; the channel is then closed).
type WatchResponse struct {
	// Revision of the events (every change up to it has been sent); for
	// a listing, the revision the listing is at.
	Revision uint64
	Events   []WatchEvent
	// Progress: no event; nothing selected changed up to Revision.
	Progress bool
	// Listing: Events are current values (puts) at Revision; ListDone
	// marks the last page. Resync is set on the first page of a listing
	// that starts over (ListWatch after the history was compacted, or
	// after a listing was cut off by a reconnect): the consumer must
	// first drop the view it built so far, then apply this listing.
	Listing, ListDone, Resync bool
	// Shard and Follower say who serves the watch (from its start, or
	// from the last reconnect).
	Shard    shard.ID
	Follower bool
	// Reconnects is how many times the watch has opened its stream again
	// (after an error, or to follow a moved slot) before this message.
	Reconnects int
	Err        error
}

// CompactedError: the watch started (or resumed) below the shard's
// retained history. Oldest is the oldest revision a watch can start
// after; use ListWatch to resync.
type CompactedError struct{ Oldest, Current uint64 }

func (e *CompactedError) Error() string {
	return fmt.Sprintf("swarmkv: compacted: oldest retained revision %d, current revision %d", e.Oldest, e.Current)
}

// WatchTable selects a typed table instead of kv keys.
type WatchTable = rpc.WatchTable

// The typed tables Watch can follow (WithTable).
const (
	TableKV      = rpc.WatchTable_WATCH_TABLE_KV
	TablePools   = rpc.WatchTable_WATCH_TABLE_POOLS
	TableBots    = rpc.WatchTable_WATCH_TABLE_BOTS
	TableRunners = rpc.WatchTable_WATCH_TABLE_RUNNERS
	TableAgents  = rpc.WatchTable_WATCH_TABLE_AGENTS
)

// WatchOption sets an option of Watch.
type WatchOption func(*watchOpts)

type watchOpts struct {
	req        rpc.WatchRequest
	anyReplica bool
	relist     bool // ListWatch: resync on compacted
}

// WithPrefix watches the kv keys that start with p.
func WithPrefix(p []byte) WatchOption { return func(o *watchOpts) { o.req.KeyPrefix = p } }

// WithTable watches a typed table (the pool tables take routing key
// "pools" or nil; TableAgents a user id).
func WithTable(t WatchTable) WatchOption { return func(o *watchOpts) { o.req.Table = t } }

// WithAfter starts after revision rev (default 0: the shard's start, if
// retained; else a *CompactedError).
func WithAfter(rev uint64) WatchOption { return func(o *watchOpts) { o.req.AfterRevision = rev } }

// WithProgress sets the interval of progress notifications when idle.
func WithProgress(d time.Duration) WatchOption {
	return func(o *watchOpts) { o.req.ProgressMs = uint32(d / time.Millisecond) }
}

// WithAnyReplica lets followers serve the watch (and its reconnects).
func WithAnyReplica() WatchOption { return func(o *watchOpts) { o.anyReplica = true } }

// Watch follows the committed changes of routingKey's keys (kv keys, or a
// typed table) after a revision: every change exactly once, in commit
// order. It reconnects on transient errors (node down, leader change,
// slow watcher cancelled) and resumes after the last revision received,
// and follows a slot move to the new shard. The channel is closed when
// ctx ends (no error message) or after a message with Err: a
// *CompactedError, ErrInvalidArgument, a permission error.
func (c *Client) Watch(ctx context.Context, routingKey []byte, opts ...WatchOption) <-chan WatchResponse {
	return c.rawWatch(ctx, newWatchOpts(routingKey, false, opts))
}

// newWatchOpts applies opts to the request of a watch of routingKey; list
// makes it a ListWatch.
func newWatchOpts(routingKey []byte, list bool, opts []WatchOption) *watchOpts {
	o := &watchOpts{relist: list}
	for _, f := range opts {
		f(o)
	}
	o.req.RoutingKey = routingKey
	if list {
		o.req.List, o.req.AfterRevision = true, 0
	}
	return o
}

// rawWatch runs the watch o on a goroutine that sends its messages to the
// returned channel and closes it when the watch ends.
func (c *Client) rawWatch(ctx context.Context, o *watchOpts) <-chan WatchResponse {
	ch := make(chan WatchResponse, 16)
	go func() {
		defer close(ch)
		c.watchLoop(ctx, o, func(r WatchResponse) bool {
			select {
			case ch <- r:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return ch
}

// ListWatch is Watch that starts with a listing of the selected keys (the
// values at one revision, in Listing messages ending with ListDone), then
// their changes after that revision. If the watch falls behind the
// retained history (a long disconnect), it resyncs with a new listing
// marked Resync instead of failing: no change is lost.
func (c *Client) ListWatch(ctx context.Context, routingKey []byte, opts ...WatchOption) <-chan WatchResponse {
	return c.rawWatch(ctx, newWatchOpts(routingKey, true, opts))
}

// watchBackoff spaces reconnects.
var watchBackoff = retry.Options{Initial: 20 * time.Millisecond, Max: time.Second}

// busyBackoff spaces the attempts of a watch the node refused for its
// load (a catch-up over --max-concurrent-catchups: ResourceExhausted with
// a RetryInfo), each at least the node's hint.
var busyBackoff = retry.Options{Initial: 500 * time.Millisecond, Max: 10 * time.Second}

// busyHint is the pause a ResourceExhausted status with a RetryInfo
// detail asks for (the node refused for load, nothing registered: retry);
// false for any other status (a cap of watchers or streams is final).
func busyHint(st *status.Status) (time.Duration, bool) {
	if st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*rpc.RetryInfo); ok {
			return time.Duration(ri.GetRetryAfterMs()) * time.Millisecond, true
		}
	}
	return 0, false
}

// watchLoop runs the watch o until ctx ends, emit returns false (the
// consumer stops it), or an error ends it (emitted last). Watch and
// ListWatch emit to a channel; the typed watches (watch_typed.go) decode
// first.
func (c *Client) watchLoop(ctx context.Context, o *watchOpts, emit func(WatchResponse) bool) {
	ctx, cancel := context.WithCancel(ctx) // ends the stream when emit stops the watch
	defer cancel()
	req := &o.req
	backoff := watchBackoff.Backoff()
	busy := busyBackoff.Backoff() // reset by the first message after created
	offset := rand.IntN(1 << 16)
	resync := false
	movedFrom := shard.ID(0)
	movedTries := 0
	opened := 0 // streams opened
	// Once a hint was followed at once, the next hints wait like any
	// retry until a stream is created (that ends the row).
	var hints hintPacer
	// atLeader: the next attempts go to the leader even with anyReplica,
	// after a replica answered compacted (a follower restored from a
	// snapshot keeps history only from its index: the leader may hold
	// more).
	atLeader := false
	for attempt := 0; ctx.Err() == nil; attempt++ {
		id := c.ShardOf(req.RoutingKey)
		if req.HasShard {
			// Resume where the revisions belong, even if the map moved the
			// slot meanwhile: that shard's history ends with the moved
			// notice, which says where to continue.
			id = shard.ID(req.Shard)
		}
		if movedFrom != 0 && id == movedFrom && movedTries < 20 {
			// The map does not name the slot's new owner yet.
			movedTries++
			_ = c.RefreshMap(ctx)
			backoff.Wait(ctx)
			continue
		}
		if movedFrom != 0 && id == movedFrom {
			// The move was aborted: the slot stayed; resume after the freeze.
			req.AfterMove, req.HasShard, req.Shard = 0, true, uint32(id)
		}
		movedFrom, movedTries = 0, 0
		addr, ok := c.target(id, attempt, o.anyReplica && !atLeader, offset)
		if !ok {
			_ = c.RefreshMap(ctx)
			backoff.Wait(ctx)
			continue
		}
		nc, err := c.conn(addr)
		if err != nil {
			emit(WatchResponse{Err: err})
			return
		}
		// A listing page is up to the node's --max-page-bytes (256 MiB at
		// most), over gRPC's default 4 MiB.
		stream, err := rpc.NewWatchClient(nc.cc).Watch(ctx, req, grpc.MaxCallRecvMsgSize(maxPipeRecv))
		opened++
		var created *rpc.WatchCreated
		listed := false
		for err == nil {
			var m *rpc.WatchResponse
			if m, err = stream.Recv(); err != nil {
				break
			}
			if m.Created != nil {
				created = m.Created
				if req.AfterMove != 0 {
					req.AfterMove, req.AfterRevision = 0, m.Created.AfterRevision
				}
				if !req.List {
					req.HasShard, req.Shard = true, m.Created.Shard
				}
				backoff = watchBackoff.Backoff()
				hints.reset()
				continue
			}
			busy = busyBackoff.Backoff()
			r := WatchResponse{Revision: m.Revision, Progress: m.Progress, Listing: m.Listing, ListDone: m.ListDone, Resync: resync && m.Listing,
				Reconnects: opened - 1}
			if created != nil {
				r.Shard, r.Follower = shard.ID(created.Shard), created.Follower
			}
			for _, e := range m.Events {
				r.Events = append(r.Events, WatchEvent{Type: EventType(e.Type), Key: e.Key, Value: e.Value})
			}
			if m.Listing {
				resync = false // only the first page starts over
			}
			if m.Listing && !m.ListDone {
				listed = true
				if !emit(r) {
					return
				}
				continue
			}
			if m.ListDone {
				req.List, resync = false, false
				if created != nil {
					req.HasShard, req.Shard = true, created.Shard
				}
			}
			req.AfterRevision = m.Revision
			if len(r.Events) > 0 || r.Progress || r.ListDone {
				if !emit(r) {
					return
				}
			}
			if m.Moved != nil {
				req.AfterMove, req.AfterRevision, req.HasShard = m.Moved.MoveId, m.Moved.FreezeRevision, false
				movedFrom = id
				_ = c.RefreshMap(ctx)
				err = errMovedOn
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errMovedOn) {
			continue
		}
		if req.List && listed {
			resync = true // the listing starts over
		}
		st, _ := status.FromError(err)
		if st.Code() == codes.OutOfRange && o.anyReplica && !atLeader {
			atLeader = true // ask the leader before giving up
			continue
		}
		if st.Code() == codes.OutOfRange {
			ce := &CompactedError{}
			for _, d := range st.Details() {
				if cd, ok := d.(*rpc.Compacted); ok {
					ce.Oldest, ce.Current = cd.Oldest, cd.Current
				}
			}
			if o.relist {
				req.List, req.AfterRevision, req.AfterMove, resync = true, 0, 0, true
				continue
			}
			emit(WatchResponse{Err: ce})
			return
		}
		if pause, ok := busyHint(st); ok {
			// Refused for the node's load (too many catch-ups): nothing
			// was registered; retry later, from the same position.
			c.log.Debug("watch refused for load; retrying", "shard", id, "after", req.AfterRevision, "err", err)
			t := time.NewTimer(max(pause, busy.Next()))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		cerr, class, hint := classify(err)
		if req.HasShard && (class == classMoved || errors.Is(cerr, ErrInvalidArgument)) {
			// The shard the revisions belong to no longer answers for the
			// slot (a merge removed it, or its move record is gone): the
			// position cannot be carried over.
			if o.relist {
				req.List, req.AfterRevision, req.HasShard, resync = true, 0, false, true
				continue
			}
			emit(WatchResponse{Err: fmt.Errorf("%w: the watched slot moved while the watch was disconnected and shard %d no longer answers for it; resync (ListWatch): %w", ErrUnavailable, req.Shard, cerr)})
			return
		}
		switch {
		case class == classFatal && st.Code() != codes.Aborted && st.Code() != codes.Canceled && st.Code() != codes.DeadlineExceeded && st.Code() != codes.Internal:
			// Invalid requests, permissions, caps (ResourceExhausted).
			emit(WatchResponse{Err: cerr})
			return
		case hint.GetLeaderAddr() != "" && hint.GetLeaderAddr() != addr:
			c.setLeader(id, hint.GetLeaderAddr())
			if hints.now() {
				continue
			}
		case class == classNotLeader || st.Code() == codes.Unavailable:
			c.setLeader(id, "")
		case class == classMoved:
			_ = c.RefreshMap(ctx)
		}
		c.log.Debug("watch reconnecting", "shard", id, "after", req.AfterRevision, "err", err)
		backoff.Wait(ctx)
	}
}

var errMovedOn = errors.New("moved")
