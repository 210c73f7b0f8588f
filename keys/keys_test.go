package keys

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// seq returns n bytes start, start+1, ... so that a swapped or shifted
// field shows up in a byte comparison.
func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// The seed's Rust key functions (agent registry §3.2, billing "Key
// Encoding"), transcribed literally. A swarmkv key must be the table byte
// followed by exactly these bytes.
func seedAgentKey(u UserID, a AgentID) [64]byte {
	var k [64]byte
	copy(k[:32], u[:])
	copy(k[32:], a[:])
	return k
}

func seedStatusKey(status byte, u UserID, a AgentID) [65]byte {
	var k [65]byte
	k[0] = status
	copy(k[1:33], u[:])
	copy(k[33:], a[:])
	return k
}

func seedSessionByAgentKey(a AgentID, s SessionID) [48]byte {
	var k [48]byte
	copy(k[:32], a[:])
	copy(k[32:], s[:])
	return k
}

func seedUserTransactionKey(u AccountID, id TransactionID) []byte {
	k := make([]byte, 0, 32)
	k = append(k, u[:]...)
	return append(k, id[:]...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestLayouts(t *testing.T) {
	var (
		u  = UserID(seq(0x01, 32))
		a  = AgentID(seq(0xa0, 32))
		s  = SessionID(seq(0x40, 16))
		ac = AccountID(seq(0x60, 16))
		tx = TransactionID(seq(0x80, 16))
	)
	seedAgent := seedAgentKey(u, a)
	seedStatus := seedStatusKey(7, u, a)
	seedSBA := seedSessionByAgentKey(a, s)
	ev, err := UsageEvent("evt-1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"agent/seed", Agent(u, a), cat([]byte{0x01}, seedAgent[:])},
		{"agent/hex", Agent(u, a), mustHex(t, "01"+
			"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20"+
			"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf")},
		{"agent prefix/seed", AgentPrefix(u), cat([]byte{0x01}, u[:])},
		{"agent by status/seed", AgentByStatus(7, u, a), cat([]byte{0x02}, seedStatus[:])},
		{"agent by status prefix", AgentByStatusPrefix(7), []byte{0x02, 0x07}},
		{"session/seed", Session(s), cat([]byte{0x03}, s[:])},
		{"session by agent/seed", SessionByAgent(a, s), cat([]byte{0x04}, seedSBA[:])},
		{"session by agent prefix", SessionByAgentPrefix(a), cat([]byte{0x04}, a[:])},
		{"user/seed", User(u), cat([]byte{0x05}, u[:])},
		{"agent owner", AgentOwner(a), cat([]byte{0x06}, a[:])},
		{"agent owner/hex", AgentOwner(a), mustHex(t, "06"+
			"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf")},
		{"account/seed", Account(ac), cat([]byte{0x10}, ac[:])},
		{"account/hex", Account(ac), mustHex(t, "10 606162636465666768696a6b6c6d6e6f")},
		{"transaction/seed", Transaction(tx), cat([]byte{0x11}, tx[:])},
		{"transaction by user/seed", TransactionByUser(ac, tx), cat([]byte{0x12}, seedUserTransactionKey(ac, tx))},
		{"transaction by user/hex", TransactionByUser(ac, tx), mustHex(t,
			"12 606162636465666768696a6b6c6d6e6f 808182838485868788898a8b8c8d8e8f")},
		{"transaction by user prefix", TransactionByUserPrefix(ac), cat([]byte{0x12}, ac[:])},
		{"usage event/seed", ev, cat([]byte{0x13}, []byte("evt-1"))},
		{"tx directory", TxDirectory(tx), cat([]byte{0x14}, tx[:])},
		{"kv", KV([]byte("user-1"), []byte("k")), mustHex(t, "20 0006 757365722d31 6b")},
		{"kv empty routing key", KV(nil, []byte("k")), mustHex(t, "20 0000 6b")},
		{"kv empty key", KV([]byte("r"), nil), mustHex(t, "20 0001 72")},
		{"kv max routing key", KV(bytes.Repeat([]byte{'x'}, MaxRoutingKeyLen), nil),
			cat(mustHex(t, "20 0400"), bytes.Repeat([]byte{'x'}, MaxRoutingKeyLen))},
		{"kv prefix", KVPrefix([]byte("ab"), []byte("c")), mustHex(t, "20 0002 6162 63")},
		{"meta", Meta("applied"), cat([]byte{0x00}, []byte("applied"))},
		{"table prefix", TablePrefix(TableKV), []byte{0x20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.got, tc.want) {
				t.Errorf("got  %x\nwant %x", tc.got, tc.want)
			}
		})
	}
}

func TestTableNames(t *testing.T) {
	want := map[byte]string{
		TableMeta:               "meta",
		TableAgents:             "agents",
		TableAgentsByStatus:     "agents_by_status",
		TableSessions:           "sessions",
		TableSessionsByAgent:    "sessions_by_agent",
		TableUsers:              "users",
		TableAgentOwners:        "agent_owners",
		TableAccounts:           "accounts",
		TableTransactions:       "transactions",
		TableTransactionsByUser: "transactions_by_user",
		TableUsageEvents:        "usage_events",
		TableTxDirectory:        "tx_directory",
		TableKV:                 "kv",
		TablePools:              "pools",
		TableBots:               "bots",
		TableBotsByPool:         "bots_by_pool",
		TableRunners:            "runners",
		TableGuildSettings:      "guild_settings",
		TableLeases:             "leases",
		TableLeaseKeys:          "lease_keys",
		TableKeyLease:           "key_lease",
		TableLeaseSeq:           "lease_seq",
		TableEtcdKeys:           "etcd_keys",
		TableEtcdHistory:        "etcd_history",
		TableEtcdRevs:           "etcd_revs",
	}
	if len(want) != 25 {
		t.Fatalf("table bytes collide: %d distinct, want 25", len(want))
	}
	for tb, name := range want {
		if got := TableName(tb); got != name {
			t.Errorf("TableName(0x%02x) = %q, want %q", tb, got, name)
		}
	}
	if got := TableName(0x7f); got != "unknown(0x7f)" {
		t.Errorf("TableName(0x7f) = %q", got)
	}
}

func TestPrefixEnd(t *testing.T) {
	tests := []struct {
		prefix, want []byte
	}{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte{0xff}, nil},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{0x00}, []byte{0x01}},
		{[]byte{0x01}, []byte{0x02}},
		{[]byte{0x01, 0xfe}, []byte{0x01, 0xff}},
		{[]byte{0x01, 0xff}, []byte{0x02}},
		{[]byte{0x01, 0xff, 0xff}, []byte{0x02}},
		{[]byte{0x12, 0x00, 0xff}, []byte{0x12, 0x01}},
	}
	for _, tc := range tests {
		orig := slices.Clone(tc.prefix)
		got := PrefixEnd(tc.prefix)
		if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", tc.prefix, got, tc.want)
		}
		if !bytes.Equal(tc.prefix, orig) {
			t.Errorf("PrefixEnd modified its input: %x -> %x", orig, tc.prefix)
		}
	}
	// The result must not alias the input.
	p := []byte{0x01, 0x02}
	end := PrefixEnd(p)
	end[0] = 0x99
	if p[0] != 0x01 {
		t.Error("PrefixEnd result aliases its input")
	}
}

func TestTablesAreDisjointRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	byTable := map[byte][][]byte{}
	for range 50 {
		u, a, s := randUser(rng), randAgent(rng), randSession(rng)
		ac, tx := randAccount(rng), randTransaction(rng)
		ev, err := UsageEvent(string(randBytes(rng, 1+rng.IntN(MaxEventIDLen))))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range [][]byte{
			Meta(string(randBytes(rng, rng.IntN(8)))),
			Agent(u, a), AgentByStatus(byte(rng.IntN(256)), u, a), Session(s),
			SessionByAgent(a, s), User(u), AgentOwner(a), Account(ac), Transaction(tx),
			TransactionByUser(ac, tx), ev,
			KV(randBytes(rng, rng.IntN(8)), randBytes(rng, rng.IntN(8))),
			EtcdKey(EtcdRoutingKey("ns"), randBytes(rng, rng.IntN(8))),
			EtcdHistory(EtcdRoutingKey("ns"), rng.Uint64(), rng.Uint32()), EtcdRevs(EtcdRoutingKey("ns")),
		} {
			byTable[k[0]] = append(byTable[k[0]], k)
		}
	}
	for tb := range byTable {
		lo, hi := TablePrefix(tb), PrefixEnd(TablePrefix(tb))
		for other, oks := range byTable {
			for _, k := range oks {
				if got := inRange(k, lo, hi); got != (other == tb) {
					t.Fatalf("key %x of table %s: in range of %s = %v", k, TableName(other), TableName(tb), got)
				}
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		u, a, s := randUser(rng), randAgent(rng), randSession(rng)
		ac, tx := randAccount(rng), randTransaction(rng)
		status := byte(rng.IntN(256))

		if gu, ga, err := DecodeAgent(Agent(u, a)); err != nil || gu != u || ga != a {
			t.Fatalf("DecodeAgent: %x %x %v", gu, ga, err)
		}
		if gs, gu, ga, err := DecodeAgentByStatus(AgentByStatus(status, u, a)); err != nil || gs != status || gu != u || ga != a {
			t.Fatalf("DecodeAgentByStatus: %d %x %x %v", gs, gu, ga, err)
		}
		if got, err := DecodeSession(Session(s)); err != nil || got != s {
			t.Fatalf("DecodeSession: %x %v", got, err)
		}
		if ga, gs, err := DecodeSessionByAgent(SessionByAgent(a, s)); err != nil || ga != a || gs != s {
			t.Fatalf("DecodeSessionByAgent: %x %x %v", ga, gs, err)
		}
		if got, err := DecodeUser(User(u)); err != nil || got != u {
			t.Fatalf("DecodeUser: %x %v", got, err)
		}
		if got, err := DecodeAgentOwner(AgentOwner(a)); err != nil || got != a {
			t.Fatalf("DecodeAgentOwner: %x %v", got, err)
		}
		if got, err := DecodeAccount(Account(ac)); err != nil || got != ac {
			t.Fatalf("DecodeAccount: %x %v", got, err)
		}
		if got, err := DecodeTransaction(Transaction(tx)); err != nil || got != tx {
			t.Fatalf("DecodeTransaction: %x %v", got, err)
		}
		if gu, gt, err := DecodeTransactionByUser(TransactionByUser(ac, tx)); err != nil || gu != ac || gt != tx {
			t.Fatalf("DecodeTransactionByUser: %x %x %v", gu, gt, err)
		}
		id := string(randBytes(rng, 1+rng.IntN(MaxEventIDLen)))
		k, err := UsageEvent(id)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeUsageEvent(k); err != nil || got != id {
			t.Fatalf("DecodeUsageEvent: %q %v", got, err)
		}
		rk, key := randBytes(rng, rng.IntN(MaxRoutingKeyLen+1)), randBytes(rng, rng.IntN(64))
		if grk, gkey, err := DecodeKV(KV(rk, key)); err != nil || !bytes.Equal(grk, rk) || !bytes.Equal(gkey, key) {
			t.Fatalf("DecodeKV: %x %x %v", grk, gkey, err)
		}
		name := string(randBytes(rng, rng.IntN(16)))
		if got, err := DecodeMeta(Meta(name)); err != nil || got != name {
			t.Fatalf("DecodeMeta: %q %v", got, err)
		}
	}
}

func TestDecodeKVClipsCapacity(t *testing.T) {
	k := KV([]byte("rk"), []byte("key"))
	orig := slices.Clone(k)
	rk, key, err := DecodeKV(k)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(rk, 'X')
	_ = append(key, 'Y')
	if !bytes.Equal(k, orig) {
		t.Fatalf("appending to decoded slices changed the key: %x -> %x", orig, k)
	}
}

// decoders maps each table to a function running its decoder.
var decoders = map[byte]func([]byte) error{
	TableMeta:               func(k []byte) error { _, err := DecodeMeta(k); return err },
	TableAgents:             func(k []byte) error { _, _, err := DecodeAgent(k); return err },
	TableAgentsByStatus:     func(k []byte) error { _, _, _, err := DecodeAgentByStatus(k); return err },
	TableSessions:           func(k []byte) error { _, err := DecodeSession(k); return err },
	TableSessionsByAgent:    func(k []byte) error { _, _, err := DecodeSessionByAgent(k); return err },
	TableUsers:              func(k []byte) error { _, err := DecodeUser(k); return err },
	TableAgentOwners:        func(k []byte) error { _, err := DecodeAgentOwner(k); return err },
	TableAccounts:           func(k []byte) error { _, err := DecodeAccount(k); return err },
	TableTransactions:       func(k []byte) error { _, err := DecodeTransaction(k); return err },
	TableTransactionsByUser: func(k []byte) error { _, _, err := DecodeTransactionByUser(k); return err },
	TableUsageEvents:        func(k []byte) error { _, err := DecodeUsageEvent(k); return err },
	TableTxDirectory:        func(k []byte) error { _, err := DecodeTxDirectory(k); return err },
	TableKV:                 func(k []byte) error { _, _, err := DecodeKV(k); return err },
	TablePools:              func(k []byte) error { _, err := DecodePool(k); return err },
	TableBots:               func(k []byte) error { _, err := DecodeBot(k); return err },
	TableBotsByPool:         func(k []byte) error { _, _, err := DecodeBotByPool(k); return err },
	TableRunners:            func(k []byte) error { _, err := DecodeRunner(k); return err },
	TableGuildSettings:      func(k []byte) error { _, err := DecodeGuildSettings(k); return err },
	TableEtcdKeys:           func(k []byte) error { _, _, err := DecodeEtcdKey(k); return err },
	TableEtcdHistory:        func(k []byte) error { _, _, _, err := DecodeEtcdHistory(k); return err },
	TableEtcdRevs:           func(k []byte) error { _, err := DecodeEtcdRevs(k); return err },
}

func TestDecodeRejectsMalformed(t *testing.T) {
	var u UserID
	var a AgentID
	agent := Agent(u, a)
	tests := []struct {
		name  string
		table byte
		key   []byte
	}{
		{"agent empty", TableAgents, nil},
		{"agent short", TableAgents, agent[:64]},
		{"agent long", TableAgents, append(slices.Clone(agent), 0)},
		{"agent prefix only", TableAgents, AgentPrefix(u)},
		{"agent wrong table", TableAgents, cat([]byte{TableUsers}, agent[1:])},
		{"status short", TableAgentsByStatus, AgentByStatus(1, u, a)[:65]},
		{"status prefix only", TableAgentsByStatus, AgentByStatusPrefix(1)},
		{"session long", TableSessions, cat(Session(SessionID{}), []byte{0})},
		{"session short", TableSessions, []byte{TableSessions}},
		{"session by agent prefix only", TableSessionsByAgent, SessionByAgentPrefix(a)},
		{"user short", TableUsers, User(u)[:32]},
		{"agent owner short", TableAgentOwners, AgentOwner(a)[:32]},
		{"agent owner long", TableAgentOwners, append(AgentOwner(a), 0)},
		{"agent owner is a user", TableAgentOwners, User(u)},
		{"account is a transaction", TableAccounts, Transaction(TransactionID{})},
		{"transaction is an account", TableTransactions, Account(AccountID{})},
		{"transaction by user prefix only", TableTransactionsByUser, TransactionByUserPrefix(AccountID{})},
		{"tx directory short", TableTxDirectory, TxDirectory(TransactionID{})[:16]},
		{"tx directory is a transaction", TableTxDirectory, Transaction(TransactionID{})},
		{"usage event empty id", TableUsageEvents, []byte{TableUsageEvents}},
		{"usage event too long", TableUsageEvents, cat([]byte{TableUsageEvents}, bytes.Repeat([]byte{'e'}, MaxEventIDLen+1))},
		{"kv table only", TableKV, []byte{TableKV}},
		{"kv half length", TableKV, []byte{TableKV, 0x00}},
		{"kv routing key truncated", TableKV, []byte{TableKV, 0x00, 0x03, 'a', 'b'}},
		{"kv routing key over max", TableKV, cat([]byte{TableKV, 0x04, 0x01}, bytes.Repeat([]byte{'x'}, MaxRoutingKeyLen+1))},
		{"kv wrong table", TableKV, []byte{TableMeta, 0x00, 0x00}},
		{"meta empty", TableMeta, nil},
		{"meta wrong table", TableMeta, []byte{TableKV}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := decoders[tc.table](tc.key)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode %x as %s: err = %v, want ErrMalformed", tc.key, TableName(tc.table), err)
			}
			if !strings.HasPrefix(err.Error(), "keys: malformed key: "+TableName(tc.table)+": ") {
				t.Errorf("error %q lacks detail", err)
			}
		})
	}
}

