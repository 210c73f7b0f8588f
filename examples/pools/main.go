// Command pools runs seed 004's agent pool lifecycle against a running
// cluster through the Go client (c.Pools()): public and private pools,
// bots contributed to them, a guild's pool selection, deploy planning
// (MAX_AGENTS_PER_GUILD = 49), runner heartbeats and the stale-runner list,
// and deleting a pool that still has bots. Two users take part: --actor
// owns the pools, --other is anyone else. It prints one line per step,
// checks every ownership and visibility rule on the way, exits 1 on the
// first mismatch and prints "all checks passed" when everything held.
//
//	go run ./examples/pools --endpoints 127.0.0.1:17100,127.0.0.1:27100
//
// The nodes need a bot-token key ring (--token-keys-file or
// SWARM_TOKEN_KEYS; see README.md). Pool, bot, guild and runner ids are
// fresh on every run, so the program can run any number of times against
// the same cluster; it deletes its pools and bots and leaves its runners
// and guild settings behind. Tokens are random, never printed.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
)

var (
	timeout    time.Duration
	staleAfter time.Duration
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of one or more nodes")
	actor := flag.String("actor", "alice", "user id of the pool owner")
	other := flag.String("other", "bob", "user id of another user")
	flag.DurationVar(&timeout, "timeout", 30*time.Second, "deadline of connecting and of each step group")
	flag.DurationVar(&staleAfter, "stale-after", time.Second, "max age for the stale-runner list (the program waits a little longer than this)")
	flag.Parse()
	if *actor == *other {
		fmt.Fprintln(os.Stderr, "pools: --actor and --other must differ")
		os.Exit(2)
	}

	var eps []string
	for _, e := range strings.Split(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	ctx, cancel := callCtx()
	c, err := client.New(ctx, client.Config{Endpoints: eps})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pools: connect to %v: %v\n", eps, err)
		os.Exit(2)
	}
	defer c.Close()
	fmt.Printf("connected to %v: %d shards, pools in shard %d\n", eps, c.Map().NumShards, c.ShardOf([]byte("pools")))

	run := strings.ToLower(rand.Text()[:8])
	t := &tour{p: c.Pools(), owner: *actor, other: *other, run: run,
		pub: "pool_pub_" + run, priv: "pool_priv_" + run, guild: "guild-" + run, tokens: map[string]string{}}
	fmt.Printf("run %s: owner %s, other user %s\n", run, t.owner, t.other)
	t.pools()
	t.bots()
	t.guildSelection()
	t.plan()
	t.runners()
	t.cleanup()
	fmt.Println("\nall checks passed")
}

// ---------------------------------------------------------------- helpers

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), timeout)
}

// fail reports a mismatch and exits non-zero.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "CHECK FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func check(ok bool, format string, args ...any) {
	if !ok {
		fail(format, args...)
	}
}

// must fails on any error of call what.
func must(err error, what string) {
	if err != nil {
		fail("%s: unexpected error: %v", what, err)
	}
}

// want checks that call what failed with sentinel.
func want(err, sentinel error, what string) {
	if !errors.Is(err, sentinel) {
		fail("%s: want %v, got %v", what, sentinel, err)
	}
}

// show prints one line: the step and its result.
func show(step, format string, args ...any) {
	fmt.Printf("  %-44s %s\n", step, fmt.Sprintf(format, args...))
}

func section(title string) { fmt.Printf("\n== %s\n", title) }

func newToken() string { return "tok." + rand.Text() + rand.Text() }

func agentIDs(bs []*client.BotInfo) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.AgentID
	}
	return out
}

func poolIDs(ps []*records.Pool) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.PoolID
	}
	return out
}

// tour is one run's users, ids and the tokens it registered (kept to
// compare with GetBotToken, never printed).
type tour struct {
	p            *client.Pools
	owner, other string
	run          string
	pub, priv    string
	guild        string
	tokens       map[string]string // agent id -> token
	active       []string          // active bots of the public pool
}

func (t *tour) bot(n string) string { return "bot-" + t.run + "-" + n }

// ---------------------------------------------------------------- pools

