package client

// Pools is the agent pool control plane of seed 004: pools with their
// ownership and visibility, the bots contributed to them (each with an
// encrypted token), runners and their heartbeats, each guild's selected
// pool, and deploy planning.
//
//	pools := c.Pools()
//	p, err := pools.CreatePool(ctx, "user-1", client.PoolSpec{PoolID: "pool_alpha", Name: "alpha",
//		Visibility: records.VisibilityPrivate, Meta: `{"region":"eu"}`})
//	bot, err := pools.RegisterBot(ctx, "user-1", client.BotSpec{AgentID: "1203...", Token: tok,
//		ClientID: "1203...", PoolID: "pool_alpha"})
//	_, err = pools.GetPool(ctx, "user-2", "pool_alpha")
//	if errors.Is(err, client.ErrPermissionDenied) { ... } // private pool of user-1
//	plan, err := pools.PlanDeploy(ctx, "user-1", guildID, 49, "", presentAgentIDs)
//
// Placement: every entity lives in the shard of the routing key "pools"
// (docs/architecture.md, "Agent pools"), so every call goes to that one
// shard and each rule (agent_id unique across pools, no deleting a pool
// that has bots, ...) is one atomic state machine command.
//
// Actors: actor is the id of the user on whose behalf a call is made; the
// server checks ownership and visibility against it. A private pool of
// another user answers ErrPermissionDenied, never ErrNotFound, to every
// call that reads, changes or uses it (CreatePool of its id answers
// ErrAlreadyExists). With auth on, the actor is bound to the credential
// (docs/security.md, "Pools: actors"): a token made with
// `swarmnode token create --actor U` acts only as U (actor "" means U;
// another actor is ErrPermissionDenied); an unbound credential may name an
// actor only with the pools:impersonate role (or admin, or a node
// certificate). GetBotToken needs the pools:secrets role.
//
// User ids of others: a bot's contributor (BotInfo.OwnerUserID) is shown
// only to the contributor and to the owner of the bot's pool; other readers
// get "". A public pool's owner is shown to everyone.
//
// Tokens: a bot's token is plaintext only in the arguments of RegisterBot
// and UpdateBot and in the result of GetBotToken. The node that receives it
// encrypts it before it enters the Raft log; BotInfo has no token field,
// listings never carry one, and no error message of this package contains
// one.
//
// Retries when an attempt's outcome is unknown (leader lost, connection
// broken): reads, UpdatePool, UpdateBot, Heartbeat and SetGuildPool are
// retried (applying them twice is applying them once). CreatePool,
// RegisterBot, DeletePool and RemoveBot are NOT retried: a retry of an
// applied first attempt would answer ErrAlreadyExists or ErrNotFound and
// hide that this call succeeded, so they answer ErrOutcomeUnknown and the
// caller looks (GetPool, GetBot) to find out.
//
// Arguments are checked before sending (ids, enum values, JSON fields, the
// deploy limit), so bad input fails with ErrInvalidArgument without a round
// trip; the server checks again and has the last word.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
)

// poolsRoutingKey is the namespace key every pool-catalogue entity routes by.
var poolsRoutingKey = []byte(keys.PoolsRoutingKey)

// Pools is the agent pool store of seed 004. Safe for concurrent use.
type Pools struct{ c *Client }

// Pools returns the agent pool store of the cluster.
func (c *Client) Pools() *Pools { return &Pools{c: c} }

// PoolSpec is what a caller says about a pool in CreatePool and UpdatePool.
// The owner is the calling actor (CreatePool) and never changes; the
// timestamps are set by the server.
type PoolSpec struct {
	PoolID     string             // 1..64 bytes of printable ASCII, no spaces
	Name       string             // required, UTF-8, at most records.MaxNameLen bytes
	Visibility records.Visibility // VisibilityPublic or VisibilityPrivate
	Meta       string             // JSON, at most records.MaxJSONLen bytes; "" for none
}

// BotSpec is what a caller says about a bot in RegisterBot and UpdateBot.
// Token is the bot's plaintext token: required by RegisterBot; in UpdateBot
// "" keeps the stored token. The contributor (owner) is the calling actor
// of RegisterBot and never changes. String and GoString never show the
// token.
type BotSpec struct {
	AgentID  string // the bot's user id (a Discord snowflake), unique across pools
	Token    string
	ClientID string            // the bot's application id, used in invite URLs; "" = not invitable
	Tag      string            // at most records.MaxTagLen bytes
	Status   records.BotStatus // BotActive, BotInactive or BotDisabled
	// PoolID is the pool the bot is in. "" means records.DefaultPoolID in
	// RegisterBot, and the bot's current pool in UpdateBot.
	PoolID  string
	Profile string // JSON, at most records.MaxJSONLen bytes; "" for none
}