func TestDecodeRejectsOtherTables(t *testing.T) {
	ev, _ := UsageEvent("e")
	valid := map[byte][]byte{
		TableMeta:               Meta("m"),
		TableAgents:             Agent(UserID{}, AgentID{}),
		TableAgentsByStatus:     AgentByStatus(0, UserID{}, AgentID{}),
		TableSessions:           Session(SessionID{}),
		TableSessionsByAgent:    SessionByAgent(AgentID{}, SessionID{}),
		TableUsers:              User(UserID{}),
		TableAgentOwners:        AgentOwner(AgentID{}),
		TableAccounts:           Account(AccountID{}),
		TableTransactions:       Transaction(TransactionID{}),
		TableTransactionsByUser: TransactionByUser(AccountID{}, TransactionID{}),
		TableUsageEvents:        ev,
		TableTxDirectory:        TxDirectory(TransactionID{}),
		TableKV:                 KV(nil, nil),
		TablePools:              Pool("pool_goot27"),
		TableBots:               Bot("1234"),
		TableBotsByPool:         BotByPool("pool_goot27", "1234"),
		TableRunners:            Runner("runner-1"),
		TableGuildSettings:      GuildSettings("9876"),
	}
	for tb, decode := range decoders {
		for other, k := range valid {
			err := decode(k)
			if other == tb && err != nil {
				t.Errorf("%s rejects its own key %x: %v", TableName(tb), k, err)
			}
			if other != tb && !errors.Is(err, ErrMalformed) {
				t.Errorf("%s accepts a %s key %x (err %v)", TableName(tb), TableName(other), k, err)
			}
		}
	}
}

