package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// kvPair is a kv pair of routing key rk.
func kvPair(rk, k, v string) Pair { return Pair{Key: keys.KV([]byte(rk), []byte(k)), Value: []byte(v)} }

// slotRKs[s] is a routing key of slot s.
var slotRKs = func() (out [shard.NumSlots]string) {
	left := shard.NumSlots
	for n := 0; left > 0; n++ {
		rk := fmt.Sprintf("rk%d", n)
		if s := shard.SlotOf([]byte(rk)); out[s] == "" {
			out[s] = rk
			left--
		}
	}
	return out
}()

// rkInSlot returns a routing key whose slot is in s (notIn: not in s).
func rkInSlot(t testing.TB, s shard.SlotSet, notIn bool) string {
	for x, rk := range slotRKs {
		if s.Has(shard.Slot(x)) != notIn {
			return rk
		}
	}
	t.Fatal("no routing key found")
	return ""
}

func TestSlotOpsValidate(t *testing.T) {
	S := ptr(shard.SlotSetOf(3))
	for _, tc := range []struct {
		name string
		c    *Command
		want string
	}{
		{"id 0", &Command{Op: OpUnfreezeSlots, Move: &SlotMove{}}, "move id 0"},
		{"freeze no slots", &Command{Op: OpFreezeSlots, Move: &SlotMove{ID: 1, MapVersion: 1, Slots: &shard.SlotSet{}}}, "no slots"},
		{"freeze version 0", &Command{Op: OpFreezeSlots, Move: &SlotMove{ID: 1, Slots: S}}, "map version 0"},
		{"unfreeze slots", &Command{Op: OpUnfreezeSlots, Move: &SlotMove{ID: 1, Slots: S}}, "carries slots"},
		{"drop peer", &Command{Op: OpDropSlots, Move: &SlotMove{ID: 1, Max: 1, Peer: 2}}, "carries peer"},
		{"drop max 0", &Command{Op: OpDropSlots, Move: &SlotMove{ID: 1}}, "max 0"},
		{"drop max big", &Command{Op: OpDropSlots, Move: &SlotMove{ID: 1, Max: MaxDropKeys + 1}}, "max 65537"},
		{"adopt pairs", &Command{Op: OpAdoptSlots, Move: &SlotMove{ID: 1, Slots: S, Pairs: []Pair{{Key: []byte{0x20}}}}}, "carries pairs"},
		{"freeze max", &Command{Op: OpFreezeSlots, Move: &SlotMove{ID: 1, Slots: S, MapVersion: 1, Max: 3}}, "carries max"},
		{"restrict id", &Command{Op: OpRestrictSlots, Move: &SlotMove{ID: 1, Slots: S}}, "carries more than slots"},
		{"restrict version", &Command{Op: OpRestrictSlots, Move: &SlotMove{Slots: S, MapVersion: 2}}, "carries more than slots"},
		{"restrict empty", &Command{Op: OpRestrictSlots, Move: &SlotMove{Slots: &shard.SlotSet{}}}, "no slots"},
		{"restrict nil", &Command{Op: OpRestrictSlots, Move: &SlotMove{}}, "no slots"},
		{"ingest meta key", ingestCmd(1, *S, Pair{Key: []byte("\x00slots")}), "reserved meta table"},
		{"ingest empty key", ingestCmd(1, *S, Pair{}), "empty key"},
		{"ingest order", ingestCmd(1, *S, kvPair("a", "2", ""), kvPair("a", "1", "")), "strictly ascending"},
		{"ingest dup", ingestCmd(1, *S, kvPair("a", "1", ""), kvPair("a", "1", "")), "strictly ascending"},
		{"ingest too many", ingestCmd(1, *S, make([]Pair, defaultMaxBatchOps+1)...), "1025 pairs"},
		{"move with batch", &Command{Op: OpAdoptSlots, Move: &SlotMove{ID: 1, Slots: S}, Batch: &Batch{}}, "carries batch"},
		{"batch two slots", batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte("a"), nil)}, Mutation{Kind: MutPut, Key: keys.KV([]byte("b"), nil)}), "batch's other keys in slot"},
	} {
		if err := tc.c.Validate(Limits{}); !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// A multi carries no slot op.
	f := newReplica(t, 1, nil)
	res := f.f.Apply(cmdLog(1, mustEncode(t, multiCmd(freezeCmd(1, *S, 2, 1))))).([]*Result)
	if !errors.Is(res[0].Err, ErrInvalidCommand) || f.f.Owned() != shard.AllSlots() {
		t.Fatalf("freeze in a multi: %v", res[0].Err)
	}
}