func (t *tour) pools() {
	section("pools: ownership and visibility")
	ctx, cancel := callCtx()
	defer cancel()
	p := t.p

	def, err := p.GetPool(ctx, t.other, records.DefaultPoolID)
	must(err, "GetPool default")
	check(def.Visibility == records.VisibilityPublic && def.OwnerUserID == records.SystemUserID,
		"default pool %+v: want public, owned by %s", def, records.SystemUserID)
	show("GetPool("+records.DefaultPoolID+")", "%s, owner %s -> the seed pool is ensured", def.Visibility, def.OwnerUserID)

	pub, err := p.CreatePool(ctx, t.owner, client.PoolSpec{PoolID: t.pub, Name: "community", Meta: `{"region":"eu"}`})
	must(err, "CreatePool public")
	check(pub.OwnerUserID == t.owner && pub.Visibility == records.VisibilityPublic, "created %+v", pub)
	show("CreatePool("+t.pub+")", "public, owner %s", pub.OwnerUserID)
	priv, err := p.CreatePool(ctx, t.owner, client.PoolSpec{PoolID: t.priv, Name: "mine", Visibility: records.VisibilityPrivate})
	must(err, "CreatePool private")
	show("CreatePool("+t.priv+")", "%s, owner %s", priv.Visibility, priv.OwnerUserID)

	_, err = p.CreatePool(ctx, t.other, client.PoolSpec{PoolID: t.priv, Name: "taken"})
	want(err, client.ErrAlreadyExists, "CreatePool over an existing id")
	show("CreatePool(same id) as "+t.other, "ErrAlreadyExists")

	_, err = p.GetPool(ctx, t.other, t.priv)
	want(err, client.ErrPermissionDenied, "GetPool of another's private pool")
	show("GetPool(private) as "+t.other, "ErrPermissionDenied (not NotFound)")
	_, err = p.GetPool(ctx, t.other, "pool_missing_"+t.run)
	want(err, client.ErrNotFound, "GetPool of a missing pool")
	show("GetPool(missing)", "ErrNotFound")
	got, err := p.GetPool(ctx, t.other, t.pub)
	must(err, "GetPool public as other")
	check(*got == *pub, "GetPool public: %+v, want %+v", got, pub)
	show("GetPool(public) as "+t.other, "%q -> matches", got.Name)

	mine, err := p.ListPools(ctx, t.owner)
	must(err, "ListPools owner")
	theirs, err := p.ListPools(ctx, t.other)
	must(err, "ListPools other")
	check(slices.Contains(poolIDs(mine), t.pub) && slices.Contains(poolIDs(mine), t.priv) && slices.Contains(poolIDs(mine), records.DefaultPoolID),
		"ListPools(%s) lacks a pool: %v", t.owner, poolIDs(mine))
	check(slices.Contains(poolIDs(theirs), t.pub) && !slices.Contains(poolIDs(theirs), t.priv),
		"ListPools(%s): %v; want the public pool and not the private one", t.other, poolIDs(theirs))
	show("ListPools", "%s sees %d pools (both of its own), %s sees %d (not the private one)", t.owner, len(mine), t.other, len(theirs))

	_, err = p.UpdatePool(ctx, t.other, client.PoolSpec{PoolID: t.pub, Name: "hijacked"})
	want(err, client.ErrPermissionDenied, "UpdatePool by another user")
	show("UpdatePool(public) as "+t.other, "ErrPermissionDenied")
	upd, err := p.UpdatePool(ctx, t.owner, client.PoolSpec{PoolID: t.pub, Name: "community v2", Meta: `{"region":"eu","tier":2}`})
	must(err, "UpdatePool by owner")
	check(upd.Name == "community v2" && upd.OwnerUserID == t.owner && upd.CreatedAt == pub.CreatedAt && upd.UpdatedAt >= pub.UpdatedAt,
		"UpdatePool: %+v (was %+v)", upd, pub)
	show("UpdatePool(public) as "+t.owner, "%q, owner and created_at unchanged", upd.Name)
}

// ---------------------------------------------------------------- bots