func TestUsageEventErrors(t *testing.T) {
	for _, id := range []string{"", strings.Repeat("e", MaxEventIDLen+1)} {
		if _, err := UsageEvent(id); !errors.Is(err, ErrInvalidEventID) {
			t.Errorf("UsageEvent(%d bytes): err = %v, want ErrInvalidEventID", len(id), err)
		}
	}
	if _, err := UsageEvent(strings.Repeat("e", MaxEventIDLen)); err != nil {
		t.Errorf("UsageEvent(MaxEventIDLen bytes): %v", err)
	}
}

func TestRoutingKeyTooLong(t *testing.T) {
	if err := ValidateRoutingKey(make([]byte, MaxRoutingKeyLen)); err != nil {
		t.Errorf("ValidateRoutingKey(max): %v", err)
	}
	long := make([]byte, MaxRoutingKeyLen+1)
	if err := ValidateRoutingKey(long); !errors.Is(err, ErrRoutingKeyTooLong) {
		t.Errorf("ValidateRoutingKey(max+1) = %v, want ErrRoutingKeyTooLong", err)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("KV with an over-long routing key did not panic")
		}
	}()
	KV(long, nil)
}

// inRange reports whether lo <= k < hi, where a nil hi is unbounded.
func inRange(k, lo, hi []byte) bool {
	return bytes.Compare(k, lo) >= 0 && (hi == nil || bytes.Compare(k, hi) < 0)
}

