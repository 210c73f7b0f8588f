package api

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
)

var poolsRoutingKey = []byte(keys.PoolsRoutingKey)

// maxTokenLen is the longest plaintext bot token: its sealed form (plus the
// 16-byte GCM tag) must fit records.MaxTokenCiphertextLen.
const maxTokenLen = records.MaxTokenCiphertextLen - 16

// inviteURLFormat is the Discord OAuth2 URL that adds a bot (application
// client_id) to a guild: the bot and applications.commands scopes, no
// permissions requested (the guild's admins grant roles afterwards).
const inviteURLFormat = "https://discord.com/oauth2/authorize?client_id=%s&scope=bot%%20applications.commands&permissions=0"

// poolsServer implements the Pools gRPC service (seed 004) on a Node. Every
// call routes by keys.PoolsRoutingKey. Rules that cross entities are checked in
// the state machine (fsm ops 30-38), atomically with the write; this layer
// validates input (InvalidArgument, nothing proposed), fixes times, seals
// tokens with the node's key ring before they enter the Raft log, and
// answers reads from the local replica after the read barrier.
//
// Tokens: plaintext exists here only between the request and Ring.Encrypt
// (RegisterBot, UpdateBot) and between Ring.Decrypt and the response
// (GetBotToken). No other response carries one (rpc.BotToProto never
// does), and no log line or error message includes one.
type poolsServer struct {
	rpc.UnimplementedPoolsServer
	*server
}

var _ rpc.PoolsServer = (*poolsServer)(nil)

// checkID validates a string id from a request.
func checkID(kind, id string, max int) error {
	if err := keys.ValidateStringID(kind, id, max); err != nil {
		return badInput(err)
	}
	return nil
}

func checkActor(actor string) error { return checkID("actor", actor, keys.MaxStringIDLen) }

// checkRef validates a request's actor and the id (of kind, at most max
// bytes) it names.
func checkRef(actor, kind, id string, max int) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	return checkID(kind, id, max)
}

// validRecord wraps a record's validation error as bad input.
func validRecord(err error) error {
	if err != nil {
		return badInput(err)
	}
	return nil
}

// poolForCreate builds the pool a CreatePool request asks for: owned by
// actor, created and updated at now.
func poolForCreate(actor string, p *rpc.Pool, now int64) (*records.Pool, error) {
	if err := checkActor(actor); err != nil {
		return nil, err
	}
	pool, err := rpc.PoolFromProto(p)
	if err != nil {
		return nil, badInput(err)
	}
	pool.OwnerUserID, pool.CreatedAt, pool.UpdatedAt = actor, now, now
	return pool, validRecord(pool.Validate())
}

// poolForUpdate builds the pool an UpdatePool request carries: its name,
// visibility and meta replace the stored ones. Owner and created_at are
// set to pass validation; the state machine keeps the stored ones.
func poolForUpdate(actor string, p *rpc.Pool, now int64) (*records.Pool, error) {
	return poolForCreate(actor, p, now)
}

// sealFunc seals a bot's plaintext token (secrets.Ring.Encrypt).
type sealFunc func(agentID, token string) (records.EncryptedToken, error)

// botFromRequest builds the bot a RegisterBot (tokenRequired) or UpdateBot
// request carries, sealing its token with seal. Every other field is
// validated before the token is sealed; an empty token in an update leaves
// Token zero (the state machine keeps the stored one). The contributor is
// actor (an update keeps the stored one). defaultPool replaces an empty
// pool_id.
func botFromRequest(actor string, p *rpc.Bot, now int64, tokenRequired bool, defaultPool string, seal sealFunc) (*records.Bot, error) {
	if err := checkActor(actor); err != nil {
		return nil, err
	}
	b, err := rpc.BotFromProto(p)
	if err != nil {
		return nil, badInput(err)
	}
	b.OwnerUserID, b.CreatedAt, b.UpdatedAt = actor, now, now
	if b.PoolID == "" {
		b.PoolID = defaultPool
	}
	if err := b.Validate(); err != nil {
		return nil, badInput(err)
	}
	token := p.GetToken()
	switch {
	case token == "" && tokenRequired:
		return nil, invalid("token is required")
	case token == "":
		return b, nil
	case len(token) > maxTokenLen:
		return nil, invalid("token is %d bytes, limit %d", len(token), maxTokenLen)
	}
	if seal == nil {
		return nil, cluster.ErrNoTokenKeys
	}
	if b.Token, err = seal(b.AgentID, token); err != nil {
		return nil, err
	}
	return b, validRecord(b.Token.Validate())
}

