package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// kvw is an expected change of one key: a put of value, or a delete.
type kvw struct {
	key, value []byte
	del        bool
}

func setw(k, v []byte) kvw { return kvw{key: k, value: v} }
func delw(k []byte) kvw    { return kvw{key: k, del: true} }

// enc is the stored encoding of a record.
func enc[R records.Record](t testing.TB, r R) []byte {
	t.Helper()
	b, err := records.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// opCase applies setup (every command must succeed), then cmd, and
// expects err (nil: success, with Result.Balance == balance) and exactly
// the changes writes on top of the setup's state (none when rejected).
type opCase struct {
	name    string
	setup   []*Command
	cmd     *Command
	err     error
	balance int64
	removed int // Result.Removed of a successful cmd
	writes  func(t testing.TB) []kvw
}

func runOpCases(t *testing.T, cases []opCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := mustOpen(t, testConfig(1, t.TempDir()), nil)
			m := newModel()
			var index uint64
			apply := func(c *Command) *Result {
				index++
				l := cmdLog(index, mustEncode(t, c))
				r := f.Apply(l).(*Result)
				if d := diffResult(r, m.apply(l)); d != "" {
					t.Fatalf("entry %d (%s): fsm vs model: %s", index, c.Op, d)
				}
				return r
			}
			for _, c := range tc.setup {
				if r := apply(c); r.Err != nil || !r.Succeeded {
					t.Fatalf("setup %s: %+v", c.Op, r)
				}
			}
			before := mustDump(t, f)
			r := apply(tc.cmd)
			checkErr(t, r.Err, tc.err)
			want := before
			if tc.err == nil {
				if !r.Succeeded || r.Balance != tc.balance || r.Removed != tc.removed || r.FailedGuard != -1 {
					t.Fatalf("result %+v, want success with balance %d, removed %d", r, tc.balance, tc.removed)
				}
				if tc.writes != nil {
					want = applyWrites(before, tc.writes(t))
				}
			} else if r.Succeeded || r.Balance != 0 || r.Removed != 0 {
				t.Fatalf("rejected result %+v", r)
			}
			if d := diffKVs(mustDump(t, f), want); d != "" {
				t.Fatalf("state: %s", d)
			}
			checkResultRecord(t, f, tc.cmd, r)
			if d := diffKVs(mustDump(t, f), m.dump()); d != "" {
				t.Fatalf("state vs model: %s", d)
			}
		})
	}
}

// checkResultRecord checks Result.Record: on a successful update op that
// reports its record (recordKey), the bytes stored under the record's key,
// which the api answers with instead of reading the record back; nil on
// every other op and on a rejection.
func checkResultRecord(t testing.TB, f *FSM, c *Command, r *Result) {
	t.Helper()
	key := recordKey(c)
	switch c.Op {
	case OpUpdateAgentStatus, OpUpdateSessionStatus, OpUpdatePool, OpRegisterBot, OpUpdateBot:
		if key == nil {
			t.Fatalf("%s reports no record", c.Op)
		}
	default:
		if key != nil || r.Record != nil {
			t.Fatalf("%s reports record key %x, record %x", c.Op, key, r.Record)
		}
		return
	}
	if r.Err != nil {
		if r.Record != nil {
			t.Fatalf("rejected %s reports record %x", c.Op, r.Record)
		}
		return
	}
	stored, err := f.Get(key)
	if err != nil || r.Record == nil || !bytes.Equal(r.Record, stored) {
		t.Fatalf("%s: Result.Record %x, stored %x (%v)", c.Op, r.Record, stored, err)
	}
}

// checkErr compares an error with the expected one: typed errors by value,
// sentinels with errors.Is.
func checkErr(t testing.TB, got, want error) {
	t.Helper()
	var ie *InsufficientCreditsError
	var de *DuplicateEventError
	var pe *PoolNotEmptyError
	switch {
	case want == nil:
		if got != nil {
			t.Fatalf("err %v, want success", got)
		}
	case errors.As(want, &ie):
		var g *InsufficientCreditsError
		if !errors.As(got, &g) || *g != *ie {
			t.Fatalf("err %v, want %v", got, want)
		}
	case errors.As(want, &de):
		var g *DuplicateEventError
		if !errors.As(got, &g) || *g != *de {
			t.Fatalf("err %v, want %v", got, want)
		}
	case errors.As(want, &pe):
		var g *PoolNotEmptyError
		if !errors.As(got, &g) || *g != *pe {
			t.Fatalf("err %v, want %v", got, want)
		}
	case !errors.Is(got, want):
		t.Fatalf("err %v, want %v", got, want)
	}
}