type owned struct {
	key   []byte
	owner int // index of the group the key belongs to, -1 for noise
}

// checkGroups sorts keys bytewise and checks, for every group g with
// prefix prefixes[g], that [prefix, PrefixEnd(prefix)) holds exactly the
// keys of g and that they are adjacent in the sorted order.
func checkGroups(t *testing.T, ks []owned, prefixes [][]byte) {
	t.Helper()
	slices.SortFunc(ks, func(x, y owned) int { return bytes.Compare(x.key, y.key) })
	for g, p := range prefixes {
		lo, hi := p, PrefixEnd(p)
		first, last, n := -1, -1, 0
		for i, k := range ks {
			in := inRange(k.key, lo, hi)
			if in != (k.owner == g) {
				t.Fatalf("group %d range [%x, %x): key %x of group %d in range = %v", g, lo, hi, k.key, k.owner, in)
			}
			if k.owner == g {
				if first < 0 {
					first = i
				}
				last, n = i, n+1
			}
		}
		if n > 0 && last-first+1 != n {
			t.Fatalf("group %d: %d keys spread over %d positions", g, n, last-first+1)
		}
	}
}

func TestAgentsOfUserAreContiguous(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 20 {
		// Users that share all but their last byte, plus the extremes, so
		// that PrefixEnd must carry across 0xff bytes.
		base := randUser(rng)
		var users []UserID
		for _, last := range []byte{0x00, 0x01, 0xfe, 0xff} {
			u := base
			u[31] = last
			users = append(users, u)
		}
		var zero, ones UserID
		for i := range ones {
			ones[i] = 0xff
		}
		users = append(users, zero, ones, randUser(rng))

		var ks []owned
		var prefixes [][]byte
		for g, u := range users {
			prefixes = append(prefixes, AgentPrefix(u))
			for range 1 + rng.IntN(10) {
				ks = append(ks, owned{Agent(u, randAgent(rng)), g})
			}
			var minA, maxA AgentID
			for i := range maxA {
				maxA[i] = 0xff
			}
			ks = append(ks, owned{Agent(u, minA), g}, owned{Agent(u, maxA), g})
			// Keys of other tables built from the same ids.
			ks = append(ks,
				owned{User(u), -1},
				owned{AgentByStatus(TableAgents, u, randAgent(rng)), -1},
				owned{SessionByAgent(AgentID(u), randSession(rng)), -1})
		}
		ks = append(ks, owned{TablePrefix(TableAgentsByStatus), -1}, owned{[]byte{TableAgents}, -1})
		rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		t.Logf("round %d: %d keys", round, len(ks))
		checkGroups(t, ks, prefixes)
	}
}

