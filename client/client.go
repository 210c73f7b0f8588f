// Package client is the Go client of swarmkv. It learns the shard map from
// any node, routes every request by its routing key (blake3 slot -> shard ->
// leader), caches leaders, follows NotLeader hints, refreshes the map when
// it is stale, and retries what is safe to retry within the caller's
// context. Besides gRPC it imports only swarmkv's pure packages: the
// generated API (rpc), the slot math (shard), the key layouts (keys), the
// record types (records) and the retry helper (internal/retry): a program
// using it never pulls in Raft, memberlist or Pebble.
//
// Typed stores: c.Registry() (seed 000: agents, sessions, users) and
// c.Billing() (seed 001: accounts, transactions, usage events) mirror the
// seeds' Store traits, context first, with typed errors (ErrNotFound,
// *InsufficientCreditsError, *DuplicateEventError, ErrInvalidArgument);
// c.Pools() (seed 004: pools, bots, runners, guild selections, deploy plans)
// adds ErrPermissionDenied, ErrAlreadyExists and *PoolNotEmptyError.
//
// Usage:
//
//	c, err := client.New(ctx, client.Config{Endpoints: []string{"127.0.0.1:7100"}})
//	if err != nil { ... }
//	defer c.Close()
//	err = c.Put(ctx, []byte("user-42"), []byte("profile"), []byte(`{"plan":"pro"}`))
//	v, err := c.Get(ctx, []byte("user-42"), []byte("profile"))
//	if errors.Is(err, client.ErrNotFound) { ... }
//
// Retries: a request that the server did not execute (NotLeader, no leader
// yet, node without the shard, a slot that moved to another shard) is
// retried on the right node; for a moved slot the client first refreshes
// its map until it names the new owner (CallRouted). A request whose
// outcome is unknown (leadership lost after proposing, connection broken) is
// retried only when sending it twice is safe: reads, and the ledger's
// ProcessUsage and AddCredits, which the state machine deduplicates by
// transaction id. Every other write (Put, Delete, Batch, the registry's and
// pools' updates) returns ErrOutcomeUnknown instead: sent again, it could
// land after another client's write and undo it, which no single execution
// could have done.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// KeepaliveTime is how long a connection to a node may be silent before
// the client pings it, with or without calls in flight, and
// KeepaliveTimeout how long it waits for the answer before it drops the
// connection (a node gone without a FIN). Nodes refuse pings more often
// than their --grpc-keepalive-min-time, which is at most half of
// KeepaliveTime. Nodes dial each other with the same settings
// (rpc.Keepalive).
const (
	KeepaliveTime    = rpc.KeepaliveTime
	KeepaliveTimeout = rpc.KeepaliveTimeout
)

// Keepalive is the dial option with KeepaliveTime and KeepaliveTimeout;
// every Client connection has it (Config.DialOptions come after it and
// may replace it).
func Keepalive() grpc.DialOption { return rpc.Keepalive() }

// Config configures a Client.
type Config struct {
	// Endpoints are gRPC addresses (host:port) of one or more nodes; the
	// client learns the rest from the cluster map.
	Endpoints []string
	// DialOptions are added to every connection, after the transport
	// credentials made from TLS.
	DialOptions []grpc.DialOption
	// TLS, if set, secures every connection (LoadTLS reads the cluster CA
	// and an optional client certificate); nil: plaintext, for a cluster
	// listening on loopback without TLS.
	TLS *tls.Config
	// Token, if set, is sent with every call as "authorization: Bearer
	// <token>" (a token made by `swarmnode token create`). Without TLS it
	// is sent only to loopback addresses (localhost, 127.0.0.0/8, ::1):
	// New refuses other endpoints, and a node the map lists elsewhere is
	// not dialed (ErrPlaintextToken).
	Token string
	// AttemptTimeout bounds one attempt on one node, so that a hung node
	// (paused, partitioned) does not eat the caller's whole deadline.
	// Default 3s.
	AttemptTimeout time.Duration
	// DefaultTimeout applies when the caller's context has no deadline.
	// Default 15s.
	DefaultTimeout time.Duration
	// Unary sends every call as its own unary gRPC call. By default the
	// calls to a node travel as items of one Pipeline stream
	// (rpc/pipeline.proto): concurrent calls share messages, which costs
	// both sides far less CPU per call; a lone call is sent at once, and a
	// node without the Pipeline service gets unary calls anyway.
	Unary bool
	// Logger receives debug logs about routing; default slog.Default().
	Logger *slog.Logger
}