// applyWrites returns kvs with the changes ws made, in key order.
func applyWrites(kvs []KV, ws []kvw) []KV {
	m := map[string][]byte{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	for _, w := range ws {
		if w.del {
			delete(m, string(w.key))
		} else {
			m[string(w.key)] = w.value
		}
	}
	out := make([]KV, 0, len(m))
	for k, v := range m {
		out = append(out, KV{Key: []byte(k), Value: v})
	}
	slices.SortFunc(out, func(a, b KV) int { return bytes.Compare(a.Key, b.Key) })
	return out
}

func agentRec(u, a int, st records.AgentState) *records.AgentRecord {
	return &records.AgentRecord{AgentID: aid(a), UserID: uid(u), Name: "agent", Status: st,
		Spec: records.AgentSpecRecord{CPUMillicores: 100, MemoryMB: 64, RuntimeVersion: "v1"}, CreatedAt: 10, UpdatedAt: 10}
}

func putAgentCmd(r *records.AgentRecord) *Command { return &Command{Op: OpPutAgent, Agent: r} }

func sessionRec(s, a int, st records.SessionStatus, closedAt *int64) *records.SessionRecord {
	return &records.SessionRecord{SessionID: sid(s), AgentID: aid(a), UserID: uid(0), Status: st, CreatedAt: 20, ClosedAt: closedAt}
}

func TestRegistryOps(t *testing.T) {
	a0 := agentRec(0, 0, records.AgentPending)
	a0Running := agentRec(0, 0, records.AgentRunning)
	a0Renamed := agentRec(0, 0, records.AgentPending)
	a0Renamed.Name = "renamed"
	a0ByUser1 := agentRec(1, 0, records.AgentRunning)
	u0, a := uid(0), aid(0)
	owner := keys.AgentOwner(a)
	status := func(st records.AgentState) []byte { return keys.AgentByStatus(byte(st), u0, a) }
	running := uint8(records.AgentRunning)
	closed, active := uint8(records.SessionClosed), uint8(records.SessionActive)
	s0 := sessionRec(0, 0, records.SessionActive, nil)
	s0Moved := sessionRec(0, 1, records.SessionActive, nil)
	withAgent := func(cs ...*Command) []*Command { return append([]*Command{putAgentCmd(a0)}, cs...) }
	updated := func(r *records.AgentRecord, st records.AgentState, at int64) *records.AgentRecord {
		c := *r
		c.Status, c.UpdatedAt = st, at
		return &c
	}
	session := func(s *records.SessionRecord, st records.SessionStatus, closedAt *int64) *records.SessionRecord {
		c := *s
		c.Status, c.ClosedAt = st, closedAt
		return &c
	}
	user := &records.UserRecord{UserID: u0, Email: "a@b", CreatedAt: 1, LastSeenAt: 2}
	user2 := &records.UserRecord{UserID: u0, Email: "c@d", CreatedAt: 1, LastSeenAt: 3}

	runOpCases(t, []opCase{
		{name: "put agent new", cmd: putAgentCmd(a0), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Agent(u0, a), enc(t, a0)), setw(status(records.AgentPending), nil), setw(owner, u0[:])}
		}},
		{name: "put agent same status", setup: withAgent(), cmd: putAgentCmd(a0Renamed), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Agent(u0, a), enc(t, a0Renamed))}
		}},
		{name: "put agent moves status entry", setup: withAgent(), cmd: putAgentCmd(a0Running), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Agent(u0, a), enc(t, a0Running)), delw(status(records.AgentPending)), setw(status(records.AgentRunning), nil)}
		}},
		{name: "put agent owned by another user", setup: withAgent(), cmd: putAgentCmd(a0ByUser1), err: ErrInvalidCommand},
		{name: "put agent after the owner deleted it", setup: withAgent(&Command{Op: OpDeleteAgent, UserID: &u0, AgentID: &a}),
			cmd: putAgentCmd(a0ByUser1), writes: func(t testing.TB) []kvw {
				u1 := uid(1)
				return []kvw{setw(keys.Agent(u1, a), enc(t, a0ByUser1)), setw(keys.AgentByStatus(byte(records.AgentRunning), u1, a), nil), setw(owner, u1[:])}
			}},

		{name: "delete agent", setup: withAgent(putSessionCmd(s0)), cmd: &Command{Op: OpDeleteAgent, UserID: &u0, AgentID: &a},
			writes: func(t testing.TB) []kvw {
				return []kvw{delw(keys.Agent(u0, a)), delw(status(records.AgentPending)), delw(owner)} // sessions stay
			}},
		{name: "delete agent missing", cmd: &Command{Op: OpDeleteAgent, UserID: &u0, AgentID: &a}, err: ErrNotFound},
		{name: "delete agent of another user", setup: withAgent(), cmd: &Command{Op: OpDeleteAgent, UserID: ptr(uid(1)), AgentID: &a}, err: ErrNotFound},

		{name: "update agent status", setup: withAgent(),
			cmd: &Command{Op: OpUpdateAgentStatus, UserID: &u0, AgentID: &a, Status: &running, Time: 77},
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Agent(u0, a), enc(t, updated(a0, records.AgentRunning, 77))),
					delw(status(records.AgentPending)), setw(status(records.AgentRunning), nil)}
			}},
		{name: "update agent status unchanged", setup: withAgent(),
			cmd: &Command{Op: OpUpdateAgentStatus, UserID: &u0, AgentID: &a, Status: ptr(uint8(0)), Time: 78},
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Agent(u0, a), enc(t, updated(a0, records.AgentPending, 78)))}
			}},
		{name: "update agent status missing", cmd: &Command{Op: OpUpdateAgentStatus, UserID: &u0, AgentID: &a, Status: &running, Time: 1}, err: ErrNotFound},

		{name: "put session new", cmd: putSessionCmd(s0), writes: func(t testing.TB) []kvw {
			return []kvw{setw(keys.Session(sid(0)), enc(t, s0)), setw(keys.SessionByAgent(a, sid(0)), nil)}
		}},
		{name: "put session moves to another agent", setup: []*Command{putSessionCmd(s0)}, cmd: putSessionCmd(s0Moved),
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Session(sid(0)), enc(t, s0Moved)), delw(keys.SessionByAgent(a, sid(0))), setw(keys.SessionByAgent(aid(1), sid(0)), nil)}
			}},
		{name: "put session same agent", setup: []*Command{putSessionCmd(s0)}, cmd: putSessionCmd(session(s0, records.SessionFailed, ptr(int64(30)))),
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Session(sid(0)), enc(t, session(s0, records.SessionFailed, ptr(int64(30)))))}
			}},

		{name: "close session sets closed_at", setup: []*Command{putSessionCmd(s0)},
			cmd: &Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(0)), Status: &closed, Time: 99},
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Session(sid(0)), enc(t, session(s0, records.SessionClosed, ptr(int64(99)))))}
			}},
		{name: "closed_at is kept", setup: []*Command{putSessionCmd(session(s0, records.SessionClosed, ptr(int64(50))))},
			cmd: &Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(0)), Status: ptr(uint8(records.SessionExpired)), Time: 99},
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Session(sid(0)), enc(t, session(s0, records.SessionExpired, ptr(int64(50)))))}
			}},
		{name: "reactivate keeps closed_at", setup: []*Command{putSessionCmd(session(s0, records.SessionClosed, ptr(int64(50))))},
			cmd: &Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(0)), Status: &active, Time: 99},
			writes: func(t testing.TB) []kvw {
				return []kvw{setw(keys.Session(sid(0)), enc(t, session(s0, records.SessionActive, ptr(int64(50)))))}
			}},
		{name: "active stays open", setup: []*Command{putSessionCmd(s0)},
			cmd:    &Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(0)), Status: &active, Time: 99},
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.Session(sid(0)), enc(t, s0))} }},
		{name: "update session missing", cmd: &Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(0)), Status: &closed, Time: 9}, err: ErrNotFound},

		{name: "put user", cmd: &Command{Op: OpPutUser, User: user},
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.User(u0), enc(t, user))} }},
		{name: "put user overwrites", setup: []*Command{{Op: OpPutUser, User: user}}, cmd: &Command{Op: OpPutUser, User: user2},
			writes: func(t testing.TB) []kvw { return []kvw{setw(keys.User(u0), enc(t, user2))} }},
	})
}