// TestSlotOps: each op's transitions and refusals, in order.
func TestSlotOps(t *testing.T) {
	src := newReplica(t, 1, nil)
	S, T := shard.SlotSetOf(1, 2, 3), shard.SlotSetOf(3, 4)
	rkS, rkOut := rkInSlot(t, S, false), rkInSlot(t, S, true)
	src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkS), []byte("k")), Value: []byte("v")}))
	conflictErr := func(r *replica, c *Command, want string) {
		t.Helper()
		res := r.apply(c)
		if !errors.Is(res.Err, ErrMoveConflict) || !strings.Contains(res.Err.Error(), want) {
			t.Fatalf("%s: %v, want a conflict containing %q", c.Op, res.Err, want)
		}
	}
	fr := src.must(freezeCmd(1, S, 2, 9))
	conflictErr(src, freezeCmd(1, T, 2, 9), "recorded as frozen")
	conflictErr(src, freezeCmd(2, T, 2, 9), "slots 3 are not owned")
	if r := src.must(freezeCmd(1, S, 2, 9)); r.MoveIndex != fr.Index {
		t.Fatalf("re-freeze index %d", r.MoveIndex)
	}
	// Frozen: writes and reads of the slots refused, others served.
	res := src.apply(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkS), []byte("k")), Value: []byte("w")}))
	if me := movedErr(t, res.Err); me.Target != 2 || me.MapVersion != 9 || !S.Has(me.Slot) {
		t.Fatalf("moved error %+v", me)
	}
	src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkOut), []byte("k")), Value: []byte("v")}))
	conflictErr(src, ingestCmd(1, S), "is frozen")
	conflictErr(src, adoptCmd(1, S), "is frozen")
	// Unfreeze gives them back; again is a no-op.
	src.must(unfreezeCmd(1))
	src.must(unfreezeCmd(1))
	if src.f.Owned() != shard.AllSlots() || len(src.f.Moves()) != 0 {
		t.Fatalf("after unfreeze: %v %v", src.f.Owned(), src.f.Moves())
	}
	src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkS), []byte("k")), Value: []byte("w")}))
	conflictErr(src, dropCmd(1, 5), "unknown")

	// Target side.
	dst := newReplica(t, 2, ptr(shard.SlotSetOf(200)))
	if me := movedErr(t, dst.f.CheckSlot(1)); me.MapVersion != 0 {
		t.Fatalf("never-owned slot: %+v", me)
	}
	res = dst.apply(ingestCmd(5, S, kvPair(rkOut, "k", "v")))
	if !errors.Is(res.Err, ErrInvalidCommand) || !strings.Contains(res.Err.Error(), "not in the move's slots") || len(dst.f.Moves()) != 0 {
		t.Fatalf("pair outside the slots: %v", res.Err)
	}
	conflictErr(dst, ingestCmd(5, shard.SlotSetOf(1, 200)), "owned here")
	dst.must(ingestCmd(5, S, kvPair(rkS, "k", "v")))
	dst.must(ingestCmd(5, S, kvPair(rkS, "k", "v"))) // the same pair again
	res = dst.apply(ingestCmd(5, S, kvPair(rkS, "k", "other")))
	if !errors.Is(res.Err, ErrInvalidCommand) || !strings.Contains(res.Err.Error(), "exists here with another value") {
		t.Fatalf("changed pair: %v", res.Err)
	}
	conflictErr(dst, ingestCmd(5, T), "is of slots")
	conflictErr(dst, ingestCmd(6, T), "in move 5 (incoming)")
	conflictErr(dst, adoptCmd(5, T), "is of slots")
	dst.must(adoptCmd(5, S))
	dst.must(adoptCmd(5, S))
	if dst.f.Owned() != S.Union(shard.SlotSetOf(200)) {
		t.Fatalf("owned after adopt: %v", dst.f.Owned())
	}
	conflictErr(dst, ingestCmd(5, S, kvPair(rkS, "k", "v")), "is adopted")
	conflictErr(dst, dropCmd(5, 5), "is adopted")
	conflictErr(dst, unfreezeCmd(5), "is adopted")
	// An empty move: adopt registers and adopts at once.
	dst.must(adoptCmd(8, shard.SlotSetOf(100)))
	if !dst.f.Owned().Has(100) {
		t.Fatal("empty move not adopted")
	}
	if v, err := dst.f.Get(keys.KV([]byte(rkS), []byte("k"))); err != nil || string(v) != "v" {
		t.Fatalf("ingested value: %q %v", v, err)
	}
}

