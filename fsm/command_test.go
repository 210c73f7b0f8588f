package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

func TestValidate(t *testing.T) {
	big := func(n int) []byte { return bytes.Repeat([]byte{0x20}, n) }
	manyOps := make([]Mutation, 1025)
	for i := range manyOps {
		manyOps[i] = del("\x20k")
	}
	for _, tc := range []struct {
		name   string
		cmd    *Command
		limits Limits
		want   string // "" = valid
	}{
		{"put", batchCmd(nil, put("\x20k", "v")), Limits{}, ""},
		{"put empty value", batchCmd(nil, put("\x20k", "")), Limits{}, ""},
		{"guards only", batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20k")}}), Limits{}, ""},
		{"empty batch", batchCmd(nil), Limits{}, ""},
		{"equals empty", batchCmd([]Guard{{Kind: GuardEquals, Key: []byte("\x20k")}}), Limits{}, ""},
		{"max sizes", batchCmd(nil, Mutation{Kind: MutPut, Key: big(4096), Value: big(1 << 20)}), Limits{}, ""},
		{"max ops", batchCmd(nil, manyOps[:1024]...), Limits{}, ""},
		{"unknown op", &Command{Op: 7, Batch: &Batch{}}, Limits{}, "unknown op 7"},
		{"zero op", &Command{}, Limits{}, "unknown op 0"},
		{"missing batch", &Command{Op: OpBatch}, Limits{}, "op batch: missing batch"},
		{"noop with batch", &Command{Op: OpNoop, Batch: &Batch{}}, Limits{}, "op noop: carries batch"},
		{"empty key", batchCmd(nil, put("", "v")), Limits{}, "mutation 0: empty key"},
		{"guard empty key", batchCmd([]Guard{{Kind: GuardExists}}), Limits{}, "guard 0: empty key"},
		{"key too long", batchCmd(nil, put("\x20a", ""), Mutation{Kind: MutPut, Key: big(4097)}), Limits{}, "mutation 1: key is 4097 bytes, limit 4096"},
		{"key over custom limit", batchCmd(nil, put("\x20abcdefgh", "")), Limits{MaxKeySize: 8}, "mutation 0: key is 9 bytes, limit 8"},
		{"meta key", batchCmd(nil, put("\x00applied", "x")), Limits{}, "mutation 0: key is in the reserved meta table (first byte 0x00)"},
		{"meta guard", batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte{0}}}), Limits{}, "guard 0: key is in the reserved meta table"},
		{"value too large", batchCmd(nil, Mutation{Kind: MutPut, Key: []byte("\x20k"), Value: big(1<<20 + 1)}), Limits{}, "mutation 0: value is 1048577 bytes, limit 1048576"},
		{"guard value too large", batchCmd([]Guard{{Kind: GuardEquals, Key: []byte("\x20k"), Value: big(11)}}), Limits{MaxValueSize: 10}, "guard 0: value is 11 bytes, limit 10"},
		{"too many ops", batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20k")}}, manyOps[:1024]...), Limits{}, "batch has 1025 guards+mutations, limit 1024"},
		{"unknown guard kind", batchCmd([]Guard{{Kind: 9, Key: []byte("\x20k")}}), Limits{}, "guard 0: unknown guard kind 9"},
		{"unknown mutation kind", batchCmd(nil, Mutation{Key: []byte("\x20k")}), Limits{}, "mutation 0: unknown mutation kind 0"},
		{"value for exists", batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20k"), Value: []byte("v")}}), Limits{}, "guard 0: value given for an exists/absent guard"},
		{"value for absent", batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k"), Value: []byte("v")}}), Limits{}, "guard 0: value given for an exists/absent guard"},
		{"value for delete", batchCmd(nil, Mutation{Kind: MutDelete, Key: []byte("\x20k"), Value: []byte("v")}), Limits{}, "mutation 0: value given for a delete"},
		{"batch with a record", &Command{Op: OpBatch, Batch: &Batch{}, User: &records.UserRecord{}}, Limits{}, "op batch: carries user"},
		{"noop with time", &Command{Op: OpNoop, Time: 5}, Limits{}, "op noop: carries time"},
		{"multi", &Command{Op: OpMulti, Multi: [][]byte{nil, {1}}}, Limits{}, ""},
		{"multi max", &Command{Op: OpMulti, Multi: make([][]byte, MaxMultiCmds)}, Limits{}, ""},
		{"multi max bytes", &Command{Op: OpMulti, Multi: [][]byte{big(MaxMultiBytes - 1), {1}}}, Limits{}, ""},
		{"multi empty", &Command{Op: OpMulti, Multi: [][]byte{}}, Limits{}, "multi has 0 commands, want 1 to 1024"},
		{"multi too many", &Command{Op: OpMulti, Multi: make([][]byte, MaxMultiCmds+1)}, Limits{}, "multi has 1025 commands, want 1 to 1024"},
		{"multi too large", &Command{Op: OpMulti, Multi: [][]byte{big(MaxMultiBytes), {1}}}, Limits{}, "multi commands total 8388609 bytes, limit 8388608"},
		{"multi with batch", &Command{Op: OpMulti, Multi: [][]byte{{1}}, Batch: &Batch{}}, Limits{}, "op multi: carries batch"},
		{"batch with multi", &Command{Op: OpBatch, Batch: &Batch{}, Multi: [][]byte{{1}}}, Limits{}, "op batch: carries multi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cmd.Validate(tc.limits)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want ErrInvalidCommand containing %q", err, tc.want)
			}
		})
	}
}