// String never shows the token (BotSpec values end up in logs and %v).
func (b BotSpec) String() string {
	tok := "none"
	if b.Token != "" {
		tok = "set"
	}
	return fmt.Sprintf("{AgentID:%s ClientID:%s Tag:%s Status:%d PoolID:%s Profile:%s Token:%s}",
		b.AgentID, b.ClientID, b.Tag, b.Status, b.PoolID, b.Profile, tok)
}

// GoString keeps %#v from printing the token too.
func (b BotSpec) GoString() string { return "client.BotSpec" + b.String() }

// BotInfo is a registered bot as the server shows it: everything but the
// token, of which only its presence is told.
type BotInfo struct {
	AgentID     string
	ClientID    string
	Tag         string
	Status      records.BotStatus
	PoolID      string
	OwnerUserID string // the actor who contributed the bot; "" to readers other than it and the pool's owner
	Profile     string
	HasToken    bool
	CreatedAt   int64 // Unix ms
	UpdatedAt   int64 // Unix ms
}

// DeployPlan says how to bring a guild to its desired number of agents:
// Missing = Desired - Present (not below 0), and Invites lists up to Missing
// active bots of the pool that are not already present, each with its
// invite URL. Fewer invites than Missing means the pool has no more
// available bots.
type DeployPlan struct {
	PoolID  string // the pool the plan draws from
	Desired int
	Present int
	Missing int
	Invites []Invite
}

// Invite is one bot to add to a guild.
type Invite struct {
	AgentID  string
	ClientID string
	URL      string
}

// shard is the pools service on the pools shard.
func (p *Pools) shard() stub[rpc.PoolsClient] {
	return stub[rpc.PoolsClient]{c: p.c, rk: poolsRoutingKey, newSC: rpc.NewPoolsClient}
}

// ---------------------------------------------------------------- checks

// checkID checks an id: 1..max bytes of printable ASCII without spaces
// (keys.ValidateStringID, whose messages never quote a bad id).
func checkID(field, id string, max int) error {
	if err := keys.ValidateStringID(field, id, max); err != nil {
		return invalidArg(err)
	}
	return nil
}

// checkActor checks an actor argument: a user id, or "" for the actor the
// credential is bound to (the server refuses "" from an unbound one).
func checkActor(actor string) error {
	if actor == "" {
		return nil
	}
	return checkID("actor", actor, keys.MaxStringIDLen)
}

// boundActor stands in for actor "" where a record is checked locally.
const boundActor = "bound-actor"

func ownerFor(actor string) string {
	if actor == "" {
		return boundActor
	}
	return actor
}

func checkPoolID(id string) error { return checkID("pool_id", id, keys.MaxPoolIDLen) }

// checkJSON checks an optional JSON field: "" or valid JSON of at most
// records.MaxJSONLen bytes.
func checkJSON(field, v string) error {
	if v == "" {
		return nil
	}
	if len(v) > records.MaxJSONLen {
		return invalidf("%s is %d bytes, at most %d", field, len(v), records.MaxJSONLen)
	}
	if !json.Valid([]byte(v)) {
		return invalidf("%s is not valid JSON", field)
	}
	return nil
}

// checkPoolSpec checks s as the pool record actor would own.
func checkPoolSpec(actor string, s PoolSpec) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	p := records.Pool{PoolID: s.PoolID, OwnerUserID: ownerFor(actor), Name: s.Name, Visibility: s.Visibility, Meta: s.Meta}
	if err := p.Validate(); err != nil {
		return invalidArg(err)
	}
	return nil
}

// checkBotSpec checks b as the bot record actor would contribute (without
// its token, which only has to be there when tokenRequired). Its messages
// never contain the token.
func checkBotSpec(actor string, b BotSpec, tokenRequired bool) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	if tokenRequired && b.Token == "" {
		return invalidf("token is empty")
	}
	r := records.Bot{AgentID: b.AgentID, ClientID: b.ClientID, Tag: b.Tag, Status: b.Status,
		PoolID: b.PoolID, OwnerUserID: ownerFor(actor), Profile: b.Profile}
	if r.PoolID == "" { // the server fills it in
		r.PoolID = records.DefaultPoolID
	}
	if err := r.Validate(); err != nil {
		return invalidArg(err)
	}
	return nil
}

