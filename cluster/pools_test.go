package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/secrets"
)

// Scenario tests of the agent pool store (client.Pools, seed 004) against
// an in-process cluster: the ownership and visibility rules as a table,
// PoolNotEmpty and cascade, the agent_id uniqueness race, deploy planning,
// runner heartbeats, the default pool across restarts, and token secrecy
// (data dirs, logs, error messages) with key rotation.

// The actors of the rules: poolsOwner owns the pools a case acts on.
const (
	poolsOwner = "u-owner"
	poolsOther = "u-other"
	poolsThird = "u-third"
)

// poolsRingText returns ring text with the given key ids, active first.
// Each key is derived from its id, so the same id is the same key in every
// ring built here.
func poolsRingText(ids ...string) string {
	var b strings.Builder
	for _, id := range ids {
		k := sha256.Sum256([]byte("swarmkv pools test key " + id))
		fmt.Fprintf(&b, "%s:%s\n", id, base64.StdEncoding.EncodeToString(k[:]))
	}
	return b.String()
}

func poolsRing(t testing.TB, ids ...string) *secrets.Ring {
	t.Helper()
	r, err := secrets.ParseRing(poolsRingText(ids...))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newPoolsCluster starts 3 nodes, 4 shards, every node with ring.
func newPoolsCluster(t *testing.T, ring *secrets.Ring, tweak func(*Config)) *testCluster {
	return newTestCluster(t, 3, 4, func(c *Config) {
		c.TokenKeys = ring
		if tweak != nil {
			tweak(c)
		}
	})
}

// poolsRestartAll stops every node, lets tweak change each config, starts
// them all again and waits until they are ready.
func poolsRestartAll(tc *testCluster, tweak func(*Config)) {
	tc.t.Helper()
	for i := range tc.nodes {
		tc.stop(i)
	}
	for i := range tc.cfgs {
		if tweak != nil {
			tweak(&tc.cfgs[i])
		}
		tc.start(i)
	}
	tc.waitReady()
}

// poolsTokens makes random-looking tokens from a seeded generator: no
// common prefix, no repeats, so a leaked token shows up verbatim even in a
// compressed block.
type poolsTokens struct{ rng *rand.Rand }

func newPoolsTokens(seed uint64) *poolsTokens {
	return &poolsTokens{rng: rand.New(rand.NewPCG(seed, 0x7043))}
}

func (g *poolsTokens) token(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return hex.EncodeToString(b)
}

// poolsRaw runs one raw RPC on the pools shard (to check what the server
// itself enforces and sends, past the client's own checks).
func poolsRaw(ctx context.Context, c *client.Client, call func(context.Context, rpc.PoolsClient) error) error {
	return c.CallShard(ctx, c.ShardOf([]byte("pools")), client.CallOptions{Idempotent: true},
		func(ctx context.Context, cc grpc.ClientConnInterface) error { return call(ctx, rpc.NewPoolsClient(cc)) })
}

func poolsIDs[T any](xs []T, id func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}

func botIDs(bs []*client.BotInfo) []string {
	return poolsIDs(bs, func(b *client.BotInfo) string { return b.AgentID })
}

func poolIDs(ps []*records.Pool) []string {
	return poolsIDs(ps, func(p *records.Pool) string { return p.PoolID })
}

func runnerIDs(rs []*records.Runner) []string {
	return poolsIDs(rs, func(r *records.Runner) string { return r.RunnerID })
}

// ---------------------------------------------------------------- rules

// poolsRuleEnv is one rule case's world: a fresh pool of poolsOwner with
// one bot of poolsOwner in it, and a guild without a selection.
type poolsRuleEnv struct {
	ctx   context.Context
	p     *client.Pools
	spec  client.PoolSpec
	pool  *records.Pool
	bot   string
	token string
	guild string
}

// poolsRuleOp is one operation of the rules table. do runs it as actor and
// checks its result when it succeeds; state checks, as poolsOwner, that the
// store shows the effect when done and no effect otherwise.
type poolsRuleOp struct {
	name  string
	do    func(e *poolsRuleEnv, actor string) error
	state func(e *poolsRuleEnv, done bool) error
}

func poolsRuleOps() []poolsRuleOp {
	unchangedPool := func(e *poolsRuleEnv, done bool) error {
		got, err := e.p.GetPool(e.ctx, poolsOwner, e.spec.PoolID)
		if err != nil {
			return err
		}
		if *got != *e.pool {
			return fmt.Errorf("pool is %+v, want %+v", got, e.pool)
		}
		return nil
	}
	botThere := func(e *poolsRuleEnv, id string, there bool) error {
		b, err := e.p.GetBot(e.ctx, poolsOwner, id)
		switch {
		case there && err != nil:
			return fmt.Errorf("bot %s: %w", id, err)
		case !there && !errors.Is(err, client.ErrNotFound):
			return fmt.Errorf("bot %s: got %+v, %v, want ErrNotFound", id, b, err)
		}
		return nil
	}
	return []poolsRuleOp{
		{name: "get pool",
			do: func(e *poolsRuleEnv, actor string) error {
				got, err := e.p.GetPool(e.ctx, actor, e.spec.PoolID)
				if err == nil && *got != *e.pool {
					return fmt.Errorf("pool is %+v, want %+v", got, e.pool)
				}
				return err
			},
			state: unchangedPool},
		{name: "update pool",
			do: func(e *poolsRuleEnv, actor string) error {
				s := e.spec
				s.Name, s.Meta = "renamed", `{"rev":2}`
				got, err := e.p.UpdatePool(e.ctx, actor, s)
				if err == nil && (got.Name != "renamed" || got.Meta != s.Meta || got.OwnerUserID != poolsOwner ||
					got.CreatedAt != e.pool.CreatedAt || got.Visibility != s.Visibility || got.UpdatedAt < e.pool.UpdatedAt) {
					return fmt.Errorf("updated pool is %+v (was %+v)", got, e.pool)
				}
				return err
			},
			state: func(e *poolsRuleEnv, done bool) error {
				if !done {
					return unchangedPool(e, done)
				}
				got, err := e.p.GetPool(e.ctx, poolsOwner, e.spec.PoolID)
				if err != nil {
					return err
				}
				if got.Name != "renamed" || got.OwnerUserID != poolsOwner || got.CreatedAt != e.pool.CreatedAt {
					return fmt.Errorf("pool after update is %+v", got)
				}
				return nil
			}},
		{name: "delete pool cascade",
			do: func(e *poolsRuleEnv, actor string) error {
				n, err := e.p.DeletePool(e.ctx, actor, e.spec.PoolID, true)
				if err == nil && n != 1 {
					return fmt.Errorf("removed %d bots, want 1", n)
				}
				return err
			},
			state: func(e *poolsRuleEnv, done bool) error {
				if !done {
					if err := unchangedPool(e, done); err != nil {
						return err
					}
					return botThere(e, e.bot, true)
				}
				if _, err := e.p.GetPool(e.ctx, poolsOwner, e.spec.PoolID); !errors.Is(err, client.ErrNotFound) {
					return fmt.Errorf("deleted pool: %v, want ErrNotFound", err)
				}
				return botThere(e, e.bot, false)
			}},
		{name: "delete pool no cascade",
			do: func(e *poolsRuleEnv, actor string) error {
				_, err := e.p.DeletePool(e.ctx, actor, e.spec.PoolID, false)
				var pne *client.PoolNotEmptyError
				if errors.As(err, &pne) && (pne.PoolID != e.spec.PoolID || pne.Bots != 1) {
					return fmt.Errorf("PoolNotEmptyError %+v, want pool %s with 1 bot", *pne, e.spec.PoolID)
				}
				return err
			},
			state: func(e *poolsRuleEnv, done bool) error {
				if err := unchangedPool(e, done); err != nil {
					return err
				}
				return botThere(e, e.bot, true)
			}},
		{name: "register bot",
			do: func(e *poolsRuleEnv, actor string) error {
				b, err := e.p.RegisterBot(e.ctx, actor, client.BotSpec{AgentID: e.bot + "-new", Token: e.token + "-new",
					ClientID: "cid-new", PoolID: e.spec.PoolID})
				if err == nil && (b.OwnerUserID != actor || b.PoolID != e.spec.PoolID || !b.HasToken || b.Status != records.BotActive) {
					return fmt.Errorf("registered bot is %+v", b)
				}
				return err
			},
			state: func(e *poolsRuleEnv, done bool) error { return botThere(e, e.bot+"-new", done) }},
		{name: "list bots",
			do: func(e *poolsRuleEnv, actor string) error {
				bs, err := e.p.ListBots(e.ctx, actor, e.spec.PoolID)
				if err == nil && (!slices.Equal(botIDs(bs), []string{e.bot}) || !bs[0].HasToken) {
					return fmt.Errorf("bots %v (has token %v), want [%s] with a token", botIDs(bs), len(bs) > 0 && bs[0].HasToken, e.bot)
				}
				// The contributor's id only to the contributor and the pool's owner.
				if err == nil && bs[0].OwnerUserID != shownContributor(actor) {
					return fmt.Errorf("bot %s listed to %s with contributor %q, want %q", e.bot, actor, bs[0].OwnerUserID, shownContributor(actor))
				}
				return err
			},
			state: unchangedPool},
		{name: "get bot",
			do: func(e *poolsRuleEnv, actor string) error {
				b, err := e.p.GetBot(e.ctx, actor, e.bot)
				if err == nil && (b.AgentID != e.bot || b.PoolID != e.spec.PoolID || b.OwnerUserID != shownContributor(actor) || !b.HasToken) {
					return fmt.Errorf("bot is %+v", b)
				}
				return err
			},
			state: unchangedPool},
		{name: "select guild pool",
			do: func(e *poolsRuleEnv, actor string) error {
				return e.p.SetGuildPool(e.ctx, actor, e.guild, e.spec.PoolID)
			},
			state: func(e *poolsRuleEnv, done bool) error {
				got, err := e.p.GetGuildPool(e.ctx, e.guild)
				want := ""
				if done {
					want = e.spec.PoolID
				}
				if err != nil || got != want {
					return fmt.Errorf("guild pool %q, %v; want %q", got, err, want)
				}
				return nil
			}},
		{name: "plan deploy",
			do: func(e *poolsRuleEnv, actor string) error {
				plan, err := e.p.PlanDeploy(e.ctx, actor, e.guild, 2, e.spec.PoolID, nil)
				if err == nil && (plan.PoolID != e.spec.PoolID || plan.Missing != 2 || len(plan.Invites) != 1 || plan.Invites[0].AgentID != e.bot) {
					return fmt.Errorf("plan %+v", plan)
				}
				return err
			},
			state: unchangedPool},
		{name: "get token",
			do: func(e *poolsRuleEnv, actor string) error {
				tok, err := e.p.GetBotToken(e.ctx, actor, e.bot)
				if err == nil && tok != e.token {
					return errors.New("GetBotToken returned another token")
				}
				return err
			},
			state: unchangedPool},
		{name: "update bot",
			do: func(e *poolsRuleEnv, actor string) error {
				b, err := e.p.UpdateBot(e.ctx, actor, client.BotSpec{AgentID: e.bot, ClientID: "cid-" + e.bot, Tag: "updated",
					Status: records.BotInactive, PoolID: e.spec.PoolID})
				if err == nil && (b.Tag != "updated" || b.Status != records.BotInactive || b.OwnerUserID != poolsOwner || !b.HasToken) {
					return fmt.Errorf("updated bot is %+v", b)
				}
				return err
			},
			state: func(e *poolsRuleEnv, done bool) error {
				b, err := e.p.GetBot(e.ctx, poolsOwner, e.bot)
				if err != nil {
					return err
				}
				if (b.Tag == "updated") != done {
					return fmt.Errorf("bot after update (done %t): %+v", done, b)
				}
				tok, err := e.p.GetBotToken(e.ctx, poolsOwner, e.bot)
				if err != nil || tok != e.token {
					return fmt.Errorf("token after an update without a token: changed or unreadable (%v)", err)
				}
				return nil
			}},
		{name: "remove bot",
			do:    func(e *poolsRuleEnv, actor string) error { return e.p.RemoveBot(e.ctx, actor, e.bot) },
			state: func(e *poolsRuleEnv, done bool) error { return botThere(e, e.bot, !done) }},
	}
}

// shownContributor is the contributor id a rule case's bot (contributed by
// poolsOwner, in a pool of poolsOwner) shows to actor: only its contributor
// and the pool's owner see it.
func shownContributor(actor string) string {
	if actor == poolsOwner {
		return poolsOwner
	}
	return ""
}

// wantRule is the expected outcome of a rule case.
type wantRule int

const (
	ruleOK wantRule = iota
	ruleDenied
	ruleNotEmpty
)

func (w wantRule) String() string { return [...]string{"ok", "PermissionDenied", "PoolNotEmpty"}[w] }

// poolsRuleTable: op -> {owner, other on a public pool, other on a private
// pool}. The owner's outcome is the same for both kinds.
var poolsRuleTable = map[string][3]wantRule{
	"get pool":               {ruleOK, ruleOK, ruleDenied},
	"update pool":            {ruleOK, ruleDenied, ruleDenied},
	"delete pool cascade":    {ruleOK, ruleDenied, ruleDenied},
	"delete pool no cascade": {ruleNotEmpty, ruleDenied, ruleDenied},
	"register bot":           {ruleOK, ruleOK, ruleDenied},
	"list bots":              {ruleOK, ruleOK, ruleDenied},
	"get bot":                {ruleOK, ruleOK, ruleDenied},
	"select guild pool":      {ruleOK, ruleOK, ruleDenied},
	"plan deploy":            {ruleOK, ruleOK, ruleDenied},
	"get token":              {ruleOK, ruleDenied, ruleDenied},
	"update bot":             {ruleOK, ruleDenied, ruleDenied},
	"remove bot":             {ruleOK, ruleDenied, ruleDenied},
}

func checkRule(err error, want wantRule) error {
	var pne *client.PoolNotEmptyError
	switch {
	case want == ruleOK && err == nil,
		want == ruleDenied && errors.Is(err, client.ErrPermissionDenied),
		want == ruleNotEmpty && errors.As(err, &pne):
		return nil
	case errors.Is(err, client.ErrNotFound) && want == ruleDenied:
		return fmt.Errorf("got ErrNotFound for an existing pool (%v), want %s", err, want)
	}
	return fmt.Errorf("got %v, want %s", err, want)
}

func TestPoolsStore(t *testing.T) {
	tc := newPoolsCluster(t, poolsRing(t, "k1"), nil)
	c := tc.client()
	ctx := ctxT(t, 4*time.Minute)
	p := c.Pools()
	toks := newPoolsTokens(4)
	waitDefaultPool(t, ctx, p)

	t.Run("rules", func(t *testing.T) {
		ops := poolsRuleOps()
		if len(ops) != len(poolsRuleTable) {
			t.Fatalf("%d ops, %d table rows", len(ops), len(poolsRuleTable))
		}
		n := 0
		for _, op := range ops {
			row, ok := poolsRuleTable[op.name]
			if !ok {
				t.Fatalf("op %q has no table row", op.name)
			}
			for _, private := range []bool{false, true} {
				for _, actor := range []string{poolsOwner, poolsOther} {
					n++
					want := row[0]
					kind, vis := "public", records.VisibilityPublic
					if private {
						kind, vis = "private", records.VisibilityPrivate
					}
					if actor == poolsOther {
						want = row[1]
						if private {
							want = row[2]
						}
					}
					t.Run(fmt.Sprintf("%s/%s/%s", op.name, actor, kind), func(t *testing.T) {
						e := &poolsRuleEnv{ctx: ctx, p: p, bot: fmt.Sprintf("rule-bot-%d", n), token: toks.token(20),
							guild: fmt.Sprintf("rule-guild-%d", n),
							spec:  client.PoolSpec{PoolID: fmt.Sprintf("rule-%s-%d", kind, n), Name: "rule pool", Visibility: vis, Meta: `{"case":` + strconv.Itoa(n) + `}`}}
						var err error
						if e.pool, err = p.CreatePool(ctx, poolsOwner, e.spec); err != nil {
							t.Fatal(err)
						}
						if e.pool.OwnerUserID != poolsOwner || e.pool.Visibility != vis || e.pool.Name != e.spec.Name || e.pool.Meta != e.spec.Meta {
							t.Fatalf("created pool %+v from %+v", e.pool, e.spec)
						}
						if _, err := p.RegisterBot(ctx, poolsOwner, client.BotSpec{AgentID: e.bot, Token: e.token,
							ClientID: "cid-" + e.bot, PoolID: e.spec.PoolID}); err != nil {
							t.Fatal(err)
						}
						err = op.do(e, actor)
						if cerr := checkRule(err, want); cerr != nil {
							t.Errorf("%s as %s on a %s pool: %v", op.name, actor, kind, cerr)
						}
						if serr := op.state(e, err == nil); serr != nil {
							t.Errorf("%s as %s on a %s pool (err %v): state: %v", op.name, actor, kind, err, serr)
						}
					})
				}
			}
		}
	})

	t.Run("not found", func(t *testing.T) {
		if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "nf-pool", Name: "nf"}); err != nil {
			t.Fatal(err)
		}
		const pool, bot = "nf-missing-pool", "nf-missing-bot"
		for name, err := range map[string]error{
			"get pool":          errOf(p.GetPool(ctx, poolsOther, pool)),
			"update pool":       errOf(p.UpdatePool(ctx, poolsOther, client.PoolSpec{PoolID: pool, Name: "x"})),
			"delete pool":       errOf(p.DeletePool(ctx, poolsOther, pool, true)),
			"register bot":      errOf(p.RegisterBot(ctx, poolsOther, client.BotSpec{AgentID: "nf-bot", Token: toks.token(20), PoolID: pool})),
			"list bots":         errOf(p.ListBots(ctx, poolsOther, pool)),
			"select guild pool": p.SetGuildPool(ctx, poolsOther, "nf-guild", pool),
			"plan deploy":       errOf(p.PlanDeploy(ctx, poolsOther, "nf-guild", 1, pool, nil)),
			"get bot":           errOf(p.GetBot(ctx, poolsOther, bot)),
			"get token":         errOf(p.GetBotToken(ctx, poolsOther, bot)),
			"update bot":        errOf(p.UpdateBot(ctx, poolsOther, client.BotSpec{AgentID: bot, PoolID: "nf-pool"})),
			"remove bot":        p.RemoveBot(ctx, poolsOther, bot),
		} {
			wantErr(t, name, err, client.ErrNotFound)
		}
		if _, err := p.GetBot(ctx, poolsOther, "nf-bot"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("a refused registration stored its bot: %v", err)
		}
	})

	t.Run("list pools", func(t *testing.T) {
		for _, s := range []struct {
			owner string
			spec  client.PoolSpec
		}{
			{poolsOwner, client.PoolSpec{PoolID: "lp-owner-pub", Name: "a"}},
			{poolsOwner, client.PoolSpec{PoolID: "lp-owner-priv", Name: "b", Visibility: records.VisibilityPrivate}},
			{poolsOther, client.PoolSpec{PoolID: "lp-other-pub", Name: "c"}},
			{poolsOther, client.PoolSpec{PoolID: "lp-other-priv", Name: "d", Visibility: records.VisibilityPrivate}},
		} {
			if _, err := p.CreatePool(ctx, s.owner, s.spec); err != nil {
				t.Fatal(err)
			}
		}
		for actor, want := range map[string][]string{
			poolsOwner: {"lp-other-pub", "lp-owner-priv", "lp-owner-pub"},
			poolsOther: {"lp-other-priv", "lp-other-pub", "lp-owner-pub"},
			poolsThird: {"lp-other-pub", "lp-owner-pub"},
		} {
			ps, err := p.ListPools(ctx, actor)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSortedFunc(ps, func(a, b *records.Pool) int { return strings.Compare(a.PoolID, b.PoolID) }) {
				t.Errorf("ListPools(%s) not in pool id order: %v", actor, poolIDs(ps))
			}
			var got []string
			for _, pool := range ps {
				if pool.Visibility == records.VisibilityPrivate && pool.OwnerUserID != actor {
					t.Errorf("ListPools(%s) shows private pool %s of %s", actor, pool.PoolID, pool.OwnerUserID)
				}
				if strings.HasPrefix(pool.PoolID, "lp-") {
					got = append(got, pool.PoolID)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("ListPools(%s): lp- pools %v, want %v", actor, got, want)
			}
			if !slices.Contains(poolIDs(ps), records.DefaultPoolID) {
				t.Errorf("ListPools(%s) lacks the default pool", actor)
			}
		}
		// Creating over an existing id fails, also for a user who cannot
		// see the pool, and changes nothing.
		wantErr(t, "create existing", errOf(p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "lp-owner-pub", Name: "z"})), client.ErrAlreadyExists)
		wantErr(t, "create over another's private", errOf(p.CreatePool(ctx, poolsOther, client.PoolSpec{PoolID: "lp-owner-priv", Name: "z"})), client.ErrAlreadyExists)
		if got, err := p.GetPool(ctx, poolsOwner, "lp-owner-priv"); err != nil || got.Name != "b" || got.OwnerUserID != poolsOwner {
			t.Errorf("pool after a refused create: %+v, %v", got, err)
		}
	})

	t.Run("contributors and pool owners", func(t *testing.T) {
		for _, s := range []struct {
			owner string
			spec  client.PoolSpec
		}{
			{poolsOwner, client.PoolSpec{PoolID: "cb-pub", Name: "p"}},
			{poolsOwner, client.PoolSpec{PoolID: "cb-owner-priv", Name: "q", Visibility: records.VisibilityPrivate}},
			{poolsOther, client.PoolSpec{PoolID: "cb-other-priv", Name: "r", Visibility: records.VisibilityPrivate}},
		} {
			if _, err := p.CreatePool(ctx, s.owner, s.spec); err != nil {
				t.Fatal(err)
			}
		}
		tok1, tok2 := toks.token(24), toks.token(24)
		spec := client.BotSpec{AgentID: "cb-bot", Token: tok1, ClientID: "cid-cb", Tag: "cb#0001", PoolID: "cb-pub", Profile: `{"lang":"en"}`}
		b, err := p.RegisterBot(ctx, poolsOther, spec)
		if err != nil {
			t.Fatal(err)
		}
		if b.OwnerUserID != poolsOther || b.Profile != spec.Profile || b.Tag != spec.Tag || b.ClientID != spec.ClientID || !b.HasToken {
			t.Errorf("registered %+v from %v", b, spec)
		}
		// Contributor and pool owner read the token; a third user may not.
		for _, actor := range []string{poolsOther, poolsOwner} {
			if got, err := p.GetBotToken(ctx, actor, "cb-bot"); err != nil || got != tok1 {
				t.Errorf("GetBotToken as %s: wrong token or %v", actor, err)
			}
		}
		wantErr(t, "token as third", errOf(p.GetBotToken(ctx, poolsThird, "cb-bot")), client.ErrPermissionDenied)
		wantErr(t, "update as third", errOf(p.UpdateBot(ctx, poolsThird, client.BotSpec{AgentID: "cb-bot", PoolID: "cb-pub"})), client.ErrPermissionDenied)
		wantErr(t, "remove as third", p.RemoveBot(ctx, poolsThird, "cb-bot"), client.ErrPermissionDenied)
		wantErr(t, "register again", errOf(p.RegisterBot(ctx, poolsOwner, spec)), client.ErrAlreadyExists)

		// The pool owner updates another's bot; without a token the token stays.
		upd := spec
		upd.Token, upd.Tag = "", "cb#0002"
		if b, err := p.UpdateBot(ctx, poolsOwner, upd); err != nil || b.Tag != "cb#0002" || b.OwnerUserID != poolsOther || !b.HasToken {
			t.Errorf("UpdateBot by the pool owner: %+v, %v", b, err)
		}
		if got, err := p.GetBotToken(ctx, poolsOther, "cb-bot"); err != nil || got != tok1 {
			t.Errorf("token after an update without a token: changed or %v", err)
		}
		// With a token, the token is replaced.
		upd.Token = tok2
		if _, err := p.UpdateBot(ctx, poolsOther, upd); err != nil {
			t.Fatal(err)
		}
		if got, err := p.GetBotToken(ctx, poolsOwner, "cb-bot"); err != nil || got != tok2 {
			t.Errorf("token after an update with a new token: not the new one, %v", err)
		}
		// Moving needs the right to use the target pool.
		mv := upd
		mv.Token, mv.PoolID = "", "cb-owner-priv"
		wantErr(t, "move into another's private pool", errOf(p.UpdateBot(ctx, poolsOther, mv)), client.ErrPermissionDenied)
		mv.PoolID = "cb-other-priv"
		if b, err := p.UpdateBot(ctx, poolsOther, mv); err != nil || b.PoolID != "cb-other-priv" {
			t.Fatalf("move into own private pool: %+v, %v", b, err)
		}
		if bs, err := p.ListBots(ctx, poolsOwner, "cb-pub"); err != nil || len(bs) != 0 {
			t.Errorf("old pool after the move: %v, %v", botIDs(bs), err)
		}
		if bs, err := p.ListBots(ctx, poolsOther, "cb-other-priv"); err != nil || !slices.Equal(botIDs(bs), []string{"cb-bot"}) {
			t.Errorf("new pool after the move: %v, %v", botIDs(bs), err)
		}
		// No longer in the owner's pool: the owner has no say over it.
		wantErr(t, "token as the former pool owner", errOf(p.GetBotToken(ctx, poolsOwner, "cb-bot")), client.ErrPermissionDenied)
		// The pool owner removes a bot someone else contributed.
		if _, err := p.RegisterBot(ctx, poolsThird, client.BotSpec{AgentID: "cb-bot2", Token: toks.token(20), PoolID: "cb-pub"}); err != nil {
			t.Fatal(err)
		}
		if err := p.RemoveBot(ctx, poolsOwner, "cb-bot2"); err != nil {
			t.Errorf("RemoveBot by the pool owner: %v", err)
		}
		wantErr(t, "removed bot", errOf(p.GetBot(ctx, poolsOwner, "cb-bot2")), client.ErrNotFound)
	})

	t.Run("listings carry no tokens", func(t *testing.T) {
		if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "nt-pool", Name: "nt"}); err != nil {
			t.Fatal(err)
		}
		tok := toks.token(24)
		if _, err := p.RegisterBot(ctx, poolsOwner, client.BotSpec{AgentID: "nt-bot", Token: tok, PoolID: "nt-pool"}); err != nil {
			t.Fatal(err)
		}
		var msgs []*rpc.Bot
		err := poolsRaw(ctx, c, func(ctx context.Context, pc rpc.PoolsClient) error {
			g, err := pc.GetBot(ctx, &rpc.BotRef{Actor: poolsOwner, AgentId: "nt-bot"})
			if err != nil {
				return err
			}
			l, err := pc.ListBots(ctx, &rpc.ListBotsRequest{Actor: poolsOwner, PoolId: "nt-pool"})
			if err != nil {
				return err
			}
			u, err := pc.UpdateBot(ctx, &rpc.UpdateBotRequest{Actor: poolsOwner, Bot: &rpc.Bot{AgentId: "nt-bot", PoolId: "nt-pool", Tag: "t"}})
			if err != nil {
				return err
			}
			msgs = append(append(msgs, g.GetBot(), u.GetBot()), l.GetBots()...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range msgs {
			if m.GetToken() != "" || !m.GetHasToken() {
				t.Errorf("bot message %d carries a token (%t) or says it has none (has_token %t)", i, m.GetToken() != "", m.GetHasToken())
			}
		}
	})

	t.Run("delete non-empty pool", func(t *testing.T) {
		if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "del-pool", Name: "del"}); err != nil {
			t.Fatal(err)
		}
		bots := []string{"del-a", "del-b", "del-c"}
		for i, id := range bots {
			actor := []string{poolsOwner, poolsOther, poolsThird}[i] // contributed by anyone
			if _, err := p.RegisterBot(ctx, actor, client.BotSpec{AgentID: id, Token: toks.token(20), PoolID: "del-pool"}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := p.DeletePool(ctx, poolsOwner, "del-pool", false)
		var pne *client.PoolNotEmptyError
		if !errors.As(err, &pne) || *pne != (client.PoolNotEmptyError{PoolID: "del-pool", Bots: 3}) {
			t.Fatalf("delete with bots: %v, want *PoolNotEmptyError{del-pool, 3}", err)
		}
		if bs, err := p.ListBots(ctx, poolsOwner, "del-pool"); err != nil || !slices.Equal(botIDs(bs), bots) {
			t.Fatalf("bots after a refused delete: %v, %v", botIDs(bs), err)
		}
		n, err := p.DeletePool(ctx, poolsOwner, "del-pool", true)
		if err != nil || n != 3 {
			t.Fatalf("cascade delete: removed %d, %v; want 3", n, err)
		}
		wantErr(t, "deleted pool", errOf(p.GetPool(ctx, poolsOwner, "del-pool")), client.ErrNotFound)
		wantErr(t, "bots of a deleted pool", errOf(p.ListBots(ctx, poolsOwner, "del-pool")), client.ErrNotFound)
		for _, id := range bots {
			wantErr(t, "bot "+id+" after cascade", errOf(p.GetBot(ctx, poolsOwner, id)), client.ErrNotFound)
		}
		// The agent ids are free again, and a new pool of the same id
		// starts empty.
		if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "del-pool", Name: "again"}); err != nil {
			t.Fatal(err)
		}
		if bs, err := p.ListBots(ctx, poolsOwner, "del-pool"); err != nil || len(bs) != 0 {
			t.Errorf("recreated pool lists %v, %v", botIDs(bs), err)
		}
		if _, err := p.RegisterBot(ctx, poolsOther, client.BotSpec{AgentID: "del-a", Token: toks.token(20), PoolID: "del-pool"}); err != nil {
			t.Errorf("agent id of a cascaded bot is not free: %v", err)
		}
		if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "del-empty", Name: "empty"}); err != nil {
			t.Fatal(err)
		}
		if n, err := p.DeletePool(ctx, poolsOwner, "del-empty", false); err != nil || n != 0 {
			t.Errorf("delete of an empty pool: %d, %v", n, err)
		}
		// The default pool cannot be deleted, by anyone.
		if _, err := p.DeletePool(ctx, records.SystemUserID, records.DefaultPoolID, true); err == nil {
			t.Errorf("the default pool was deleted by its owner")
		}
		wantErr(t, "delete default pool as a user", errOf(p.DeletePool(ctx, poolsOwner, records.DefaultPoolID, true)), client.ErrPermissionDenied)
		waitDefaultPool(t, ctx, p)
	})

	t.Run("one agent id, two pools, concurrently", func(t *testing.T) {
		for _, s := range []struct{ owner, id string }{{poolsOwner, "race-a"}, {poolsOther, "race-b"}} {
			if _, err := p.CreatePool(ctx, s.owner, client.PoolSpec{PoolID: s.id, Name: s.id}); err != nil {
				t.Fatal(err)
			}
		}
		for round := range 16 {
			agent := fmt.Sprintf("race-bot-%d", round)
			attempts := [2]struct{ actor, pool string }{{poolsOwner, "race-a"}, {poolsOther, "race-b"}}
			var errs [2]error
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, a := range attempts {
				tok := toks.token(20)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = p.RegisterBot(ctx, a.actor, client.BotSpec{AgentID: agent, Token: tok, PoolID: a.pool})
				}()
			}
			close(start)
			wg.Wait()
			won := -1
			for i, err := range errs {
				switch {
				case err == nil && won < 0:
					won = i
				case err == nil:
					t.Fatalf("round %d: both registrations of %s succeeded", round, agent)
				case !errors.Is(err, client.ErrAlreadyExists):
					t.Fatalf("round %d: the losing registration failed with %v, want ErrAlreadyExists", round, err)
				}
			}
			if won < 0 {
				t.Fatalf("round %d: neither registration succeeded: %v", round, errs)
			}
			// Read as the winner: only the contributor (or the pool's owner)
			// sees the contributor's id.
			b, err := p.GetBot(ctx, attempts[won].actor, agent)
			if err != nil || b.PoolID != attempts[won].pool || b.OwnerUserID != attempts[won].actor {
				t.Fatalf("round %d: bot %+v, %v; want it in %s by %s", round, b, err, attempts[won].pool, attempts[won].actor)
			}
			lose := attempts[1-won]
			if bs, err := p.ListBots(ctx, lose.actor, lose.pool); err != nil || slices.Contains(botIDs(bs), agent) {
				t.Fatalf("round %d: losing pool %s lists %v, %v", round, lose.pool, botIDs(bs), err)
			}
		}
	})

	t.Run("plan deploy", func(t *testing.T) { poolsPlanDeploy(t, ctx, c, toks) })
	t.Run("runners", func(t *testing.T) { poolsRunners(t, ctx, p) })
}