// validCommands returns one valid command of every registry and billing op.
func validCommands() []*Command {
	u, a, s, ac := uid(1), aid(2), sid(3), acct(4)
	return []*Command{
		putAgentCmd(agentRec(1, 2, records.AgentRunning)),
		{Op: OpDeleteAgent, UserID: &u, AgentID: &a},
		{Op: OpUpdateAgentStatus, UserID: &u, AgentID: &a, Status: ptr(uint8(records.AgentFailed)), Time: 1},
		putSessionCmd(sessionRec(3, 2, records.SessionClosed, ptr(int64(40)))),
		{Op: OpUpdateSessionStatus, SessionID: &s, Status: ptr(uint8(records.SessionExpired)), Time: 1},
		{Op: OpPutUser, User: &records.UserRecord{UserID: u, Email: "x@y"}},
		putAccountCmd(account(4, 10, 10, 0)),
		{Op: OpDeleteAccount, AccountID: &ac},
		updateBalanceCmd(4, 5, -7, 1),
		{Op: OpPutTransaction, Tx: creditTx(4, 6, 9)},
		{Op: OpPutUsageEvent, Event: usageEvent(4, 7)},
		processUsageCmd(4, 8, 9, 3, 1),
		addCreditsCmd(4, 10, 11, 1),
		// pool ops: indexes 13..21
		{Op: OpEnsureDefaultPool, Time: 1},
		{Op: OpCreatePool, Pool: poolRec("p1", "u0", records.VisibilityPrivate)},
		{Op: OpUpdatePool, Pool: poolRec("p1", "u0", records.VisibilityPublic), Actor: "u0", Time: 2},
		{Op: OpDeletePool, PoolID: "p1", Actor: "u0"},
		{Op: OpRegisterBot, Bot: botRec("a1", "p1", "u1"), Actor: "u1"},
		{Op: OpUpdateBot, Bot: botRec("a1", "p2", "u1"), Actor: "u0", Time: 3},
		{Op: OpRemoveBot, BotID: "a1", Actor: "u1"},
		{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r1", LastSeen: 4, Meta: `{"v":1}`}},
		{Op: OpSetGuildPool, GuildID: "g1", PoolID: "p1", Actor: "u1", Time: 5},
		multiCmd(putAgentCmd(agentRec(1, 2, records.AgentRunning)), batchCmd(nil, put("\x20k", "v"))),
		// slot move ops
		{Op: OpFreezeSlots, Move: &SlotMove{ID: 1, Slots: ptr(shard.SlotSetOf(1, 2)), Peer: 3, MapVersion: 2}},
		{Op: OpUnfreezeSlots, Move: &SlotMove{ID: 1}},
		{Op: OpIngestSlots, Move: &SlotMove{ID: 1, Slots: ptr(shard.SlotSetOf(1, 2)), Peer: 1,
			Pairs: []Pair{{Key: []byte("\x20a"), Value: []byte("1")}, {Key: []byte("\x20b")}}}},
		{Op: OpAdoptSlots, Move: &SlotMove{ID: 1, Slots: ptr(shard.SlotSetOf(1, 2)), MapVersion: 2}},
		{Op: OpDropSlots, Move: &SlotMove{ID: 1, Max: 100}},
		{Op: OpRestrictSlots, Move: &SlotMove{Slots: ptr(shard.SlotSetOf(0, 7))}},
		{Op: OpSyncSlots, Move: &SlotMove{ID: 1, Slots: ptr(shard.SlotSetOf(1, 2)), Peer: 1,
			Pairs: []Pair{{Key: []byte("\x20a"), Value: []byte("1")}}, Deletes: [][]byte{[]byte("\x20b"), []byte("\x20c")}}},
		// leases
		{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: []byte("alice"), TTLMs: 5000}, Time: 6},
		{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: keys.LeaseIDOf(3, 1)}, Time: 6},
		{Op: OpLeaseExpire, Lease: &LeaseArgs{IDs: []uint64{keys.LeaseIDOf(3, 1), keys.LeaseIDOf(3, 2)}, Term: 4}, Time: 6},
		{Op: OpLeaseCheckpoint, Lease: &LeaseArgs{Checkpoints: []LeaseCheckpoint{{ID: keys.LeaseIDOf(3, 1), RemainingMs: 10}, {ID: keys.LeaseIDOf(3, 2)}}, Term: 4}},
		{Op: OpAgentHeartbeat, UserID: ptr(uid(1)), AgentID: ptr(aid(2)), Time: 7},
		// lease owners, random ids, key bounds, deny (VersionHardening)
		{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: []byte("alice"), TTLMs: 5000, Owner: "token:0123456789abcdef", Nonce: 0xabcdef012345, MaxKeys: 10}, Time: 6},
		{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: keys.LeaseIDOf(3, 1), Deny: LeaseKindKV | LeaseKindAgent}, Time: 6},
		// the transaction-id directory
		{Op: OpReserveTx, AccountID: ptr(acct(1)), TxID: ptr(txid(5))},
		// etcd namespaces (VersionEtcd)
		{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default",
			Compare: []EtcdCompare{{Target: EtcdTargetMod, Result: EtcdEqual, Key: []byte("a"), Int: 3}, {Target: EtcdTargetValue, Key: []byte("b"), End: []byte("c"), Value: []byte("v")}},
			Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a"), Value: []byte("1"), PrevKV: true}, {Kind: EtcdDelete, Key: []byte("d"), End: []byte{0}, PrevKV: true}},
			Failure: []EtcdOp{{Kind: EtcdRangeK, Range: &EtcdRange{Key: []byte("a"), End: []byte("z"), Limit: 2, Revision: 1, SortOrder: EtcdSortDescend, SortTarget: EtcdSortByMod, KeysOnly: true}}}}},
		{Op: OpEtcdCompact, EtcdCompact: &EtcdCompact{NS: "default", Revision: 5}},
		// a nested etcd txn (VersionEtcdNested)
		{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default", Success: []EtcdOp{{Kind: EtcdTxnK, Txn: &EtcdTxn{
			Compare: []EtcdCompare{{Target: EtcdTargetVersion, Key: []byte("a"), Int: 1}},
			Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a"), Value: []byte("2")}},
			Failure: []EtcdOp{{Kind: EtcdTxnK, Txn: &EtcdTxn{Success: []EtcdOp{{Kind: EtcdDelete, Key: []byte("a")}}}}}}}}}},
	}
}

