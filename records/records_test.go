package records

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/swarmkv/swarmkv/keys"
)

func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func i64(v int64) *int64 { return &v }

func sampleAgent() *AgentRecord {
	return &AgentRecord{
		AgentID: keys.AgentID(seq(0xa0, 32)), UserID: keys.UserID(seq(1, 32)),
		Name: "scout", Status: AgentRunning,
		Spec:      AgentSpecRecord{CPUMillicores: 500, MemoryMB: 256, RuntimeVersion: "1.2.3"},
		CreatedAt: 1700000000000, UpdatedAt: 1700000000500, LastHeartbeatAt: i64(1700000000600),
	}
}

func sampleSession() *SessionRecord {
	return &SessionRecord{
		SessionID: keys.SessionID(seq(0x40, 16)), AgentID: keys.AgentID(seq(0xa0, 32)),
		UserID: keys.UserID(seq(1, 32)), Status: SessionClosed, CreatedAt: 5, ClosedAt: i64(9),
	}
}

func sampleUser() *UserRecord {
	return &UserRecord{UserID: keys.UserID(seq(1, 32)), Email: "a@example.com", CreatedAt: 1, LastSeenAt: 2}
}

func sampleAccount() *Account {
	return &Account{UserID: keys.AccountID(seq(0x60, 16)), BalanceCents: 700,
		LifetimeCreditsCents: 1000, LifetimeUsageCents: 300, CreatedAt: 1, UpdatedAt: 2}
}

func sampleTx() *CreditTransaction {
	return &CreditTransaction{TransactionID: keys.TransactionID(seq(0x80, 16)), UserID: keys.AccountID(seq(0x60, 16)),
		AmountCents: 25, TransactionType: TxUsage, BalanceAfterCents: 675, Description: "llm", EventID: "evt-1", CreatedAt: 3}
}

func sampleEvent() *UsageEvent {
	return &UsageEvent{EventID: "evt-1", UserID: keys.AccountID(seq(0x60, 16)), AgentID: "agent-7",
		Resource: "llm_tokens", Quantity: 1200, CostCents: 25, CreatedAt: 3}
}

// roundTrip encodes r, decodes into fresh, and checks equality and a
// stable re-encoding.
func roundTrip[R Record](t *testing.T, r R, fresh R) {
	t.Helper()
	b, err := Encode(r)
	if err != nil {
		t.Fatalf("encode %+v: %v", r, err)
	}
	if err := Decode(b, fresh); err != nil {
		t.Fatalf("decode %x: %v", b, err)
	}
	if !reflect.DeepEqual(r, fresh) {
		t.Fatalf("round trip: got %+v, want %+v", fresh, r)
	}
	if b2, _ := Encode(fresh); !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding differs: %x vs %x", b, b2)
	}
}

func TestRoundTrip(t *testing.T) {
	a := sampleAgent()
	roundTrip(t, a, new(AgentRecord))
	a.LastHeartbeatAt = nil
	roundTrip(t, a, new(AgentRecord))
	roundTrip(t, &AgentRecord{}, new(AgentRecord))
	s := sampleSession()
	roundTrip(t, s, new(SessionRecord))
	s.ClosedAt = nil
	roundTrip(t, s, new(SessionRecord))
	roundTrip(t, sampleUser(), new(UserRecord))
	roundTrip(t, sampleAccount(), new(Account))
	roundTrip(t, &Account{BalanceCents: math.MaxInt64, LifetimeUsageCents: math.MaxInt64}, new(Account))
	tx := sampleTx()
	roundTrip(t, tx, new(CreditTransaction))
	tx.EventID, tx.AmountCents, tx.TransactionType = "", -5, TxAdjustment
	roundTrip(t, tx, new(CreditTransaction))
	e := sampleEvent()
	roundTrip(t, e, new(UsageEvent))
	e.AgentID = ""
	roundTrip(t, e, new(UsageEvent))
}

