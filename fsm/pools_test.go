package fsm

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

const (
	public  = records.VisibilityPublic
	private = records.VisibilityPrivate
	defID   = records.DefaultPoolID
)

func createCmd(p *records.Pool) *Command { return &Command{Op: OpCreatePool, Pool: p} }

func regCmd(agent, pool, owner string) *Command {
	return &Command{Op: OpRegisterBot, Bot: botRec(agent, pool, owner), Actor: owner}
}

func ensureCmd(now int64) *Command { return &Command{Op: OpEnsureDefaultPool, Time: now} }

func defaultPool(v records.Visibility, created, updated int64) *records.Pool {
	return &records.Pool{PoolID: defID, OwnerUserID: records.SystemUserID, Name: "goot27", Visibility: v,
		CreatedAt: created, UpdatedAt: updated}
}

// botWrites are the writes that store bot b and its index entry.
func botWrites(t testing.TB, b *records.Bot) []kvw {
	return []kvw{setw(keys.Bot(b.AgentID), enc(t, b)), setw(keys.BotByPool(b.PoolID, b.AgentID), nil)}
}

// botDeletes are the writes that delete bot agent of pool.
func botDeletes(agent, pool string) []kvw {
	return []kvw{delw(keys.Bot(agent)), delw(keys.BotByPool(pool, agent))}
}