// TestValidateRecordOps: every op takes exactly its fields, its records
// must validate, and its own rules hold.
func TestValidateRecordOps(t *testing.T) {
	for _, c := range validCommands() {
		if err := c.Validate(Limits{}); err != nil {
			t.Errorf("%s: %v", c.Op, err)
		}
		// Dropping any required field, or adding one the op neither
		// requires nor allows, is invalid; adding an optional one is fine.
		for bit := field(1); bit <= fLast; bit <<= 1 {
			d := *c
			if c.Op.spec().optional&bit != 0 {
				setField(&d, bit, true)
				if err := d.Validate(Limits{}); err != nil {
					t.Errorf("%s with optional field %s: %v", c.Op, bit.first(), err)
				}
				continue
			}
			setField(&d, bit, c.fields()&bit == 0)
			err := d.Validate(Limits{})
			want := "op " + c.Op.String() + ": missing " + bit.first()
			if c.fields()&bit == 0 {
				want = "op " + c.Op.String() + ": carries " + bit.first()
			}
			if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s with field %s toggled: %v, want %q", c.Op, bit.first(), err, want)
			}
		}
	}
	vc := validCommands()
	edit := func(i int, f func(c *Command)) *Command {
		c := *vc[i]
		if c.Tx != nil {
			c.Tx = ptr(*c.Tx)
		}
		f(&c)
		return &c
	}
	for _, tc := range []struct {
		name string
		cmd  *Command
		want string
	}{
		{"agent record", edit(0, func(c *Command) { c.Agent = &records.AgentRecord{} }), "op put_agent: agent: records: invalid record: name is empty"},
		{"agent status", edit(2, func(c *Command) { c.Status = ptr(uint8(6)) }), "status: agent_state(6) is not a valid agent state"},
		{"negative time", edit(2, func(c *Command) { c.Time = -1 }), "op update_agent_status: time -1 is negative"},
		{"session record", edit(3, func(c *Command) { c.Session = &records.SessionRecord{Status: 7} }), "session: records: invalid record"},
		{"session status", edit(4, func(c *Command) { c.Status = ptr(uint8(4)) }), "session_status(4) is not a valid session status"},
		{"user record", edit(5, func(c *Command) { c.User = &records.UserRecord{CreatedAt: -1} }), "user: records: invalid record"},
		{"account record", edit(6, func(c *Command) { c.Account = account(1, -1, 0, 0) }), "account: records: invalid record"},
		{"zero delta", edit(8, func(c *Command) { c.Amount = ptr(int64(0)) }), "amount 0: want a non-zero delta"},
		{"min delta", edit(8, func(c *Command) { c.Amount, c.Tx.AmountCents = ptr(int64(math.MinInt64)), math.MaxInt64 }), "want a non-zero delta"},
		{"adjustment type", edit(8, func(c *Command) { c.Tx.TransactionType, c.Tx.AmountCents = records.TxGrant, 7 }), "tx: type grant, want adjustment"},
		{"adjustment amount", edit(8, func(c *Command) { c.Tx.AmountCents = 7 }), "tx: amount_cents 7 differs from amount -7"},
		{"adjustment user", edit(8, func(c *Command) { c.Tx.UserID = acct(9) }), "tx: user_id differs from account_id"},
		{"tx record", edit(9, func(c *Command) { c.Tx.AmountCents = 0 }), "tx: records: invalid record"},
		{"event record", edit(10, func(c *Command) { c.Event = &records.UsageEvent{} }), "event: records: invalid record: event_id is empty"},
		{"usage type", edit(11, func(c *Command) { c.Tx.TransactionType = records.TxPurchase }), "tx: type purchase, want usage"},
		{"usage amount", edit(11, func(c *Command) { c.Tx.AmountCents = -3 }), "must be positive for usage"},
		{"usage user", edit(11, func(c *Command) { c.Tx.UserID = acct(9) }), "tx: user_id differs from the event's user_id"},
		{"usage event id", edit(11, func(c *Command) { c.Tx.EventID = "other" }), "tx: event_id differs from the event's event_id"},
		{"credit amount", edit(12, func(c *Command) { c.Amount = ptr(int64(-11)) }), "amount -11: want a positive amount"},
		{"credit type", edit(12, func(c *Command) { c.Tx.TransactionType = records.TxUsage }), "tx: type usage is not a credit"},
		{"credit adjustment", edit(12, func(c *Command) { c.Tx.TransactionType = records.TxAdjustment }), "tx: type adjustment is not a credit"},
		{"credit tx amount", edit(12, func(c *Command) { c.Tx.AmountCents = 12 }), "tx: amount_cents 12 differs from amount 11"},
		{"credit user", edit(12, func(c *Command) { c.Tx.UserID = acct(9) }), "tx: user_id differs from account_id"},
		{"pool record", edit(14, func(c *Command) { c.Pool = &records.Pool{PoolID: "p"} }), "op create_pool: pool: records: invalid record: keys: invalid id: owner_user_id is empty"},
		{"pool meta", edit(15, func(c *Command) { c.Pool = ptr(*c.Pool); c.Pool.Meta = "{" }), "pool: records: invalid record: meta is not valid JSON"},
		{"update pool actor", edit(15, func(c *Command) { c.Actor = "u 0" }), "op update_pool: keys: invalid id: actor has byte 0x20 at 1"},
		{"delete pool id", edit(16, func(c *Command) { c.PoolID = strings.Repeat("p", 65) }), "pool_id is 65 bytes, max 64"},
		{"bot owner", edit(17, func(c *Command) { c.Actor = "u2" }), "op register_bot: bot: owner_user_id differs from actor"},
		{"bot token", edit(17, func(c *Command) { c.Bot = ptr(*c.Bot); c.Bot.Token = records.EncryptedToken{} }), "op register_bot: bot: token is required"},
		{"bot token nonce", edit(17, func(c *Command) { c.Bot = ptr(*c.Bot); c.Bot.Token.Nonce = []byte{1} }), "bot: records: invalid record: token.nonce is 1 bytes"},
		{"bot record", edit(18, func(c *Command) { c.Bot = ptr(*c.Bot); c.Bot.Status = 3 }), "op update_bot: bot: records: invalid record: bot_status(3)"},
		{"remove bot id", edit(19, func(c *Command) { c.BotID = "a\x00" }), "bot_id has byte 0x00"},
		{"runner record", edit(20, func(c *Command) { c.Runner = &records.Runner{RunnerID: "r", LastSeen: -1} }), "runner: records: invalid record: last_seen is negative"},
		{"guild id", edit(21, func(c *Command) { c.GuildID = strings.Repeat("g", 129) }), "guild_id is 129 bytes, max 128"},
		{"guild pool id", edit(21, func(c *Command) { c.PoolID = "p\t" }), "pool_id has byte 0x09"},
		{"reserved id of another tx", edit(12, func(c *Command) { c.TxID = ptr(txid(99)) }), "op add_credits: tx_id differs from tx: transaction_id"},
	} {
		err := tc.cmd.Validate(Limits{})
		if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidCommand containing %q", tc.name, err, tc.want)
		}
	}
	if err := edit(0, func(c *Command) { c.Agent = &records.AgentRecord{} }).Validate(Limits{}); !errors.Is(err, records.ErrInvalid) {
		t.Errorf("a bad record's error does not wrap records.ErrInvalid: %v", err)
	}
	for op, want := range map[Op]string{OpBatch: "batch", OpAddCredits: "add_credits", OpPutUser: "put_user", 0: "op(0)", 99: "op(99)",
		OpEnsureDefaultPool: "ensure_default_pool", OpSetGuildPool: "set_guild_pool", 39: "op(39)"} {
		if op.String() != want {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), op.String(), want)
		}
	}
}