func TestSessionsOfAgentAreContiguous(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var ks []owned
	var prefixes [][]byte
	for g := range 30 {
		a := randAgent(rng)
		if g%3 == 0 && g > 0 {
			a = AgentID(bytes.Repeat([]byte{byte(g)}, 32))
		}
		prefixes = append(prefixes, SessionByAgentPrefix(a))
		for range 1 + rng.IntN(8) {
			ks = append(ks, owned{SessionByAgent(a, randSession(rng)), g})
		}
		ks = append(ks, owned{Session(randSession(rng)), -1})
	}
	checkGroups(t, ks, prefixes)
}

func TestKVRoutingKeysDoNotInterleave(t *testing.T) {
	// Routing key "a" with key "b..." versus routing key "ab": without the
	// length field both would start with "ab".
	a1 := KV([]byte("a"), []byte("b"))
	a2 := KV([]byte("a"), []byte("bz"))
	ab := KV([]byte("ab"), nil)
	ab2 := KV([]byte("ab"), []byte("c"))
	if bytes.HasPrefix(ab, KVPrefix([]byte("a"), nil)) || bytes.HasPrefix(a1, KVPrefix([]byte("ab"), nil)) {
		t.Fatalf("prefixes of \"a\" and \"ab\" overlap: %x %x", a1, ab)
	}
	if rk, key, err := DecodeKV(a1); err != nil || string(rk) != "a" || string(key) != "b" {
		t.Fatalf("DecodeKV(%x) = %q, %q, %v", a1, rk, key, err)
	}
	if rk, key, err := DecodeKV(ab); err != nil || string(rk) != "ab" || string(key) != "" {
		t.Fatalf("DecodeKV(%x) = %q, %q, %v", ab, rk, key, err)
	}
	checkGroups(t, []owned{{a1, 0}, {a2, 0}, {ab, 1}, {ab2, 1}},
		[][]byte{KVPrefix([]byte("a"), nil), KVPrefix([]byte("ab"), nil)})

	// Property: routing keys over a tiny alphabet, so that many are
	// prefixes of each other, and keys that start with routing-key bytes.
	rng := rand.New(rand.NewPCG(9, 10))
	small := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab\xff"[rng.IntN(3)]
		}
		return b
	}
	seen := map[string]int{}
	var rks [][]byte
	var ks []owned
	for range 300 {
		rk := small(rng.IntN(5))
		g, ok := seen[string(rk)]
		if !ok {
			g = len(rks)
			seen[string(rk)] = g
			rks = append(rks, rk)
		}
		ks = append(ks, owned{KV(rk, small(rng.IntN(6))), g})
	}
	var prefixes [][]byte
	for _, rk := range rks {
		prefixes = append(prefixes, KVPrefix(rk, nil))
	}
	ks = append(ks, owned{Meta("x"), -1}, owned{User(UserID{}), -1})
	checkGroups(t, ks, prefixes)

	// Key prefixes inside one routing key bound exactly the keys that
	// start with them.
	rk := []byte("a")
	lo := KVPrefix(rk, []byte("b"))
	hi := PrefixEnd(lo)
	for _, k := range [][]byte{[]byte("b"), []byte("ba"), []byte("b\xff\xff")} {
		if !inRange(KV(rk, k), lo, hi) {
			t.Errorf("key %q not inside KVPrefix(%q, %q)", k, rk, "b")
		}
	}
	for _, k := range [][]byte{[]byte("a"), []byte("c"), nil} {
		if inRange(KV(rk, k), lo, hi) {
			t.Errorf("key %q inside KVPrefix(%q, %q)", k, rk, "b")
		}
	}
}

func TestTransactionsByUserSortByTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	entropy := rand.NewChaCha8([32]byte{1})
	users := []AccountID{randAccount(rng), randAccount(rng)}
	users[1] = users[0]
	users[1][15]++ // adjacent user ids: their ranges must still not mix

	type entry struct {
		key  []byte
		user int
		ms   uint64
	}
	var es []entry
	// Timestamps across byte boundaries (255/256, 65535/65536) and at
	// the ULID maximum, plus random ones.
	times := []uint64{0, 1, 255, 256, 65535, 65536, 1 << 40, ulid.MaxTime()}
	for range 200 {
		times = append(times, rng.Uint64N(ulid.MaxTime()+1))
	}
	for i, ms := range times {
		id := TransactionID(ulid.MustNew(ms, entropy))
		es = append(es, entry{TransactionByUser(users[i%2], id), i % 2, ms})
	}
	rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	slices.SortFunc(es, func(x, y entry) int { return bytes.Compare(x.key, y.key) })

	for u, user := range users {
		lo := TransactionByUserPrefix(user)
		hi := PrefixEnd(lo)
		var prev uint64
		n := 0
		for _, e := range es {
			if inRange(e.key, lo, hi) != (e.user == u) {
				t.Fatalf("user %d range holds key %x of user %d", u, e.key, e.user)
			}
			if e.user != u {
				continue
			}
			if n > 0 && e.ms < prev {
				t.Fatalf("user %d: ms %d sorts after ms %d", u, e.ms, prev)
			}
			_, id, err := DecodeTransactionByUser(e.key)
			if err != nil {
				t.Fatal(err)
			}
			if got := ulid.ULID(id).Time(); got != e.ms {
				t.Fatalf("decoded ULID time %d, want %d", got, e.ms)
			}
			prev, n = e.ms, n+1
		}
		if n != (len(times)+1-u)/2 {
			t.Fatalf("user %d: %d transactions in range, want %d", u, n, (len(times)+1-u)/2)
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func randUser(rng *rand.Rand) UserID               { return UserID(randBytes(rng, 32)) }
func randAgent(rng *rand.Rand) AgentID             { return AgentID(randBytes(rng, 32)) }
func randSession(rng *rand.Rand) SessionID         { return SessionID(randBytes(rng, 16)) }
func randAccount(rng *rand.Rand) AccountID         { return AccountID(randBytes(rng, 16)) }
func randTransaction(rng *rand.Rand) TransactionID { return TransactionID(randBytes(rng, 16)) }

func TestIDTextRoundTrip(t *testing.T) {
	var u UserID
	u[0], u[31] = 0xab, 0x01
	b, err := u.MarshalText()
	if err != nil || len(b) != 64 || string(b[:2]) != "ab" {
		t.Fatalf("MarshalText = %q, %v", b, err)
	}
	var back UserID
	if err := back.UnmarshalText(b); err != nil || back != u {
		t.Fatalf("UnmarshalText = %x, %v", back, err)
	}
	var tx TransactionID
	for _, bad := range []string{"", "ab", string(b), "zz" + string(b[2:32])} {
		if err := tx.UnmarshalText([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("UnmarshalText(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}