// TestSlotMergeAbort: a merge into a target that serves its own slots;
// an ingest that collides with the target's data is refused; the move is
// aborted and both sides are as before.
func TestSlotMergeAbort(t *testing.T) {
	src := newReplica(t, 1, ptr(shard.SlotSetOf(10, 11)))
	S := shard.SlotSetOf(10, 11)
	dst := newReplica(t, 2, ptr(shard.AllSlots().Minus(S)))
	rkS := rkInSlot(t, S, false)
	// A user of S on the source and a user of the target's slots share an
	// event id.
	var uS, uT keys.AccountID
	for n := 0; ; n++ {
		a := mAcct(n)
		if S.Has(shard.SlotOf(a[:])) && uS == (keys.AccountID{}) {
			uS = a
		} else if !S.Has(shard.SlotOf(a[:])) && uT == (keys.AccountID{}) {
			uT = a
		}
		if uS != (keys.AccountID{}) && uT != (keys.AccountID{}) {
			break
		}
	}
	ev := func(u keys.AccountID) *Command {
		return &Command{Op: OpPutUsageEvent, Event: &records.UsageEvent{EventID: "shared", UserID: u, AgentID: "a", Resource: "r", Quantity: 1, CostCents: 1, CreatedAt: 1}}
	}
	src.must(ev(uS))
	src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkS), []byte("k")), Value: []byte("v")}))
	dst.must(ev(uT))
	dst.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkInSlot(t, S, true)), []byte("own")), Value: []byte("1")}))
	dstBefore := rawDump(t, dst.f)
	srcBefore := mustDump(t, src.f)

	src.must(freezeCmd(3, S, 2, 4))
	var pairs []Pair
	if err := src.f.ExportChunks(t.Context(), 3, nil, Limits{}, 0, func(p []Pair) error { pairs = append(pairs, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 2 {
		t.Fatalf("exported %d pairs", len(pairs))
	}
	// The kv pair alone ingests; the event collides.
	if pairs[0].Key[0] != keys.TableUsageEvents {
		t.Fatalf("first pair %x", pairs[0].Key)
	}
	pairs[0], pairs[1] = pairs[1], pairs[0]
	dst.must(ingestCmd(3, S, pairs[0]))
	res := dst.apply(ingestCmd(3, S, pairs[1]))
	if !errors.Is(res.Err, ErrInvalidCommand) || !strings.Contains(res.Err.Error(), "usage_events") {
		t.Fatalf("colliding ingest: %v", res.Err)
	}
	// Abort: unfreeze the source, drop what the target ingested.
	src.must(unfreezeCmd(3))
	if err := src.f.ExportSlots(t.Context(), 3, nil, func(k, v []byte) error { return nil }); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("export after unfreeze: %v", err)
	}
	for {
		r := dst.must(dropCmd(3, 1))
		if r.Remaining == 0 {
			break
		}
	}
	conflictRes := dst.apply(ingestCmd(3, S, pairs[0]))
	if !errors.Is(conflictRes.Err, ErrMoveConflict) {
		t.Fatalf("ingest after abort: %v", conflictRes.Err)
	}
	got := rawDump(t, dst.f)
	var data []KV
	for _, kv := range got {
		if kv.Key[0] != metaPrefix {
			data = append(data, kv)
		}
	}
	var want []KV
	for _, kv := range dstBefore {
		if kv.Key[0] != metaPrefix {
			want = append(want, kv)
		}
	}
	if d := diffKVs(data, want); d != "" {
		t.Fatalf("target after abort: %s", d)
	}
	if d := diffKVs(mustDump(t, src.f), srcBefore); d != "" {
		t.Fatalf("source after abort: %s", d)
	}
	if src.f.Owned() != S {
		t.Fatalf("source owns %v", src.f.Owned())
	}
	// The aborted move's slots may come again in a new move.
	dst.must(ingestCmd(4, S, pairs[0]))
}

// TestSlotOfKey: the slot of a key of every table.
func TestSlotOfKey(t *testing.T) {
	r := newReplica(t, 1, nil)
	u, acc := mUID(1), mAcct(2)
	su, sa := shard.SlotOf(u[:]), shard.SlotOf(acc[:])
	a, s := mAgent(1, 0), mSession(1, 0)
	sess := &records.SessionRecord{SessionID: s, AgentID: a, UserID: u, CreatedAt: 1}
	r.must(&Command{Op: OpPutAgent, Agent: &records.AgentRecord{AgentID: a, UserID: u, Name: "n", Spec: records.AgentSpecRecord{RuntimeVersion: "v"}, CreatedAt: 1, UpdatedAt: 1}})
	r.must(&Command{Op: OpPutSession, Session: sess})
	r.must(&Command{Op: OpPutUser, User: &records.UserRecord{UserID: u, Email: "e", CreatedAt: 1, LastSeenAt: 1}})
	r.must(putAccountCmd(&records.Account{UserID: acc, CreatedAt: 1, UpdatedAt: 1}))
	amt := int64(5)
	r.must(&Command{Op: OpAddCredits, AccountID: &acc, Amount: &amt, Time: 1, Tx: &records.CreditTransaction{TransactionID: mTx(2, 0), UserID: acc, AmountCents: 5, TransactionType: records.TxGrant, CreatedAt: 1}})
	r.must(&Command{Op: OpPutUsageEvent, Event: &records.UsageEvent{EventID: "e1", UserID: acc, AgentID: "a", Resource: "r", CreatedAt: 1}})
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte("rk"), []byte("k"))}))
	r.must(&Command{Op: OpEnsureDefaultPool, Time: 1})
	r.must(&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("RPUSH", "asset:l", "x")}}})
	r.must(&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("HSET", "{t}:h", "f", "v")}}})
	r.must(&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("SADD", "z", "m")}}})
	want := map[byte]shard.Slot{
		keys.TableAgents: su, keys.TableAgentsByStatus: su, keys.TableSessions: su, keys.TableSessionsByAgent: su,
		keys.TableUsers: su, keys.TableAgentOwners: su, keys.TableAccounts: sa, keys.TableTransactions: sa,
		keys.TableTransactionsByUser: sa, keys.TableUsageEvents: sa, keys.TableKV: shard.SlotOf([]byte("rk")),
		keys.TablePools: shard.SlotOf([]byte(keys.PoolsRoutingKey)),
	}
	seen := map[byte]bool{}
	for _, kv := range mustDump(t, r.f) {
		got, ok := slotOfStored(t, r.f, kv)
		if !ok {
			t.Fatalf("%s key %x: no slot", keys.TableName(kv.Key[0]), kv.Key)
		}
		w, known := want[kv.Key[0]]
		if !known {
			rk, _, _ := keys.RoutingKeyOf(kv.Key)
			w = shard.SlotOf(rk)
			if !strings.HasPrefix(keys.TableName(kv.Key[0]), "redis_") {
				t.Fatalf("unexpected table %s", keys.TableName(kv.Key[0]))
			}
		}
		if got != w {
			t.Errorf("%s key %x: slot %d, want %d", keys.TableName(kv.Key[0]), kv.Key, got, w)
		}
		seen[kv.Key[0]] = true
	}
	for tbl := range want {
		if !seen[tbl] {
			t.Errorf("table %s not covered", keys.TableName(tbl))
		}
	}
	if !seen[keys.TableRedisList] || !seen[keys.TableRedisHash] || !seen[keys.TableRedisSet] || !seen[keys.TableRedisScan] || !seen[keys.TableRedisKeys] {
		t.Error("a Redis table not covered")
	}
	// sessions_by_agent falls back on the agent's owner; meta has no slot.
	r.must(batchCmd(nil, Mutation{Kind: MutDelete, Key: keys.Session(s)}))
	if got, ok := slotOfStored(t, r.f, KV{Key: keys.SessionByAgent(a, s)}); !ok || got != su {
		t.Fatalf("index entry without its session: %d %v", got, ok)
	}
	if _, ok := slotOfStored(t, r.f, KV{Key: metaSlots}); ok {
		t.Fatal("a meta key has a slot")
	}
	if _, ok := slotOfStored(t, r.f, KV{Key: keys.Session(s), Value: []byte("junk")}); ok {
		t.Fatal("a corrupt record has a slot")
	}
}