// setField sets (on) or clears the field bit of c to some value.
func setField(c *Command, bit field, on bool) {
	switch bit {
	case fBatch:
		c.Batch = cond(on, &Batch{}, nil)
	case fAgent:
		c.Agent = cond(on, agentRec(0, 0, 0), nil)
	case fSession:
		c.Session = cond(on, sessionRec(0, 0, 0, nil), nil)
	case fUser:
		c.User = cond(on, &records.UserRecord{}, nil)
	case fAccount:
		c.Account = cond(on, account(0, 0, 0, 0), nil)
	case fTx:
		c.Tx = cond(on, creditTx(0, 0, 1), nil)
	case fEvent:
		c.Event = cond(on, usageEvent(0, 0), nil)
	case fUserID:
		c.UserID = cond(on, ptr(uid(0)), nil)
	case fAgentID:
		c.AgentID = cond(on, ptr(aid(0)), nil)
	case fSessionID:
		c.SessionID = cond(on, ptr(sid(0)), nil)
	case fAccountID:
		c.AccountID = cond(on, ptr(acct(0)), nil)
	case fStatus:
		c.Status = cond(on, ptr(uint8(0)), nil)
	case fAmount:
		c.Amount = cond(on, ptr(int64(1)), nil)
	case fTime:
		c.Time = cond(on, int64(1), 0)
	case fPool:
		c.Pool = cond(on, poolRec("p0", "u0", 0), nil)
	case fBot:
		c.Bot = cond(on, botRec("a0", "p0", "u0"), nil)
	case fRunner:
		c.Runner = cond(on, &records.Runner{RunnerID: "r0"}, nil)
	case fActor:
		c.Actor = cond(on, "u0", "")
	case fPoolID:
		c.PoolID = cond(on, "p0", "")
	case fBotID:
		c.BotID = cond(on, "a0", "")
	case fGuildID:
		c.GuildID = cond(on, "g0", "")
	case fCascade:
		c.Cascade = on
	case fRedis:
		c.Redis = cond(on, &RedisTx{Cmds: []RedisArgv{{[]byte("ping")}}}, nil)
	case fMulti:
		c.Multi = cond(on, [][]byte{{commandVersion}}, nil)
	case fMove:
		c.Move = cond(on, &SlotMove{ID: 1, Slots: ptr(shard.AllSlots())}, nil)
	case fHistory:
		c.History = cond(on, &HistoryRetention{MaxRevisions: 1}, nil)
	case fLease:
		c.Lease = cond(on, &LeaseArgs{ID: 1}, nil)
	case fTxID:
		id := txid(0)
		if c.Tx != nil {
			id = c.Tx.TransactionID // an op that records it reserves its own id
		}
		c.TxID = cond(on, &id, nil)
	case fEtcd:
		c.Etcd = cond(on, &EtcdTxn{NS: "ns"}, nil)
	case fEtcdCompact:
		c.EtcdCompact = cond(on, &EtcdCompact{NS: "ns", Revision: 1}, nil)
	case fLeaseID:
		rk := []byte(keys.PoolsRoutingKey)
		if c.UserID != nil {
			rk = c.UserID[:]
		}
		c.LeaseID = cond(on, keys.LeaseIDOf(byte(shard.SlotOf(rk)), 1), 0)
	default:
		panic(fmt.Sprintf("setField: bit %#x", bit))
	}
}

