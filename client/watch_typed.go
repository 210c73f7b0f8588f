package client

// Typed watches: the change feeds of the typed tables (seed 004's
// agent_runners, agent_bots and agent_pools; seed 000's agents of a user)
// with each value decoded into its record, so that a controller never
// touches the stored encoding:
//
//	for r := range c.Pools().ListWatchRunners(ctx) {
//		if r.Err != nil { ... }        // ended: the last message
//		if r.Resync { view = map[string]*records.Runner{} }
//		for _, e := range r.Events {
//			if e.Type == client.EventDelete { delete(view, e.ID) } else { view[e.ID] = e.Record }
//		}
//	}
//
// They are Watch and ListWatch (the same loop: reconnects, resumes after
// the last revision, follows slot moves, resyncs ListWatch) on a typed
// table, with the events of each message converted: the key is the
// record's id, a put's value the record, decoded (records.Decode, strict)
// and checked (Validate, and the id inside the record is the key's). A
// value that fails is not skipped, which would leave a hole in the
// consumer's view: it ends the watch with a *WatchDecodeError (a record
// written by a newer version with fields this client does not know, or a
// corrupt one).

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// TypedEvent is one change of a typed table: the record's id and, for a
// put, the record as it now is (for a delete, Record is nil).
type TypedEvent[K comparable, R any] struct {
	Type   EventType
	ID     K
	Record R
}

// TypedWatchResponse is a WatchResponse of a typed table: the same
// messages in the same order, with typed events. See WatchResponse for
// the flags; the last message of a watch that ends other than by its
// context carries Err.
type TypedWatchResponse[K comparable, R any] struct {
	Revision                  uint64
	Events                    []TypedEvent[K, R]
	Progress                  bool
	Listing, ListDone, Resync bool
	Shard                     shard.ID
	Follower                  bool
	Err                       error
}

// The typed events and responses of each table: runners, bots (as
// BotInfo: no token, only whether one is stored), pools, and a user's
// agents (by agent id).
type (
	RunnerEvent         = TypedEvent[string, *records.Runner]
	RunnerWatchResponse = TypedWatchResponse[string, *records.Runner]
	BotEvent            = TypedEvent[string, *BotInfo]
	BotWatchResponse    = TypedWatchResponse[string, *BotInfo]
	PoolEvent           = TypedEvent[string, *records.Pool]
	PoolWatchResponse   = TypedWatchResponse[string, *records.Pool]
	AgentEvent          = TypedEvent[keys.AgentID, *records.AgentRecord]
	AgentWatchResponse  = TypedWatchResponse[keys.AgentID, *records.AgentRecord]
)

// ErrWatchDecode is wrapped by every *WatchDecodeError.
var ErrWatchDecode = errors.New("swarmkv: watch: undecodable event")

// WatchDecodeError: a typed watch received an event it cannot convert (a
// bad id, an unknown event type, or a value that does not decode or
// check); the watch ended with it. Err wraps the cause: keys.ErrInvalidID,
// records.ErrMalformed or records.ErrInvalid. The message names the key,
// not the value (a bot's holds its sealed token).
type WatchDecodeError struct {
	Table    WatchTable
	Revision uint64
	Key      []byte // the event's key as the server named it
	Err      error
}

func (e *WatchDecodeError) Error() string {
	key := fmt.Sprintf("%q", e.Key)
	if e.Table == TableAgents {
		key = fmt.Sprintf("%x", e.Key)
	}
	if len(key) > 80 {
		key = key[:80] + "..."
	}
	return fmt.Sprintf("%v: %s at revision %d, key %s: %v", ErrWatchDecode, tableName(e.Table), e.Revision, key, e.Err)
}

func (e *WatchDecodeError) Unwrap() []error { return []error{ErrWatchDecode, e.Err} }

func tableName(t WatchTable) string {
	switch t {
	case TablePools:
		return "pools"
	case TableBots:
		return "bots"
	case TableRunners:
		return "runners"
	case TableAgents:
		return "agents"
	}
	return t.String()
}

