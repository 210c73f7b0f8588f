package client

// Typed stores. Registry (seed 000, agent registry) and Billing (seed 001,
// billing ledger) mirror the seeds' Store traits on top of CallShard and
// FanOut:
//
//	reg := c.Registry()
//	err := reg.PutAgent(ctx, &records.AgentRecord{AgentID: aid, UserID: uid, Name: "scout", ...})
//	a, err := reg.GetAgentOf(ctx, uid, aid) // routed: one shard
//	a, err = reg.GetAgent(ctx, aid)         // by id alone: every shard, in parallel
//	if errors.Is(err, client.ErrNotFound) { ... }
//
// Addressing: a method that takes the user id (the ...Of forms, and every
// method whose record carries its user) routes to that user's shard. The
// seed's forms without a user id fan out over every shard in parallel; the
// server answers them from per-shard indexes, never by scanning records.
//
// Results: records come back converted with package rpc's checking
// conversions; a malformed record in a response is an error wrapping the
// conversion error (records.ErrInvalid or rpc.ErrBadID). Records and
// arguments are checked before sending, so bad input fails with
// ErrInvalidArgument without a round trip (the server checks again).
//
// Reads are linearizable unless Stale() is passed. A fan-out read is a set
// of per-shard reads, each linearizable on its shard, not one snapshot of
// the whole cluster.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// shardPageLimit is the page size ListAgentsByStatus and ListAllAgents ask
// each shard for.
const shardPageLimit = 1000

var (
	idempotent = CallOptions{Idempotent: true}
	// writeOnce: a write that is not deduplicated by the state machine is
	// never sent twice. Sending it again after an unknown outcome could
	// apply it a second time after another client's write, which would
	// undo that write (a lost update the first attempt never caused), so
	// the caller gets ErrOutcomeUnknown and decides.
	writeOnce = CallOptions{Idempotent: false}
)