func cond[T any](on bool, a, b T) T {
	if on {
		return a
	}
	return b
}

// TestRejectedCommandsChangeNothing applies rejected commands to an FSM
// holding data: each gets its error in the Result, the data stays, the
// applied index advances.
func TestRejectedCommandsChangeNothing(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil, put("\x20a", "1"), put("\x20b", "2")))))
	before := mustDump(t, f)
	valid := mustEncode(t, batchCmd(nil, del("\x20a")))
	for i, tc := range []struct {
		data []byte
		want error
	}{
		{mustEncode(t, batchCmd(nil, del("\x20a"), put("\x00applied", "x"))), ErrInvalidCommand},
		{mustEncode(t, batchCmd(nil, del("\x20a"), Mutation{Kind: MutDelete, Key: []byte("\x20b"), Value: []byte("x")})), ErrInvalidCommand},
		{mustEncode(t, &Command{Op: 99, Batch: &Batch{Mutations: []Mutation{del("\x20a")}}}), ErrInvalidCommand},
		{nil, ErrMalformedCommand},
		{append([]byte{2}, valid[1:]...), ErrMalformedCommand},
		{append(append([]byte{}, valid...), 0), ErrMalformedCommand},
		{valid[:len(valid)-1], ErrMalformedCommand},
	} {
		index := uint64(2 + i)
		r, _ := f.Apply(cmdLog(index, tc.data)).(*Result)
		if r == nil || !errors.Is(r.Err, tc.want) || r.Succeeded || r.Index != index || r.FailedGuard != -1 {
			t.Fatalf("case %d: result %+v, want Err %v", i, r, tc.want)
		}
		if d := diffKVs(before, mustDump(t, f)); d != "" {
			t.Fatalf("case %d: state changed: %s", i, d)
		}
		if f.AppliedIndex() != index {
			t.Fatalf("case %d: applied index %d, want %d", i, f.AppliedIndex(), index)
		}
	}
}

