package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// replica is an FSM under test with its own log, kept for replays.
type replica struct {
	t    testing.TB
	f    *FSM
	dir  string
	logs []*raft.Log
}

func newReplica(t testing.TB, id uint32, initial *shard.SlotSet) *replica {
	dir := t.TempDir()
	cfg := testConfig(id, dir)
	cfg.InitialSlots = initial
	return &replica{t: t, f: mustOpen(t, cfg, nil), dir: dir}
}

// apply proposes c as the next entry and returns its result.
func (r *replica) apply(c *Command) *Result {
	r.t.Helper()
	l := cmdLog(uint64(len(r.logs)+1), mustEncode(r.t, c))
	r.logs = append(r.logs, l)
	return r.f.Apply(l).(*Result)
}

// must applies c and fails unless it succeeded.
func (r *replica) must(c *Command) *Result {
	r.t.Helper()
	res := r.apply(c)
	if res.Err != nil || !res.Succeeded {
		r.t.Fatalf("%s: %+v", c.Op, res)
	}
	return res
}

// rawDump is every key of the DB but the replica-local meta (applied
// index, shard id): data, owned slots and move records.
func rawDump(t testing.TB, f *FSM) []KV {
	t.Helper()
	it, err := f.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []KV
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key(); k[0] == metaPrefix && !isReplicatedMeta(k) {
			continue
		}
		out = append(out, KV{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	return out
}

// slotsOfDump maps every data key of f to its slot (ok false: none).
func slotOfStored(t testing.TB, f *FSM, kv KV) (shard.Slot, bool) {
	t.Helper()
	s, ok, err := SlotOfKey(f.db, kv.Key, kv.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s, ok
}

func movedErr(t testing.TB, err error) *MovedError {
	t.Helper()
	var me *MovedError
	if !errors.As(err, &me) {
		t.Fatalf("error %v, want *MovedError", err)
	}
	return me
}

func freezeCmd(id uint64, s shard.SlotSet, target shard.ID, ver uint64) *Command {
	return &Command{Op: OpFreezeSlots, Move: &SlotMove{ID: id, Slots: &s, Peer: target, MapVersion: ver}}
}
func unfreezeCmd(id uint64) *Command { return &Command{Op: OpUnfreezeSlots, Move: &SlotMove{ID: id}} }
func ingestCmd(id uint64, s shard.SlotSet, pairs ...Pair) *Command {
	return &Command{Op: OpIngestSlots, Move: &SlotMove{ID: id, Slots: &s, Pairs: pairs}}
}
func adoptCmd(id uint64, s shard.SlotSet) *Command {
	return &Command{Op: OpAdoptSlots, Move: &SlotMove{ID: id, Slots: &s}}
}
func dropCmd(id uint64, max uint32) *Command {
	return &Command{Op: OpDropSlots, Move: &SlotMove{ID: id, Max: max}}
}

// Many users, so that their data spreads over many slots.
const moveUsers = 48

func mUID(i int) keys.UserID     { return keys.UserID(idBytes(0x11, i, 32)) }
func mAcct(i int) keys.AccountID { return keys.AccountID(idBytes(0x61, i, 16)) }
func mAgent(i, j int) keys.AgentID {
	a := keys.AgentID(idBytes(0xa1, i, 32))
	a[1] = byte(j)
	return a
}
func mSession(i, j int) keys.SessionID {
	s := keys.SessionID(idBytes(0x51, i, 16))
	s[1] = byte(j)
	return s
}
func mTx(i, j int) keys.TransactionID {
	var id keys.TransactionID
	id[4], id[5], id[14], id[15] = byte(j), byte(i), byte(i), 0x78
	return id
}
func mEvent(i, j int) string { return fmt.Sprintf("ev-%d-%d", i, j) }

// genUserData returns commands that give user i data in every table of
// the registry, the ledger, kv and Redis ({u<i>}:* keys).
func genUserData(rng *rand.Rand, i int) []*Command {
	now := int64(1_700_000_000_000 + i)
	u, acc := mUID(i), mAcct(i)
	var out []*Command
	out = append(out, &Command{Op: OpPutUser, User: &records.UserRecord{UserID: u, Email: "u@x", CreatedAt: now, LastSeenAt: now}})
	for j := 0; j < 1+rng.IntN(3); j++ {
		a := &records.AgentRecord{AgentID: mAgent(i, j), UserID: u, Name: "a", Status: records.AgentState(rng.IntN(6)),
			Spec: records.AgentSpecRecord{CPUMillicores: 1, MemoryMB: 1, RuntimeVersion: "v"}, CreatedAt: now, UpdatedAt: now}
		out = append(out, &Command{Op: OpPutAgent, Agent: a})
		for k := 0; k < rng.IntN(3); k++ {
			s := &records.SessionRecord{SessionID: mSession(i, j*4+k), AgentID: a.AgentID, UserID: u,
				Status: records.SessionActive, CreatedAt: now}
			out = append(out, &Command{Op: OpPutSession, Session: s})
		}
	}
	out = append(out, putAccountCmd(&records.Account{UserID: acc, CreatedAt: now, UpdatedAt: now}))
	credit := int64(10_000)
	out = append(out, &Command{Op: OpAddCredits, AccountID: &acc, Amount: &credit, Time: now,
		Tx: &records.CreditTransaction{TransactionID: mTx(i, 0), UserID: acc, AmountCents: credit, TransactionType: records.TxPurchase, CreatedAt: now}})
	for j := 1; j < 1+rng.IntN(4); j++ {
		e := &records.UsageEvent{EventID: mEvent(i, j), UserID: acc, AgentID: "a", Resource: "r", Quantity: 1, CostCents: 5, CreatedAt: now}
		out = append(out, &Command{Op: OpProcessUsage, Event: e, Time: now,
			Tx: &records.CreditTransaction{TransactionID: mTx(i, j), UserID: acc, AmountCents: 5, TransactionType: records.TxUsage, EventID: e.EventID, CreatedAt: now}})
	}
	rk := []byte(fmt.Sprintf("rk-%d", i))
	out = append(out, batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV(rk, []byte("a")), Value: []byte("1")},
		Mutation{Kind: MutPut, Key: keys.KV(rk, []byte("b")), Value: nil}))
	out = append(out, &Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: rk, TTLMs: 5000}, Time: now})
	tag := fmt.Sprintf("{u%d}", i)
	out = append(out,
		&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("SET", tag+":s", "v")}}},
		&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("HSET", tag+":h", "f1", "1", "f2", "2")}}},
		&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("SADD", tag+":set", "m1", "m2")}}},
		&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("RPUSH", tag+":l", "x", "y", "z")}}},
	)
	return out
}