func putSessionCmd(s *records.SessionRecord) *Command { return &Command{Op: OpPutSession, Session: s} }

// TestRegistrySeesEarlierEntriesOfTheRun: within one ApplyBatch run, a
// command sees what earlier commands of the run wrote.
func TestRegistrySeesEarlierEntriesOfTheRun(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	u0, a := uid(0), aid(0)
	res := f.ApplyBatch([]*raft.Log{
		cmdLog(1, mustEncode(t, putAgentCmd(agentRec(0, 0, records.AgentPending)))),
		cmdLog(2, mustEncode(t, putAgentCmd(agentRec(1, 0, records.AgentPending)))), // agent id taken in entry 1
		cmdLog(3, mustEncode(t, &Command{Op: OpUpdateAgentStatus, UserID: &u0, AgentID: &a, Status: ptr(uint8(2)), Time: 5})),
		cmdLog(4, mustEncode(t, &Command{Op: OpDeleteAgent, UserID: &u0, AgentID: &a})),
		cmdLog(5, mustEncode(t, &Command{Op: OpDeleteAgent, UserID: &u0, AgentID: &a})), // deleted in entry 4
		cmdLog(6, mustEncode(t, putAgentCmd(agentRec(1, 0, records.AgentPending)))),     // free again
	})
	want := []error{nil, ErrInvalidCommand, nil, nil, ErrNotFound, nil}
	for i, w := range want {
		checkErr(t, res[i].(*Result).Err, w)
	}
	kvs := mustDump(t, f)
	wantKeys := [][]byte{keys.Agent(uid(1), a), keys.AgentByStatus(0, uid(1), a), keys.AgentOwner(a)}
	var got [][]byte
	for _, kv := range kvs {
		got = append(got, kv.Key)
	}
	slices.SortFunc(wantKeys, bytes.Compare)
	if !reflect.DeepEqual(got, wantKeys) {
		t.Fatalf("keys %x, want %x", got, wantKeys)
	}
}