func (t *tour) register(actor, agent, pool string, s records.BotStatus) (*client.BotInfo, error) {
	ctx, cancel := callCtx()
	defer cancel()
	tok := newToken()
	b, err := t.p.RegisterBot(ctx, actor, client.BotSpec{AgentID: agent, Token: tok, ClientID: "app-" + agent,
		Tag: agent + "#0001", Status: s, PoolID: pool, Profile: `{"voice":true}`})
	if err == nil {
		t.tokens[agent] = tok
	}
	return b, err
}

func (t *tour) bots() {
	section("bots: contributions and tokens")
	for i, s := range []records.BotStatus{records.BotActive, records.BotActive, records.BotActive, records.BotInactive} {
		id := t.bot(fmt.Sprint(i + 1))
		b, err := t.register(t.owner, id, t.pub, s)
		must(err, "RegisterBot "+id)
		check(b.OwnerUserID == t.owner && b.PoolID == t.pub && b.HasToken && b.Status == s, "RegisterBot: %+v", b)
		if s == records.BotActive {
			t.active = append(t.active, id)
		}
	}
	show("RegisterBot x4 into the public pool", "3 active, 1 inactive, by %s", t.owner)
	b, err := t.register(t.other, t.bot("5"), t.pub, records.BotActive)
	must(err, "RegisterBot by other into public")
	t.active = append(t.active, b.AgentID)
	show("RegisterBot(public) as "+t.other, "ok: anyone may contribute to a public pool")
	_, err = t.register(t.other, t.bot("6"), t.priv, records.BotActive)
	want(err, client.ErrPermissionDenied, "RegisterBot into another's private pool")
	show("RegisterBot(private) as "+t.other, "ErrPermissionDenied")
	_, err = t.register(t.owner, t.bot("7"), t.priv, records.BotActive)
	must(err, "RegisterBot by owner into private")
	show("RegisterBot(private) as "+t.owner, "ok")
	_, err = t.register(t.owner, t.bot("1"), t.priv, records.BotActive)
	want(err, client.ErrAlreadyExists, "RegisterBot of a taken agent id into another pool")
	show("RegisterBot(same agent id, other pool)", "ErrAlreadyExists: agent ids are unique across pools")

	ctx, cancel := callCtx()
	defer cancel()
	p := t.p
	list, err := p.ListBots(ctx, t.other, t.pub)
	must(err, "ListBots public as other")
	check(len(list) == 5, "ListBots(public): %v, want 5 bots", agentIDs(list))
	for _, b := range list {
		check(b.HasToken, "ListBots: %s has no token stored", b.AgentID)
	}
	show("ListBots(public) as "+t.other, "%d bots, each with a stored token (never listed)", len(list))
	_, err = p.ListBots(ctx, t.other, t.priv)
	want(err, client.ErrPermissionDenied, "ListBots of another's private pool")
	show("ListBots(private) as "+t.other, "ErrPermissionDenied")

	// Tokens: the contributor and the pool's owner may read one.
	tok, err := p.GetBotToken(ctx, t.owner, t.bot("5"))
	must(err, "GetBotToken by pool owner")
	check(tok == t.tokens[t.bot("5")], "GetBotToken(%s) as pool owner: not the registered token", t.bot("5"))
	tok, err = p.GetBotToken(ctx, t.other, t.bot("5"))
	must(err, "GetBotToken by contributor")
	check(tok == t.tokens[t.bot("5")], "GetBotToken(%s) as contributor: not the registered token", t.bot("5"))
	show("GetBotToken(bot 5)", "contributor %s and pool owner %s: the registered token", t.other, t.owner)
	_, err = p.GetBotToken(ctx, t.other, t.bot("1"))
	want(err, client.ErrPermissionDenied, "GetBotToken by neither contributor nor pool owner")
	show("GetBotToken(bot 1) as "+t.other, "ErrPermissionDenied")

	// An update without a token keeps the stored one.
	u, err := p.UpdateBot(ctx, t.other, client.BotSpec{AgentID: t.bot("5"), ClientID: "app-" + t.bot("5"), Tag: "renamed#0005", PoolID: t.pub})
	must(err, "UpdateBot by contributor")
	tok, err = p.GetBotToken(ctx, t.other, t.bot("5"))
	must(err, "GetBotToken after update")
	check(u.Tag == "renamed#0005" && u.HasToken && tok == t.tokens[t.bot("5")], "UpdateBot without a token: %+v, token kept %t", u, tok == t.tokens[t.bot("5")])
	show("UpdateBot(bot 5, no token) as "+t.other, "tag %q, token kept", u.Tag)
	_, err = p.UpdateBot(ctx, t.other, client.BotSpec{AgentID: t.bot("5"), ClientID: "app-" + t.bot("5"), PoolID: t.priv})
	want(err, client.ErrPermissionDenied, "UpdateBot moving into another's private pool")
	show("UpdateBot(bot 5 -> private) as "+t.other, "ErrPermissionDenied")
}