func TestPoolOps(t *testing.T) {
	// p1: public, owned by u0. p2: private, owned by u1. "p": a pool id
	// that is a prefix of "p1".
	p1, p2, p := poolRec("p1", "u0", public), poolRec("p2", "u1", private), poolRec("p", "u0", public)
	pools := []*Command{createCmd(p1), createCmd(p2)}
	with := func(cs ...*Command) []*Command { return append(slices.Clone(pools), cs...) }
	renamed := func(src *records.Pool, name string, v records.Visibility, meta string, at int64) *records.Pool {
		c := *src
		c.Name, c.Visibility, c.Meta, c.UpdatedAt = name, v, meta, at
		return &c
	}
	updPool := func(id, actor string, v records.Visibility) *Command {
		// The command's owner and created_at are not the stored ones: the
		// state machine must keep the stored ones.
		return &Command{Op: OpUpdatePool, Pool: &records.Pool{PoolID: id, OwnerUserID: "u9", Name: "new name",
			Visibility: v, Meta: `{"x":1}`, CreatedAt: 999, UpdatedAt: 999}, Actor: actor, Time: 50}
	}
	del := func(id, actor string, cascade bool) *Command {
		return &Command{Op: OpDeletePool, PoolID: id, Actor: actor, Cascade: cascade}
	}
	// a1 contributed by u1 to u0's public p1; a2 contributed by u1 to its own private p2.
	a1, a2 := botRec("a1", "p1", "u1"), botRec("a2", "p2", "u1")
	withBots := with(regCmd("a1", "p1", "u1"), regCmd("a2", "p2", "u1"))
	updBot := func(agent, pool, actor string, tok records.EncryptedToken) *Command {
		b := botRec(agent, pool, "u9")
		b.Token, b.Tag, b.Status, b.Profile, b.CreatedAt = tok, "renamed#2", records.BotDisabled, `{"p":true}`, 777
		return &Command{Op: OpUpdateBot, Bot: b, Actor: actor, Time: 60}
	}
	// updated is what updBot stores over the stored bot old.
	updated := func(old *records.Bot, pool string, tok records.EncryptedToken) *records.Bot {
		b := *old
		b.PoolID, b.Tag, b.Status, b.Profile, b.UpdatedAt = pool, "renamed#2", records.BotDisabled, `{"p":true}`, 60
		if tok.KeyID != "" {
			b.Token = tok
		}
		return &b
	}
	newTok := token(0xee)
	rawPut := func(key, value []byte) *Command {
		return batchCmd(nil, Mutation{Kind: MutPut, Key: key, Value: value})
	}
	guild := func(g, pool, actor string) *Command {
		return &Command{Op: OpSetGuildPool, GuildID: g, PoolID: pool, Actor: actor, Time: 70}
	}
	gs := func(g, pool string) *records.GuildSettings {
		return &records.GuildSettings{GuildID: g, SelectedPoolID: pool, UpdatedAt: 70}
	}
	runner := &records.Runner{RunnerID: "r1", LastSeen: 80, Meta: `{"host":"h"}`}
	runner2 := &records.Runner{RunnerID: "r1", LastSeen: 90}

	runOpCases(t, []opCase{
		{name: "ensure creates the default pool", cmd: ensureCmd(5), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Pool(defID), enc(t, defaultPool(public, 5, 5)))}
		}},
		{name: "ensure is idempotent", setup: []*Command{ensureCmd(5)}, cmd: ensureCmd(6),
			writes: func(testing.TB) []kvw { return nil }},
		{name: "ensure makes a private default pool public", setup: []*Command{rawPut(keys.Pool(defID), enc(t, defaultPool(private, 3, 4)))},
			cmd: ensureCmd(6), writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Pool(defID), enc(t, defaultPool(public, 3, 6)))}
			}},

		{name: "create pool", cmd: createCmd(p1), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Pool("p1"), enc(t, p1))}
		}},
		{name: "create pool taken", setup: pools, cmd: createCmd(poolRec("p1", "u1", private)), err: ErrAlreadyExists},
		{name: "create default pool present", setup: []*Command{ensureCmd(5)}, cmd: createCmd(poolRec(defID, "u0", public)), err: ErrAlreadyExists},
		{name: "create default pool absent", cmd: createCmd(poolRec(defID, records.SystemUserID, public)), err: ErrPermissionDenied},

		{name: "update pool by owner", setup: pools, cmd: updPool("p1", "u0", private), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Pool("p1"), enc(t, renamed(p1, "new name", private, `{"x":1}`, 50)))}
		}},
		{name: "update private pool by owner", setup: pools, cmd: updPool("p2", "u1", public), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Pool("p2"), enc(t, renamed(p2, "new name", public, `{"x":1}`, 50)))}
		}},
		{name: "update public pool of another user", setup: pools, cmd: updPool("p1", "u1", public), err: ErrPermissionDenied},
		{name: "update private pool of another user", setup: pools, cmd: updPool("p2", "u0", private), err: ErrPermissionDenied},
		{name: "update missing pool", setup: pools, cmd: updPool("p3", "u0", public), err: ErrNotFound},
		{name: "default pool cannot be made private", setup: []*Command{ensureCmd(5)}, cmd: updPool(defID, records.SystemUserID, private), err: ErrPermissionDenied},
		{name: "default pool renamed by its owner", setup: []*Command{ensureCmd(5)}, cmd: updPool(defID, records.SystemUserID, public),
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Pool(defID), enc(t, renamed(defaultPool(public, 5, 5), "new name", public, `{"x":1}`, 50)))}
			}},
		{name: "default pool updated by a user", setup: []*Command{ensureCmd(5)}, cmd: updPool(defID, "u0", public), err: ErrPermissionDenied},

		{name: "delete empty pool", setup: pools, cmd: del("p1", "u0", false),
			writes: func(testing.TB) []kvw { return []kvw{delw(keys.Pool("p1"))} }},
		{name: "delete empty pool with cascade", setup: pools, cmd: del("p2", "u1", true),
			writes: func(testing.TB) []kvw { return []kvw{delw(keys.Pool("p2"))} }},
		{name: "delete pool of another user", setup: pools, cmd: del("p1", "u1", true), err: ErrPermissionDenied},
		{name: "delete private pool of another user", setup: pools, cmd: del("p2", "u0", false), err: ErrPermissionDenied},
		{name: "delete missing pool", setup: pools, cmd: del("p3", "u0", false), err: ErrNotFound},
		{name: "delete default pool", setup: []*Command{ensureCmd(5)}, cmd: del(defID, records.SystemUserID, true), err: ErrPermissionDenied},
		{name: "delete pool with bots", setup: with(regCmd("a1", "p1", "u1"), regCmd("a3", "p1", "u0")),
			cmd: del("p1", "u0", false), err: &PoolNotEmptyError{PoolID: "p1", Bots: 2}},
		{name: "delete pool with bots, cascade",
			setup: with(createCmd(p), regCmd("a1", "p1", "u1"), regCmd("a3", "p1", "u0"), regCmd("a4", "p", "u1"), regCmd("a2", "p2", "u1")),
			cmd:   del("p1", "u0", true), removed: 2, writes: func(testing.TB) []kvw {
				return slices.Concat([]kvw{delw(keys.Pool("p1"))}, botDeletes("a1", "p1"), botDeletes("a3", "p1"))
			}},
		{name: "cascade of a prefix pool id", setup: with(createCmd(p), regCmd("a1", "p1", "u1"), regCmd("a4", "p", "u1")),
			cmd: del("p", "u0", true), removed: 1, writes: func(testing.TB) []kvw {
				return append([]kvw{delw(keys.Pool("p"))}, botDeletes("a4", "p")...)
			}},

		{name: "register bot in a public pool of another user", setup: pools, cmd: regCmd("a1", "p1", "u1"),
			writes: func(t testing.TB) []kvw { return botWrites(t, a1) }},
		{name: "register bot in own private pool", setup: pools, cmd: regCmd("a2", "p2", "u1"),
			writes: func(t testing.TB) []kvw { return botWrites(t, a2) }},
		{name: "register bot in a private pool of another user", setup: pools, cmd: regCmd("a1", "p2", "u0"), err: ErrPermissionDenied},
		{name: "register bot in a missing pool", setup: pools, cmd: regCmd("a1", "p3", "u0"), err: ErrNotFound},
		{name: "register bot twice", setup: withBots, cmd: regCmd("a1", "p1", "u1"), err: ErrAlreadyExists},
		{name: "register bot taken in another pool", setup: withBots, cmd: regCmd("a2", "p1", "u0"), err: ErrAlreadyExists},
		{name: "register bot in the default pool", setup: []*Command{ensureCmd(5)}, cmd: regCmd("a1", defID, "u0"),
			writes: func(t testing.TB) []kvw { return botWrites(t, botRec("a1", defID, "u0")) }},

		{name: "update bot by contributor keeps token", setup: withBots, cmd: updBot("a1", "p1", "u1", records.EncryptedToken{}),
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Bot("a1"), enc(t, updated(a1, "p1", records.EncryptedToken{})))}
			}},
		{name: "update bot replaces token", setup: withBots, cmd: updBot("a1", "p1", "u1", newTok),
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.Bot("a1"), enc(t, updated(a1, "p1", newTok)))} }},
		{name: "update bot by pool owner", setup: withBots, cmd: updBot("a1", "p1", "u0", newTok),
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.Bot("a1"), enc(t, updated(a1, "p1", newTok)))} }},
		{name: "update bot by a stranger", setup: withBots, cmd: updBot("a2", "p2", "u0", newTok), err: ErrPermissionDenied},
		{name: "update missing bot", setup: withBots, cmd: updBot("a5", "p1", "u0", newTok), err: ErrNotFound},
		{name: "move bot to a public pool", setup: withBots, cmd: updBot("a2", "p1", "u1", records.EncryptedToken{}),
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Bot("a2"), enc(t, updated(a2, "p1", records.EncryptedToken{}))),
					delw(keys.BotByPool("p2", "a2")), setw(keys.BotByPool("p1", "a2"), nil)}
			}},
		{name: "move bot to a private pool of another user", setup: withBots, cmd: updBot("a1", "p2", "u0", newTok), err: ErrPermissionDenied},
		{name: "move bot to a missing pool", setup: withBots, cmd: updBot("a1", "p3", "u1", newTok), err: ErrNotFound},
		{name: "move bot to own private pool", setup: withBots, cmd: updBot("a1", "p2", "u1", newTok),
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Bot("a1"), enc(t, updated(a1, "p2", newTok))),
					delw(keys.BotByPool("p1", "a1")), setw(keys.BotByPool("p2", "a1"), nil)}
			}},

		{name: "remove bot by contributor", setup: withBots, cmd: &Command{Op: OpRemoveBot, BotID: "a2", Actor: "u1"},
			writes: func(testing.TB) []kvw { return botDeletes("a2", "p2") }},
		{name: "remove bot by pool owner", setup: withBots, cmd: &Command{Op: OpRemoveBot, BotID: "a1", Actor: "u0"},
			writes: func(testing.TB) []kvw { return botDeletes("a1", "p1") }},
		{name: "remove bot by a stranger", setup: withBots, cmd: &Command{Op: OpRemoveBot, BotID: "a2", Actor: "u0"}, err: ErrPermissionDenied},
		{name: "remove missing bot", setup: withBots, cmd: &Command{Op: OpRemoveBot, BotID: "a5", Actor: "u0"}, err: ErrNotFound},

		{name: "runner heartbeat", cmd: &Command{Op: OpRunnerHeartbeat, Runner: runner},
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.Runner("r1"), enc(t, runner))} }},
		{name: "runner heartbeat upserts", setup: []*Command{{Op: OpRunnerHeartbeat, Runner: runner}}, cmd: &Command{Op: OpRunnerHeartbeat, Runner: runner2},
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.Runner("r1"), enc(t, runner2))} }},

		{name: "guild selects a public pool", setup: pools, cmd: guild("g1", "p1", "u1"),
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.GuildSettings("g1"), enc(t, gs("g1", "p1")))} }},
		{name: "guild selects own private pool", setup: pools, cmd: guild("g1", "p2", "u1"),
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.GuildSettings("g1"), enc(t, gs("g1", "p2")))} }},
		{name: "guild changes its selection", setup: with(guild("g1", "p1", "u0")), cmd: guild("g1", "p2", "u1"),
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.GuildSettings("g1"), enc(t, gs("g1", "p2")))} }},
		{name: "guild selects a private pool of another user", setup: pools, cmd: guild("g1", "p2", "u0"), err: ErrPermissionDenied},
		{name: "guild selects a missing pool", setup: pools, cmd: guild("g1", "p3", "u0"), err: ErrNotFound},
	})
}

