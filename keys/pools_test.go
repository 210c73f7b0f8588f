package keys

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestPoolLayouts(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"pool", Pool("pool_goot27"), cat([]byte{0x30}, []byte("pool_goot27"))},
		{"pool/hex", Pool("p1"), mustHex(t, "30 7031")},
		{"bot", Bot("123456789012345678"), cat([]byte{0x31}, []byte("123456789012345678"))},
		{"bot by pool", BotByPool("pool_a", "42"), cat([]byte{0x32, 6}, []byte("pool_a"), []byte("42"))},
		{"bot by pool/hex", BotByPool("p", "ab"), mustHex(t, "32 01 70 6162")},
		{"bots by pool prefix", BotsByPoolPrefix("pool_a"), cat([]byte{0x32, 6}, []byte("pool_a"))},
		{"bots by pool prefix max", BotsByPoolPrefix(strings.Repeat("p", MaxPoolIDLen)),
			cat([]byte{0x32, 64}, bytes.Repeat([]byte{'p'}, MaxPoolIDLen))},
		{"runner", Runner("runner-1"), cat([]byte{0x33}, []byte("runner-1"))},
		{"guild settings", GuildSettings("9876"), mustHex(t, "34 39383736")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.got, tc.want) {
				t.Errorf("got  %x\nwant %x", tc.got, tc.want)
			}
		})
	}
}

func TestValidateStringID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		max  int
		want string // "" = valid
	}{
		{"a", 1, ""},
		{"pool_goot27", MaxPoolIDLen, ""},
		{"!~", 2, ""},
		{strings.Repeat("x", MaxStringIDLen), MaxStringIDLen, ""},
		{"", 8, "agent_id is empty"},
		{"abc", 2, "agent_id is 3 bytes, max 2"},
		{"a b", 8, "byte 0x20 at 1"},
		{"a\x7f", 8, "byte 0x7f at 1"},
		{"\x00", 8, "byte 0x00 at 0"},
		{"é", 8, "byte 0xc3 at 0"},
		{"a\n", 8, "byte 0x0a at 1"},
	} {
		err := ValidateStringID("agent_id", tc.id, tc.max)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ValidateStringID(%q, %d): %v", tc.id, tc.max, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateStringID(%q, %d) = %v, want ErrInvalidID containing %q", tc.id, tc.max, err, tc.want)
		}
	}
}

// randStringID returns a printable-ASCII id of 1..max bytes over a small
// alphabet, so that ids are often prefixes of one another.
func randStringID(rng *rand.Rand, max int) string {
	b := make([]byte, 1+rng.IntN(max))
	for i := range b {
		b[i] = "ab~!"[rng.IntN(4)]
	}
	return string(b)
}

func TestPoolRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 300 {
		p, a := randStringID(rng, MaxPoolIDLen), randStringID(rng, MaxStringIDLen)
		if got, err := DecodePool(Pool(p)); err != nil || got != p {
			t.Fatalf("DecodePool: %q %v", got, err)
		}
		if got, err := DecodeBot(Bot(a)); err != nil || got != a {
			t.Fatalf("DecodeBot: %q %v", got, err)
		}
		if gp, ga, err := DecodeBotByPool(BotByPool(p, a)); err != nil || gp != p || ga != a {
			t.Fatalf("DecodeBotByPool: %q %q %v", gp, ga, err)
		}
		if got, err := DecodeRunner(Runner(a)); err != nil || got != a {
			t.Fatalf("DecodeRunner: %q %v", got, err)
		}
		if got, err := DecodeGuildSettings(GuildSettings(a)); err != nil || got != a {
			t.Fatalf("DecodeGuildSettings: %q %v", got, err)
		}
	}
}