func invalidArg(err error) error { return fmt.Errorf("%w: %w", ErrInvalidArgument, err) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// badResponse wraps a conversion error of a server's answer.
func badResponse(what string, err error) error {
	return fmt.Errorf("swarmkv: malformed %s in response: %w", what, err)
}

// stub is a typed store's gRPC service on one shard: the client, the
// shard, and the constructor of the service's client on a node's
// connection (rpc.NewBillingClient, ...).
type stub[S any] struct {
	c     *Client
	id    shard.ID
	rk    []byte // when set, the call is routed by rk (CallRouted), not sent to id
	newSC func(grpc.ClientConnInterface) S
}

// unary runs one unary RPC through CallShard and returns its answer:
// method is the service's method (rpc.BillingClient.GetAccount), req its
// request, sent unchanged on every attempt.
func unary[S, Req, Resp any](ctx context.Context, s stub[S], opts CallOptions,
	method func(S, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var resp Resp
	d := &dest{id: s.id, rk: s.rk}
	err := s.c.call(ctx, d, opts, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		resp, err = method(s.newSC(cc), ctx, req)
		return err
	})
	return resp, err
}

// checkRecord refuses a nil or invalid record (what names it) before any
// round trip, with ErrInvalidArgument.
func checkRecord[T any, P interface {
	*T
	Validate() error
}](rec P, what string) error {
	if rec == nil {
		return invalidf("%s is nil", what)
	}
	if err := rec.Validate(); err != nil {
		return invalidArg(err)
	}
	return nil
}

// allFrom converts the records of a response with from (agentFrom, ...),
// failing at the first malformed one.
func allFrom[P, R any](ps []P, from func(P) (R, error)) ([]R, error) {
	out := make([]R, 0, len(ps))
	for _, p := range ps {
		r, err := from(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// fanLookup asks every shard in parallel for something named by an id that
// carries no routing key. get answers for one shard: the value, or an error
// wrapping ErrNotFound when that shard does not hold it. fanLookup returns
// the values found, in shard order. With none found it returns the other
// shards' errors joined, or, when every shard answered NotFound, an error
// wrapping ErrNotFound. Once a value is found, other shards' failures do
// not matter: the id lives in one shard.
//
// A shard that holds the record in a slot it does not own (the slot is
// moving: frozen on the source, not yet adopted by the target) answers
// *MovedError. When no shard found the record and one answered moved, the
// lookup waits for the map to publish the move and asks every shard
// again, until ctx ends: the record is somewhere, not absent.
func fanLookup[T any](ctx context.Context, c *Client, what string, get func(context.Context, shard.ID) (T, error)) ([]T, error) {
	backoff := callBackoff.Backoff()
	for {
		found, err := fanLookupOnce(ctx, c, what, get)
		var me *MovedError
		if len(found) > 0 || !errors.As(err, &me) {
			return found, err
		}
		if err := c.awaitMap(ctx, me); err != nil {
			return nil, err
		}
		if !backoff.Wait(ctx) {
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		}
	}
}

func fanLookupOnce[T any](ctx context.Context, c *Client, what string, get func(context.Context, shard.ID) (T, error)) ([]T, error) {
	var mu sync.Mutex
	found := map[shard.ID]T{}
	err := c.FanOut(ctx, func(ctx context.Context, id shard.ID) error {
		v, err := get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		found[id] = v
		return nil
	})
	if len(found) > 0 {
		ids := make([]shard.ID, 0, len(found))
		for id := range found {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		out := make([]T, len(ids))
		for i, id := range ids {
			out[i] = found[id]
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: no shard holds %s", ErrNotFound, what)
}

// fanCollect asks every shard in parallel for its part of a listing and
// concatenates the parts. Every shard must answer: a listing missing a
// shard would be silently incomplete, so any shard's error fails it.
//
// A shard that gave slots away under a newer map than the one the fan-out
// chose its shards from answers *MovedError (api's staleMap): fanCollect
// then waits for that map and lists every shard again, until ctx ends.
func fanCollect[T any](ctx context.Context, c *Client, list func(context.Context, shard.ID) ([]T, error)) ([]T, error) {
	backoff := callBackoff.Backoff()
	for {
		all, err := fanCollectOnce(ctx, c, list)
		var me *MovedError
		if !errors.As(err, &me) {
			return all, err
		}
		if err := c.awaitMap(ctx, me); err != nil {
			return nil, err
		}
		if !backoff.Wait(ctx) {
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		}
	}
}

func fanCollectOnce[T any](ctx context.Context, c *Client, list func(context.Context, shard.ID) ([]T, error)) ([]T, error) {
	var mu sync.Mutex
	var all []T
	err := c.FanOut(ctx, func(ctx context.Context, id shard.ID) error {
		part, err := list(ctx, id)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		all = append(all, part...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// Registry is the agent registry of seed 000: agents with their status
// index, sessions with their by-agent index, and cached users. Agents,
// sessions and users live in the shard of their user (the 32-byte
// UserID). Safe for concurrent use.
type Registry struct{ c *Client }

// Registry returns the agent registry store of the cluster.
func (c *Client) Registry() *Registry { return &Registry{c: c} }

// routed is the registry on user's shard, onShard on shard id.
func (r *Registry) routed(user keys.UserID) stub[rpc.RegistryClient] {
	return stub[rpc.RegistryClient]{c: r.c, rk: bytes.Clone(user[:]), newSC: rpc.NewRegistryClient}
}

func (r *Registry) onShard(id shard.ID) stub[rpc.RegistryClient] {
	return stub[rpc.RegistryClient]{c: r.c, id: id, newSC: rpc.NewRegistryClient}
}

func userTarget(user keys.UserID) *rpc.Target { return &rpc.Target{UserId: user[:]} }

// shardTarget addresses shard id with the map version it was chosen from
// (mapVersionFor).
func (c *Client) shardTarget(ctx context.Context, id shard.ID) *rpc.Target {
	return &rpc.Target{Shard: uint32(id), HasShard: true, MapVersion: c.mapVersionFor(ctx)}
}

func agentFrom(p *rpc.Agent) (*records.AgentRecord, error) {
	a, err := rpc.AgentFromProto(p)
	if err != nil {
		return nil, badResponse("agent", err)
	}
	return a, nil
}

func sessionFrom(p *rpc.Session) (*records.SessionRecord, error) {
	s, err := rpc.SessionFromProto(p)
	if err != nil {
		return nil, badResponse("session", err)
	}
	return s, nil
}

// sortAgents orders agents as the seed's agents column family does:
// by user id, then agent id.
func sortAgents(as []*records.AgentRecord) {
	slices.SortFunc(as, func(a, b *records.AgentRecord) int {
		if c := bytes.Compare(a.UserID[:], b.UserID[:]); c != 0 {
			return c
		}
		return bytes.Compare(a.AgentID[:], b.AgentID[:])
	})
}

// sortSessions orders sessions as the seed's sessions_by_agent index
// does: by session id (then user id, for ids that collide across shards).
func sortSessions(ss []*records.SessionRecord) {
	slices.SortFunc(ss, func(a, b *records.SessionRecord) int {
		if c := bytes.Compare(a.SessionID[:], b.SessionID[:]); c != 0 {
			return c
		}
		return bytes.Compare(a.UserID[:], b.UserID[:])
	})
}

// PutAgent creates or replaces an agent; its status index entry moves with
// it in the same state machine command. Retried when the outcome is
// unknown (an upsert applied twice is applied once).
func (r *Registry) PutAgent(ctx context.Context, a *records.AgentRecord) error {
	if err := checkRecord(a, "agent"); err != nil {
		return err
	}
	_, err := unary(ctx, r.routed(a.UserID), writeOnce, rpc.RegistryClient.PutAgent, &rpc.PutAgentRequest{Agent: rpc.AgentToProto(a)})
	return err
}

// GetAgentOf returns agent agentID of user, or ErrNotFound.
func (r *Registry) GetAgentOf(ctx context.Context, user keys.UserID, agentID keys.AgentID, opts ...ReadOption) (*records.AgentRecord, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, r.routed(user), co, rpc.RegistryClient.GetAgent, &rpc.AgentRef{Target: userTarget(user), AgentId: agentID[:], Consistency: cons})
	if err != nil {
		return nil, err
	}
	return agentFrom(resp.GetAgent())
}

// GetAgent returns agent agentID whoever owns it (seed get_agent): it asks
// every shard, each answering from its agent-owner index. ErrNotFound if no
// shard holds it. Should several users' shards hold the same agent id, the
// agent of the smallest user id is returned (the seed's scan order).
func (r *Registry) GetAgent(ctx context.Context, agentID keys.AgentID, opts ...ReadOption) (*records.AgentRecord, error) {
	cons, co := consistency(opts)
	found, err := fanLookup(ctx, r.c, fmt.Sprintf("agent %x", agentID[:]), func(ctx context.Context, id shard.ID) (*records.AgentRecord, error) {
		resp, err := unary(ctx, r.onShard(id), co, rpc.RegistryClient.GetAgent, &rpc.AgentRef{Target: r.c.shardTarget(ctx, id), AgentId: agentID[:], Consistency: cons})
		if err != nil {
			return nil, err
		}
		return agentFrom(resp.GetAgent())
	})
	if err != nil {
		return nil, err
	}
	sortAgents(found)
	return found[0], nil
}

// DeleteAgentOf deletes agent agentID of user with its index entries, or
// returns ErrNotFound. It is retried when the outcome is unknown: if the
// first attempt applied but its answer was lost, the retry answers
// ErrNotFound although this call deleted the agent.
func (r *Registry) DeleteAgentOf(ctx context.Context, user keys.UserID, agentID keys.AgentID) error {
	_, err := unary(ctx, r.routed(user), writeOnce, rpc.RegistryClient.DeleteAgent, &rpc.AgentRef{Target: userTarget(user), AgentId: agentID[:]})
	return err
}

// DeleteAgent deletes agent agentID whoever owns it (seed delete_agent): it
// finds the owner with GetAgent, then deletes in the owner's shard.
// ErrNotFound if no shard holds it; like DeleteAgentOf, a retried delete
// whose first attempt applied answers ErrNotFound.
func (r *Registry) DeleteAgent(ctx context.Context, agentID keys.AgentID) error {
	a, err := r.GetAgent(ctx, agentID)
	if err != nil {
		return err
	}
	return r.DeleteAgentOf(ctx, a.UserID, agentID)
}

// ListAgentsByUser returns every agent of user, ordered by agent id, read
// page by page (pages.go).
func (r *Registry) ListAgentsByUser(ctx context.Context, user keys.UserID, opts ...ReadOption) ([]*records.AgentRecord, error) {
	return collectPages(ctx, "agents of user", func(ctx context.Context, p Page) ([]*records.AgentRecord, []byte, error) {
		return r.ListAgentsByUserPage(ctx, user, p, opts...)
	})
}

// ListAgentsByUserPage returns one page of user's agents, ordered by agent
// id, and the cursor of the next page (nil after the last).
func (r *Registry) ListAgentsByUserPage(ctx context.Context, user keys.UserID, p Page, opts ...ReadOption) ([]*records.AgentRecord, []byte, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, r.routed(user), co, rpc.RegistryClient.ListAgentsByUser, &rpc.ListAgentsByUserRequest{UserId: user[:], Consistency: cons, Cursor: p.Cursor, Limit: p.limit()})
	if err != nil {
		return nil, nil, err
	}
	agents, err := allFrom(resp.GetAgents(), agentFrom)
	if err != nil {
		return nil, nil, err
	}
	return agents, nextCursor(resp.GetNextCursor()), nil
}

// CountAgentsByUser returns how many agents user has; the server counts
// index keys without sending (or decoding) the records.
func (r *Registry) CountAgentsByUser(ctx context.Context, user keys.UserID, opts ...ReadOption) (uint32, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, r.routed(user), co, rpc.RegistryClient.CountAgentsByUser, &rpc.UserRef{UserId: user[:], Consistency: cons})
	if err != nil {
		return 0, err
	}
	return resp.GetCount(), nil
}

// UpdateAgentStatusOf sets the status of agent agentID of user (moving its
// status index entry and stamping updated_at) and returns the updated
// agent, or ErrNotFound. Retried when the outcome is unknown: setting a
// status twice is harmless.
func (r *Registry) UpdateAgentStatusOf(ctx context.Context, user keys.UserID, agentID keys.AgentID, s records.AgentState) (*records.AgentRecord, error) {
	if !s.Valid() {
		return nil, invalidf("agent status %s", s)
	}
	resp, err := unary(ctx, r.routed(user), writeOnce, rpc.RegistryClient.UpdateAgentStatus, &rpc.UpdateAgentStatusRequest{UserId: user[:], AgentId: agentID[:], Status: uint32(s)})
	if err != nil {
		return nil, err
	}
	return agentFrom(resp.GetAgent())
}

// AgentHeartbeat sets the last_heartbeat_at of agent agentID of user to
// the server's clock and returns the agent, or ErrNotFound. WithLease (a
// lease granted for the user id) makes it a keep-alive of the lease too,
// and attaches the agent to it: when the lease ends, a running or
// provisioning agent becomes failed. Retried when the outcome is unknown.
func (r *Registry) AgentHeartbeat(ctx context.Context, user keys.UserID, agentID keys.AgentID, opts ...WriteOption) (*records.AgentRecord, error) {
	o := writeOpts(opts)
	resp, err := unary(ctx, r.routed(user), idempotent, rpc.RegistryClient.AgentHeartbeat, &rpc.AgentHeartbeatRequest{UserId: user[:], AgentId: agentID[:], Lease: uint64(o.lease)})
	if err != nil {
		return nil, err // not found: the agent, or the lease (the message says which)
	}
	return agentFrom(resp.GetAgent())
}

// StartAgentHeartbeat keeps the liveness of agent agentID of user (seed
// 000's last_heartbeat_at) on a lease: it grants a lease of ttl for the
// user, heartbeats with it once, then every third of ttl in the
// background. When the heartbeats stop (the agent's process dies, Stop,
// or the lease is lost), the lease expires within ttl plus the shard
// leader's bound and a running or provisioning agent becomes failed;
// Close does that at once (it revokes the lease). A failed first
// heartbeat revokes the lease and returns the error.
func (r *Registry) StartAgentHeartbeat(ctx context.Context, user keys.UserID, agentID keys.AgentID, ttl time.Duration) (*KeepAlive, error) {
	return r.c.startLeasedHeartbeat(ctx, user[:], ttl, func(ctx context.Context, id LeaseID) error {
		_, err := r.AgentHeartbeat(ctx, user, agentID, WithLease(id))
		return err
	})
}

// UpdateAgentStatus sets the status of agent agentID whoever owns it (seed
// update_agent_status): it finds the owner with GetAgent, then updates in
// the owner's shard. ErrNotFound if no shard holds it.
func (r *Registry) UpdateAgentStatus(ctx context.Context, agentID keys.AgentID, s records.AgentState) error {
	if !s.Valid() {
		return invalidf("agent status %s", s)
	}
	a, err := r.GetAgent(ctx, agentID)
	if err != nil {
		return err
	}
	_, err = r.UpdateAgentStatusOf(ctx, a.UserID, agentID, s)
	return err
}

// ListAgentsByStatus returns every agent in status s, from every shard's
// status index, ordered by user id then agent id (the seed's index order).
// Each shard is read in pages of shardPageLimit; the pages are separate
// reads, so an agent that changes status during the listing may be missed
// or seen with its new status.
func (r *Registry) ListAgentsByStatus(ctx context.Context, s records.AgentState, opts ...ReadOption) ([]*records.AgentRecord, error) {
	if !s.Valid() {
		return nil, invalidf("agent status %s", s)
	}
	return r.listShardAgents(ctx, true, s, opts)
}

// ListAllAgents returns every agent of every user (seed list_all_agents),
// ordered by user id then agent id, paged per shard like
// ListAgentsByStatus.
func (r *Registry) ListAllAgents(ctx context.Context, opts ...ReadOption) ([]*records.AgentRecord, error) {
	return r.listShardAgents(ctx, false, 0, opts)
}

func (r *Registry) listShardAgents(ctx context.Context, byStatus bool, s records.AgentState, opts []ReadOption) ([]*records.AgentRecord, error) {
	cons, co := consistency(opts)
	all, err := fanCollect(ctx, r.c, func(ctx context.Context, id shard.ID) ([]*records.AgentRecord, error) {
		var out []*records.AgentRecord
		var cursor []byte
		for {
			resp, err := unary(ctx, r.onShard(id), co, rpc.RegistryClient.ListShardAgents, &rpc.ShardAgentsRequest{Shard: uint32(id), ByStatus: byStatus,
				Status: uint32(s), Cursor: cursor, Limit: shardPageLimit, Consistency: cons, MapVersion: r.c.mapVersionFor(ctx)})
			if err != nil {
				return nil, err
			}
			page, err := allFrom(resp.GetAgents(), agentFrom)
			if err != nil {
				return nil, err
			}
			out = append(out, page...)
			next := resp.GetNextCursor()
			if len(next) == 0 {
				return out, nil
			}
			if len(page) == 0 || bytes.Equal(next, cursor) {
				return nil, fmt.Errorf("swarmkv: shard %d: agent listing cursor does not advance", id)
			}
			cursor = next
		}
	})
	if err != nil {
		return nil, err
	}
	sortAgents(all)
	return slices.CompactFunc(all, sameAgent), nil
}

// sameAgent and sameSession say whether two records of a fan-out listing
// are one record: each shard lists only the slots it owns, but the shards
// are read one by one, so a slot that moved between the source's read and
// the target's could be listed by both.
func sameAgent(a, b *records.AgentRecord) bool { return a.UserID == b.UserID && a.AgentID == b.AgentID }

func sameSession(a, b *records.SessionRecord) bool {
	return a.UserID == b.UserID && a.SessionID == b.SessionID
}

// PutSession creates or replaces a session with its by-agent index entry.
// Retried when the outcome is unknown.
func (r *Registry) PutSession(ctx context.Context, s *records.SessionRecord) error {
	if err := checkRecord(s, "session"); err != nil {
		return err
	}
	_, err := unary(ctx, r.routed(s.UserID), writeOnce, rpc.RegistryClient.PutSession, &rpc.PutSessionRequest{Session: rpc.SessionToProto(s)})
	return err
}

// GetSessionOf returns session id of user, or ErrNotFound (also when the
// user's shard holds a session with that id of another user).
func (r *Registry) GetSessionOf(ctx context.Context, user keys.UserID, id keys.SessionID, opts ...ReadOption) (*records.SessionRecord, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, r.routed(user), co, rpc.RegistryClient.GetSession, &rpc.SessionRef{Target: userTarget(user), SessionId: id[:], Consistency: cons})
	if err != nil {
		return nil, err
	}
	s, err := sessionFrom(resp.GetSession())
	if err != nil {
		return nil, err
	}
	if s.UserID != user {
		return nil, fmt.Errorf("%w: session %x belongs to another user", ErrNotFound, id[:])
	}
	return s, nil
}

// GetSession returns session id whoever owns it (seed get_session), asking
// every shard. ErrNotFound if no shard holds it. Should several shards hold
// the id, the session of the smallest user id is returned.
func (r *Registry) GetSession(ctx context.Context, id keys.SessionID, opts ...ReadOption) (*records.SessionRecord, error) {
	cons, co := consistency(opts)
	found, err := fanLookup(ctx, r.c, fmt.Sprintf("session %x", id[:]), func(ctx context.Context, sid shard.ID) (*records.SessionRecord, error) {
		resp, err := unary(ctx, r.onShard(sid), co, rpc.RegistryClient.GetSession, &rpc.SessionRef{Target: r.c.shardTarget(ctx, sid), SessionId: id[:], Consistency: cons})
		if err != nil {
			return nil, err
		}
		return sessionFrom(resp.GetSession())
	})
	if err != nil {
		return nil, err
	}
	sortSessions(found)
	return found[0], nil
}

// UpdateSessionStatusOf sets the status of session id in user's shard and
// returns the updated session, or ErrNotFound. Retried when the outcome is
// unknown: setting a status twice is harmless.
func (r *Registry) UpdateSessionStatusOf(ctx context.Context, user keys.UserID, id keys.SessionID, s records.SessionStatus) (*records.SessionRecord, error) {
	if !s.Valid() {
		return nil, invalidf("session status %s", s)
	}
	resp, err := unary(ctx, r.routed(user), writeOnce, rpc.RegistryClient.UpdateSessionStatus, &rpc.UpdateSessionStatusRequest{Target: userTarget(user), SessionId: id[:], Status: uint32(s)})
	if err != nil {
		return nil, err
	}
	return sessionFrom(resp.GetSession())
}

// UpdateSessionStatus sets the status of session id whoever owns it (seed
// update_session_status): every shard is asked to update it, and the one
// holding it does (the others answer NotFound). ErrNotFound if no shard
// holds it. Once a shard has updated it, other shards' failures are
// ignored.
func (r *Registry) UpdateSessionStatus(ctx context.Context, id keys.SessionID, s records.SessionStatus) error {
	if !s.Valid() {
		return invalidf("session status %s", s)
	}
	_, err := fanLookup(ctx, r.c, fmt.Sprintf("session %x", id[:]), func(ctx context.Context, sid shard.ID) (*rpc.Session, error) {
		resp, err := unary(ctx, r.onShard(sid), writeOnce, rpc.RegistryClient.UpdateSessionStatus, &rpc.UpdateSessionStatusRequest{Target: r.c.shardTarget(ctx, sid), SessionId: id[:], Status: uint32(s)})
		return resp.GetSession(), err
	})
	return err
}

// ListSessionsByAgentOf returns the sessions of agent agentID that belong
// to user (from user's shard), ordered by session id, read page by page
// (pages.go).
func (r *Registry) ListSessionsByAgentOf(ctx context.Context, user keys.UserID, agentID keys.AgentID, opts ...ReadOption) ([]*records.SessionRecord, error) {
	return collectPages(ctx, "sessions of agent", func(ctx context.Context, p Page) ([]*records.SessionRecord, []byte, error) {
		return r.ListSessionsByAgentOfPage(ctx, user, agentID, p, opts...)
	})
}

// ListSessionsByAgentOfPage returns one page of the sessions of agent
// agentID that belong to user, ordered by session id, and the cursor of
// the next page (nil after the last). The page may hold fewer sessions
// than the limit, even none, while more follow.
func (r *Registry) ListSessionsByAgentOfPage(ctx context.Context, user keys.UserID, agentID keys.AgentID, p Page, opts ...ReadOption) ([]*records.SessionRecord, []byte, error) {
	ss, next, err := r.sessionsPage(ctx, r.routed(user), userTarget(user), agentID, p, opts)
	if err != nil {
		return nil, nil, err
	}
	// The shard's index is by agent id alone: drop other users' sessions
	// of the same agent id that share the shard (the server skips them
	// too).
	return slices.DeleteFunc(ss, func(s *records.SessionRecord) bool { return s.UserID != user }), next, nil
}

// sessionsPage reads one page of the by-agent index through st (routed by
// user or on a shard), for target (the user or the shard).
func (r *Registry) sessionsPage(ctx context.Context, st stub[rpc.RegistryClient], target *rpc.Target, agentID keys.AgentID, p Page, opts []ReadOption) ([]*records.SessionRecord, []byte, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, st, co, rpc.RegistryClient.ListSessionsByAgent, &rpc.ListSessionsByAgentRequest{Target: target, AgentId: agentID[:],
		Consistency: cons, Cursor: p.Cursor, Limit: p.limit()})
	if err != nil {
		return nil, nil, err
	}
	ss, err := allFrom(resp.GetSessions(), sessionFrom)
	if err != nil {
		return nil, nil, err
	}
	return ss, nextCursor(resp.GetNextCursor()), nil
}

// ListSessionsByAgent returns the sessions of agent agentID from every
// shard's by-agent index (seed list_sessions_by_agent), ordered by session
// id. Each shard is read page by page (pages.go).
func (r *Registry) ListSessionsByAgent(ctx context.Context, agentID keys.AgentID, opts ...ReadOption) ([]*records.SessionRecord, error) {
	all, err := fanCollect(ctx, r.c, func(ctx context.Context, id shard.ID) ([]*records.SessionRecord, error) {
		return collectPages(ctx, fmt.Sprintf("shard %d: sessions of agent", id), func(ctx context.Context, p Page) ([]*records.SessionRecord, []byte, error) {
			return r.sessionsPage(ctx, r.onShard(id), r.c.shardTarget(ctx, id), agentID, p, opts)
		})
	})
	if err != nil {
		return nil, err
	}
	sortSessions(all)
	return slices.CompactFunc(all, sameSession), nil
}

// PutUser creates or replaces a cached user. Retried when the outcome is
// unknown.
func (r *Registry) PutUser(ctx context.Context, u *records.UserRecord) error {
	if err := checkRecord(u, "user"); err != nil {
		return err
	}
	_, err := unary(ctx, r.routed(u.UserID), writeOnce, rpc.RegistryClient.PutUser, &rpc.PutUserRequest{User: rpc.UserToProto(u)})
	return err
}

// GetUser returns the cached user, or ErrNotFound.
func (r *Registry) GetUser(ctx context.Context, user keys.UserID, opts ...ReadOption) (*records.UserRecord, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, r.routed(user), co, rpc.RegistryClient.GetUser, &rpc.UserRef{UserId: user[:], Consistency: cons})
	if err != nil {
		return nil, err
	}
	u, err := rpc.UserFromProto(resp.GetUser())
	if err != nil {
		return nil, badResponse("user", err)
	}
	return u, nil
}