// TestRegisterBotRace: two RegisterBot commands for one agent id into two
// pools, in one ApplyBatch run (as Raft delivers concurrent proposals):
// exactly one succeeds, and the index holds one entry.
func TestRegisterBotRace(t *testing.T) {
	for _, first := range []string{"p1", "p2"} {
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		f.ApplyBatch([]*raft.Log{
			cmdLog(1, mustEncode(t, createCmd(poolRec("p1", "u0", public)))),
			cmdLog(2, mustEncode(t, createCmd(poolRec("p2", "u1", public)))),
		})
		second := map[string]string{"p1": "p2", "p2": "p1"}[first]
		res := f.ApplyBatch([]*raft.Log{
			cmdLog(3, mustEncode(t, regCmd("a1", first, "u0"))),
			cmdLog(4, mustEncode(t, regCmd("a1", second, "u1"))),
		})
		checkErr(t, res[0].(*Result).Err, nil)
		checkErr(t, res[1].(*Result).Err, ErrAlreadyExists)
		var index []string
		for _, kv := range mustDump(t, f) {
			if kv.Key[0] == keys.TableBotsByPool {
				p, a, err := keys.DecodeBotByPool(kv.Key)
				if err != nil {
					t.Fatal(err)
				}
				index = append(index, p+"/"+a)
			}
		}
		if !slices.Equal(index, []string{first + "/a1"}) {
			t.Fatalf("first %s: index %q", first, index)
		}
	}
}