// TestSlotFencingPerOp: with the user's slot frozen, every op of that user
// is refused with MovedError and writes nothing; a multi refuses only its
// commands of frozen slots; an update by session id alone is refused by
// the slot of the stored session.
func TestSlotFencingPerOp(t *testing.T) {
	r := newReplica(t, 1, nil)
	u, acc := uid(1), acct(1)
	u7 := uid(7)
	if shard.SlotOf(u[:]) == shard.SlotOf(acc[:]) || shard.SlotOf(u[:]) == shard.SlotOf(u7[:]) {
		t.Fatal("test ids share a slot")
	}
	r.must(putAgentCmd(agentRec(1, 2, records.AgentRunning)))
	sessOf := func(n int, user keys.UserID) *records.SessionRecord {
		return &records.SessionRecord{SessionID: sid(n), AgentID: aid(2), UserID: user, CreatedAt: 1}
	}
	r.must(putSessionCmd(sessOf(3, u)))
	r.must(putAccountCmd(account(1, 100, 100, 0)))
	r.must(&Command{Op: OpEnsureDefaultPool, Time: 1})
	S := shard.SlotSetOf(shard.SlotOf(u[:]), shard.SlotOf([]byte(keys.PoolsRoutingKey)), shard.SlotOf([]byte("asset")))
	r.must(freezeCmd(1, S, 2, 3))
	before := rawDump(t, r.f)
	a, s := aid(2), sid(3)
	for _, c := range []*Command{
		putAgentCmd(agentRec(1, 5, records.AgentRunning)),
		{Op: OpDeleteAgent, UserID: &u, AgentID: &a},
		{Op: OpUpdateAgentStatus, UserID: &u, AgentID: &a, Status: ptr(uint8(records.AgentFailed)), Time: 1},
		putSessionCmd(sessOf(4, u)),
		{Op: OpUpdateSessionStatus, SessionID: &s, Status: ptr(uint8(records.SessionExpired)), Time: 1},
		{Op: OpUpdateSessionStatus, SessionID: &s, UserID: &u, Status: ptr(uint8(records.SessionExpired)), Time: 1},
		{Op: OpPutUser, User: &records.UserRecord{UserID: u, Email: "x@y"}},
		{Op: OpCreatePool, Pool: poolRec("p9", "u0", records.VisibilityPrivate)},
		{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("SET", "asset:x", "1")}}},
		{Op: OpRedisMulti, Redis: &RedisTx{Cmds: []RedisArgv{argv("GET", "other")}, Watch: []RedisWatch{{Key: []byte("asset:y")}}}},
		batchCmd(nil, Mutation{Kind: MutPut, Key: keys.Agent(u, aid(9)), Value: []byte("x")}),
		// a session of another user taking over the frozen user's session id
		putSessionCmd(sessOf(3, uid(7))),
	} {
		res := r.apply(c)
		if _, ok := res.Err.(*MovedError); !ok {
			t.Fatalf("%s: %+v, want *MovedError", c.Op, res)
		}
		if res.Succeeded {
			t.Fatalf("%s succeeded", c.Op)
		}
	}
	if d := diffKVs(before, rawDump(t, r.f)); d != "" {
		t.Fatalf("refused commands wrote: %s", d)
	}
	// A multi: the kept account's credit applies, the frozen user's
	// status update does not.
	amt := int64(5)
	out := r.f.Apply(cmdLog(uint64(len(r.logs)+100), mustEncode(t, multiCmd(
		&Command{Op: OpAddCredits, AccountID: &acc, Amount: &amt, Time: 1, Tx: creditTx(1, 1, 5)},
		&Command{Op: OpUpdateAgentStatus, UserID: &u, AgentID: &a, Status: ptr(uint8(records.AgentFailed)), Time: 1},
	)))).([]*Result)
	if out[0].Err != nil || !out[0].Succeeded {
		t.Fatalf("kept command in multi: %+v", out[0])
	}
	movedErr(t, out[1].Err)
}