// genSharedData: the namespaces (pools, the asset catalogue) and some
// cross-user writes.
func genSharedData() []*Command {
	return []*Command{
		{Op: OpEnsureDefaultPool, Time: 1},
		{Op: OpCreatePool, Pool: poolRec("p1", "u0", records.VisibilityPublic)},
		{Op: OpRegisterBot, Bot: botRec("bot1", "p1", "u0"), Actor: "u0"},
		{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r1", LastSeen: 4}},
		{Op: OpSetGuildPool, GuildID: "g1", PoolID: "p1", Actor: "u0", Time: 5},
		{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("HSET", "asset:metadata:x", "name", "x")}}},
		{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{argv("SADD", "asset:index", "x")}}},
	}
}

// populate fills r with the data of moveUsers users and the namespaces,
// and gives leases things to hold: each user's kv key "leased" (its lease
// granted by genUserData), its first agent (a lease of its user id) and a
// runner (a lease of the pools namespace). It returns the leases by the
// routing key they were granted for.
func populate(t *testing.T, r *replica, rng *rand.Rand) map[string]uint64 {
	leases := map[string]uint64{}
	var cmds []*Command
	for i := 0; i < moveUsers; i++ {
		cmds = append(cmds, genUserData(rng, i)...)
	}
	cmds = append(cmds, genSharedData()...)
	for _, c := range cmds {
		res := r.must(c)
		if c.Op == OpLeaseGrant {
			leases[string(c.Lease.RoutingKey)] = res.LeaseID
		}
	}
	grant := func(rk []byte) uint64 {
		id := r.must(&Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: rk, TTLMs: 7000}, Time: 9}).LeaseID
		leases[string(rk)] = id
		return id
	}
	for i := 0; i < moveUsers; i++ {
		rk := []byte(fmt.Sprintf("rk-%d", i))
		r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV(rk, []byte("leased")), Value: []byte("x"), Lease: leases[string(rk)]}))
		u := mUID(i)
		r.must(&Command{Op: OpAgentHeartbeat, UserID: &u, AgentID: ptr(mAgent(i, 0)), Time: 10, LeaseID: grant(u[:])})
	}
	r.must(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r-leased", LastSeen: 4}, LeaseID: grant([]byte(keys.PoolsRoutingKey))})
	checkLeaseTables(t, r.f)
	return leases
}

