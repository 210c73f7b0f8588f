package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// This file holds the reference model of the agent pool ops (a literal
// transcription of the rules in docs/architecture.md, "Agent pools", over
// the model's Go map) and the random generator of such commands.

// applyPoolOp is the model of a validated pool command: it returns the
// number of bots a cascade removed, or a rejection, and changes m.kv only
// when it succeeds.
func (m *model) applyPoolOp(c *Command) (int, error) {
	kv := m.kv
	enc := func(r any) []byte {
		b, err := encMode.Marshal(r)
		if err != nil {
			panic(err)
		}
		return b
	}
	// pool returns the stored pool, nil if absent.
	pool := func(id string) (*records.Pool, error) {
		var p records.Pool
		found, err := modelRecord(m, keys.Pool(id), &p)
		if err != nil || !found {
			return nil, err
		}
		return &p, nil
	}
	bot := func(id string) (*records.Bot, error) {
		var b records.Bot
		found, err := modelRecord(m, keys.Bot(id), &b)
		if err != nil || !found {
			return nil, err
		}
		return &b, nil
	}
	usable := func(p *records.Pool, actor string) bool {
		return p.Visibility == records.VisibilityPublic || p.OwnerUserID == actor
	}
	// manages: the actor contributed the bot or owns its pool.
	manages := func(b *records.Bot, actor string) (bool, error) {
		if b.OwnerUserID == actor {
			return true, nil
		}
		p, err := pool(b.PoolID)
		if err != nil {
			return false, err
		}
		return p != nil && p.OwnerUserID == actor, nil
	}
	switch c.Op {
	case OpEnsureDefaultPool:
		p, err := pool(records.DefaultPoolID)
		switch {
		case err != nil:
			return 0, err
		case p == nil:
			kv[string(keys.Pool(records.DefaultPoolID))] = enc(&records.Pool{PoolID: "pool_goot27", OwnerUserID: "system",
				Name: "goot27", Visibility: records.VisibilityPublic, CreatedAt: c.Time, UpdatedAt: c.Time})
		case p.Visibility != records.VisibilityPublic:
			p.Visibility, p.UpdatedAt = records.VisibilityPublic, c.Time
			kv[string(keys.Pool(records.DefaultPoolID))] = enc(p)
		}
	case OpCreatePool:
		if _, ok := kv[string(keys.Pool(c.Pool.PoolID))]; ok {
			return 0, ErrAlreadyExists
		}
		if c.Pool.PoolID == "pool_goot27" {
			return 0, ErrPermissionDenied
		}
		kv[string(keys.Pool(c.Pool.PoolID))] = enc(c.Pool)
	case OpUpdatePool:
		p, err := pool(c.Pool.PoolID)
		if err != nil || p == nil {
			return 0, orNotFound(err)
		}
		if p.OwnerUserID != c.Actor {
			return 0, ErrPermissionDenied
		}
		if p.PoolID == "pool_goot27" && c.Pool.Visibility == records.VisibilityPrivate {
			return 0, ErrPermissionDenied
		}
		upd := records.Pool{PoolID: p.PoolID, OwnerUserID: p.OwnerUserID, Name: c.Pool.Name,
			Visibility: c.Pool.Visibility, Meta: c.Pool.Meta, CreatedAt: p.CreatedAt, UpdatedAt: c.Time}
		kv[string(keys.Pool(p.PoolID))] = enc(&upd)
	case OpDeletePool:
		p, err := pool(c.PoolID)
		if err != nil || p == nil {
			return 0, orNotFound(err)
		}
		if p.OwnerUserID != c.Actor || c.PoolID == "pool_goot27" {
			return 0, ErrPermissionDenied
		}
		prefix := string(keys.BotsByPoolPrefix(c.PoolID))
		var agents []string
		for k := range kv {
			if strings.HasPrefix(k, prefix) {
				agents = append(agents, k[len(prefix):])
			}
		}
		slices.Sort(agents)
		if len(agents) > 0 && !c.Cascade {
			return 0, &PoolNotEmptyError{PoolID: c.PoolID, Bots: len(agents)}
		}
		var gone []string // bots of this pool, deleted only after every check
		for _, a := range agents {
			b, err := bot(a)
			if err != nil {
				return 0, err
			}
			if b != nil && b.PoolID == c.PoolID {
				gone = append(gone, a)
			}
		}
		// Guild selections of the pool are cleared (checked before any
		// change: a corrupt record rejects the whole command).
		gprefix := string(keys.TablePrefix(keys.TableGuildSettings))
		cleared := map[string][]byte{}
		for k, v := range kv {
			if !strings.HasPrefix(k, gprefix) {
				continue
			}
			var g records.GuildSettings
			if err := records.Decode(v, &g); err != nil {
				return 0, fmt.Errorf("%w: guild settings %q: %v", ErrCorruptRecord, k, err)
			}
			if g.SelectedPoolID == c.PoolID {
				g.SelectedPoolID = ""
				cleared[k] = enc(&g)
			}
		}
		for k, v := range cleared {
			kv[k] = v
		}
		for _, a := range gone {
			delete(kv, string(keys.Bot(a)))
		}
		for _, a := range agents {
			delete(kv, prefix+a)
		}
		delete(kv, string(keys.Pool(c.PoolID)))
		return len(gone), nil
	case OpRegisterBot:
		p, err := pool(c.Bot.PoolID)
		if err != nil || p == nil {
			return 0, orNotFound(err)
		}
		if !usable(p, c.Actor) {
			return 0, ErrPermissionDenied
		}
		if _, ok := kv[string(keys.Bot(c.Bot.AgentID))]; ok {
			return 0, ErrAlreadyExists
		}
		kv[string(keys.Bot(c.Bot.AgentID))] = enc(c.Bot)
		kv[string(keys.BotByPool(c.Bot.PoolID, c.Bot.AgentID))] = []byte{}
	case OpUpdateBot:
		old, err := bot(c.Bot.AgentID)
		if err != nil || old == nil {
			return 0, orNotFound(err)
		}
		if ok, err := manages(old, c.Actor); err != nil || !ok {
			return 0, orDeniedModel(err)
		}
		moved := c.Bot.PoolID != old.PoolID
		if moved {
			p, err := pool(c.Bot.PoolID)
			if err != nil || p == nil {
				return 0, orNotFound(err)
			}
			if !usable(p, c.Actor) {
				return 0, ErrPermissionDenied
			}
		}
		upd := *c.Bot
		upd.OwnerUserID, upd.CreatedAt, upd.UpdatedAt = old.OwnerUserID, old.CreatedAt, c.Time
		if upd.Token.KeyID == "" && len(upd.Token.Nonce) == 0 && len(upd.Token.Ciphertext) == 0 {
			upd.Token = old.Token
		}
		if moved {
			delete(kv, string(keys.BotByPool(old.PoolID, c.Bot.AgentID)))
			kv[string(keys.BotByPool(upd.PoolID, c.Bot.AgentID))] = []byte{}
		}
		kv[string(keys.Bot(c.Bot.AgentID))] = enc(&upd)
	case OpRemoveBot:
		b, err := bot(c.BotID)
		if err != nil || b == nil {
			return 0, orNotFound(err)
		}
		if ok, err := manages(b, c.Actor); err != nil || !ok {
			return 0, orDeniedModel(err)
		}
		delete(kv, string(keys.Bot(c.BotID)))
		delete(kv, string(keys.BotByPool(b.PoolID, c.BotID)))
	case OpRunnerHeartbeat:
		kv[string(keys.Runner(c.Runner.RunnerID))] = enc(c.Runner)
	case OpSetGuildPool:
		p, err := pool(c.PoolID)
		if err != nil || p == nil {
			return 0, orNotFound(err)
		}
		if !usable(p, c.Actor) {
			return 0, ErrPermissionDenied
		}
		kv[string(keys.GuildSettings(c.GuildID))] = enc(&records.GuildSettings{GuildID: c.GuildID, SelectedPoolID: c.PoolID, UpdatedAt: c.Time})
	default:
		panic(fmt.Sprintf("model: op %s", c.Op))
	}
	return 0, nil
}