// runnerForHeartbeat builds the runner a Heartbeat stores: last_seen is
// the proposer's clock.
func runnerForHeartbeat(p *rpc.Runner, now int64) (*records.Runner, error) {
	r, err := rpc.RunnerFromProto(p)
	if err != nil {
		return nil, badInput(err)
	}
	r.LastSeen = now
	return r, validRecord(r.Validate())
}

// staleRunners returns the runners not seen for at least staleAfter ms at
// now (every runner when staleAfter is 0), sorted by runner id.
func staleRunners(rs []*records.Runner, now, staleAfter int64) []*records.Runner {
	out := make([]*records.Runner, 0, len(rs))
	for _, r := range rs {
		if staleAfter == 0 || now-r.LastSeen >= staleAfter {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *records.Runner) int { return strings.Compare(a.RunnerID, b.RunnerID) })
	return out
}

// validatePlanRequest checks a PlanDeploy request: desired at most
// MAX_AGENTS_PER_GUILD, well-formed ids.
func validatePlanRequest(req *rpc.PlanDeployRequest) error {
	if err := checkRef(req.GetActor(), "guild_id", req.GetGuildId(), keys.MaxStringIDLen); err != nil {
		return err
	}
	if d := req.GetDesired(); d > records.MaxAgentsPerGuild {
		return invalid("desired %d exceeds MAX_AGENTS_PER_GUILD %d", d, records.MaxAgentsPerGuild)
	}
	if p := req.GetPoolId(); p != "" {
		if err := checkID("pool_id", p, keys.MaxPoolIDLen); err != nil {
			return err
		}
	}
	for i, id := range req.GetPresentAgentIds() {
		if err := checkID(fmt.Sprintf("present_agent_ids[%d]", i), id, keys.MaxStringIDLen); err != nil {
			return err
		}
	}
	return nil
}

// inviteURL is the URL that adds the bot with application id clientID to a
// guild (inviteURLFormat).
func inviteURL(clientID string) string {
	return fmt.Sprintf(inviteURLFormat, url.QueryEscape(clientID))
}

// planDeploy computes a deploy plan (seed 004's buildDeployPlan) for a
// guild that wants desired agents and already has the agents present,
// drawing from bots, the bots of pool poolID: present counts the unique
// present ids, missing = max(0, desired-present), and the invites are the
// pool's active bots not present, in agent id order, at most missing of
// them. A bot without a client id cannot be invited and is skipped.
func planDeploy(poolID string, desired uint32, present []string, bots []*records.Bot) *rpc.DeployPlan {
	here := make(map[string]bool, len(present))
	for _, id := range present {
		here[id] = true
	}
	plan := &rpc.DeployPlan{PoolId: poolID, Desired: desired, Present: uint32(len(here))}
	if desired > plan.Present {
		plan.Missing = desired - plan.Present
	}
	sorted := slices.Clone(bots)
	slices.SortFunc(sorted, func(a, b *records.Bot) int { return strings.Compare(a.AgentID, b.AgentID) })
	for _, b := range sorted {
		if uint32(len(plan.Invites)) >= plan.Missing {
			break
		}
		if b.Status != records.BotActive || here[b.AgentID] || b.ClientID == "" {
			continue
		}
		plan.Invites = append(plan.Invites, &rpc.Invite{AgentId: b.AgentID, ClientId: b.ClientID, Url: inviteURL(b.ClientID)})
	}
	return plan
}

// permissionDenied answers a request on another user's private pool (or
// bot): PermissionDenied, never NotFound, for an entity that exists.
func permissionDenied(format string, a ...any) error {
	return status.Error(codes.PermissionDenied, fmt.Sprintf(format, a...))
}