// ---------------------------------------------------------------- conversions

func poolSpecToProto(s PoolSpec) *rpc.Pool {
	return &rpc.Pool{PoolId: s.PoolID, Name: s.Name, Visibility: uint32(s.Visibility), Meta: s.Meta}
}

func poolFrom(p *rpc.Pool) (*records.Pool, error) {
	if p == nil {
		return nil, badResponse("pool", fmt.Errorf("%w: pool is missing", records.ErrInvalid))
	}
	if p.GetVisibility() > 255 {
		return nil, badResponse("pool", fmt.Errorf("%w: visibility %d", records.ErrInvalid, p.GetVisibility()))
	}
	pool := &records.Pool{
		PoolID: p.GetPoolId(), OwnerUserID: p.GetOwnerUserId(), Name: p.GetName(),
		Visibility: records.Visibility(p.GetVisibility()), Meta: p.GetMeta(),
		CreatedAt: p.GetCreatedAt(), UpdatedAt: p.GetUpdatedAt(),
	}
	if err := pool.Validate(); err != nil {
		return nil, badResponse("pool", err)
	}
	return pool, nil
}

func botSpecToProto(b BotSpec) *rpc.Bot {
	return &rpc.Bot{AgentId: b.AgentID, Token: b.Token, ClientId: b.ClientID, Tag: b.Tag,
		Status: uint32(b.Status), PoolId: b.PoolID, Profile: b.Profile}
}

// botFrom converts and checks a bot message; a token in it, which the
// server never sends, is dropped. An empty owner_user_id is a contributor
// the reader may not see.
func botFrom(p *rpc.Bot) (*BotInfo, error) {
	if p == nil {
		return nil, badResponse("bot", fmt.Errorf("%w: bot is missing", records.ErrInvalid))
	}
	if p.GetStatus() > 255 {
		return nil, badResponse("bot", fmt.Errorf("%w: status %d", records.ErrInvalid, p.GetStatus()))
	}
	b := &BotInfo{
		AgentID: p.GetAgentId(), ClientID: p.GetClientId(), Tag: p.GetTag(),
		Status: records.BotStatus(p.GetStatus()), PoolID: p.GetPoolId(), OwnerUserID: p.GetOwnerUserId(),
		Profile: p.GetProfile(), HasToken: p.GetHasToken(), CreatedAt: p.GetCreatedAt(), UpdatedAt: p.GetUpdatedAt(),
	}
	r := records.Bot{AgentID: b.AgentID, ClientID: b.ClientID, Tag: b.Tag, Status: b.Status, PoolID: b.PoolID,
		OwnerUserID: ownerFor(b.OwnerUserID), Profile: b.Profile, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
	if err := r.Validate(); err != nil {
		return nil, badResponse("bot", err)
	}
	return b, nil
}

func runnerFrom(p *rpc.Runner) (*records.Runner, error) {
	if p == nil {
		return nil, badResponse("runner", fmt.Errorf("%w: runner is missing", records.ErrInvalid))
	}
	r := &records.Runner{RunnerID: p.GetRunnerId(), LastSeen: p.GetLastSeen(), Meta: p.GetMeta()}
	if err := r.Validate(); err != nil {
		return nil, badResponse("runner", err)
	}
	return r, nil
}

// ---------------------------------------------------------------- pools

// CreatePool creates pool p owned by actor and returns it with its
// timestamps. ErrAlreadyExists if the pool id is taken (whoever owns it);
// the default pool's id is reserved (ErrPermissionDenied).
// Not retried when the outcome is unknown (ErrOutcomeUnknown).
func (p *Pools) CreatePool(ctx context.Context, actor string, s PoolSpec) (*records.Pool, error) {
	if err := checkPoolSpec(actor, s); err != nil {
		return nil, err
	}
	resp, err := unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.CreatePool, &rpc.CreatePoolRequest{Actor: actor, Pool: poolSpecToProto(s)})
	if err != nil {
		return nil, err
	}
	return poolFrom(resp.GetPool())
}