func TestDecodeCommandStrict(t *testing.T) {
	enc := func(v any) []byte {
		b, err := cbor.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{commandVersion}, b...)
	}
	manyGuards := make([]map[string]any, maxDecodeArray+1)
	for i := range manyGuards {
		manyGuards[i] = map[string]any{}
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"version only", []byte{commandVersion}},
		{"unknown version", []byte{0x02, 0xa0}},
		{"trailing bytes", append(mustEncode(t, batchCmd(nil)), 0x00)},
		{"unknown field", enc(map[string]any{"op": 1, "extra": 1})},
		{"unknown nested field", enc(map[string]any{"op": 1, "batch": map[string]any{"x": 1}})},
		{"case-folded field", enc(map[string]any{"OP": 1})},
		{"duplicate key", []byte{commandVersion, 0xa2, 0x62, 'o', 'p', 0x01, 0x62, 'o', 'p', 0x01}},
		{"duplicate key, other value", []byte{commandVersion, 0xa2, 0x62, 'o', 'p', 0x01, 0x62, 'o', 'p', 0x02}},
		{"nested duplicate key", []byte{commandVersion, 0xa2, 0x62, 'o', 'p', 0x01, 0x65, 'b', 'a', 't', 'c', 'h',
			0xa1, 0x61, 'm', 0x81, 0xa3, 0x61, 'k', 0x00, 0x63, 'k', 'e', 'y', 0x42, 0x20, 'k', 0x63, 'k', 'e', 'y', 0x42, 0x20, 'k'}},
		{"nested unknown field", []byte{commandVersion, 0xa2, 0x62, 'o', 'p', 0x01, 0x65, 'b', 'a', 't', 'c', 'h',
			0xa1, 0x61, 'm', 0x81, 0xa3, 0x61, 'k', 0x00, 0x61, 'x', 0x00, 0x63, 'k', 'e', 'y', 0x42, 0x20, 'k'}},
		{"indefinite map", []byte{commandVersion, 0xbf, 0x62, 'o', 'p', 0x01, 0xff}},
		{"tag", []byte{commandVersion, 0xc1, 0xa1, 0x62, 'o', 'p', 0x01}},
		{"op overflow", enc(map[string]any{"op": 300})},
		{"negative op", enc(map[string]any{"op": -1})},
		{"kind overflow", enc(map[string]any{"op": 1, "batch": map[string]any{"m": []any{map[string]any{"k": 256}}}})},
		{"key not bytes", enc(map[string]any{"op": 1, "batch": map[string]any{"m": []any{map[string]any{"key": 5}}}})},
		{"oversized array", enc(map[string]any{"op": 1, "batch": map[string]any{"g": manyGuards}})},
		{"not a map", enc([]int{1, 2})},
		{"short id", shortIDCommand(false)},
		{"short nested id", shortIDCommand(true)},
		{"long id", canon(map[string]any{"op": 11, "user_id": make([]byte, 33), "agent_id": make([]byte, 32)})},
		{"id as array", canon(map[string]any{"op": 21, "account_id": make([]int, 16)})},
		{"explicit zero time", canon(map[string]any{"op": 2, "time": 0})},
		{"null record", canon(map[string]any{"op": 15, "user": nil})},
		{"non-canonical order", []byte{commandVersion, 0xa2, 0x64, 't', 'i', 'm', 'e', 0x01, 0x62, 'o', 'p', 0x02}},
		{"non-minimal int", []byte{commandVersion, 0xa1, 0x62, 'o', 'p', 0x18, 0x02}},
		{"invalid utf-8", canon(map[string]any{"op": 24, "event": map[string]any{"event_id": "\xff"}})},
		{"status overflow", canon(map[string]any{"op": 12, "status": 256})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := DecodeCommand(tc.data); !errors.Is(err, ErrMalformedCommand) {
				t.Fatalf("DecodeCommand = %+v, %v; want ErrMalformedCommand", c, err)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, c := range seedCommands() {
		b := mustEncode(t, c)
		if b[0] != commandVersion {
			t.Fatalf("version byte %#x", b[0])
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: got %+v, want %+v", got, c)
		}
		if b2 := mustEncode(t, got); !bytes.Equal(b, b2) {
			t.Fatalf("encoding not deterministic: %x vs %x", b, b2)
		}
	}
	if _, err := EncodeCommand(nil); err == nil {
		t.Fatal("EncodeCommand(nil) succeeded")
	}
}

// canon is the version byte and the deterministic encoding of v.
func canon(v any) []byte {
	b, err := encMode.Marshal(v)
	if err != nil {
		panic(err)
	}
	return append([]byte{commandVersion}, b...)
}

func seedCommands() []*Command {
	return append(validCommands(), []*Command{
		{Op: OpBatch, Batch: &Batch{}},
		batchCmd(nil, put("\x20k", "v")),
		batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k")}}, put("\x20k", "v"), del("\x20j")),
		batchCmd([]Guard{
			{Kind: GuardEquals, Key: []byte("\x20k"), Value: []byte("v")},
			{Kind: GuardExists, Key: []byte("\x21k")},
		}, del("\x20k")),
		{Op: 9},
		{Op: OpPutAgent, Agent: &records.AgentRecord{}, Time: 5},
		multiCmd(batchCmd(nil, put("\x20k", "v")), &Command{Op: OpNoop}, multiCmd(&Command{Op: OpNoop})),
		multiCmd(&Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{{[]byte("SET"), []byte("a"), []byte("1")}}}}),
		{Op: OpMulti, Multi: [][]byte{nil, {}, {commandVersion, 0xa0}, {0x02}}},
	}...)
}