// TestRestrictSlots: a shard that owns every slot and never moved one is
// narrowed once; repeating it succeeds; any other state is refused and
// changes nothing; writes of the other slots are then refused.
func TestRestrictSlots(t *testing.T) {
	r := newReplica(t, 1, nil)
	S := shard.SlotSetOf(0, 1, 2, 3, 100)
	rkIn, rkOut := rkInSlot(t, S, false), rkInSlot(t, S, true)
	r.must(restrictCmd(S))
	if r.f.Owned() != S {
		t.Fatalf("owned %v, want %v", r.f.Owned(), S)
	}
	r.must(restrictCmd(S)) // idempotent
	before := rawDump(t, r.f)
	res := r.apply(restrictCmd(shard.SlotSetOf(0, 1)))
	if !errors.Is(res.Err, ErrMoveConflict) || !strings.Contains(res.Err.Error(), "owns slots 0-3,100") {
		t.Fatalf("restrict again with other slots: %v", res.Err)
	}
	if d := diffKVs(before, rawDump(t, r.f)); d != "" || r.f.Owned() != S {
		t.Fatalf("refused restrict wrote: %s", d)
	}
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkIn), []byte("k")), Value: []byte("v")}))
	res = r.apply(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rkOut), []byte("k")), Value: []byte("v")}))
	movedErr(t, res.Err)
	// Survives a snapshot and restore.
	c := newReplica(t, 1, nil)
	if err := c.f.Restore(reader(snapshotBytes(t, r.f))); err != nil {
		t.Fatal(err)
	}
	if c.f.Owned() != S {
		t.Fatalf("restored owned %v", c.f.Owned())
	}
	// A shard with a move record is refused even if it owns every slot
	// again (a freeze then unfreeze leaves no record; an incoming one does).
	m := newReplica(t, 1, ptr(shard.AllSlots().Minus(shard.SlotSetOf(9))))
	m.must(adoptCmd(1, shard.SlotSetOf(9)))
	if m.f.Owned() != shard.AllSlots() {
		t.Fatal("adopt did not complete the set")
	}
	if res := m.apply(restrictCmd(S)); !errors.Is(res.Err, ErrMoveConflict) || !strings.Contains(res.Err.Error(), "1 move records") {
		t.Fatalf("restrict after a move: %v", res.Err)
	}
}