// typedTable converts the events of one table: id from a key, record
// from an id and a put's value.
type typedTable[K comparable, R any] struct {
	table  WatchTable
	id     func(key []byte) (K, error)
	record func(id K, value []byte) (R, error)
}

// event converts one event.
func (t typedTable[K, R]) event(e WatchEvent) (TypedEvent[K, R], error) {
	var ev TypedEvent[K, R]
	id, err := t.id(e.Key)
	if err != nil {
		return ev, err
	}
	ev.Type, ev.ID = e.Type, id
	switch e.Type {
	case EventDelete:
		if len(e.Value) != 0 {
			return ev, fmt.Errorf("%w: a delete with a value", records.ErrMalformed)
		}
	case EventPut:
		if ev.Record, err = t.record(id, e.Value); err != nil {
			return ev, err
		}
	default:
		return ev, fmt.Errorf("%w: event type %d", records.ErrMalformed, int(e.Type))
	}
	return ev, nil
}

// response converts a message; the error is a *WatchDecodeError.
func (t typedTable[K, R]) response(r WatchResponse) (TypedWatchResponse[K, R], error) {
	out := TypedWatchResponse[K, R]{Revision: r.Revision, Progress: r.Progress, Listing: r.Listing,
		ListDone: r.ListDone, Resync: r.Resync, Shard: r.Shard, Follower: r.Follower, Err: r.Err}
	if len(r.Events) > 0 {
		out.Events = make([]TypedEvent[K, R], 0, len(r.Events))
	}
	for _, e := range r.Events {
		ev, err := t.event(e)
		if err != nil {
			return TypedWatchResponse[K, R]{}, &WatchDecodeError{Table: t.table, Revision: r.Revision, Key: bytes.Clone(e.Key), Err: err}
		}
		out.Events = append(out.Events, ev)
	}
	return out, nil
}

// stringID reads a pool-table key: the id, checked (field names it).
func stringID(field string, max int) func([]byte) (string, error) {
	return func(k []byte) (string, error) {
		id := string(k)
		if err := keys.ValidateStringID(field, id, max); err != nil {
			return "", err
		}
		return id, nil
	}
}

// sameID refuses a record whose id is not its key's.
func sameID(field string, inRecord, inKey string) error {
	if inRecord != inKey {
		return fmt.Errorf("%w: %s in the record differs from the key's", records.ErrInvalid, field)
	}
	return nil
}

var runnersTable = typedTable[string, *records.Runner]{
	table: TableRunners,
	id:    stringID("runner_id", keys.MaxStringIDLen),
	record: func(id string, v []byte) (*records.Runner, error) {
		r := &records.Runner{}
		if err := records.Decode(v, r); err != nil {
			return nil, err
		}
		if err := r.Validate(); err != nil {
			return nil, err
		}
		return r, sameID("runner_id", r.RunnerID, id)
	},
}