// Client is safe for concurrent use.
type Client struct {
	cfg Config
	log *slog.Logger

	mu struct {
		sync.RWMutex
		smap    *shard.Map
		shards  map[shard.ID]*route
		nodes   map[string]string // node id -> gRPC address
		conns   map[string]*nodeConn
		closed  bool
		version uint64
		// suspect holds, per address, until when an attempt there is
		// avoided while a shard's leader is unknown: an attempt sent
		// there timed out or found no connection (forget).
		suspect map[string]time.Time
	}
	suspects  atomic.Int32 // len(mu.suspect), read without the lock
	refreshMu sync.Mutex   // one map refresh at a time
	kas       *kaMux       // the keep-alive streams (leasemux.go)
}

// nodeConn is the connection to one node: stores' calls go through pipe
// (nil with Config.Unary), the client's own (cluster map) unary on cc.
type nodeConn struct {
	cc   *grpc.ClientConn
	pipe *pipe
}

// calls is the connection stores' calls use.
func (nc *nodeConn) calls() grpc.ClientConnInterface {
	if nc.pipe != nil {
		return nc.pipe
	}
	return nc.cc
}

func (nc *nodeConn) close() error {
	if nc.pipe != nil {
		nc.pipe.close()
	}
	return nc.cc.Close()
}

// route is the client's view of one shard: its replicas' addresses and the
// leader it last saw.
type route struct {
	replicas []string // gRPC addresses
	leader   string   // gRPC address, "" when unknown
}