func restrictCmd(s shard.SlotSet) *Command {
	return &Command{Op: OpRestrictSlots, Move: &SlotMove{Slots: &s}}
}

// FuzzSlotMoves drives one FSM with slot move and data commands drawn
// from the input: nothing panics, a refused command writes nothing, the
// owned slots never overlap a frozen or incoming move's, and a snapshot
// restores the same ownership and data.
func FuzzSlotMoves(f *testing.F) {
	f.Add([]byte{0, 1, 3, 2, 5, 4, 1, 0, 9, 3})
	f.Add([]byte{2, 0, 7, 2, 1, 7, 3, 0, 7, 4, 0, 7, 4, 1, 7})
	f.Add([]byte{0, 0, 0, 4, 0, 1, 4, 0, 1, 4, 0, 1, 1, 0, 0})
	f.Add([]byte{5, 0, 9, 5, 0, 9, 0, 1, 9, 5, 0, 9, 1, 1, 9})
	f.Add([]byte{0, 0, 9, 9, 1, 9, 6, 0, 9, 9, 1, 10, 3, 1, 9, 4, 1, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		initial := ptr(shard.AllSlots().Minus(shard.SlotSetOf(0, 1, 2, 3)))
		if len(data)%2 == 1 {
			initial = nil // every slot: OpRestrictSlots may apply
		}
		r := newReplica(t, 1, initial)
		for len(data) >= 3 {
			op, id, arg := data[0]%10, uint64(data[1]%3)+1, data[2]
			data = data[3:]
			slots := shard.SlotSetOf(shard.Slot(arg%8), shard.Slot(arg/8%8))
			rk := rkInSlot(t, slots, false)
			var c *Command
			switch op {
			case 0:
				c = freezeCmd(id, slots, 2, uint64(arg%3)+1)
			case 1:
				c = unfreezeCmd(id)
			case 2:
				c = ingestCmd(id, slots, kvPair(rk, "k", string(rune('a'+arg%3))))
			case 3:
				c = adoptCmd(id, slots)
			case 4:
				c = dropCmd(id, uint32(arg%3)+1)
			case 5:
				c = restrictCmd(shard.AllSlots().Minus(slots))
			case 9: // replace one key, delete another
				c = syncCmd(id, slots, []Pair{kvPair(rk, "k", string(rune('a'+arg%3)))}, keys.KV([]byte(rk), []byte{arg % 4}))
			default:
				c = batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(rk), []byte{arg}), Value: []byte{op}})
			}
			before := rawDump(t, r.f)
			res := r.apply(c)
			if res.Err != nil {
				if d := diffKVs(before, rawDump(t, r.f)); d != "" {
					t.Fatalf("refused %s (%v) wrote: %s", c.Op, res.Err, d)
				}
			}
			owned := r.f.Owned()
			for _, m := range r.f.Moves() {
				if (m.State == MoveFrozen || m.State == MoveIncoming || m.State == MoveAborted) && owned.Overlaps(m.Slots) {
					t.Fatalf("owned %v overlaps move %+v", owned, m)
				}
			}
		}
		if len(r.logs) == 0 {
			return // a snapshot at index 0 restores nothing
		}
		c := newReplica(t, 1, nil)
		if err := c.f.Restore(reader(snapshotBytes(t, r.f))); err != nil {
			t.Fatal(err)
		}
		if c.f.Owned() != r.f.Owned() || !reflectDeepEqualMoves(c.f.Moves(), r.f.Moves()) {
			t.Fatalf("restore changed ownership: %v %+v vs %v %+v", c.f.Owned(), c.f.Moves(), r.f.Owned(), r.f.Moves())
		}
		if d := diffKVs(rawDump(t, c.f), rawDump(t, r.f)); d != "" {
			t.Fatalf("restore: %s", d)
		}
	})
}