// TestDecodeReusedTarget: Decode replaces the whole record; fields absent
// from the input do not survive from an earlier use of the target.
func TestDecodeReusedTarget(t *testing.T) {
	noHB := sampleAgent()
	noHB.LastHeartbeatAt = nil
	noHB.Name = "other"
	b, _ := Encode(noHB)
	target := sampleAgent()
	if err := Decode(b, target); err != nil {
		t.Fatalf("decode into a used record: %v", err)
	}
	if !reflect.DeepEqual(target, noHB) {
		t.Fatalf("got %+v, want %+v", target, noHB)
	}

	open := sampleSession()
	open.ClosedAt = nil
	b, _ = Encode(open)
	st := sampleSession()
	if err := Decode(b, st); err != nil || st.ClosedAt != nil {
		t.Fatalf("decode session into a used record: %+v %v", st, err)
	}
}

// TestFieldNames pins the wire names: the seeds' snake_case field names.
func TestFieldNames(t *testing.T) {
	for _, tc := range []struct {
		rec  any
		want []string
	}{
		{sampleAgent(), []string{"agent_id", "user_id", "name", "status", "spec", "created_at", "updated_at", "last_heartbeat_at"}},
		{sampleSession(), []string{"session_id", "agent_id", "user_id", "status", "created_at", "closed_at"}},
		{sampleUser(), []string{"user_id", "email", "created_at", "last_seen_at"}},
		{sampleAccount(), []string{"user_id", "balance_cents", "lifetime_credits_cents", "lifetime_usage_cents", "created_at", "updated_at"}},
		{sampleTx(), []string{"transaction_id", "user_id", "amount_cents", "transaction_type", "balance_after_cents", "description", "event_id", "created_at"}},
		{sampleEvent(), []string{"event_id", "user_id", "agent_id", "resource", "quantity", "cost_cents", "created_at"}},
		{&sampleAgent().Spec, []string{"cpu_millicores", "memory_mb", "runtime_version"}},
	} {
		b, err := encMode.Marshal(tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := cbor.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var got []string
		for k := range m {
			got = append(got, k)
		}
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%T fields %q, want %q", tc.rec, got, want)
		}
	}
}

func TestDecodeStrict(t *testing.T) {
	valid, _ := Encode(sampleUser())
	// enc marshals a generic map with the package's deterministic options,
	// so that only the deliberate defect differs from a valid encoding.
	enc := func(m map[string]any) []byte {
		b, err := encMode.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	user := func() map[string]any {
		return map[string]any{"user_id": seq(1, 32), "email": "a@b", "created_at": 1, "last_seen_at": 2}
	}
	with := func(k string, v any) []byte {
		m := user()
		m[k] = v
		return enc(m)
	}
	without := func(k string) []byte {
		m := user()
		delete(m, k)
		return enc(m)
	}
	if err := Decode(enc(user()), new(UserRecord)); err != nil {
		t.Fatalf("generic map encoding rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short id", with("user_id", seq(1, 31))},
		{"long id", with("user_id", seq(1, 33))},
		{"empty id", with("user_id", []byte{})},
		{"id as array", with("user_id", make([]int, 32))},
		{"missing field", without("created_at")},
		{"unknown field", with("extra", 1)},
		{"case-folded field", enc(map[string]any{"USER_ID": seq(1, 32)})},
		{"wrong type", with("email", 5)},
		{"negative into unsigned", enc(map[string]any{"user_id": seq(0, 16), "balance_cents": 0, "status": -1})},
		{"invalid utf-8", with("email", string([]byte{0xff, 0xfe}))},
		{"trailing bytes", append(slices.Clone(valid), 0x00)},
		{"truncated", valid[:len(valid)-1]},
		{"non-minimal int", bytes.Replace(valid, []byte("created_at\x01"), []byte("created_at\x18\x01"), 1)},
		{"duplicate key", append([]byte{0xa2}, bytes.Repeat([]byte{0x65, 'e', 'm', 'a', 'i', 'l', 0x60}, 2)...)},
		{"indefinite map", append(append([]byte{0xbf}, valid[1:]...), 0xff)},
		{"tagged", append([]byte{0xc1}, valid...)},
		{"null", []byte{0xf6}},
		{"array", []byte{0x80}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Decode(tc.data, new(UserRecord)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode(%x) = %v, want ErrMalformed", tc.data, err)
			}
		})
	}
	// An optional field must be absent, not null.
	hb := map[string]any{"agent_id": seq(0, 32), "user_id": seq(0, 32), "name": "n", "status": 0,
		"spec":       map[string]any{"cpu_millicores": 0, "memory_mb": 0, "runtime_version": ""},
		"created_at": 0, "updated_at": 0, "last_heartbeat_at": nil}
	if err := Decode(enc(hb), new(AgentRecord)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("null optional field: %v, want ErrMalformed", err)
	}
	delete(hb, "last_heartbeat_at")
	if err := Decode(enc(hb), new(AgentRecord)); err != nil {
		t.Fatalf("absent optional field: %v", err)
	}
	if err := Decode(valid, (*UserRecord)(nil)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("nil target: %v", err)
	}
}