// TestPoolOpsSeeEarlierEntriesOfTheRun: within one run, a pool command
// sees what the run's earlier commands wrote.
func TestPoolOpsSeeEarlierEntriesOfTheRun(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	cmds := []*Command{
		createCmd(poolRec("p1", "u0", private)),
		regCmd("a1", "p1", "u0"),
		regCmd("a2", "p1", "u1"), // private pool of u0
		{Op: OpDeletePool, PoolID: "p1", Actor: "u0"},
		{Op: OpRemoveBot, BotID: "a1", Actor: "u0"},
		{Op: OpDeletePool, PoolID: "p1", Actor: "u0"},
		regCmd("a1", "p1", "u0"), // the pool is gone
		ensureCmd(9),
		ensureCmd(10),
		{Op: OpSetGuildPool, GuildID: "g1", PoolID: defID, Actor: "u1", Time: 11},
	}
	want := []error{nil, nil, ErrPermissionDenied, &PoolNotEmptyError{PoolID: "p1", Bots: 1}, nil, nil, ErrNotFound, nil, nil, nil}
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		logs[i] = cmdLog(uint64(i+1), mustEncode(t, c))
	}
	for i, r := range f.ApplyBatch(logs) {
		checkErr(t, r.(*Result).Err, want[i])
	}
	var got [][]byte
	for _, kv := range mustDump(t, f) {
		got = append(got, kv.Key)
	}
	wantKeys := [][]byte{keys.Pool(defID), keys.GuildSettings("g1")}
	if !slices.EqualFunc(got, wantKeys, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("keys %q, want %q", got, wantKeys)
	}
}