func reflectDeepEqualMoves(a, b []MoveRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].State != b[i].State || a[i].Slots != b[i].Slots || string(a[i].Cursor) != string(b[i].Cursor) || a[i].Dropped != b[i].Dropped {
			return false
		}
	}
	return true
}

// TestPullResume: a pull cut off after some chunks resumes after the last
// key the target ingested (MoveRecord.Pulled) and sends exactly the rest.
func TestPullResume(t *testing.T) {
	src := newReplica(t, 1, nil)
	S := shard.SlotSetOf(1, 2, 3, 70, 71, 200)
	for x := 0; x < shard.NumSlots; x += 3 {
		for i := 0; i < 4; i++ {
			src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(slotRKs[x]), []byte(fmt.Sprint(i))), Value: []byte("v")}))
		}
	}
	for _, s := range S.Slots() {
		src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte(slotRKs[s]), []byte("extra")), Value: []byte("w")}))
	}
	src.must(freezeCmd(4, S, 2, 3))
	export := func(after []byte) (chunks [][]Pair, all []Pair) {
		if err := src.f.ExportChunks(t.Context(), 4, after, Limits{MaxBatchOps: 3}, 0, func(p []Pair) error {
			chunks = append(chunks, p)
			all = append(all, p...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return chunks, all
	}
	chunks, all := export(nil)
	if len(chunks) < 4 {
		t.Fatalf("%d chunks of %d pairs: want several", len(chunks), len(all))
	}
	dst := newReplica(t, 2, &shard.SlotSet{})
	if err := dst.f.ExportSlots(t.Context(), 4, nil, func(k, v []byte) error { return nil }); !errors.Is(err, ErrMoveConflict) {
		t.Fatalf("export from the target: %v", err)
	}
	dst.must(ingestCmd(4, S, chunks[0]...))
	dst.must(ingestCmd(4, S, chunks[1]...))
	dst.must(ingestCmd(4, S, chunks[0]...)) // a restarted pull's first chunk again: no step back
	done := len(chunks[0]) + len(chunks[1])
	rec := dst.f.Moves()[0]
	if last := chunks[1][len(chunks[1])-1].Key; string(rec.Pulled) != string(last) || rec.PulledPairs != uint64(done) {
		t.Fatalf("record after two chunks: pulled %x (%d pairs), want %x (%d)", rec.Pulled, rec.PulledPairs, last, done)
	}
	_, rest := export(rec.Pulled)
	if d := diffKVs(pairsKV(rest), pairsKV(all[done:])); d != "" {
		t.Fatalf("resumed export differs from the rest: %s", d)
	}
	for _, c := range chunks[2:] {
		dst.must(ingestCmd(4, S, c...))
	}
	dst.must(adoptCmd(4, S))
	if d := diffKVs(mustDump(t, dst.f), pairsKV(all)); d != "" {
		t.Fatalf("target after the resumed pull: %s", d)
	}
}

// TestIngestChecksEveryPair: an ingest of several pairs refuses the whole
// command when any key (not only the first) is stored with another value,
// here or earlier in the same apply run (the batch), accepts keys stored
// with the same value, and routes a sessions_by_agent entry through the
// session record earlier in the same chunk.
func TestIngestChecksEveryPair(t *testing.T) {
	S := shard.SlotSetOf(9)
	rk := slotRKs[9]
	k := func(i int, v string) Pair { return kvPair(rk, fmt.Sprintf("k%d", i), v) }
	dst := newReplica(t, 2, &shard.SlotSet{})
	dst.must(ingestCmd(5, S, k(1, "a"), k(3, "a"), k(5, "a")))
	dst.must(ingestCmd(5, S, k(0, "x"), k(3, "a"), k(4, "y"))) // k3 again, same value
	before := rawDump(t, dst.f)
	res := dst.apply(ingestCmd(5, S, k(2, "n"), k(5, "changed"), k(6, "n")))
	if !errors.Is(res.Err, ErrInvalidCommand) || !strings.Contains(res.Err.Error(), fmt.Sprintf("%x", k(5, "").Key)) {
		t.Fatalf("a pair in the middle stored with another value: %v, want a refusal naming it", res.Err)
	}
	if d := diffKVs(before, rawDump(t, dst.f)); d != "" {
		t.Fatalf("the refused ingest wrote: %s", d)
	}
	// Two entries in one apply run: the second sees the first's pair,
	// which is still in the run's batch.
	l1 := cmdLog(uint64(len(dst.logs)+1), mustEncode(t, ingestCmd(5, S, k(7, "v"))))
	l2 := cmdLog(uint64(len(dst.logs)+2), mustEncode(t, ingestCmd(5, S, k(6, "q"), k(7, "other"))))
	dst.logs = append(dst.logs, l1, l2)
	out := dst.f.ApplyBatch([]*raft.Log{l1, l2})
	if r := out[0].(*Result); r.Err != nil {
		t.Fatalf("first entry of the run: %v", r.Err)
	}
	if r := out[1].(*Result); !errors.Is(r.Err, ErrInvalidCommand) || !strings.Contains(r.Err.Error(), "another value") {
		t.Fatalf("second entry, colliding with the first in the same run: %v", r.Err)
	}

	// A user's registry data as one chunk: its sessions_by_agent entry is
	// routed through the session record before it in the chunk.
	src := newReplica(t, 1, nil)
	u := mUID(3)
	a, sid := mAgent(3, 0), mSession(3, 0)
	src.must(&Command{Op: OpPutAgent, Agent: &records.AgentRecord{AgentID: a, UserID: u, Name: "n", Spec: records.AgentSpecRecord{RuntimeVersion: "v"}, CreatedAt: 1, UpdatedAt: 1}})
	src.must(&Command{Op: OpPutSession, Session: &records.SessionRecord{SessionID: sid, AgentID: a, UserID: u, CreatedAt: 1}})
	us := shard.SlotSetOf(shard.SlotOf(u[:]))
	src.must(freezeCmd(8, us, 2, 3))
	var chunks [][]Pair
	if err := src.f.ExportChunks(t.Context(), 8, nil, Limits{}, 0, func(p []Pair) error { chunks = append(chunks, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 {
		t.Fatalf("%d chunks, want 1", len(chunks))
	}
	routed := false
	for _, p := range chunks[0] {
		routed = routed || p.Key[0] == keys.TableSessionsByAgent
	}
	if !routed {
		t.Fatal("the chunk has no sessions_by_agent entry")
	}
	dst2 := newReplica(t, 3, &shard.SlotSet{})
	dst2.must(ingestCmd(8, us, chunks[0]...))
	if d := diffKVs(mustDump(t, dst2.f), pairsKV(chunks[0])); d != "" {
		t.Fatalf("target after the ingest: %s", d)
	}
}

func pairsKV(ps []Pair) []KV {
	out := make([]KV, len(ps))
	for i, p := range ps {
		out[i] = KV{Key: p.Key, Value: p.Value}
	}
	return out
}