// waitDefaultPool waits until the default pool exists (every leader ensures
// it when it takes over) and checks it: public, owned by the system user.
func waitDefaultPool(t *testing.T, ctx context.Context, p *client.Pools) *records.Pool {
	t.Helper()
	var got *records.Pool
	waitFor(t, 20*time.Second, "default pool", func() (err error) {
		got, err = p.GetPool(ctx, poolsThird, records.DefaultPoolID)
		return err
	})
	if got.Visibility != records.VisibilityPublic || got.OwnerUserID != records.SystemUserID || got.PoolID != records.DefaultPoolID {
		t.Fatalf("default pool is %+v, want public and owned by %s", got, records.SystemUserID)
	}
	return got
}

func poolsPlanDeploy(t *testing.T, ctx context.Context, c *client.Client, toks *poolsTokens) {
	p := c.Pools()
	if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "plan-pool", Name: "plan"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "plan-priv", Name: "plan", Visibility: records.VisibilityPrivate}); err != nil {
		t.Fatal(err)
	}
	status := map[string]records.BotStatus{"plan-1": records.BotActive, "plan-2": records.BotActive, "plan-3": records.BotActive,
		"plan-4": records.BotActive, "plan-5": records.BotActive, "plan-6": records.BotInactive, "plan-7": records.BotDisabled}
	for id, s := range status {
		if _, err := p.RegisterBot(ctx, poolsOther, client.BotSpec{AgentID: id, Token: toks.token(20), ClientID: "app-" + id,
			Status: s, PoolID: "plan-pool"}); err != nil {
			t.Fatal(err)
		}
	}
	// Over the limit: refused by the client, and by the server itself.
	wantErr(t, "plan 50", errOf(p.PlanDeploy(ctx, poolsOwner, "g-plan", records.MaxAgentsPerGuild+1, "plan-pool", nil)), client.ErrInvalidArgument)
	raw := poolsRaw(ctx, c, func(ctx context.Context, pc rpc.PoolsClient) error {
		_, err := pc.PlanDeploy(ctx, &rpc.PlanDeployRequest{Actor: poolsOwner, GuildId: "g-plan", Desired: 50, PoolId: "plan-pool"})
		return err
	})
	wantErr(t, "plan 50, server", raw, client.ErrInvalidArgument)

	// check checks a plan's figures and that it invites n distinct bots,
	// each one of from.
	check := func(what string, plan *client.DeployPlan, err error, pool string, desired, present, missing, n int, from []string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if plan.PoolID != pool || plan.Desired != desired || plan.Present != present || plan.Missing != missing {
			t.Errorf("%s: plan {pool %s desired %d present %d missing %d}, want {%s %d %d %d}",
				what, plan.PoolID, plan.Desired, plan.Present, plan.Missing, pool, desired, present, missing)
		}
		var got []string
		for _, inv := range plan.Invites {
			got = append(got, inv.AgentID)
			if inv.ClientID != "app-"+inv.AgentID || inv.URL == "" || !strings.Contains(inv.URL, inv.ClientID) {
				t.Errorf("%s: invite %+v: want client id app-%s and a URL naming it", what, inv, inv.AgentID)
			}
		}
		slices.Sort(got)
		if len(got) != n || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Errorf("%s: invites %v, want %d distinct of %v", what, got, n, from)
		}
		for _, id := range got {
			if !slices.Contains(from, id) {
				t.Errorf("%s: invites %v, want only from %v", what, got, from)
			}
		}
	}
	plan, err := p.PlanDeploy(ctx, poolsOwner, "g-plan", records.MaxAgentsPerGuild, "plan-pool", []string{"plan-1", "plan-2", "elsewhere-9"})
	check("49 with 3 present", plan, err, "plan-pool", 49, 3, 46, 3, []string{"plan-3", "plan-4", "plan-5"})
	plan, err = p.PlanDeploy(ctx, poolsOwner, "g-plan", 3, "plan-pool", []string{"plan-1"})
	check("3 with 1 present", plan, err, "plan-pool", 3, 1, 2, 2, []string{"plan-2", "plan-3", "plan-4", "plan-5"})
	plan, err = p.PlanDeploy(ctx, poolsOther, "g-plan", 2, "plan-pool", []string{"plan-1", "plan-2", "plan-3"})
	check("more present than desired", plan, err, "plan-pool", 2, 3, 0, 0, nil)
	plan, err = p.PlanDeploy(ctx, poolsOther, "g-plan", 0, "plan-pool", nil)
	check("0 desired", plan, err, "plan-pool", 0, 0, 0, 0, nil)

	// Without a pool: the guild's selection, else the default pool.
	plan, err = p.PlanDeploy(ctx, poolsOther, "g-plan", 1, "", nil)
	if err != nil || plan.PoolID != records.DefaultPoolID {
		t.Errorf("no pool, no selection: %+v, %v; want the default pool", plan, err)
	}
	if err := p.SetGuildPool(ctx, poolsOther, "g-plan", "plan-pool"); err != nil {
		t.Fatal(err)
	}
	plan, err = p.PlanDeploy(ctx, poolsOther, "g-plan", 5, "", []string{"plan-5"})
	check("guild's selection", plan, err, "plan-pool", 5, 1, 4, 4, []string{"plan-1", "plan-2", "plan-3", "plan-4"})
	// A selection the actor may not see is refused like a named pool.
	if err := p.SetGuildPool(ctx, poolsOwner, "g-plan-priv", "plan-priv"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "plan from another's private selection", errOf(p.PlanDeploy(ctx, poolsOther, "g-plan-priv", 1, "", nil)), client.ErrPermissionDenied)
	wantErr(t, "plan from another's private pool", errOf(p.PlanDeploy(ctx, poolsOther, "g-plan", 1, "plan-priv", nil)), client.ErrPermissionDenied)
	plan, err = p.PlanDeploy(ctx, poolsOwner, "g-plan-priv", 1, "", nil)
	check("owner's private selection", plan, err, "plan-priv", 1, 0, 1, 0, nil)
}