// TestPoolInvariants applies long seeded random sequences of pool commands
// (cascade deletes included) in random runs and checks, after every chunk,
// that bots and bots_by_pool agree and every bot's pool exists.
func TestPoolInvariants(t *testing.T) {
	n, chunk := 4000, 250
	if testing.Short() {
		n = 1000
	}
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 404))
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		outcomes := map[string]int{}
		for first := 1; first <= n; first += chunk {
			cmds := make([]*Command, chunk)
			logs := make([]*raft.Log, chunk)
			for i := range cmds {
				cmds[i] = genPoolCmd(rng)
				logs[i] = cmdLog(uint64(first+i), mustEncode(t, cmds[i]))
			}
			for i, r := range applyRuns(t, f, logs, rng) {
				res := r.(*Result)
				var notEmpty *PoolNotEmptyError
				switch {
				case res.Err == nil && cmds[i].Op == OpDeletePool && res.Removed > 0:
					outcomes["cascade"]++
				case res.Err == nil:
					outcomes["ok "+cmds[i].Op.String()]++
				case errors.As(res.Err, &notEmpty):
					outcomes["not empty"]++
				case errors.Is(res.Err, ErrCorruptRecord):
					t.Fatalf("%s: %v", cmds[i].Op, res.Err)
				case errors.Is(res.Err, ErrInvalidCommand):
					outcomes["invalid"]++
				default:
					outcomes[res.Err.Error()]++
				}
				if res.Removed != 0 && (res.Err != nil || cmds[i].Op != OpDeletePool || !cmds[i].Cascade) {
					t.Fatalf("%s: Removed %d with err %v", cmds[i].Op, res.Removed, res.Err)
				}
			}
			checkPoolInvariants(t, f)
		}
		t.Logf("seed %d: %v", seed, outcomes)
		for _, o := range []string{"cascade", "not empty", "ok register_bot", "ok update_bot", "ok remove_bot", "ok delete_pool",
			"ok update_pool", "ok set_guild_pool", "invalid", ErrPermissionDenied.Error(), ErrAlreadyExists.Error(), ErrNotFound.Error()} {
			// The short run is smaller: each outcome must still occur.
			minSeen := 5
			if testing.Short() {
				minSeen = 1
			}
			if outcomes[o] < minSeen {
				t.Fatalf("seed %d: outcome %q seen %d times: %v", seed, o, outcomes[o], outcomes)
			}
		}
	}
}