// New connects to the cluster through cfg.Endpoints and loads the shard map.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrInvalidArgument)
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = 3 * time.Second
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Client{cfg: cfg, log: cfg.Logger}
	c.kas = newKaMux(c)
	for _, ep := range cfg.Endpoints {
		if err := c.checkTokenTransport(ep); err != nil {
			return nil, err
		}
	}
	c.mu.conns = map[string]*nodeConn{}
	c.mu.nodes = map[string]string{}
	if err := c.RefreshMap(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every connection and the keep-alive streams (waiting for
// their goroutines). Calls in flight fail with ErrClosed or a canceled
// status; KeepAlives still running can no longer renew.
func (c *Client) Close() error {
	if c.kas != nil {
		c.kas.close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil
	}
	c.mu.closed = true
	var err error
	for _, nc := range c.mu.conns {
		err = errors.Join(err, nc.close())
	}
	c.mu.conns = nil
	return err
}

func (c *Client) conn(addr string) (*nodeConn, error) {
	c.mu.RLock()
	nc, closed := c.mu.conns[addr], c.mu.closed
	c.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if nc != nil {
		return nc, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	if nc := c.mu.conns[addr]; nc != nil {
		return nc, nil
	}
	// The map may list addresses the endpoints did not: check each.
	if err := c.checkTokenTransport(addr); err != nil {
		return nil, err
	}
	opts := append(c.transportOptions(), Keepalive())
	opts = append(opts, c.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("swarmkv: dial %s: %w", addr, err)
	}
	nc = &nodeConn{cc: cc}
	if !c.cfg.Unary {
		nc.pipe = newPipe(cc)
	}
	c.mu.conns[addr] = nc
	return nc, nil
}

// Map returns the shard map the client routes with.
func (c *Client) Map() *shard.Map {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.smap.Clone()
}

// RefreshMap reloads the cluster map from any reachable node (known nodes
// first, then the configured endpoints).
func (c *Client) RefreshMap(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.RLock()
	var addrs []string
	for _, a := range c.mu.nodes {
		addrs = append(addrs, a)
	}
	c.mu.RUnlock()
	slices.Sort(addrs)
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	addrs = append(addrs, c.cfg.Endpoints...)
	var errs error
	for _, a := range slices.Compact(addrs) {
		nc, err := c.conn(a)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		resp, err := rpc.NewClusterClient(nc.cc).ClusterMap(actx, &rpc.ClusterMapRequest{})
		cancel()
		if code := status.Code(err); code == codes.PermissionDenied || code == codes.Unauthenticated {
			// Credentials are refused: no other node will take them either.
			return fmt.Errorf("%w: %s", ErrPermissionDenied, status.Convert(err).Message())
		}
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		if err := c.installMap(resp); err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		return nil
	}
	return fmt.Errorf("%w: no node answered with a cluster map: %v", ErrUnavailable, errs)
}

func (c *Client) installMap(resp *rpc.ClusterMapResponse) error {
	if len(resp.GetSlots()) != shard.NumSlots {
		return fmt.Errorf("swarmkv: cluster map has %d slots", len(resp.GetSlots()))
	}
	m := &shard.Map{Version: resp.GetMapVersion(), NumShards: int(resp.GetNumShards())}
	for i, s := range resp.GetSlots() {
		m.Slots[i] = shard.ID(s)
	}
	if err := m.Validate(); err != nil {
		return err
	}
	nodes := map[string]string{}
	for _, n := range resp.GetNodes() {
		nodes[n.GetId()] = n.GetGrpcAddr()
	}
	shards := map[shard.ID]*route{}
	for _, s := range resp.GetShards() {
		r := &route{}
		for _, id := range s.GetReplicas() {
			if a, ok := nodes[id]; ok {
				r.replicas = append(r.replicas, a)
			}
		}
		r.leader = nodes[s.GetLeaderId()]
		shards[shard.ID(s.GetId())] = r
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.smap != nil && m.Version < c.mu.smap.Version {
		return nil // never go back to an older map
	}
	// Keep leaders learned from NotLeader hints when the node answering
	// did not know the leader of a shard it does not hold.
	for id, r := range shards {
		if old := c.mu.shards[id]; r.leader == "" && old != nil && slices.Contains(r.replicas, old.leader) {
			r.leader = old.leader
		}
	}
	c.mu.smap, c.mu.shards, c.mu.nodes = m, shards, nodes
	c.mu.version++
	return nil
}

// target picks the node for attempt i on shard id: the cached leader if
// any, otherwise the replicas in turn (for stale reads, replicas in turn
// starting at a random one).
func (c *Client) target(id shard.ID, attempt int, anyReplica bool, offset int) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.mu.shards[id]
	if r == nil || len(r.replicas) == 0 {
		return "", false
	}
	now := time.Now()
	if r.leader != "" && !anyReplica {
		if until, ok := c.mu.suspect[r.leader]; !ok || now.After(until) {
			return r.leader, true
		}
	}
	// The leader is unknown (or any replica serves, or the map names a
	// leader an attempt found silent): take the replicas in turn, passing
	// over those an attempt recently found unresponsive unless all of them
	// are.
	n := len(r.replicas)
	for i := range n {
		addr := r.replicas[(offset+attempt+i)%n]
		if until, ok := c.mu.suspect[addr]; !ok || now.After(until) {
			return addr, true
		}
	}
	return r.replicas[(offset+attempt)%n], true
}

// suspectFor is how long an address whose attempt timed out or found no
// connection is passed over while a leader is unknown: about one election
// (1 to 2 s), by which time the cluster has a new leader or the address
// answers again.
const suspectFor = 2 * time.Second

// forget is the retry loop's answer to an attempt on addr that may have
// been lost with its node (an ambiguous outcome): the shard's cached
// leader is forgotten if it is addr, and when the attempt timed out or
// the connection failed, addr is passed over for suspectFor while the
// shard's leader is unknown, so the next call (the caller's next write
// as well as this call's retry) asks another replica instead of waiting
// on the same silent node again.
func (c *Client) forget(id shard.ID, addr string, unresponsive bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.mu.shards[id]; r != nil && r.leader == addr {
		r.leader = ""
	}
	if !unresponsive {
		return
	}
	now := time.Now()
	if c.mu.suspect == nil {
		c.mu.suspect = map[string]time.Time{}
	}
	for a, until := range c.mu.suspect {
		if now.After(until) {
			delete(c.mu.suspect, a)
		}
	}
	c.mu.suspect[addr] = now.Add(suspectFor)
	c.suspects.Store(int32(len(c.mu.suspect)))
}

// suspected reports whether addr is passed over (forget).
func (c *Client) suspected(addr string) bool {
	if c.suspects.Load() == 0 {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	until, ok := c.mu.suspect[addr]
	return ok && time.Now().Before(until)
}

// acquit ends the suspicion of addr: a call there succeeded.
func (c *Client) acquit(addr string) {
	c.mu.RLock()
	_, ok := c.mu.suspect[addr]
	c.mu.RUnlock()
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mu.suspect, addr)
	c.suspects.Store(int32(len(c.mu.suspect)))
}

func (c *Client) setLeader(id shard.ID, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.mu.shards[id]; r != nil {
		r.leader = addr
	}
}

// hintPacer paces the following of NotLeader hints: the first hint of a
// row is followed at once (without the retry's pause), the next ones wait
// like any retry, as two nodes that name each other during an election
// would otherwise be called in a tight loop. The caller says what ends a
// row (reset): Client.call and the keep-alive holder's renew a hint that
// waited (so every other hint in a row is followed at once), watchLoop a
// stream created.
type hintPacer struct {
	followed bool // a hint of this row was followed at once
}

// now reports whether to follow a hint at once (false: after the
// retry's pause).
func (p *hintPacer) now() bool {
	if p.followed {
		return false
	}
	p.followed = true
	return true
}

// reset ends the row: the next hint is followed at once.
func (p *hintPacer) reset() { p.followed = false }

// ShardOf returns the shard a routing key maps to under the current map.
func (c *Client) ShardOf(routingKey []byte) shard.ID {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.smap.ShardOf(routingKey)
}

// Call is one RPC attempt on a node's connection.
type Call func(ctx context.Context, cc grpc.ClientConnInterface) error

// CallOptions say how CallShard may retry.
type CallOptions struct {
	// Idempotent calls are retried when their outcome is unknown.
	Idempotent bool
	// AnyReplica lets any replica answer (stale reads).
	AnyReplica bool
}

// CallShard runs call against shard id's leader (or any replica), following
// NotLeader hints, refreshing the map and retrying with backoff until the
// call succeeds, fails for good, or ctx ends. Typed stores built on the
// client use it for their own RPCs addressed to a shard (fan-out); a call
// routed by a routing key goes through CallRouted, which also follows
// moved slots. A moved answer to a shard-addressed call is returned at
// once as a *MovedError (the request names its shard: the caller decides
// where to send it).
func (c *Client) CallShard(ctx context.Context, id shard.ID, opts CallOptions, call Call) error {
	return c.call(ctx, &dest{id: id}, opts, call)
}

// CallRouted runs call against the leader (or any replica) of the shard
// that owns routingKey's slot, as CallShard does, and follows moves: when
// the shard answers that the slot moved (a *MovedError: the request was
// not executed), it refreshes the map until it names the new owner and
// sends call there at once, whatever opts.Idempotent says. Only ctx
// bounds the wait for the map; the error then names the move.
func (c *Client) CallRouted(ctx context.Context, routingKey []byte, opts CallOptions, call Call) error {
	return c.call(ctx, &dest{rk: routingKey}, opts, call)
}

// dest is where a call goes: the shard that owns rk's slot under the
// current map when rk is set, else shard id. follow, when set, re-addresses
// a shard-addressed call to the shard that owns the moved slot under the
// refreshed map (RedisExecRequest: its request names its shard).
type dest struct {
	id     shard.ID
	rk     []byte
	follow func(owner shard.ID)
	// bySlot, when set, addresses the shard that owns slot (a lease's),
	// and follows its moves as a routed call does.
	bySlot bool
	slot   shard.Slot
}

// shard is the call's shard for the next attempt.
func (d *dest) shard(c *Client) shard.ID {
	switch {
	case d.bySlot:
		return c.slotOwner(d.slot)
	case d.rk != nil:
		return c.ShardOf(d.rk)
	}
	return d.id
}

// CallSlot is CallRouted for a call addressed by a slot (a lease's, whose
// id carries it) instead of a routing key.
func (c *Client) CallSlot(ctx context.Context, slot shard.Slot, opts CallOptions, call Call) error {
	return c.call(ctx, &dest{bySlot: true, slot: slot}, opts, call)
}

func (c *Client) call(ctx context.Context, d *dest, opts CallOptions, call Call) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.DefaultTimeout)
		defer cancel()
	}
	backoff := callBackoff.Backoff()
	offset := rand.IntN(1 << 16)
	var last error
	// Hints are followed at once every other time in a row: a hint
	// that waited ends the row.
	var hints hintPacer
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return err
			}
			return fmt.Errorf("%w (after %d attempts; last error: %w)", err, attempt, last)
		}
		id := d.shard(c)
		addr, ok := c.target(id, attempt, opts.AnyReplica, offset)
		if !ok {
			if err := c.RefreshMap(ctx); err != nil {
				last = err
				backoff.Wait(ctx)
			}
			continue
		}
		nc, err := c.conn(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		err = call(actx, nc.calls())
		// The attempt's deadline passed: the client's timer, or the node's
		// (it answers DeadlineExceeded by the same deadline, and may do so
		// first).
		attemptTimedOut := ctx.Err() == nil && (actx.Err() != nil || status.Code(err) == codes.DeadlineExceeded)
		cancel()
		if err == nil {
			if c.suspects.Load() > 0 {
				c.acquit(addr)
			}
			return nil
		}
		cerr, class, hint := classify(err)
		last = cerr
		switch class {
		case classFatal:
			if attemptTimedOut {
				// The node did not answer within the attempt: a write's
				// outcome is unknown (returned as is), a read asks again.
				c.forget(id, addr, true)
				if opts.Idempotent {
					continue
				}
			}
			return cerr
		case classNotLeader:
			if la := hint.GetLeaderAddr(); la != "" && c.suspected(la) {
				// A follower still names the leader an attempt found
				// silent (it has not seen the election yet): going there
				// costs an attempt timeout, and a write's outcome. Ask
				// the other replicas again after the pause instead.
				c.forget(id, la, false)
				break
			}
			if hint.GetLeaderAddr() != "" && hint.GetLeaderAddr() != addr {
				c.setLeader(id, hint.GetLeaderAddr())
				if hints.now() {
					continue
				}
				hints.reset() // this one waits
				break
			}
			c.setLeader(id, "")
			if attempt > 0 && attempt%3 == 0 {
				c.RefreshMap(ctx)
			}
		case classRetry:
			// Definitely not executed (no leader yet, leader not ready):
			// back off and try again, keeping the cached leader.
		case classMoved:
			// Definitely not executed: the slot is not the shard's (any
			// more). Wait for a map that names its owner, then send the
			// call there at once, idempotent or not.
			var me *MovedError
			errors.As(cerr, &me)
			if d.rk == nil && d.follow == nil && !d.bySlot {
				return cerr // the caller chooses the shard (fanLookup)
			}
			if err := c.awaitMap(ctx, me); err != nil {
				return err
			}
			if d.follow != nil {
				d.id = c.slotOwner(shard.Slot(me.Slot))
				d.follow(d.id)
			}
			if d.shard(c) != id {
				continue
			}
			// The map still gives the slot to the shard that refused it
			// (a move the map does not publish yet): pause.
		case classAmbiguous:
			c.forget(id, addr, attemptTimedOut || errors.Is(cerr, ErrUnavailable))
			if !opts.Idempotent {
				if !errors.Is(cerr, ErrOutcomeUnknown) {
					cerr = fmt.Errorf("%w: %w", ErrOutcomeUnknown, cerr)
				}
				return cerr
			}
		}
		backoff.Wait(ctx)
	}
}