// GetPool returns pool poolID as actor sees it: ErrNotFound if it does not
// exist, ErrPermissionDenied if it is another user's private pool.
func (p *Pools) GetPool(ctx context.Context, actor, poolID string, opts ...ReadOption) (*records.Pool, error) {
	if err := checkActor(actor); err != nil {
		return nil, err
	}
	if err := checkPoolID(poolID); err != nil {
		return nil, err
	}
	cons, co := consistency(opts)
	resp, err := unary(ctx, p.shard(), co, rpc.PoolsClient.GetPool, &rpc.PoolRef{Actor: actor, PoolId: poolID, Consistency: cons})
	if err != nil {
		return nil, err
	}
	return poolFrom(resp.GetPool())
}

// UpdatePool replaces the name, visibility and meta of pool s.PoolID and
// returns the updated pool; owner and created_at do not change. Only the
// owner may update (else ErrPermissionDenied; the default pool cannot be
// made private); ErrNotFound if it does not exist. Retried when the
// outcome is unknown.
func (p *Pools) UpdatePool(ctx context.Context, actor string, s PoolSpec) (*records.Pool, error) {
	if err := checkPoolSpec(actor, s); err != nil {
		return nil, err
	}
	resp, err := unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.UpdatePool, &rpc.UpdatePoolRequest{Actor: actor, Pool: poolSpecToProto(s)})
	if err != nil {
		return nil, err
	}
	return poolFrom(resp.GetPool())
}

// DeletePool deletes pool poolID and returns how many of its bots were
// removed with it. Only the owner may delete (else ErrPermissionDenied);
// the default pool cannot be deleted (ErrPermissionDenied, also for its
// owner). A pool that still has bots answers
// *PoolNotEmptyError unless cascade, which removes them in the same
// command. Not retried when the outcome is unknown (ErrOutcomeUnknown).
func (p *Pools) DeletePool(ctx context.Context, actor, poolID string, cascade bool) (removed int, err error) {
	if err := checkActor(actor); err != nil {
		return 0, err
	}
	if err := checkPoolID(poolID); err != nil {
		return 0, err
	}
	resp, err := unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.DeletePool, &rpc.DeletePoolRequest{Actor: actor, PoolId: poolID, Cascade: cascade})
	if err != nil {
		return 0, err
	}
	return int(resp.GetBotsRemoved()), nil
}

// ListPools returns the pools actor may see: every public pool and actor's
// own private ones, in pool id order, read page by page (pages.go).
func (p *Pools) ListPools(ctx context.Context, actor string, opts ...ReadOption) ([]*records.Pool, error) {
	return collectPages(ctx, "pools", func(ctx context.Context, pg Page) ([]*records.Pool, []byte, error) {
		return p.ListPoolsPage(ctx, actor, pg, opts...)
	})
}

// ListPoolsPage returns one page of the pools actor may see, in pool id
// order, and the cursor of the next page (nil after the last). The page
// may hold fewer pools than the limit, even none, while more follow.
func (p *Pools) ListPoolsPage(ctx context.Context, actor string, pg Page, opts ...ReadOption) ([]*records.Pool, []byte, error) {
	if err := checkActor(actor); err != nil {
		return nil, nil, err
	}
	cons, co := consistency(opts)
	resp, err := unary(ctx, p.shard(), co, rpc.PoolsClient.ListPools, &rpc.ListPoolsRequest{Actor: actor, Consistency: cons, Cursor: pg.Cursor, Limit: pg.limit()})
	if err != nil {
		return nil, nil, err
	}
	out := make([]*records.Pool, 0, len(resp.GetPools()))
	for _, pp := range resp.GetPools() {
		pool, err := poolFrom(pp)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, pool)
	}
	return out, nextCursor(resp.GetNextCursor()), nil
}

// ---------------------------------------------------------------- bots

// RegisterBot contributes bot b, owned by actor, to pool b.PoolID (the
// default pool when empty); the token is required. ErrNotFound if the pool does not exist,
// ErrPermissionDenied if it is another user's private pool,
// ErrAlreadyExists if the agent id is registered in any pool. A node
// without a key ring answers a gRPC FailedPrecondition status. Not retried
// when the outcome is unknown (ErrOutcomeUnknown): look with GetBot.
func (p *Pools) RegisterBot(ctx context.Context, actor string, b BotSpec) (*BotInfo, error) {
	if err := checkBotSpec(actor, b, true); err != nil {
		return nil, err
	}
	resp, err := unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.RegisterBot, &rpc.RegisterBotRequest{Actor: actor, Bot: botSpecToProto(b)})
	if err != nil {
		return nil, err
	}
	return botFrom(resp.GetBot())
}