// checkPoolInvariants checks the pool tables of f's state.
func checkPoolInvariants(t *testing.T, f *FSM) {
	t.Helper()
	pools := map[string]bool{}
	bots := map[string]string{}    // agent -> pool
	index := map[string][]string{} // agent -> pools of its entries
	for _, kv := range mustDump(t, f) {
		k, v := kv.Key, kv.Value
		switch k[0] {
		case keys.TablePools:
			id, err := keys.DecodePool(k)
			var p records.Pool
			mustDecode(t, k, v, &p)
			if err != nil || p.PoolID != id {
				t.Fatalf("pool record %+v under key %q (%v)", p, k, err)
			}
			if id == defID && (p.OwnerUserID != records.SystemUserID || p.Visibility != public) {
				t.Fatalf("default pool %+v", p)
			}
			pools[id] = true
		case keys.TableBots:
			id, err := keys.DecodeBot(k)
			var b records.Bot
			mustDecode(t, k, v, &b)
			if err != nil || b.AgentID != id || b.Token.IsZero() {
				t.Fatalf("bot record %+v under key %q (%v)", b, k, err)
			}
			bots[id] = b.PoolID
		case keys.TableBotsByPool:
			p, a, err := keys.DecodeBotByPool(k)
			if err != nil || len(v) != 0 {
				t.Fatalf("index entry %q = %q: %v", k, v, err)
			}
			index[a] = append(index[a], p)
		case keys.TableRunners:
			mustDecode(t, k, v, &records.Runner{})
		case keys.TableGuildSettings:
			mustDecode(t, k, v, &records.GuildSettings{})
		}
	}
	for a, p := range bots {
		if got := index[a]; len(got) != 1 || got[0] != p {
			t.Fatalf("bot %s of pool %s has index entries %q", a, p, got)
		}
		if !pools[p] {
			t.Fatalf("bot %s is in pool %s, which does not exist", a, p)
		}
	}
	for a, ps := range index {
		if _, ok := bots[a]; !ok {
			t.Fatalf("index entries %q/%s without a bot", ps, a)
		}
	}
}

// TestPoolOpsOverCorruptState: records written raw (by OpBatch) that do not
// decode are deterministic rejections; an index entry whose bot is in
// another pool loses the entry, not the bot, in a cascade.
func TestPoolOpsOverCorruptState(t *testing.T) {
	raw := func(key, value []byte) *Command {
		return batchCmd(nil, Mutation{Kind: MutPut, Key: key, Value: value})
	}
	p1 := createCmd(poolRec("p1", "u0", public))
	p2 := createCmd(poolRec("p2", "u0", public))
	runOpCases(t, []opCase{
		{name: "junk pool", setup: []*Command{raw(keys.Pool("p1"), []byte("junk"))}, cmd: regCmd("a1", "p1", "u0"), err: ErrCorruptRecord},
		{name: "junk default pool", setup: []*Command{raw(keys.Pool(defID), []byte("junk"))}, cmd: ensureCmd(3), err: ErrCorruptRecord},
		{name: "junk bot in a cascade", setup: []*Command{p1, regCmd("a1", "p1", "u0"), raw(keys.Bot("a1"), []byte("junk"))},
			cmd: &Command{Op: OpDeletePool, PoolID: "p1", Actor: "u0", Cascade: true}, err: ErrCorruptRecord},
		{name: "stray index entry", setup: []*Command{p1, p2, regCmd("a1", "p2", "u0"), raw(keys.BotByPool("p1", "a1"), nil)},
			cmd:    &Command{Op: OpDeletePool, PoolID: "p1", Actor: "u0", Cascade: true},
			writes: func(testing.TB) []kvw { return []kvw{delw(keys.Pool("p1")), delw(keys.BotByPool("p1", "a1"))} }},
		{name: "junk pool of a bot", setup: []*Command{p1, regCmd("a1", "p1", "u1"), raw(keys.Pool("p1"), []byte("junk"))},
			cmd: &Command{Op: OpRemoveBot, BotID: "a1", Actor: "u0"}, err: ErrCorruptRecord},
		{name: "contributor needs no pool read", setup: []*Command{p1, regCmd("a1", "p1", "u1"), raw(keys.Pool("p1"), []byte("junk"))},
			cmd: &Command{Op: OpRemoveBot, BotID: "a1", Actor: "u1"}, writes: func(testing.TB) []kvw { return botDeletes("a1", "p1") }},
	})
}