// ---------------------------------------------------------------- guild

func (t *tour) guildSelection() {
	section("guild pool selection")
	ctx, cancel := callCtx()
	defer cancel()
	p := t.p
	sel, err := p.GetGuildPool(ctx, t.guild)
	must(err, "GetGuildPool before")
	check(sel == "", "GetGuildPool of a new guild: %q, want none", sel)
	show("GetGuildPool("+t.guild+")", "none selected")
	want(p.SetGuildPool(ctx, t.other, t.guild, t.priv), client.ErrPermissionDenied, "SetGuildPool to another's private pool")
	show("SetGuildPool(private) as "+t.other, "ErrPermissionDenied")
	want(p.SetGuildPool(ctx, t.other, t.guild, "pool_missing_"+t.run), client.ErrNotFound, "SetGuildPool to a missing pool")
	show("SetGuildPool(missing)", "ErrNotFound")
	must(p.SetGuildPool(ctx, t.other, t.guild, t.pub), "SetGuildPool public")
	sel, err = p.GetGuildPool(ctx, t.guild)
	must(err, "GetGuildPool after")
	check(sel == t.pub, "GetGuildPool: %q, want %s", sel, t.pub)
	show("SetGuildPool(public) as "+t.other, "ok; GetGuildPool -> %s", sel)
}

// ---------------------------------------------------------------- plan

func (t *tour) plan() {
	section("deploy planning (MAX_AGENTS_PER_GUILD 49)")
	ctx, cancel := callCtx()
	defer cancel()
	p := t.p
	_, err := p.PlanDeploy(ctx, t.other, t.guild, records.MaxAgentsPerGuild+1, "", nil)
	want(err, client.ErrInvalidArgument, "PlanDeploy 50")
	show("PlanDeploy(50)", "ErrInvalidArgument")

	present := []string{t.active[0], "someone-elses-bot-" + t.run}
	plan, err := p.PlanDeploy(ctx, t.other, t.guild, records.MaxAgentsPerGuild, "", present)
	must(err, "PlanDeploy 49")
	check(plan.PoolID == t.pub && plan.Desired == 49 && plan.Present == 2 && plan.Missing == 47,
		"plan %+v: want the guild's pool %s, 49 desired, 2 present, 47 missing", plan, t.pub)
	var invited []string
	for _, inv := range plan.Invites {
		check(slices.Contains(t.active, inv.AgentID) && !slices.Contains(present, inv.AgentID), "invite of %s: not an active bot of the pool that is absent", inv.AgentID)
		check(inv.ClientID == "app-"+inv.AgentID && strings.Contains(inv.URL, inv.ClientID), "invite %+v: want the bot's client id in its URL", inv)
		invited = append(invited, inv.AgentID)
	}
	check(len(invited) == len(t.active)-1, "plan invites %v, want the %d active bots not present", invited, len(t.active)-1)
	show("PlanDeploy(49, 2 present)", "pool %s: %d missing, %d invites (every available active bot)", plan.PoolID, plan.Missing, len(plan.Invites))
	fmt.Printf("  %-44s %s\n", "", plan.Invites[0].URL)

	plan, err = p.PlanDeploy(ctx, t.other, t.guild, 2, "", present[:1])
	must(err, "PlanDeploy 2")
	check(plan.Missing == 1 && len(plan.Invites) == 1, "PlanDeploy(2, 1 present): %+v, want 1 missing and 1 invite", plan)
	show("PlanDeploy(2, 1 present)", "1 missing, 1 invite")
	_, err = p.PlanDeploy(ctx, t.other, t.guild, 1, t.priv, nil)
	want(err, client.ErrPermissionDenied, "PlanDeploy from another's private pool")
	show("PlanDeploy(private pool) as "+t.other, "ErrPermissionDenied")
}