// multiCmd is an OpMulti carrying cmds.
func multiCmd(cmds ...*Command) *Command {
	c := &Command{Op: OpMulti}
	for _, sub := range cmds {
		b, err := EncodeCommand(sub)
		if err != nil {
			panic(err)
		}
		c.Multi = append(c.Multi, b)
	}
	return c
}

// FuzzDecodeCommand: decoding never panics; whatever decodes re-encodes to
// bytes that decode to an equal command and re-encode identically.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{commandVersion, 0xa0})
	f.Add(shortIDCommand(false))
	f.Add(shortIDCommand(true))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedCommand) {
				t.Fatalf("error %v does not wrap ErrMalformedCommand", err)
			}
			return
		}
		_ = c.Validate(Limits{})
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		c2, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode of re-encoding %x: %v", b, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip: %+v vs %+v", c, c2)
		}
		if b2, _ := EncodeCommand(c2); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding not stable: %x vs %x", b, b2)
		}
	})
}

// anySucceeded reports whether an apply response (a *Result or an
// OpMulti's []*Result) has a command that succeeded.
func anySucceeded(v interface{}) bool {
	if rs, ok := v.([]*Result); ok {
		for _, r := range rs {
			if r.Err == nil && r.Succeeded {
				return true
			}
		}
		return false
	}
	r := v.(*Result)
	return r.Err == nil && r.Succeeded
}