// UpdateBot replaces bot b.AgentID's client id, tag, status and profile
// with b's, its pool when b.PoolID is not empty, and its token when
// b.Token is not empty (else the stored token stays). Allowed to the bot's contributor and its pool's
// owner (else ErrPermissionDenied); moving it to another pool needs the
// right to use that pool. ErrNotFound if the bot does not exist. Retried
// when the outcome is unknown.
func (p *Pools) UpdateBot(ctx context.Context, actor string, b BotSpec) (*BotInfo, error) {
	if err := checkBotSpec(actor, b, false); err != nil {
		return nil, err
	}
	resp, err := unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.UpdateBot, &rpc.UpdateBotRequest{Actor: actor, Bot: botSpecToProto(b)})
	if err != nil {
		return nil, err
	}
	return botFrom(resp.GetBot())
}

func (p *Pools) botRef(actor, agentID string) (*rpc.BotRef, error) {
	if err := checkActor(actor); err != nil {
		return nil, err
	}
	if err := checkID("agent_id", agentID, keys.MaxStringIDLen); err != nil {
		return nil, err
	}
	return &rpc.BotRef{Actor: actor, AgentId: agentID}, nil
}

// GetBot returns bot agentID without its token, or ErrNotFound. Its
// contributor always sees it; anyone else only if they may see its pool
// (else ErrPermissionDenied).
func (p *Pools) GetBot(ctx context.Context, actor, agentID string, opts ...ReadOption) (*BotInfo, error) {
	ref, err := p.botRef(actor, agentID)
	if err != nil {
		return nil, err
	}
	cons, co := consistency(opts)
	ref.Consistency = cons
	resp, err := unary(ctx, p.shard(), co, rpc.PoolsClient.GetBot, ref)
	if err != nil {
		return nil, err
	}
	return botFrom(resp.GetBot())
}

// RemoveBot removes bot agentID; allowed to its contributor and its pool's
// owner (else ErrPermissionDenied). ErrNotFound if it does not exist. Not
// retried when the outcome is unknown (ErrOutcomeUnknown).
func (p *Pools) RemoveBot(ctx context.Context, actor, agentID string) error {
	ref, err := p.botRef(actor, agentID)
	if err != nil {
		return err
	}
	_, err = unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.RemoveBot, ref)
	return err
}

// ListBots returns the bots of pool poolID, without tokens, in agent id
// order, read page by page (pages.go). The pool must be visible to actor:
// ErrNotFound if it does not exist, ErrPermissionDenied if it is another
// user's private pool.
func (p *Pools) ListBots(ctx context.Context, actor, poolID string, opts ...ReadOption) ([]*BotInfo, error) {
	return collectPages(ctx, "bots", func(ctx context.Context, pg Page) ([]*BotInfo, []byte, error) {
		return p.ListBotsPage(ctx, actor, poolID, pg, opts...)
	})
}

// ListBotsPage returns one page of the bots of pool poolID, as ListBots,
// and the cursor of the next page (nil after the last).
func (p *Pools) ListBotsPage(ctx context.Context, actor, poolID string, pg Page, opts ...ReadOption) ([]*BotInfo, []byte, error) {
	if err := checkActor(actor); err != nil {
		return nil, nil, err
	}
	if err := checkPoolID(poolID); err != nil {
		return nil, nil, err
	}
	cons, co := consistency(opts)
	resp, err := unary(ctx, p.shard(), co, rpc.PoolsClient.ListBots, &rpc.ListBotsRequest{Actor: actor, PoolId: poolID, Consistency: cons, Cursor: pg.Cursor, Limit: pg.limit()})
	if err != nil {
		return nil, nil, err
	}
	out := make([]*BotInfo, 0, len(resp.GetBots()))
	for _, b := range resp.GetBots() {
		info, err := botFrom(b)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, info)
	}
	return out, nextCursor(resp.GetNextCursor()), nil
}