// userRoutingKeys are the routing keys of user i's data.
func userRoutingKeys(i int) [][]byte {
	u, acc := mUID(i), mAcct(i)
	return [][]byte{u[:], acc[:], []byte(fmt.Sprintf("rk-%d", i)), []byte(fmt.Sprintf("u%d", i))}
}

// pickSlots picks a random set of slots, about a third of them.
func pickSlots(rng *rand.Rand) shard.SlotSet {
	var s shard.SlotSet
	for x := 0; x < shard.NumSlots; x++ {
		if rng.IntN(3) == 0 {
			s.Add(shard.Slot(x))
		}
	}
	s.Add(shard.SlotOf([]byte(keys.PoolsRoutingKey)))
	return s
}

// TestSlotMoveModel moves a random slot set from A to a fresh B and checks
// every step against the data A held.
func TestSlotMoveModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { testSlotMove(t, seed) })
	}
}

func testSlotMove(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	a := newReplica(t, 1, nil)
	leases := populate(t, a, rng)
	before := rawDump(t, a.f)
	S := pickSlots(rng)
	const moveID, target, ver = 7, 2, 5
	redisReads := func(i int) []RedisArgv {
		tag := fmt.Sprintf("{u%d}", i)
		return []RedisArgv{argv("HGETALL", tag+":h"), argv("LRANGE", tag+":l", "0", "-1"), argv("GET", tag+":s"), argv("SMEMBERS", tag+":set")}
	}
	answers := map[string]string{} // the answers A gave before the move
	for i := 0; i < moveUsers; i++ {
		for _, cmd := range redisReads(i) {
			v, err := a.f.RedisRead(cmd)
			if err != nil {
				t.Fatal(err)
			}
			answers[fmt.Sprintf("%q", cmd)] = string(v.Append(nil, 2))
		}
	}

	inS := func(f *FSM, kvs []KV) (moved, kept []KV) {
		for _, kv := range kvs {
			if kv.Key[0] == metaPrefix {
				continue
			}
			s, ok := slotOfStored(t, f, kv)
			if !ok {
				t.Fatalf("key %x has no slot", kv.Key)
			}
			if S.Has(s) {
				moved = append(moved, kv)
			} else {
				kept = append(kept, kv)
			}
		}
		return
	}
	movedKVs, keptKVs := inS(a.f, before)
	if len(movedKVs) == 0 || len(keptKVs) == 0 {
		t.Fatalf("degenerate split: %d moved, %d kept", len(movedKVs), len(keptKVs))
	}

	// Freeze; a re-applied freeze answers the recorded index.
	fr := a.must(freezeCmd(moveID, S, target, ver))
	if fr.MoveIndex != fr.Index {
		t.Fatalf("freeze index %d at entry %d", fr.MoveIndex, fr.Index)
	}
	if again := a.must(freezeCmd(moveID, S, target, ver)); again.MoveIndex != fr.Index {
		t.Fatalf("re-applied freeze: index %d, want %d", again.MoveIndex, fr.Index)
	}
	if a.f.Owned() != shard.AllSlots().Minus(S) {
		t.Fatalf("owned %v", a.f.Owned())
	}

	// Every user's writes: refused on moved slots (nothing written),
	// applied on the others.
	for i := 0; i < moveUsers; i++ {
		for _, c := range genUserData(rng, i) {
			snap := rawDump(t, a.f)
			res := a.apply(c)
			var me *MovedError
			if errors.As(res.Err, &me) {
				if !S.Has(me.Slot) || me.Target != target || me.MapVersion != ver {
					t.Fatalf("%s: %+v", c.Op, me)
				}
				if d := diffKVs(snap, rawDump(t, a.f)); d != "" {
					t.Fatalf("refused %s wrote: %s", c.Op, d)
				}
				continue
			}
			// Kept slots: applied as usual (domain rejections such as
			// insufficient credits for the replayed charges are fine).
			if rk := commandRoutingKey(c); rk != nil && S.Has(shard.SlotOf(rk)) {
				t.Fatalf("%s of a moved slot not refused: %+v", c.Op, res)
			}
		}
	}
	// The moved slots' data did not change.
	frozenBefore, _ := inS(a.f, before)
	after := rawDump(t, a.f)
	frozenNow, _ := inS(a.f, after)
	if d := diffKVs(frozenBefore, frozenNow); d != "" {
		t.Fatalf("frozen data changed: %s", d)
	}
	keptAtFreeze := func() []KV { _, k := inS(a.f, rawDump(t, a.f)); return k }()

	// Reads: A refuses the moved users, serves the others.
	for i := 0; i < moveUsers; i++ {
		for _, rk := range userRoutingKeys(i) {
			err := a.f.CheckRoutingKey(rk)
			if S.Has(shard.SlotOf(rk)) {
				if me := movedErr(t, err); me.Target != target || me.MapVersion != ver {
					t.Fatalf("moved error %+v", me)
				}
			} else if err != nil {
				t.Fatalf("kept routing key %q: %v", rk, err)
			}
		}
	}
	// Redis listings on A leave the moved keys out.
	v, err := a.f.RedisRead(argv("KEYS", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range v.Elems {
		if S.Has(shard.SlotOf(keys.RedisRoutingKey(k.Str))) {
			t.Fatalf("KEYS on A lists moved key %q", k.Str)
		}
	}

	// Export, ingest into a fresh B, adopt.
	b := newReplica(t, target, &shard.SlotSet{})
	var chunks [][]Pair
	if err := a.f.ExportChunks(context.Background(), moveID, nil, Limits{MaxBatchOps: 17}, 0, func(p []Pair) error {
		chunks = append(chunks, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var exported []KV
	for _, c := range chunks {
		for _, p := range c {
			exported = append(exported, KV{p.Key, p.Value})
		}
	}
	if d := diffKVs(exported, frozenNow); d != "" {
		t.Fatalf("export differs from the frozen data: %s", d)
	}
	for i, c := range chunks {
		b.must(ingestCmd(moveID, S, c...))
		if i == 0 {
			b.must(ingestCmd(moveID, S, c...)) // the same pairs again: fine
		}
		if err := b.f.CheckSlot(S.Slots()[0]); err == nil {
			t.Fatal("B serves an incoming slot")
		}
	}
	// Before adopt, B refuses commands of the incoming slots.
	for i := 0; i < moveUsers; i++ {
		if rk := mUID(i); S.Has(shard.SlotOf(rk[:])) {
			res := b.apply(&Command{Op: OpPutUser, User: &records.UserRecord{UserID: rk, Email: "n@x", CreatedAt: 1, LastSeenAt: 1}})
			movedErr(t, res.Err)
			break
		}
	}
	b.must(adoptCmd(moveID, S))
	b.must(adoptCmd(moveID, S))
	if b.f.Owned() != S {
		t.Fatalf("B owns %v, want %v", b.f.Owned(), S)
	}
	if d := diffKVs(mustDump(t, b.f), frozenNow); d != "" {
		t.Fatalf("B's data differs from A's frozen data: %s", d)
	}
	for i := 0; i < moveUsers; i++ {
		for _, rk := range userRoutingKeys(i) {
			errB := b.f.CheckRoutingKey(rk)
			if S.Has(shard.SlotOf(rk)) != (errB == nil) {
				t.Fatalf("B on %q: %v", rk, errB)
			}
		}
		// Reads on the new owner answer what A answered before the move.
		owner, other := a.f, b.f
		if S.Has(shard.SlotOf([]byte(fmt.Sprintf("u%d", i)))) {
			owner, other = b.f, a.f
		}
		for _, cmd := range redisReads(i) {
			got, err := owner.RedisRead(cmd)
			if err != nil {
				t.Fatal(err)
			}
			// (A's kept users took more writes since.)
			if want := answers[fmt.Sprintf("%q", cmd)]; owner == b.f && string(got.Append(nil, 2)) != want {
				t.Fatalf("%q: %q, want %q", cmd, got.Append(nil, 2), want)
			}
			if _, err := other.RedisRead(cmd); err == nil {
				t.Fatalf("the other shard answers %q", cmd)
			} else {
				movedErr(t, err)
			}
		}
	}
	// The ledger's idempotency moved with it: a seen event is a duplicate
	// on B, and a retry of a recorded charge answers its balance.
	checked := false
	for i := 0; i < moveUsers && !checked; i++ {
		acc := mAcct(i)
		if !S.Has(shard.SlotOf(acc[:])) {
			continue
		}
		if _, err := b.f.Get(eventKey(mEvent(i, 1))); err != nil {
			continue
		}
		e := &records.UsageEvent{EventID: mEvent(i, 1), UserID: acc, AgentID: "a", Resource: "r", Quantity: 1, CostCents: 5, CreatedAt: 1}
		other := &records.CreditTransaction{TransactionID: mTx(i, 200), UserID: acc, AmountCents: 5, TransactionType: records.TxUsage, CreatedAt: 1}
		res := b.apply(&Command{Op: OpProcessUsage, Event: e, Tx: other, Time: 2})
		if !errors.As(res.Err, new(*DuplicateEventError)) {
			t.Fatalf("seen event on B: %+v", res)
		}
		checked = true
	}

	if !checked {
		t.Fatal("no moved user with a processed event")
	}
	// The leases moved with their slots: records, attachments and each
	// slot's sequence.
	movedLeases := 0
	for rk, id := range leases {
		owner, other := a.f, b.f
		if S.Has(shard.SlotOf([]byte(rk))) {
			owner, other = b.f, a.f
			movedLeases++
		}
		if rec, err := owner.Lease(id); err != nil || string(rec.RoutingKey) != rk {
			t.Fatalf("lease %016x of %q on its owner: %+v %v", id, rk, rec, err)
		}
		if _, err := other.Lease(id); !errors.Is(err, ErrLeaseNotFound) {
			t.Fatalf("lease %016x of %q on the other shard: %v", id, rk, err)
		}
	}
	if movedLeases == 0 {
		t.Fatal("no lease moved")
	}
	checkLeaseTables(t, b.f)
	for i := 0; i < moveUsers; i++ {
		rk := []byte(fmt.Sprintf("rk-%d", i))
		if !S.Has(shard.SlotOf(rk)) {
			continue
		}
		id := leases[string(rk)]
		// A new lease of the slot on B continues the slot's sequence.
		if next := b.must(&Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: rk, TTLMs: 5000}, Time: 20}).LeaseID; next <= id || keys.LeaseSlot(next) != keys.LeaseSlot(id) {
			t.Fatalf("lease granted on B after the move: %016x, the moved one %016x", next, id)
		}
		// Ending the moved lease on B deletes its key there.
		if res := b.must(&Command{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: id}, Time: 20}); res.Deleted != 1 {
			t.Fatalf("revoke of a moved lease on B: %+v", res)
		}
		if _, err := b.f.Get(keys.KV(rk, []byte("leased"))); !errors.Is(err, ErrNotFound) {
			t.Fatal("the moved lease's key outlived it on B")
		}
		checkLeaseTables(t, b.f)
		break
	}
	// Snapshot and restore both sides at this point.
	for _, r := range []*replica{a, b} {
		c := newReplica(t, uint32(r.f.shard), &shard.SlotSet{})
		if err := c.f.Restore(reader(snapshotBytes(t, r.f))); err != nil {
			t.Fatal(err)
		}
		if c.f.Owned() != r.f.Owned() || !reflect.DeepEqual(c.f.Moves(), r.f.Moves()) {
			t.Fatalf("restored ownership %v %+v, want %v %+v", c.f.Owned(), c.f.Moves(), r.f.Owned(), r.f.Moves())
		}
		if d := diffKVs(rawDump(t, c.f), rawDump(t, r.f)); d != "" {
			t.Fatalf("restored state differs: %s", d)
		}
	}

	// Drop on A, a few keys at a time, until none is left.
	total := 0
	for n := 0; ; n++ {
		res := a.must(dropCmd(moveID, 7))
		total += res.Deleted
		if res.Remaining == 0 {
			break
		}
		if n > len(movedKVs) {
			t.Fatal("drop does not progress")
		}
	}
	if total != len(frozenNow) {
		t.Fatalf("drop deleted %d keys, want %d", total, len(frozenNow))
	}
	if res := a.must(dropCmd(moveID, 7)); res.Remaining != 0 || res.Deleted != 0 {
		t.Fatalf("drop when done: %+v", res)
	}
	if d := diffKVs(mustDump(t, a.f), keptAtFreeze); d != "" {
		t.Fatalf("after drop A holds other than its kept keys: %s", d)
	}
	for _, x := range S.Slots() {
		if me := movedErr(t, a.f.CheckSlot(x)); me.Target != target {
			t.Fatalf("after drop: %+v", me)
		}
	}
	if res := a.apply(unfreezeCmd(moveID)); !errors.Is(res.Err, ErrMoveConflict) {
		t.Fatalf("unfreeze after drop: %v", res.Err)
	}

	// Determinism: the same entries, in other runs, give the same DB.
	for _, r := range []*replica{a, b} {
		checkAccountCache(t, r.f)
		checkIDFilter(t, r.f)
		c := newReplica(t, uint32(r.f.shard), initialOf(r))
		applyRuns(t, c.f, r.logs, rng)
		if d := diffKVs(rawDump(t, c.f), rawDump(t, r.f)); d != "" {
			t.Fatalf("replay differs: %s", d)
		}
	}
	// Ownership survives a restart.
	for _, r := range []*replica{a, b} {
		owned, moves := r.f.Owned(), r.f.Moves()
		if err := r.f.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(uint32(r.f.shard), r.dir)
		cfg.InitialSlots = &shard.SlotSet{} // ignored: the DB has its record
		g := mustOpen(t, cfg, nil)
		if g.Owned() != owned || !reflect.DeepEqual(g.Moves(), moves) {
			t.Fatalf("after restart: %v %+v, want %v %+v", g.Owned(), g.Moves(), owned, moves)
		}
	}
}

// initialOf is the InitialSlots r was opened with.
func initialOf(r *replica) *shard.SlotSet {
	s := r.f.initial
	return &s
}