func TestValidate(t *testing.T) {
	type validator interface{ Validate() error }
	long := func(n int) string { return strings.Repeat("x", n) }
	edit := func(r validator, f func()) validator { f(); return r }
	a, tx, e := sampleAgent(), sampleTx(), sampleEvent()
	for _, tc := range []struct {
		name string
		rec  validator
		want string // "" = valid
	}{
		{"agent", sampleAgent(), ""},
		{"agent max name", edit(a, func() { a.Name = long(MaxNameLen) }), ""},
		{"session", sampleSession(), ""},
		{"user", sampleUser(), ""},
		{"user no email", &UserRecord{}, ""},
		{"account", sampleAccount(), ""},
		{"tx", sampleTx(), ""},
		{"tx adjustment negative", &CreditTransaction{TransactionType: TxAdjustment, AmountCents: -1}, ""},
		{"event", sampleEvent(), ""},
		{"event max id", &UsageEvent{EventID: long(keys.MaxEventIDLen)}, ""},

		{"agent empty name", &AgentRecord{}, "name is empty"},
		{"agent name too long", &AgentRecord{Name: long(MaxNameLen + 1)}, "name is 257 bytes"},
		{"agent bad utf-8", &AgentRecord{Name: "\xff"}, "name is not valid UTF-8"},
		{"agent status", &AgentRecord{Name: "n", Status: 6}, "agent_state(6)"},
		{"agent runtime", &AgentRecord{Name: "n", Spec: AgentSpecRecord{RuntimeVersion: long(MaxRuntimeLen + 1)}}, "spec.runtime_version"},
		{"agent created", &AgentRecord{Name: "n", CreatedAt: -1}, "created_at is negative"},
		{"agent updated", &AgentRecord{Name: "n", UpdatedAt: -1}, "updated_at is negative"},
		{"agent heartbeat", &AgentRecord{Name: "n", LastHeartbeatAt: i64(-1)}, "last_heartbeat_at is negative"},
		{"session status", &SessionRecord{Status: 4}, "session_status(4)"},
		{"session created", &SessionRecord{CreatedAt: -1}, "created_at is negative"},
		{"session closed", &SessionRecord{ClosedAt: i64(-2)}, "closed_at is negative"},
		{"user email", &UserRecord{Email: long(MaxEmailLen + 1)}, "email is 321 bytes"},
		{"user last seen", &UserRecord{LastSeenAt: -1}, "last_seen_at is negative"},
		{"account balance", &Account{BalanceCents: -1}, "balance_cents -1 is negative"},
		{"account credits", &Account{LifetimeCreditsCents: -1}, "lifetime statistics are negative"},
		{"account usage", &Account{LifetimeUsageCents: -1}, "lifetime statistics are negative"},
		{"account updated", &Account{UpdatedAt: -1}, "updated_at is negative"},
		{"tx type", edit(tx, func() { tx.TransactionType = 5 }), "transaction_type(5)"},
		{"tx zero", &CreditTransaction{TransactionType: TxPurchase}, "amount_cents 0 must be positive for purchase"},
		{"tx negative usage", &CreditTransaction{TransactionType: TxUsage, AmountCents: -3}, "must be positive for usage"},
		{"tx zero adjustment", &CreditTransaction{TransactionType: TxAdjustment}, "adjustment amount_cents 0"},
		{"tx min adjustment", &CreditTransaction{TransactionType: TxAdjustment, AmountCents: math.MinInt64}, "adjustment amount_cents"},
		{"tx description", &CreditTransaction{AmountCents: 1, Description: long(MaxDescriptionLen + 1)}, "description is 1025 bytes"},
		{"tx event id", &CreditTransaction{AmountCents: 1, EventID: long(keys.MaxEventIDLen + 1)}, "event_id is 257 bytes"},
		{"tx created", &CreditTransaction{AmountCents: 1, CreatedAt: -1}, "created_at is negative"},
		{"event empty id", &UsageEvent{}, "event_id is empty"},
		{"event long id", &UsageEvent{EventID: long(keys.MaxEventIDLen + 1)}, "event_id is 257 bytes"},
		{"event agent", &UsageEvent{EventID: "e", AgentID: "\xff"}, "agent_id is not valid UTF-8"},
		{"event resource", &UsageEvent{EventID: "e", Resource: long(MaxResourceLen + 1)}, "resource is 129 bytes"},
		{"event quantity", &UsageEvent{EventID: "e", Quantity: -1}, "quantity -1 is negative"},
		{"event cost", &UsageEvent{EventID: "e", CostCents: -1}, "cost_cents -1 is negative"},
		{"event created", edit(e, func() { e.CreatedAt = -1 }), "created_at is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rec.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestEnums(t *testing.T) {
	for s := AgentState(0); s.Valid(); s++ {
		if got, err := ParseAgentState(s.String()); err != nil || got != s {
			t.Errorf("ParseAgentState(%q) = %v, %v", s, got, err)
		}
	}
	for s := SessionStatus(0); s.Valid(); s++ {
		if got, err := ParseSessionStatus(s.String()); err != nil || got != s {
			t.Errorf("ParseSessionStatus(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseAgentState("zombie"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseAgentState(zombie): %v", err)
	}
	if _, err := ParseSessionStatus("agent_state(9)"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseSessionStatus: %v", err)
	}
	if AgentState(6).Valid() || SessionStatus(4).Valid() || TransactionType(5).Valid() {
		t.Error("out-of-range enum reported valid")
	}
	var credit []TransactionType
	for tt := TransactionType(0); tt.Valid(); tt++ {
		if tt.Credit() {
			credit = append(credit, tt)
		}
	}
	if !slices.Equal(credit, []TransactionType{TxPurchase, TxRefund, TxGrant}) {
		t.Errorf("credit types %v", credit)
	}
}

// fuzzDecode: arbitrary bytes never panic; an error wraps ErrMalformed;
// whatever decodes re-encodes to the same bytes, and Validate never panics.
func fuzzDecode[R interface {
	Record
	Validate() error
}](f *testing.F, fresh func() R, seeds ...R) {
	for _, s := range seeds {
		b, err := Encode(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(slices.Clone(b), 0))
	}
	f.Add([]byte{})
	f.Add([]byte{0xa0})
	f.Add([]byte{0xf6})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := fresh()
		if err := Decode(data, r); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		_ = r.Validate()
		b, err := Encode(r)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", r, err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("decoded %x re-encodes to %x", data, b)
		}
	})
}