// GetBotToken returns bot agentID's plaintext token, decrypted by the
// node that answers: the one call that returns a token. With auth on the
// caller needs the pools:secrets role. Allowed to the bot's contributor
// and its pool's owner (else ErrPermissionDenied);
// ErrNotFound if the bot does not exist. A gRPC FailedPrecondition status
// (not a *NotLeaderError) means the answering node cannot open the token:
// it has no key ring, or its ring lacks the key that sealed it. Always a
// linearizable read.
func (p *Pools) GetBotToken(ctx context.Context, actor, agentID string) (string, error) {
	ref, err := p.botRef(actor, agentID)
	if err != nil {
		return "", err
	}
	resp, err := unary(ctx, p.shard(), idempotent, rpc.PoolsClient.GetBotToken, ref)
	if err != nil {
		return "", err
	}
	return resp.GetToken(), nil
}

// ---------------------------------------------------------------- runners

// Heartbeat records that runner runnerID is alive: it creates or replaces
// the runner with meta (JSON, "" for none) and last_seen set to the
// server's clock, and returns it. Retried when the outcome is unknown.
// WithLease (a lease granted for the routing key "pools") makes it a
// keep-alive of the lease too, and attaches the runner to it: when the
// lease ends the runner is deleted. Without, the runner is detached from
// any lease (and stays until pruned). StartRunner does both for a runner.
func (p *Pools) Heartbeat(ctx context.Context, runnerID, meta string, opts ...WriteOption) (*records.Runner, error) {
	if err := checkID("runner_id", runnerID, keys.MaxStringIDLen); err != nil {
		return nil, err
	}
	if err := checkJSON("meta", meta); err != nil {
		return nil, err
	}
	o := writeOpts(opts)
	resp, err := unary(ctx, p.shard(), idempotent, rpc.PoolsClient.Heartbeat, &rpc.HeartbeatRequest{Runner: &rpc.Runner{RunnerId: runnerID, Meta: meta}, Lease: uint64(o.lease)})
	if err != nil {
		if o.lease != 0 {
			return nil, leaseErr(o.lease, err)
		}
		return nil, err
	}
	return runnerFrom(resp.GetRunner())
}

// StartRunner registers runner runnerID (seed 004) and keeps it alive:
// it grants a lease of ttl for the pools namespace, heartbeats with it
// once, then every third of ttl in the background. When the heartbeats
// stop (the process dies, Stop, or the lease is lost), the lease expires
// within ttl plus the shard leader's bound and the runner disappears by
// itself; Close deletes it at once (it revokes the lease). A failed first
// heartbeat revokes the lease and returns the error.
func (p *Pools) StartRunner(ctx context.Context, runnerID, meta string, ttl time.Duration) (*KeepAlive, error) {
	if err := checkID("runner_id", runnerID, keys.MaxStringIDLen); err != nil {
		return nil, err
	}
	if err := checkJSON("meta", meta); err != nil {
		return nil, err
	}
	return p.c.startLeasedHeartbeat(ctx, []byte(keys.PoolsRoutingKey), ttl, func(ctx context.Context, id LeaseID) error {
		_, err := p.Heartbeat(ctx, runnerID, meta, WithLease(id))
		return err
	})
}

// ListRunners returns every runner, in runner id order, read page by page
// (pages.go).
func (p *Pools) ListRunners(ctx context.Context, opts ...ReadOption) ([]*records.Runner, error) {
	return p.listRunners(ctx, 0, opts)
}

// ListStaleRunners returns the runners not seen for at least maxAge (at
// least 1ms; measured in whole milliseconds against the answering node's
// clock), in runner id order, read page by page.
func (p *Pools) ListStaleRunners(ctx context.Context, maxAge time.Duration, opts ...ReadOption) ([]*records.Runner, error) {
	if maxAge < time.Millisecond {
		return nil, invalidf("max age %v: want at least 1ms", maxAge)
	}
	return p.listRunners(ctx, maxAge.Milliseconds(), opts)
}

// ListRunnersPage returns one page of the runners, in runner id order, and
// the cursor of the next page (nil after the last): every runner when
// maxAge is 0, else those not seen for at least maxAge (at least 1ms),
// in which case the page may hold fewer runners than the limit, even
// none, while more follow.
func (p *Pools) ListRunnersPage(ctx context.Context, maxAge time.Duration, pg Page, opts ...ReadOption) ([]*records.Runner, []byte, error) {
	if maxAge != 0 && maxAge < time.Millisecond {
		return nil, nil, invalidf("max age %v: want 0 or at least 1ms", maxAge)
	}
	return p.runnersPage(ctx, maxAge.Milliseconds(), pg, opts)
}