// poolsReplica routes to the pools shard's local replica.
func (s *poolsServer) poolsReplica() (*replica.Replica, error) {
	_, r, err := s.route(poolsRoutingKey)
	return r, err
}

// view reads the pools shard: the read barrier for c, then fn on a view
// fenced on the pools' slot (server.read).
func (s *poolsServer) view(ctx context.Context, c rpc.Consistency, fn func(fsm.View) error) error {
	return s.read(ctx, poolsRoutingKey, c, fn)
}

// propose proposes cmd to the pools shard and returns the replica it went
// to, for reading the result back.
func (s *poolsServer) propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, *replica.Replica, error) {
	r, err := s.poolsReplica()
	if err != nil {
		return nil, nil, err
	}
	res, err := s.proposeTo(ctx, r.ID(), r, cmd)
	return res, r, err
}

// seal returns the node's token sealer, nil without a key ring.
func (s *poolsServer) seal() sealFunc {
	if ring := s.cfg.TokenKeys; ring != nil {
		return ring.Encrypt
	}
	return nil
}

// getPool reads pool id from v; NotFound when absent.
func (s *poolsServer) getPool(v fsm.View, id string) (*records.Pool, error) {
	var p records.Pool
	if err := getRecord(s.server, v, keys.Pool(id), &p); err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, status.Errorf(codes.NotFound, "pool %s not found", id)
		}
		return nil, err
	}
	return &p, nil
}

// visiblePool reads pool id and checks actor may see it.
func (s *poolsServer) visiblePool(v fsm.View, actor, id string) (*records.Pool, error) {
	p, err := s.getPool(v, id)
	if err != nil {
		return nil, err
	}
	if !p.UsableBy(actor) {
		return nil, permissionDenied("pool %s is private to its owner", id)
	}
	return p, nil
}

// getBot reads bot agentID from v; NotFound when absent.
func (s *poolsServer) getBot(v fsm.View, agentID string) (*records.Bot, error) {
	var b records.Bot
	if err := getRecord(s.server, v, keys.Bot(agentID), &b); err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, status.Errorf(codes.NotFound, "bot %s not found", agentID)
		}
		return nil, err
	}
	return &b, nil
}