func TestPoolDecodeRejectsMalformed(t *testing.T) {
	long := strings.Repeat("x", MaxStringIDLen+1)
	tests := []struct {
		name  string
		table byte
		key   []byte
	}{
		{"pool empty key", TablePools, nil},
		{"pool empty id", TablePools, []byte{TablePools}},
		{"pool id too long", TablePools, Pool(strings.Repeat("p", MaxPoolIDLen+1))},
		{"pool id with space", TablePools, Pool("a b")},
		{"pool is a bot", TablePools, Bot("a")},
		{"bot empty id", TableBots, []byte{TableBots}},
		{"bot id too long", TableBots, Bot(long)},
		{"bot id not ascii", TableBots, Bot("\xff")},
		{"runner empty id", TableRunners, []byte{TableRunners}},
		{"runner id too long", TableRunners, Runner(long)},
		{"guild empty id", TableGuildSettings, []byte{TableGuildSettings}},
		{"guild control byte", TableGuildSettings, GuildSettings("g\x01")},
		{"by pool table only", TableBotsByPool, []byte{TableBotsByPool}},
		{"by pool prefix only", TableBotsByPool, BotsByPoolPrefix("p")},
		{"by pool empty pool id", TableBotsByPool, BotByPool("", "a")},
		{"by pool length past end", TableBotsByPool, []byte{TableBotsByPool, 5, 'a', 'b'}},
		{"by pool id too long", TableBotsByPool, BotByPool(strings.Repeat("p", MaxPoolIDLen+1), "a")},
		{"by pool agent too long", TableBotsByPool, BotByPool("p", long)},
		{"by pool agent with space", TableBotsByPool, BotByPool("p", "a b")},
		{"by pool is a pool", TableBotsByPool, Pool("pp")},
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

func TestBotsByPoolPrefixPanicsPastLengthByte(t *testing.T) {
	BotsByPoolPrefix(strings.Repeat("p", 255)) // the largest expressible
	defer func() {
		if recover() == nil {
			t.Error("BotsByPoolPrefix with a 256-byte pool id did not panic")
		}
	}()
	BotByPool(strings.Repeat("p", 256), "a")
}

// TestBotsOfPoolAreContiguous: BotsByPoolPrefix(p) bounds exactly the index
// entries of pool p, also when pool ids are prefixes of one another and
// agent ids start with pool id bytes.
func TestBotsOfPoolAreContiguous(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	seen := map[string]int{}
	var pools []string
	var ks []owned
	for range 400 {
		p := randStringID(rng, 4)
		g, ok := seen[p]
		if !ok {
			g = len(pools)
			seen[p] = g
			pools = append(pools, p)
		}
		ks = append(ks, owned{BotByPool(p, randStringID(rng, 5)), g})
	}
	var prefixes [][]byte
	for _, p := range pools {
		prefixes = append(prefixes, BotsByPoolPrefix(p))
	}
	ks = append(ks, owned{Pool("a"), -1}, owned{Bot("a"), -1}, owned{Runner("a"), -1},
		owned{[]byte{TableBotsByPool}, -1}, owned{KV([]byte("a"), nil), -1})
	checkGroups(t, ks, prefixes)
}

// TestPoolTablesAreDisjoint: each new table's keys lie in its own table
// range and in no other.
func TestPoolTablesAreDisjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	byTable := map[byte][][]byte{}
	for range 50 {
		p, a := randStringID(rng, MaxPoolIDLen), randStringID(rng, MaxStringIDLen)
		for _, k := range [][]byte{Pool(p), Bot(a), BotByPool(p, a), Runner(a), GuildSettings(a),
			KV([]byte(p), []byte(a)), Meta(a)} {
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

func FuzzDecodePool(f *testing.F) {
	addSeeds(f, TablePools, Pool("pool_goot27"))
	f.Add(Pool(strings.Repeat("p", MaxPoolIDLen)))
	f.Add(Pool(strings.Repeat("p", MaxPoolIDLen+1)))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodePool(k)
		checkDecode(t, k, err, func() []byte { return Pool(id) })
	})
}

func FuzzDecodeBot(f *testing.F) {
	addSeeds(f, TableBots, Bot("123456789012345678"))
	f.Add(Bot(strings.Repeat("b", MaxStringIDLen+1)))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodeBot(k)
		checkDecode(t, k, err, func() []byte { return Bot(id) })
	})
}

func FuzzDecodeBotByPool(f *testing.F) {
	addSeeds(f, TableBotsByPool, BotByPool("pool_goot27", "123456789012345678"))
	f.Add(BotByPool("a", "b"))
	f.Add([]byte{TableBotsByPool, 0xff, 'a'})
	f.Add([]byte{TableBotsByPool, 0x00, 'a'})
	f.Add(BotByPool(strings.Repeat("p", MaxPoolIDLen), strings.Repeat("a", MaxStringIDLen)))
	f.Fuzz(func(t *testing.T, k []byte) {
		p, a, err := DecodeBotByPool(k)
		checkDecode(t, k, err, func() []byte {
			if !bytes.HasPrefix(k, BotsByPoolPrefix(p)) {
				t.Fatalf("key %x outside BotsByPoolPrefix(%q)", k, p)
			}
			return BotByPool(p, a)
		})
	})
}

func FuzzDecodeRunner(f *testing.F) {
	addSeeds(f, TableRunners, Runner("runner-1"))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodeRunner(k)
		checkDecode(t, k, err, func() []byte { return Runner(id) })
	})
}

func FuzzDecodeGuildSettings(f *testing.F) {
	addSeeds(f, TableGuildSettings, GuildSettings("987654321098765432"))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodeGuildSettings(k)
		checkDecode(t, k, err, func() []byte { return GuildSettings(id) })
	})
}