func (p *Pools) listRunners(ctx context.Context, staleAfterMs int64, opts []ReadOption) ([]*records.Runner, error) {
	return collectPages(ctx, "runners", func(ctx context.Context, pg Page) ([]*records.Runner, []byte, error) {
		return p.runnersPage(ctx, staleAfterMs, pg, opts)
	})
}

func (p *Pools) runnersPage(ctx context.Context, staleAfterMs int64, pg Page, opts []ReadOption) ([]*records.Runner, []byte, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, p.shard(), co, rpc.PoolsClient.ListRunners, &rpc.ListRunnersRequest{StaleAfterMs: staleAfterMs, Consistency: cons, Cursor: pg.Cursor, Limit: pg.limit()})
	if err != nil {
		return nil, nil, err
	}
	rs, err := allFrom(resp.GetRunners(), runnerFrom)
	if err != nil {
		return nil, nil, err
	}
	return rs, nextCursor(resp.GetNextCursor()), nil
}

// ---------------------------------------------------------------- guilds

// GetGuildPool returns the pool guildID selected, or "" when it has not
// selected one (deploys then draw from records.DefaultPoolID).
func (p *Pools) GetGuildPool(ctx context.Context, guildID string, opts ...ReadOption) (string, error) {
	if err := checkID("guild_id", guildID, keys.MaxStringIDLen); err != nil {
		return "", err
	}
	cons, co := consistency(opts)
	resp, err := unary(ctx, p.shard(), co, rpc.PoolsClient.GetGuildPool, &rpc.GuildRef{GuildId: guildID, Consistency: cons})
	if err != nil {
		return "", err
	}
	return resp.GetPoolId(), nil
}

// SetGuildPool makes poolID guildID's selected pool. The pool must exist
// (ErrNotFound) and be visible to actor (ErrPermissionDenied for another
// user's private pool). Retried when the outcome is unknown.
func (p *Pools) SetGuildPool(ctx context.Context, actor, guildID, poolID string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	if err := checkID("guild_id", guildID, keys.MaxStringIDLen); err != nil {
		return err
	}
	if err := checkPoolID(poolID); err != nil {
		return err
	}
	_, err := unary(ctx, p.shard(), writeOnce, rpc.PoolsClient.SetGuildPool, &rpc.SetGuildPoolRequest{Actor: actor, GuildId: guildID, PoolId: poolID})
	return err
}

// PlanDeploy plans bringing guildID to desired agents (0..49,
// records.MaxAgentsPerGuild; more is ErrInvalidArgument) when the agents
// presentAgentIDs are already in it. The pool is poolID, else the guild's
// selection, else records.DefaultPoolID, and must be visible to actor.
// A read: nothing is stored.
func (p *Pools) PlanDeploy(ctx context.Context, actor, guildID string, desired int, poolID string, presentAgentIDs []string) (*DeployPlan, error) {
	if err := checkActor(actor); err != nil {
		return nil, err
	}
	if err := checkID("guild_id", guildID, keys.MaxStringIDLen); err != nil {
		return nil, err
	}
	if desired < 0 || desired > records.MaxAgentsPerGuild {
		return nil, invalidf("desired %d agents: want 0..%d", desired, records.MaxAgentsPerGuild)
	}
	if poolID != "" {
		if err := checkPoolID(poolID); err != nil {
			return nil, err
		}
	}
	for i, id := range presentAgentIDs {
		if err := checkID(fmt.Sprintf("present agent id %d", i), id, keys.MaxStringIDLen); err != nil {
			return nil, err
		}
	}
	resp, err := unary(ctx, p.shard(), idempotent, rpc.PoolsClient.PlanDeploy, &rpc.PlanDeployRequest{Actor: actor, GuildId: guildID,
		Desired: uint32(desired), PoolId: poolID, PresentAgentIds: presentAgentIDs})
	if err != nil {
		return nil, err
	}
	plan := &DeployPlan{PoolID: resp.GetPoolId(), Desired: int(resp.GetDesired()),
		Present: int(resp.GetPresent()), Missing: int(resp.GetMissing())}
	for _, inv := range resp.GetInvites() {
		plan.Invites = append(plan.Invites, Invite{AgentID: inv.GetAgentId(), ClientID: inv.GetClientId(), URL: inv.GetUrl()})
	}
	return plan, nil
}