// poolBots returns the bots of pool id, in agent id order.
func (s *poolsServer) poolBots(v fsm.View, id string) ([]*records.Bot, error) {
	prefix := keys.BotsByPoolPrefix(id)
	kvs, err := v.Scan(prefix, keys.PrefixEnd(prefix), 0)
	if err != nil {
		return nil, s.statusErr(v.Shard(), err)
	}
	out := make([]*records.Bot, 0, len(kvs))
	for _, kv := range kvs {
		b, err := s.indexedBot(v, kv.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// indexedBot reads the bot of a bots_by_pool index key.
func (s *poolsServer) indexedBot(v fsm.View, indexKey []byte) (*records.Bot, error) {
	_, agentID, err := keys.DecodeBotByPool(indexKey)
	if err != nil {
		return nil, s.statusErr(v.Shard(), err)
	}
	var b records.Bot
	if err := getRecord(s.server, v, keys.Bot(agentID), &b); err != nil {
		return nil, s.statusErr(v.Shard(), fmt.Errorf("bots_by_pool entry without its bot %s: %w", agentID, err))
	}
	return &b, nil
}

func (s *poolsServer) CreatePool(ctx context.Context, req *rpc.CreatePoolRequest) (*rpc.PoolResponse, error) {
	pool, err := poolForCreate(req.GetActor(), req.GetPool(), nowMs())
	if err != nil {
		return nil, s.statusErr(0, err)
	}
	if _, _, err := s.propose(ctx, &fsm.Command{Op: fsm.OpCreatePool, Pool: pool}); err != nil {
		return nil, err
	}
	return &rpc.PoolResponse{Pool: rpc.PoolToProto(pool)}, nil
}

// poolRead validates a pool reference and reads, after the read barrier:
// the pool, if actor may see it (visiblePool), then fn with the view and
// the pool. The answer, NotFound included, is fenced.
func (s *poolsServer) poolRead(ctx context.Context, actor, poolID string, c rpc.Consistency, fn func(fsm.View, *records.Pool) error) error {
	if err := checkRef(actor, "pool_id", poolID, keys.MaxPoolIDLen); err != nil {
		return s.statusErr(0, err)
	}
	return s.view(ctx, c, func(v fsm.View) error {
		p, err := s.visiblePool(v, actor, poolID)
		if err != nil {
			return err
		}
		return fn(v, p)
	})
}

func (s *poolsServer) GetPool(ctx context.Context, req *rpc.PoolRef) (*rpc.PoolResponse, error) {
	var pool *records.Pool
	err := s.poolRead(ctx, req.GetActor(), req.GetPoolId(), req.GetConsistency(), func(_ fsm.View, p *records.Pool) error {
		pool = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rpc.PoolResponse{Pool: rpc.PoolToProto(pool)}, nil
}

func (s *poolsServer) UpdatePool(ctx context.Context, req *rpc.UpdatePoolRequest) (*rpc.PoolResponse, error) {
	now := nowMs()
	pool, err := poolForUpdate(req.GetActor(), req.GetPool(), now)
	if err != nil {
		return nil, s.statusErr(0, err)
	}
	res, r, err := s.propose(ctx, &fsm.Command{Op: fsm.OpUpdatePool, Pool: pool, Actor: req.GetActor(), Time: now})
	if err != nil {
		return nil, err
	}
	var p records.Pool
	if err := appliedRecord(s.server, r.ID(), res, &p); err != nil {
		return nil, err
	}
	return &rpc.PoolResponse{Pool: rpc.PoolToProto(&p)}, nil
}

func (s *poolsServer) DeletePool(ctx context.Context, req *rpc.DeletePoolRequest) (*rpc.DeletePoolResponse, error) {
	if err := checkRef(req.GetActor(), "pool_id", req.GetPoolId(), keys.MaxPoolIDLen); err != nil {
		return nil, s.statusErr(0, err)
	}
	res, _, err := s.propose(ctx, &fsm.Command{Op: fsm.OpDeletePool, PoolID: req.GetPoolId(), Actor: req.GetActor(), Cascade: req.GetCascade()})
	if err != nil {
		return nil, err
	}
	return &rpc.DeletePoolResponse{BotsRemoved: uint32(res.Removed)}, nil
}

func (s *poolsServer) ListPools(ctx context.Context, req *rpc.ListPoolsRequest) (*rpc.PoolList, error) {
	if err := checkActor(req.GetActor()); err != nil {
		return nil, s.statusErr(0, err)
	}
	var resp *rpc.PoolList
	err := s.view(ctx, req.GetConsistency(), func(v fsm.View) error {
		pg, kvs, more, err := s.page(v, keys.TablePrefix(keys.TablePools), req.GetCursor(), req.GetLimit())
		if err != nil {
			return err
		}
		pools, next, err := collect(pg, kvs, more, func(kv fsm.KV) (*rpc.Pool, bool, error) {
			var p records.Pool
			if err := records.Decode(kv.Value, &p); err != nil {
				return nil, false, s.statusErr(v.Shard(), fmt.Errorf("stored pool %x: %w", kv.Key, err))
			}
			if !p.UsableBy(req.GetActor()) {
				return nil, false, nil
			}
			return rpc.PoolToProto(&p), true, nil
		})
		resp = &rpc.PoolList{Pools: pools, NextCursor: next}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *poolsServer) RegisterBot(ctx context.Context, req *rpc.RegisterBotRequest) (*rpc.BotResponse, error) {
	b, err := botFromRequest(req.GetActor(), req.GetBot(), nowMs(), true, records.DefaultPoolID, s.seal())
	if err != nil {
		return nil, s.statusErr(0, err)
	}
	res, r, err := s.propose(ctx, &fsm.Command{Op: fsm.OpRegisterBot, Bot: b, Actor: req.GetActor()})
	if err != nil {
		return nil, err
	}
	var stored records.Bot
	if err := appliedRecord(s.server, r.ID(), res, &stored); err != nil {
		return nil, err
	}
	return &rpc.BotResponse{Bot: rpc.BotToProto(&stored)}, nil
}

func (s *poolsServer) UpdateBot(ctx context.Context, req *rpc.UpdateBotRequest) (*rpc.BotResponse, error) {
	now := nowMs()
	// An empty pool_id keeps the bot's pool: fill in the stored one (the
	// state machine checks the actor's rights against it atomically).
	keepPool := ""
	if req.GetBot().GetPoolId() == "" {
		if err := checkID("agent_id", req.GetBot().GetAgentId(), keys.MaxStringIDLen); err != nil {
			return nil, s.statusErr(0, err)
		}
		err := s.view(ctx, rpc.Consistency_CONSISTENCY_LINEARIZABLE, func(v fsm.View) error {
			cur, err := s.getBot(v, req.GetBot().GetAgentId())
			if err == nil {
				keepPool = cur.PoolID
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	b, err := botFromRequest(req.GetActor(), req.GetBot(), now, false, keepPool, s.seal())
	if err != nil {
		return nil, s.statusErr(0, err)
	}
	res, r, err := s.propose(ctx, &fsm.Command{Op: fsm.OpUpdateBot, Bot: b, Actor: req.GetActor(), Time: now})
	if err != nil {
		return nil, err
	}
	var stored records.Bot
	if err := appliedRecord(s.server, r.ID(), res, &stored); err != nil {
		return nil, err
	}
	return &rpc.BotResponse{Bot: rpc.BotToProto(&stored)}, nil
}

// botRead validates a BotRef and reads, after the read barrier, the bot,
// then fn with the view and the bot. The answer, NotFound included, is
// fenced.
func (s *poolsServer) botRead(ctx context.Context, req *rpc.BotRef, fn func(fsm.View, *records.Bot) error) error {
	if err := checkRef(req.GetActor(), "agent_id", req.GetAgentId(), keys.MaxStringIDLen); err != nil {
		return s.statusErr(0, err)
	}
	return s.view(ctx, req.GetConsistency(), func(v fsm.View) error {
		b, err := s.getBot(v, req.GetAgentId())
		if err != nil {
			return err
		}
		return fn(v, b)
	})
}

// botPool reads the pool of bot b; nil if it is missing (a stored bot
// always has its pool; a missing one grants nothing).
func (s *poolsServer) botPool(v fsm.View, b *records.Bot) (*records.Pool, error) {
	p, err := s.getPool(v, b.PoolID)
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	return p, err
}

// botForReader is bot b of pool p (nil if missing) as actor may see it:
// without its token (rpc.BotToProto), and without its contributor's user
// id unless actor is that contributor or p's owner. The owner id of a
// public pool is public; the contributors of its bots are not
// (docs/security.md, "Pools: actors").
func botForReader(b *records.Bot, p *records.Pool, actor string) *rpc.Bot {
	out := rpc.BotToProto(b)
	if actor != b.OwnerUserID && (p == nil || actor != p.OwnerUserID) {
		out.OwnerUserId = ""
	}
	return out
}

// GetBot answers the bot without its token to its contributor and to
// whoever may see its pool (botForReader: the contributor's id only to the
// contributor and the pool's owner).
func (s *poolsServer) GetBot(ctx context.Context, req *rpc.BotRef) (*rpc.BotResponse, error) {
	var resp *rpc.BotResponse
	err := s.botRead(ctx, req, func(v fsm.View, b *records.Bot) error {
		p, err := s.botPool(v, b)
		if err != nil {
			return err
		}
		if b.OwnerUserID != req.GetActor() && (p == nil || !p.UsableBy(req.GetActor())) {
			return permissionDenied("bot %s is in pool %s, private to its owner", b.AgentID, b.PoolID)
		}
		resp = &rpc.BotResponse{Bot: botForReader(b, p, req.GetActor())}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *poolsServer) RemoveBot(ctx context.Context, req *rpc.BotRef) (*rpc.RemoveBotResponse, error) {
	if err := checkRef(req.GetActor(), "agent_id", req.GetAgentId(), keys.MaxStringIDLen); err != nil {
		return nil, s.statusErr(0, err)
	}
	if _, _, err := s.propose(ctx, &fsm.Command{Op: fsm.OpRemoveBot, BotID: req.GetAgentId(), Actor: req.GetActor()}); err != nil {
		return nil, err
	}
	return &rpc.RemoveBotResponse{}, nil
}

func (s *poolsServer) ListBots(ctx context.Context, req *rpc.ListBotsRequest) (*rpc.BotList, error) {
	var resp *rpc.BotList
	err := s.poolRead(ctx, req.GetActor(), req.GetPoolId(), req.GetConsistency(), func(v fsm.View, p *records.Pool) error {
		pg, kvs, more, err := s.page(v, keys.BotsByPoolPrefix(req.GetPoolId()), req.GetCursor(), req.GetLimit())
		if err != nil {
			return err
		}
		bots, next, err := collect(pg, kvs, more, func(kv fsm.KV) (*rpc.Bot, bool, error) {
			b, err := s.indexedBot(v, kv.Key)
			if err != nil {
				return nil, false, err
			}
			return botForReader(b, p, req.GetActor()), true, nil
		})
		resp = &rpc.BotList{Bots: bots, NextCursor: next}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// GetBotToken is the one call that answers a token: decrypted with the
// node's key ring, for the bot's contributor or its pool's owner. The
// caller needs pools:secrets (grpcPerms), and its actor is bound to its
// credential (bindActor).
func (s *poolsServer) GetBotToken(ctx context.Context, req *rpc.BotRef) (*rpc.GetBotTokenResponse, error) {
	var token string
	err := s.botRead(ctx, req, func(v fsm.View, b *records.Bot) error {
		if b.OwnerUserID != req.GetActor() {
			p, err := s.botPool(v, b)
			if err != nil {
				return err
			}
			if p == nil || p.OwnerUserID != req.GetActor() {
				return permissionDenied("only the contributor of bot %s or the owner of its pool may read its token", b.AgentID)
			}
		}
		if b.Token.IsZero() {
			return status.Errorf(codes.FailedPrecondition, "bot %s has no stored token", b.AgentID)
		}
		ring := s.cfg.TokenKeys
		if ring == nil {
			return s.statusErr(v.Shard(), cluster.ErrNoTokenKeys)
		}
		var err error
		if token, err = ring.Decrypt(b.AgentID, b.Token); err != nil {
			return s.statusErr(v.Shard(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rpc.GetBotTokenResponse{Token: token}, nil
}

func (s *poolsServer) Heartbeat(ctx context.Context, req *rpc.HeartbeatRequest) (*rpc.HeartbeatResponse, error) {
	rn, err := runnerForHeartbeat(req.GetRunner(), nowMs())
	if err != nil {
		return nil, s.statusErr(0, err)
	}
	if err := validateAttachLease(req.GetLease(), []byte(keys.PoolsRoutingKey)); err != nil {
		return nil, s.statusErr(0, err)
	}
	r, err := s.poolsReplica()
	if err != nil {
		return nil, err
	}
	// A heartbeat with a lease is a keep-alive, then the runner's write.
	if err := renewFor(ctx, s.server, r.ID(), r, req.GetLease()); err != nil {
		return nil, err
	}
	if _, err := s.proposeTo(ctx, r.ID(), r, &fsm.Command{Op: fsm.OpRunnerHeartbeat, Runner: rn, LeaseID: req.GetLease()}); err != nil {
		return nil, err
	}
	return &rpc.HeartbeatResponse{Runner: rpc.RunnerToProto(rn)}, nil
}

func (s *poolsServer) ListRunners(ctx context.Context, req *rpc.ListRunnersRequest) (*rpc.RunnerList, error) {
	if req.GetStaleAfterMs() < 0 {
		return nil, s.statusErr(0, invalid("stale_after_ms %d is negative", req.GetStaleAfterMs()))
	}
	var resp *rpc.RunnerList
	err := s.view(ctx, req.GetConsistency(), func(v fsm.View) error {
		pg, kvs, more, err := s.page(v, keys.TablePrefix(keys.TableRunners), req.GetCursor(), req.GetLimit())
		if err != nil {
			return err
		}
		now := nowMs()
		runners, next, err := collect(pg, kvs, more, func(kv fsm.KV) (*rpc.Runner, bool, error) {
			var rn records.Runner
			if err := records.Decode(kv.Value, &rn); err != nil {
				return nil, false, s.statusErr(v.Shard(), fmt.Errorf("stored runner %x: %w", kv.Key, err))
			}
			// Key order is runner id order, the order staleRunners sorts by.
			if len(staleRunners([]*records.Runner{&rn}, now, req.GetStaleAfterMs())) == 0 {
				return nil, false, nil
			}
			return rpc.RunnerToProto(&rn), true, nil
		})
		resp = &rpc.RunnerList{Runners: runners, NextCursor: next}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// guildPool returns the pool guild selected, "" if none.
func (s *poolsServer) guildPool(v fsm.View, guild string) (string, error) {
	var g records.GuildSettings
	err := getRecord(s.server, v, keys.GuildSettings(guild), &g)
	if status.Code(err) == codes.NotFound {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return g.SelectedPoolID, nil
}

func (s *poolsServer) GetGuildPool(ctx context.Context, req *rpc.GuildRef) (*rpc.GuildPoolResponse, error) {
	if err := checkID("guild_id", req.GetGuildId(), keys.MaxStringIDLen); err != nil {
		return nil, s.statusErr(0, err)
	}
	var pool string
	err := s.view(ctx, req.GetConsistency(), func(v fsm.View) (err error) {
		pool, err = s.guildPool(v, req.GetGuildId())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &rpc.GuildPoolResponse{GuildId: req.GetGuildId(), PoolId: pool}, nil
}

func (s *poolsServer) SetGuildPool(ctx context.Context, req *rpc.SetGuildPoolRequest) (*rpc.GuildPoolResponse, error) {
	if err := checkRef(req.GetActor(), "guild_id", req.GetGuildId(), keys.MaxStringIDLen); err != nil {
		return nil, s.statusErr(0, err)
	}
	if err := checkID("pool_id", req.GetPoolId(), keys.MaxPoolIDLen); err != nil {
		return nil, s.statusErr(0, err)
	}
	cmd := &fsm.Command{Op: fsm.OpSetGuildPool, GuildID: req.GetGuildId(), PoolID: req.GetPoolId(), Actor: req.GetActor(), Time: nowMs()}
	if _, _, err := s.propose(ctx, cmd); err != nil {
		return nil, err
	}
	return &rpc.GuildPoolResponse{GuildId: req.GetGuildId(), PoolId: req.GetPoolId()}, nil
}

// PlanDeploy is a linearizable read: the pool is the request's, else the
// guild's selection, else records.DefaultPoolID, and must be visible to
// the actor.
func (s *poolsServer) PlanDeploy(ctx context.Context, req *rpc.PlanDeployRequest) (*rpc.DeployPlan, error) {
	if err := validatePlanRequest(req); err != nil {
		return nil, s.statusErr(0, err)
	}
	var plan *rpc.DeployPlan
	err := s.view(ctx, rpc.Consistency_CONSISTENCY_LINEARIZABLE, func(v fsm.View) (err error) {
		poolID := req.GetPoolId()
		if poolID == "" {
			if poolID, err = s.guildPool(v, req.GetGuildId()); err != nil {
				return err
			}
		}
		if poolID == "" {
			poolID = records.DefaultPoolID
		}
		if _, err := s.visiblePool(v, req.GetActor(), poolID); err != nil {
			return err
		}
		bots, err := s.poolBots(v, poolID)
		if err != nil {
			return err
		}
		plan = planDeploy(poolID, req.GetDesired(), req.GetPresentAgentIds(), bots)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return plan, nil
}