var poolsTable = typedTable[string, *records.Pool]{
	table: TablePools,
	id:    stringID("pool_id", keys.MaxPoolIDLen),
	record: func(id string, v []byte) (*records.Pool, error) {
		p := &records.Pool{}
		if err := records.Decode(v, p); err != nil {
			return nil, err
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		return p, sameID("pool_id", p.PoolID, id)
	},
}

// botsTable shows a bot as BotInfo: the sealed token is dropped, only
// its presence kept.
var botsTable = typedTable[string, *BotInfo]{
	table: TableBots,
	id:    stringID("agent_id", keys.MaxStringIDLen),
	record: func(id string, v []byte) (*BotInfo, error) {
		b := &records.Bot{}
		if err := records.Decode(v, b); err != nil {
			return nil, err
		}
		if err := b.Validate(); err != nil {
			return nil, err
		}
		if err := sameID("agent_id", b.AgentID, id); err != nil {
			return nil, err
		}
		return &BotInfo{AgentID: b.AgentID, ClientID: b.ClientID, Tag: b.Tag, Status: b.Status, PoolID: b.PoolID,
			OwnerUserID: b.OwnerUserID, Profile: b.Profile, HasToken: !b.Token.IsZero(),
			CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}, nil
	},
}

// agentsTable converts the agents of user.
func agentsTable(user keys.UserID) typedTable[keys.AgentID, *records.AgentRecord] {
	return typedTable[keys.AgentID, *records.AgentRecord]{
		table: TableAgents,
		id: func(k []byte) (keys.AgentID, error) {
			var id keys.AgentID
			if len(k) != len(id) {
				return id, fmt.Errorf("%w: agent_id is %d bytes, want %d", keys.ErrInvalidID, len(k), len(id))
			}
			copy(id[:], k)
			return id, nil
		},
		record: func(id keys.AgentID, v []byte) (*records.AgentRecord, error) {
			a := &records.AgentRecord{}
			if err := records.Decode(v, a); err != nil {
				return nil, err
			}
			if err := a.Validate(); err != nil {
				return nil, err
			}
			if a.AgentID != id || a.UserID != user {
				return nil, fmt.Errorf("%w: the record's user_id/agent_id differ from the watched user's key", records.ErrInvalid)
			}
			return a, nil
		},
	}
}

// typedWatch runs the watch o of table t (the watch loop of Watch and
// ListWatch) on a goroutine, converting each message; a message that
// does not convert ends the watch with its *WatchDecodeError. keep, if
// set, may rewrite or drop (false) a converted message.
func typedWatch[K comparable, R any](ctx context.Context, c *Client, t typedTable[K, R], o *watchOpts,
	keep func(*TypedWatchResponse[K, R]) bool) <-chan TypedWatchResponse[K, R] {
	ch := make(chan TypedWatchResponse[K, R], 16)
	send := func(r TypedWatchResponse[K, R]) bool {
		select {
		case ch <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if len(o.req.KeyPrefix) > 0 || (o.req.Table != TableKV && o.req.Table != t.table) {
		go func() {
			defer close(ch)
			send(TypedWatchResponse[K, R]{Err: invalidf("a typed watch of %s takes neither WithPrefix nor WithTable", tableName(t.table))})
		}()
		return ch
	}
	o.req.Table = t.table
	go func() {
		defer close(ch)
		c.watchLoop(ctx, o, func(raw WatchResponse) bool {
			r, err := t.response(raw)
			if err != nil {
				send(TypedWatchResponse[K, R]{Revision: raw.Revision, Shard: raw.Shard, Follower: raw.Follower, Err: err})
				return false // stops the loop: the watch ends with the error
			}
			if keep != nil && !keep(&r) {
				return true
			}
			return send(r)
		})
	}()
	return ch
}

// WatchRunners follows the runners (seed 004 agent_runners): a put each
// time a runner heartbeats (or is registered), a delete when it goes
// (its lease expired or was revoked). Options as Watch (WithAfter,
// WithProgress, WithAnyReplica); not WithPrefix or WithTable. The
// channel is closed when ctx ends, or after a message with Err.
func (p *Pools) WatchRunners(ctx context.Context, opts ...WatchOption) <-chan RunnerWatchResponse {
	return typedWatch(ctx, p.c, runnersTable, newWatchOpts(poolsRoutingKey, false, opts), nil)
}

// ListWatchRunners lists the runners, then follows their changes, as
// ListWatch (a Resync message starts the view over).
func (p *Pools) ListWatchRunners(ctx context.Context, opts ...WatchOption) <-chan RunnerWatchResponse {
	return typedWatch(ctx, p.c, runnersTable, newWatchOpts(poolsRoutingKey, true, opts), nil)
}

// WatchPools follows the pools (seed 004 agent_pools) of every owner, as
// WatchRunners.
func (p *Pools) WatchPools(ctx context.Context, opts ...WatchOption) <-chan PoolWatchResponse {
	return typedWatch(ctx, p.c, poolsTable, newWatchOpts(poolsRoutingKey, false, opts), nil)
}

// ListWatchPools lists the pools, then follows their changes.
func (p *Pools) ListWatchPools(ctx context.Context, opts ...WatchOption) <-chan PoolWatchResponse {
	return typedWatch(ctx, p.c, poolsTable, newWatchOpts(poolsRoutingKey, true, opts), nil)
}

// WatchBots follows the bots of every pool (seed 004 agent_bots), as
// WatchRunners: a put when a bot is registered or updated (its PoolID
// says where it is now), a delete when it is removed. A delete carries
// no record, so only a consumer that knows the bot (from a listing or an
// earlier put) knows its pool: to follow one pool, use ListWatchBots.
// A watch has no actor: it needs the pools keyspace, shows the bots of
// private pools too, and each BotInfo.OwnerUserID as stored.
func (p *Pools) WatchBots(ctx context.Context, opts ...WatchOption) <-chan BotWatchResponse {
	return typedWatch(ctx, p.c, botsTable, newWatchOpts(poolsRoutingKey, false, opts), nil)
}

// ListWatchBots lists the bots of pool poolID ("" for every pool), then
// follows their changes. For one pool, the client keeps the set of the
// pool's bots from the listing on, and shows a bot that leaves the pool
// (removed, or moved to another pool by UpdateBot) as a delete, and one
// that moves in as a put. The watch reads the whole bots table (the
// server filters by table, not by pool).
func (p *Pools) ListWatchBots(ctx context.Context, poolID string, opts ...WatchOption) <-chan BotWatchResponse {
	o := newWatchOpts(poolsRoutingKey, true, opts)
	if poolID == "" {
		return typedWatch(ctx, p.c, botsTable, o, nil)
	}
	if err := checkPoolID(poolID); err != nil {
		ch := make(chan BotWatchResponse, 1)
		ch <- BotWatchResponse{Err: err}
		close(ch)
		return ch
	}
	f := &poolBots{pool: poolID, in: map[string]bool{}}
	return typedWatch(ctx, p.c, botsTable, o, f.keep)
}

// poolBots narrows a bots watch (a listing first) to one pool: in is the
// set of the pool's bots, from the listing on.
type poolBots struct {
	pool string
	in   map[string]bool
}

// keep rewrites r to the pool's changes; false drops a message left with
// nothing to tell.
func (f *poolBots) keep(r *BotWatchResponse) bool {
	if r.Resync {
		clear(f.in) // the listing starts over; so does the consumer's view
	}
	evs := r.Events[:0]
	for _, e := range r.Events {
		switch {
		case e.Type == EventPut && e.Record.PoolID == f.pool:
			f.in[e.ID] = true
			evs = append(evs, e)
		case f.in[e.ID]: // removed, or moved to another pool
			delete(f.in, e.ID)
			evs = append(evs, BotEvent{Type: EventDelete, ID: e.ID})
		}
	}
	r.Events = evs
	return len(evs) > 0 || r.Progress || r.ListDone || r.Resync || r.Err != nil
}

// WatchAgents follows the agents of user (seed 000 agents): a put when
// one is stored, changes status or heartbeats (StartAgentHeartbeat; when
// its lease ends, a running agent is put again as failed), a delete when
// it is deleted. Options as WatchRunners.
func (r *Registry) WatchAgents(ctx context.Context, user keys.UserID, opts ...WatchOption) <-chan AgentWatchResponse {
	return typedWatch(ctx, r.c, agentsTable(user), newWatchOpts(user[:], false, opts), nil)
}

// ListWatchAgents lists the agents of user, then follows their changes.
func (r *Registry) ListWatchAgents(ctx context.Context, user keys.UserID, opts ...WatchOption) <-chan AgentWatchResponse {
	return typedWatch(ctx, r.c, agentsTable(user), newWatchOpts(user[:], true, opts), nil)
}