func poolsRunners(t *testing.T, ctx context.Context, p *client.Pools) {
	const maxAge = 300 * time.Millisecond
	before := time.Now().UnixMilli()
	r1, err := p.Heartbeat(ctx, "runner-1", `{"v":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if r1.RunnerID != "runner-1" || r1.Meta != `{"v":1}` || r1.LastSeen < before {
		t.Fatalf("heartbeat: %+v (sent after %d)", r1, before)
	}
	// runner-1 becomes stale: wait for it, then check the lower bound.
	var stale []*records.Runner
	waitFor(t, 10*time.Second, "runner-1 stale", func() (err error) {
		if stale, err = p.ListStaleRunners(ctx, maxAge); err != nil {
			return err
		}
		if !slices.Contains(runnerIDs(stale), "runner-1") {
			return fmt.Errorf("stale runners %v", runnerIDs(stale))
		}
		return nil
	})
	if now := time.Now().UnixMilli(); now-r1.LastSeen < maxAge.Milliseconds() {
		t.Errorf("runner-1 listed stale %d ms after its heartbeat, max age %v", now-r1.LastSeen, maxAge)
	}
	// A fresh runner is not stale for an hour; a second heartbeat of
	// runner-1 moves its last_seen forward and replaces its meta.
	r2, err := p.Heartbeat(ctx, "runner-2", "")
	if err != nil {
		t.Fatal(err)
	}
	r1b, err := p.Heartbeat(ctx, "runner-1", `{"v":2}`)
	if err != nil {
		t.Fatal(err)
	}
	if r1b.LastSeen < r1.LastSeen+maxAge.Milliseconds() || r1b.Meta != `{"v":2}` {
		t.Errorf("second heartbeat: %+v after %+v", r1b, r1)
	}
	stale, err = p.ListStaleRunners(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ids := runnerIDs(stale); slices.Contains(ids, "runner-1") || slices.Contains(ids, "runner-2") {
		t.Errorf("stale for an hour: %v", ids)
	}
	all, err := p.ListRunners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]records.Runner{}
	for _, r := range all {
		if _, dup := got[r.RunnerID]; dup {
			t.Errorf("runner %s listed twice", r.RunnerID)
		}
		got[r.RunnerID] = *r
	}
	if got["runner-1"] != *r1b || got["runner-2"] != *r2 {
		t.Errorf("ListRunners: %+v, want runner-1 %+v and runner-2 %+v", all, r1b, r2)
	}
	stale, err = p.ListStaleRunners(ctx, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, r := range stale {
		if now-r.LastSeen < 1 {
			t.Errorf("runner %s stale at 1ms with last_seen %d, now %d", r.RunnerID, r.LastSeen, now)
		}
	}
	wantErr(t, "stale with max age 0", errOf(p.ListStaleRunners(ctx, 0)), client.ErrInvalidArgument)
	wantErr(t, "heartbeat with bad meta", errOf(p.Heartbeat(ctx, "runner-3", "{")), client.ErrInvalidArgument)
}

// ---------------------------------------------------------------- default pool

// TestPoolsDefaultPool: pool_goot27 exists and is public after start, after
// its owner made it private and every node restarted, and after a rolling
// restart; it is the same pool throughout (created_at unchanged).
func TestPoolsDefaultPool(t *testing.T) {
	tc := newPoolsCluster(t, poolsRing(t, "k1"), nil)
	ctx := ctxT(t, 3*time.Minute)
	p := tc.client().Pools()
	first := waitDefaultPool(t, ctx, p)
	if first.Name != records.DefaultPoolName {
		t.Errorf("default pool name %q, want %q", first.Name, records.DefaultPoolName)
	}
	if _, err := p.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "dp-mine", Name: "mine", Visibility: records.VisibilityPrivate}); err != nil {
		t.Fatal(err)
	}
	countDefault := func(p *client.Pools) {
		t.Helper()
		ps, err := p.ListPools(ctx, poolsOwner)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, pool := range ps {
			if pool.PoolID == records.DefaultPoolID {
				n++
			}
		}
		if n != 1 || !slices.Contains(poolIDs(ps), "dp-mine") {
			t.Fatalf("pools %v: want the default pool once and dp-mine", poolIDs(ps))
		}
	}
	countDefault(p)

	// Its owner makes it private: users no longer see it, until the next
	// leader ensures it public again.
	s := client.PoolSpec{PoolID: records.DefaultPoolID, Name: first.Name, Visibility: records.VisibilityPrivate, Meta: first.Meta}
	madePrivate := false
	switch _, err := p.UpdatePool(ctx, records.SystemUserID, s); {
	case errors.Is(err, client.ErrPermissionDenied):
		// The server keeps it public itself; then only the restarts are
		// left to check.
		t.Logf("making the default pool private: %v", err)
		waitDefaultPool(t, ctx, p)
	case err != nil:
		t.Fatalf("making the default pool private: %v, want success or ErrPermissionDenied", err)
	default:
		madePrivate = true
		wantErr(t, "private default pool", errOf(p.GetPool(ctx, poolsOther, records.DefaultPoolID)), client.ErrPermissionDenied)
	}

	poolsRestartAll(tc, nil)
	p = tc.client().Pools()
	got := waitDefaultPool(t, ctx, p)
	if got.CreatedAt != first.CreatedAt {
		t.Errorf("default pool recreated at restart: created_at %d, was %d", got.CreatedAt, first.CreatedAt)
	}
	if madePrivate && got.UpdatedAt < first.UpdatedAt {
		t.Errorf("default pool updated_at went back: %d < %d", got.UpdatedAt, first.UpdatedAt)
	}
	countDefault(p)

	for i := range tc.nodes { // rolling restart: leadership moves around
		tc.stop(i)
		tc.start(i)
		tc.waitReady()
	}
	p = tc.client().Pools()
	got = waitDefaultPool(t, ctx, p)
	if got.CreatedAt != first.CreatedAt {
		t.Errorf("default pool recreated at a rolling restart: created_at %d, was %d", got.CreatedAt, first.CreatedAt)
	}
	countDefault(p)
}