func FuzzDecodeAgent(f *testing.F) {
	noHB := sampleAgent()
	noHB.LastHeartbeatAt = nil
	fuzzDecode(f, func() *AgentRecord { return new(AgentRecord) }, sampleAgent(), noHB)
}

func FuzzDecodeSession(f *testing.F) {
	open := sampleSession()
	open.ClosedAt, open.Status = nil, SessionActive
	fuzzDecode(f, func() *SessionRecord { return new(SessionRecord) }, sampleSession(), open)
}

func FuzzDecodeUser(f *testing.F) {
	fuzzDecode(f, func() *UserRecord { return new(UserRecord) }, sampleUser())
}

func FuzzDecodeAccount(f *testing.F) {
	fuzzDecode(f, func() *Account { return new(Account) }, sampleAccount(), &Account{})
}

func FuzzDecodeTransaction(f *testing.F) {
	adj := sampleTx()
	adj.TransactionType, adj.AmountCents, adj.EventID = TxAdjustment, -9, ""
	fuzzDecode(f, func() *CreditTransaction { return new(CreditTransaction) }, sampleTx(), adj)
}

func FuzzDecodeUsageEvent(f *testing.F) {
	fuzzDecode(f, func() *UsageEvent { return new(UsageEvent) }, sampleEvent(), &UsageEvent{EventID: "e"})
}