func orDeniedModel(err error) error {
	if err != nil {
		return err
	}
	return ErrPermissionDenied
}

// Small id spaces for pool commands, so that they collide: "p" is a prefix
// of "p1", two users own most pools, six agent ids.
var (
	poolIDs  = []string{records.DefaultPoolID, "p", "p1", "p2"}
	userIDs  = []string{"u0", "u1"}
	agentIDs = []string{"a0", "a1", "a2", "a3", "a4", "a5"}
	metas    = []string{"", `{"region":"eu"}`, `[1,2]`}
)

func poolRec(id, owner string, v records.Visibility) *records.Pool {
	return &records.Pool{PoolID: id, OwnerUserID: owner, Name: "pool " + id, Visibility: v, CreatedAt: 10, UpdatedAt: 10}
}

func token(n byte) records.EncryptedToken {
	return records.EncryptedToken{KeyID: "k1", Nonce: idBytes(n, 1, 12), Ciphertext: idBytes(n, 2, 17+int(n)%8)}
}

func botRec(agent, pool, owner string) *records.Bot {
	return &records.Bot{AgentID: agent, Token: token(agent[len(agent)-1]), ClientID: "c-" + agent, Tag: agent + "#0001",
		Status: records.BotActive, PoolID: pool, OwnerUserID: owner, CreatedAt: 20, UpdatedAt: 20}
}