// mapVersion is the version of the map the client routes with.
func (c *Client) mapVersion() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.smap.Version
}

// slotOwner is the shard that owns slot under the current map.
func (c *Client) slotOwner(slot shard.Slot) shard.ID {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.smap.ShardOfSlot(slot)
}

// awaitMap refreshes the map, from any node, until its version is at
// least me.MapVersion, backing off between refreshes (nodes follow the
// meta group's map within about half a second); with MapVersion 0 (the
// shard that refused knows no move of the slot) it refreshes once. ctx
// bounds it: the error then names the move and the version reached.
func (c *Client) awaitMap(ctx context.Context, me *MovedError) error {
	if me.MapVersion > 0 && c.mapVersion() >= me.MapVersion {
		return nil // another call refreshed it already
	}
	backoff := mapBackoff.Backoff()
	for {
		err := c.RefreshMap(ctx)
		v := c.mapVersion()
		if v >= me.MapVersion {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: the client's shard map is still at version %d (last refresh: %v): %w", me, v, err, ctx.Err())
		}
		backoff.Wait(ctx)
	}
}

// mapBackoff draws awaitMap's waits between map refreshes.
var mapBackoff = retry.Options{Initial: 20 * time.Millisecond, Max: 250 * time.Millisecond}

// callBackoff draws CallShard's waits between attempts: 10 ms doubling up
// to 500 ms, with jitter. The attempts are bounded by ctx alone
// (DefaultTimeout when ctx has no deadline).
var callBackoff = retry.Options{Initial: 10 * time.Millisecond, Max: 500 * time.Millisecond}

// fanOutMap is the context key of the map version a FanOut chose its
// shards from.
type fanOutMap struct{}

// mapVersionFor is the map version a shard-addressed request made under
// ctx was chosen from: its FanOut's, else the current map's.
func (c *Client) mapVersionFor(ctx context.Context) uint64 {
	if v, ok := ctx.Value(fanOutMap{}).(uint64); ok {
		return v
	}
	return c.mapVersion()
}

// FanOut runs fn for every shard in parallel and returns the errors of all
// shards joined (nil when all succeeded). Queries that span shards (list
// all, lookups without a routing key) use it together with CallShard.
func (c *Client) FanOut(ctx context.Context, fn func(ctx context.Context, id shard.ID) error) error {
	c.mu.RLock()
	ids := c.mu.smap.Shards() // the shards that own slots (ids may have holes)
	version := c.mu.smap.Version
	c.mu.RUnlock()
	// Each shard is asked with the version of the map its id came from
	// (fanOutMap): a shard that gave slots away under a newer map answers
	// moved instead of leaving the moved records out.
	ctx = context.WithValue(ctx, fanOutMap{}, version)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx, id); err != nil {
				errs[i] = fmt.Errorf("shard %d: %w", id, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