// TestCorruptRecordRejected: a record written raw (by OpBatch) that does
// not decode is a deterministic rejection, not a storage error.
func TestCorruptRecordRejected(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	u0, a := uid(0), aid(0)
	// Two batches: a batch's keys must share a slot.
	f.ApplyBatch([]*raft.Log{
		cmdLog(1, mustEncode(t, batchCmd(nil, Mutation{Kind: MutPut, Key: keys.Agent(u0, a), Value: []byte("junk")}))),
		cmdLog(2, mustEncode(t, batchCmd(nil, Mutation{Kind: MutPut, Key: keys.Account(acct(0)), Value: enc(t, &records.Account{UserID: acct(0), BalanceCents: -5})}))),
	})
	before := mustDump(t, f)
	if len(before) != 2 {
		t.Fatalf("setup wrote %d keys, want 2", len(before))
	}
	for i, c := range []*Command{
		putAgentCmd(agentRec(0, 0, records.AgentRunning)),
		{Op: OpDeleteAgent, UserID: &u0, AgentID: &a},
		{Op: OpAddCredits, AccountID: ptr(acct(0)), Amount: ptr(int64(5)), Time: 1, Tx: creditTx(0, 0, 5)},
	} {
		r := f.Apply(cmdLog(uint64(3+i), mustEncode(t, c))).(*Result)
		if !errors.Is(r.Err, ErrCorruptRecord) || r.Succeeded {
			t.Fatalf("%s: %+v, want ErrCorruptRecord", c.Op, r)
		}
	}
	if d := diffKVs(before, mustDump(t, f)); d != "" {
		t.Fatalf("state changed: %s", d)
	}
	if f.failed.Load() != nil {
		t.Fatal("a corrupt record stopped the replica")
	}
}