// genPoolCmd returns a random pool command over small id spaces: mostly
// valid, some invalid (Validate rejects them).
func genPoolCmd(rng *rand.Rand) *Command {
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	now := 1 + rng.Int64N(1e12)
	user := func() string {
		if rng.IntN(12) == 0 {
			return records.SystemUserID
		}
		return pick(userIDs)
	}
	pool := func() string {
		if rng.IntN(8) == 0 {
			return records.DefaultPoolID
		}
		return pick(poolIDs[1:])
	}
	genPool := func() *records.Pool {
		p := poolRec(pool(), user(), records.Visibility(rng.IntN(2)))
		p.Meta, p.CreatedAt, p.UpdatedAt = pick(metas), now, now
		return p
	}
	genBot := func(owner string) *records.Bot {
		b := botRec(pick(agentIDs), pool(), owner)
		b.Status, b.Profile, b.CreatedAt, b.UpdatedAt = records.BotStatus(rng.IntN(3)), pick(metas), now, now
		b.Token = token(byte(rng.IntN(256)))
		return b
	}
	var c *Command
	switch rng.IntN(20) {
	case 0:
		c = &Command{Op: OpEnsureDefaultPool, Time: now}
	case 1, 2, 3:
		c = &Command{Op: OpCreatePool, Pool: genPool()}
	case 4, 5:
		c = &Command{Op: OpUpdatePool, Pool: genPool(), Actor: user(), Time: now}
	case 6, 7:
		c = &Command{Op: OpDeletePool, PoolID: pool(), Actor: user(), Cascade: rng.IntN(2) == 0}
	case 8, 9, 10, 11:
		actor := user()
		c = &Command{Op: OpRegisterBot, Bot: genBot(actor), Actor: actor}
	case 12, 13, 14:
		c = &Command{Op: OpUpdateBot, Bot: genBot(user()), Actor: user(), Time: now}
		if rng.IntN(2) == 0 {
			c.Bot.Token = records.EncryptedToken{} // keep the stored token
		}
	case 15, 16:
		c = &Command{Op: OpRemoveBot, BotID: pick(agentIDs), Actor: user()}
	case 17:
		c = &Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: fmt.Sprintf("r%d", rng.IntN(3)), LastSeen: now, Meta: pick(metas)}}
	default:
		c = &Command{Op: OpSetGuildPool, GuildID: fmt.Sprintf("g%d", rng.IntN(3)), PoolID: pool(), Actor: user(), Time: now}
	}
	if rng.IntN(12) == 0 {
		breakPoolCommand(rng, c)
	}
	return c
}

// breakPoolCommand makes c invalid in one of several ways.
func breakPoolCommand(rng *rand.Rand, c *Command) {
	switch rng.IntN(5) {
	case 0: // a field the op does not take, or a missing one
		if c.GuildID == "" {
			c.GuildID = "g0"
		} else {
			c.GuildID = ""
		}
	case 1: // a bad string id
		c.Actor = "u 0"
	case 2: // a bad record
		switch {
		case c.Pool != nil:
			c.Pool.Meta = "{"
		case c.Bot != nil:
			c.Bot.Token.Nonce = c.Bot.Token.Nonce[:0:0]
			c.Bot.Token.KeyID = "k"
		case c.Runner != nil:
			c.Runner.LastSeen = -1
		default:
			c.Time = -1
		}
	case 3: // rules of the op
		if c.Bot != nil {
			c.Bot.OwnerUserID = "someone-else"
			c.Bot.Token = records.EncryptedToken{}
		} else {
			c.Cascade = true
		}
	default: // time where none is taken, or none where one is
		if c.Time == 0 {
			c.Time = 1
		} else {
			c.Time = 0
		}
	}
}