// FuzzApply: arbitrary bytes as a command entry never panic, agree with the
// reference model, and change nothing when rejected.
func FuzzApply(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{commandVersion, 0xff})
	f.Add(shortIDCommand(true))
	for _, c := range []*Command{
		multiCmd(&Command{Op: OpDropSlots, Move: &SlotMove{ID: 1, Max: 1}}),
		putAccountCmd(account(4, 0, 0, 0)), addCreditsCmd(4, 1, 100, 2), processUsageCmd(4, 1, 2, 40, 3),
		putAgentCmd(agentRec(2, 2, records.AgentRunning)), putSessionCmd(sessionRec(1, 2, 0, nil)),
		{Op: OpCreatePool, Pool: poolRec("p2", "u1", records.VisibilityPublic)},
		{Op: OpRegisterBot, Bot: botRec("a2", "p2", "u0"), Actor: "u0"},
		{Op: OpDeletePool, PoolID: "p2", Actor: "u1", Cascade: true},
	} {
		f.Add(mustEncode(f, c))
	}
	fsm := mustOpen(f, testConfig(1, f.TempDir()), nil)
	m := newModel()
	var index uint64
	step := func(t testing.TB, data []byte) {
		if c, err := DecodeCommand(data); err == nil && (isSlotOp(c.Op) || c.Since() >= VersionLeases) && c.Validate(Limits{}) == nil {
			// The model knows no slot moves (FuzzSlotMoves covers them)
			// nor leases (lease_test.go): a valid one would change the
			// FSM and not the model.
			return
		}
		index++
		l := cmdLog(index, data)
		before := mustDump(t, fsm)
		got, want := fsm.Apply(l), m.apply(l)
		if d := diffResult(got, want); d != "" {
			t.Fatalf("fsm vs model: %s", d)
		}
		after := mustDump(t, fsm)
		if d := diffKVs(after, m.dump()); d != "" {
			t.Fatalf("state vs model: %s", d)
		}
		if !anySucceeded(got) {
			if d := diffKVs(before, after); d != "" {
				t.Fatalf("rejected or failed command changed state: %s", d)
			}
		}
		if fsm.AppliedIndex() != index {
			t.Fatalf("applied index %d, want %d", fsm.AppliedIndex(), index)
		}
	}
	step(f, mustEncode(f, batchCmd(nil, put("\x20k", "v"), put("\x20j", ""))))
	step(f, mustEncode(f, putAccountCmd(account(4, 500, 500, 0))))
	step(f, mustEncode(f, putAgentCmd(agentRec(1, 2, records.AgentPending))))
	step(f, mustEncode(f, &Command{Op: OpEnsureDefaultPool, Time: 1}))
	step(f, mustEncode(f, &Command{Op: OpCreatePool, Pool: poolRec("p1", "u0", records.VisibilityPrivate)}))
	step(f, mustEncode(f, &Command{Op: OpRegisterBot, Bot: botRec("a1", "p1", "u0"), Actor: "u0"}))
	step(f, mustEncode(f, multiCmd(putAccountCmd(account(5, 10, 10, 0)), processUsageCmd(5, 1, 2, 40, 3), addCreditsCmd(5, 3, 100, 4))))
	f.Fuzz(func(t *testing.T, data []byte) { step(t, data) })
}

func BenchmarkEncodeCommand(b *testing.B) {
	value := bytes.Repeat([]byte{0xab}, 256)
	c := &Command{Op: OpBatch, Batch: &Batch{
		Guards: []Guard{{Kind: GuardAbsent, Key: []byte("\x20user/0001/agent/0001")}},
		Mutations: []Mutation{
			{Kind: MutPut, Key: []byte("\x20user/0001/agent/0001"), Value: value},
			{Kind: MutPut, Key: []byte("\x21user/0001/status/0001"), Value: value},
		},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeCommand(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCommand decodes what every replica decodes per entry under
// put load (an OpMulti of 6 puts of 256-byte values, then each put) and per
// ledger charge (a ProcessUsage).
func BenchmarkDecodeCommand(b *testing.B) {
	value := bytes.Repeat([]byte{0xab}, 256)
	puts := make([][]byte, 6)
	for i := range puts {
		puts[i] = mustEncode(b, batchCmd(nil, Mutation{Kind: MutPut, Key: []byte{0x20, 'u', byte(i), 'k', 'e', 'y', '0', '0', '0', '1'}, Value: value}))
	}
	multi := mustEncode(b, &Command{Op: OpMulti, Multi: puts})
	b.Run("cmd=multi6put", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, err := DecodeCommand(multi)
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range c.Multi {
				if _, err := DecodeCommand(p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	usage := mustEncode(b, processUsageCmd(5, 1, 2, 40, 3))
	b.Run("cmd=processUsage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeCommand(usage); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestOpSinceTable: an op's Since is its spec's since (1 for the ops
// older than versions), as listed here: the versions that brought ops.
func TestOpSinceTable(t *testing.T) {
	wantSince := map[Op]int{
		OpAgentHeartbeat:  VersionLeases,
		OpLeaseGrant:      VersionLeases,
		OpLeaseRevoke:     VersionLeases,
		OpLeaseExpire:     VersionLeases,
		OpLeaseCheckpoint: VersionLeases,
		OpCompactHistory:  VersionLeases,
		OpSyncSlots:       VersionPrecopy,
		OpReserveTx:       VersionHardening,
		OpEtcdTxn:         VersionEtcd,
		OpEtcdCompact:     VersionEtcd,
	}
	for op, sp := range commands {
		if sp == nil {
			continue
		}
		if got, want := (&Command{Op: Op(op)}).Since(), max(wantSince[Op(op)], 1); got != want {
			t.Errorf("%s: Since %d, want %d", Op(op), got, want)
		}
	}
}