// ---------------------------------------------------------------- runners

func (t *tour) runners() {
	section("runners: heartbeats and staleness")
	ctx, cancel := context.WithTimeout(context.Background(), timeout+2*staleAfter)
	defer cancel()
	p := t.p
	old, fresh := "runner-"+t.run+"-a", "runner-"+t.run+"-b"
	r1, err := p.Heartbeat(ctx, old, `{"host":"a"}`)
	must(err, "Heartbeat a")
	show("Heartbeat("+old+")", "last_seen %d", r1.LastSeen)
	time.Sleep(staleAfter + staleAfter/2)
	sent := time.Now()
	r2, err := p.Heartbeat(ctx, fresh, `{"host":"b"}`)
	must(err, "Heartbeat b")
	show("Heartbeat("+fresh+")", "last_seen %d (%v later)", r2.LastSeen, time.Duration(r2.LastSeen-r1.LastSeen)*time.Millisecond)
	stale, err := p.ListStaleRunners(ctx, staleAfter)
	must(err, "ListStaleRunners")
	var ids []string
	for _, r := range stale {
		ids = append(ids, r.RunnerID)
		check(time.Now().UnixMilli()-r.LastSeen >= staleAfter.Milliseconds(), "stale runner %s seen %d ms ago, under %v", r.RunnerID, time.Now().UnixMilli()-r.LastSeen, staleAfter)
	}
	check(slices.Contains(ids, old), "ListStaleRunners(%v) lacks %s", staleAfter, old)
	if time.Since(sent) < staleAfter { // only then is b certainly fresh
		check(!slices.Contains(ids, fresh), "ListStaleRunners(%v) lists %s, just seen", staleAfter, fresh)
	}
	show(fmt.Sprintf("ListStaleRunners(%v)", staleAfter), "%s stale, %s not (%d stale in all)", old, fresh, len(stale))
	all, err := p.ListRunners(ctx)
	must(err, "ListRunners")
	var both int
	for _, r := range all {
		if r.RunnerID == old || r.RunnerID == fresh {
			both++
		}
	}
	check(both == 2, "ListRunners lacks one of ours")
	show("ListRunners()", "%d runners, ours included", len(all))
}

// ---------------------------------------------------------------- cleanup

func (t *tour) cleanup() {
	section("deleting pools")
	ctx, cancel := callCtx()
	defer cancel()
	p := t.p
	_, err := p.DeletePool(ctx, t.other, t.pub, true)
	want(err, client.ErrPermissionDenied, "DeletePool by another user")
	show("DeletePool(public) as "+t.other, "ErrPermissionDenied")
	_, err = p.DeletePool(ctx, t.owner, t.pub, false)
	var pne *client.PoolNotEmptyError
	check(errors.As(err, &pne) && pne.PoolID == t.pub && pne.Bots == 5, "DeletePool without cascade: %v, want *PoolNotEmptyError with 5 bots", err)
	show("DeletePool(public, no cascade)", "%v", err)
	n, err := p.DeletePool(ctx, t.owner, t.pub, true)
	must(err, "DeletePool cascade")
	check(n == 5, "DeletePool cascade removed %d bots, want 5", n)
	_, err = p.GetBot(ctx, t.owner, t.bot("1"))
	want(err, client.ErrNotFound, "GetBot after cascade")
	show("DeletePool(public, cascade)", "%d bots removed with it", n)
	n, err = p.DeletePool(ctx, t.owner, t.priv, true)
	must(err, "DeletePool private")
	show("DeletePool(private, cascade)", "%d bot removed", n)
	_, err = p.DeletePool(ctx, t.owner, records.DefaultPoolID, true)
	check(err != nil, "DeletePool(%s) succeeded", records.DefaultPoolID)
	show("DeletePool("+records.DefaultPoolID+")", "refused: %v", err)
}
