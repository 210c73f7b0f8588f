package records

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/swarmkv/swarmkv/keys"
)

func sampleToken() EncryptedToken {
	return EncryptedToken{KeyID: "k2026", Nonce: seq(0x10, TokenNonceLen), Ciphertext: seq(0x40, 48)}
}

func samplePool() *Pool {
	return &Pool{PoolID: "pool_a", OwnerUserID: "111122223333", Name: "Pool A", Visibility: VisibilityPrivate,
		Meta: `{"region":"eu"}`, CreatedAt: 1700000000000, UpdatedAt: 1700000000500}
}

func sampleBot() *Bot {
	return &Bot{AgentID: "987654321098765432", Token: sampleToken(), ClientID: "987654321098765432",
		Tag: "Agent#0001", Status: BotInactive, PoolID: "pool_a", OwnerUserID: "111122223333",
		Profile: `{"voice":true}`, CreatedAt: 5, UpdatedAt: 6}
}

func sampleRunner() *Runner {
	return &Runner{RunnerID: "runner-1", LastSeen: 1700000000000, Meta: `{"host":"h1"}`}
}

func sampleGuild() *GuildSettings {
	return &GuildSettings{GuildID: "555566667777", SelectedPoolID: DefaultPoolID, UpdatedAt: 9}
}

func TestPoolRoundTrip(t *testing.T) {
	roundTrip(t, samplePool(), new(Pool))
	roundTrip(t, &Pool{}, new(Pool))
	b := sampleBot()
	roundTrip(t, b, new(Bot))
	b.Token, b.Profile, b.ClientID = EncryptedToken{}, "", ""
	roundTrip(t, b, new(Bot))
	roundTrip(t, sampleRunner(), new(Runner))
	roundTrip(t, &Runner{RunnerID: "r"}, new(Runner))
	roundTrip(t, sampleGuild(), new(GuildSettings))

	// A reused target loses the token a previous decode left in it.
	noToken, _ := Encode(b)
	target := sampleBot()
	if err := Decode(noToken, target); err != nil || !target.Token.IsZero() || !reflect.DeepEqual(target, b) {
		t.Fatalf("decode into a used bot: %+v %v", target, err)
	}
}

func TestPoolFieldNames(t *testing.T) {
	for _, tc := range []struct {
		rec  any
		want []string
	}{
		{samplePool(), []string{"pool_id", "owner_user_id", "name", "visibility", "meta", "created_at", "updated_at"}},
		{sampleBot(), []string{"agent_id", "token", "client_id", "tag", "status", "pool_id", "owner_user_id", "profile", "created_at", "updated_at"}},
		{ptrTo(sampleToken()), []string{"key_id", "nonce", "ciphertext"}},
		{sampleRunner(), []string{"runner_id", "last_seen", "meta"}},
		{sampleGuild(), []string{"guild_id", "selected_pool_id", "updated_at"}},
	} {
		b, err := encMode.Marshal(tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := cbor.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(tc.rec)
		if err != nil {
			t.Fatal(err)
		}
		var jm map[string]any
		if err := json.Unmarshal(j, &jm); err != nil {
			t.Fatal(err)
		}
		want := slices.Sorted(slices.Values(tc.want))
		for enc, got := range map[string][]string{"cbor": mapKeys(m), "json": mapKeys(jm)} {
			if !slices.Equal(got, want) {
				t.Errorf("%T %s fields %q, want %q", tc.rec, enc, got, want)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func mapKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestPoolDecodeStrict(t *testing.T) {
	enc := func(m map[string]any) []byte {
		b, err := encMode.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pool := func() map[string]any {
		return map[string]any{"pool_id": "p", "owner_user_id": "u", "name": "n", "visibility": 0,
			"meta": "", "created_at": 1, "updated_at": 2}
	}
	if err := Decode(enc(pool()), new(Pool)); err != nil {
		t.Fatalf("generic map encoding rejected: %v", err)
	}
	with := func(k string, v any) []byte {
		m := pool()
		m[k] = v
		return enc(m)
	}
	tokenWith := func(k string, v any) []byte {
		tok := map[string]any{"key_id": "k", "nonce": seq(0, 12), "ciphertext": seq(0, 17)}
		tok[k] = v
		b := map[string]any{"agent_id": "a", "token": tok, "client_id": "", "tag": "", "status": 0,
			"pool_id": "p", "owner_user_id": "u", "profile": "", "created_at": 0, "updated_at": 0}
		return enc(b)
	}
	if err := Decode(tokenWith("key_id", "k"), new(Bot)); err != nil {
		t.Fatalf("generic bot encoding rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		into func([]byte) error
	}{
		{"id as bytes", with("pool_id", []byte("p")), decodeInto[*Pool]},
		{"unknown field", with("owner", "u"), decodeInto[*Pool]},
		{"visibility overflow", with("visibility", 256), decodeInto[*Pool]},
		{"negative visibility", with("visibility", -1), decodeInto[*Pool]},
		{"meta as map", with("meta", map[string]any{}), decodeInto[*Pool]},
		{"invalid utf-8 name", with("name", "\xff"), decodeInto[*Pool]},
		{"token unknown field", tokenWith("plaintext", "secret"), decodeInto[*Bot]},
		{"token nonce as text", tokenWith("nonce", "abcdefghijkl"), decodeInto[*Bot]},
		{"token as null", enc(map[string]any{"agent_id": "a", "token": nil}), decodeInto[*Bot]},
		{"runner last_seen text", enc(map[string]any{"runner_id": "r", "last_seen": "1", "meta": ""}), decodeInto[*Runner]},
		{"guild extra", enc(map[string]any{"guild_id": "g", "selected_pool_id": "", "updated_at": 0, "x": 1}), decodeInto[*GuildSettings]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.into(tc.data); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode(%x) = %v, want ErrMalformed", tc.data, err)
			}
		})
	}
}

func decodeInto[R interface {
	Record
	comparable
}](b []byte) error {
	var zero R
	r := reflect.New(reflect.TypeOf(zero).Elem()).Interface().(R)
	return Decode(b, r)
}

func TestPoolValidate(t *testing.T) {
	type validator interface{ Validate() error }
	long := func(n int) string { return strings.Repeat("x", n) }
	pool := func(f func(p *Pool)) validator { p := samplePool(); f(p); return p }
	bot := func(f func(b *Bot)) validator { b := sampleBot(); f(b); return b }
	bigJSON := `"` + long(MaxJSONLen-2) + `"`
	for _, tc := range []struct {
		name string
		rec  validator
		want string // "" = valid
	}{
		{"pool", samplePool(), ""},
		{"pool public no meta", pool(func(p *Pool) { p.Visibility, p.Meta = VisibilityPublic, "" }), ""},
		{"pool max meta", pool(func(p *Pool) { p.Meta = bigJSON }), ""},
		{"pool max id", pool(func(p *Pool) { p.PoolID = long(keys.MaxPoolIDLen) }), ""},
		{"pool utf-8 name", pool(func(p *Pool) { p.Name = "Écurie 🐎" }), ""},
		{"bot", sampleBot(), ""},
		{"bot no token", bot(func(b *Bot) { b.Token = EncryptedToken{} }), ""},
		{"bot empty non-nil token", bot(func(b *Bot) { b.Token = EncryptedToken{Nonce: []byte{}, Ciphertext: []byte{}} }), ""},
		{"bot no client id", bot(func(b *Bot) { b.ClientID = "" }), ""},
		{"bot max ciphertext", bot(func(b *Bot) { b.Token.Ciphertext = make([]byte, MaxTokenCiphertextLen) }), ""},
		{"bot min ciphertext", bot(func(b *Bot) { b.Token.Ciphertext = make([]byte, MinTokenCiphertextLen) }), ""},
		{"runner", sampleRunner(), ""},
		{"guild", sampleGuild(), ""},
		{"guild no selection", &GuildSettings{GuildID: "g"}, ""},

		{"pool empty id", pool(func(p *Pool) { p.PoolID = "" }), "pool_id is empty"},
		{"pool long id", pool(func(p *Pool) { p.PoolID = long(keys.MaxPoolIDLen + 1) }), "pool_id is 65 bytes, max 64"},
		{"pool id space", pool(func(p *Pool) { p.PoolID = "my pool" }), "pool_id has byte 0x20"},
		{"pool no owner", pool(func(p *Pool) { p.OwnerUserID = "" }), "owner_user_id is empty"},
		{"pool no name", pool(func(p *Pool) { p.Name = "" }), "name is empty"},
		{"pool long name", pool(func(p *Pool) { p.Name = long(MaxNameLen + 1) }), "name is 257 bytes"},
		{"pool name utf-8", pool(func(p *Pool) { p.Name = "\xff" }), "name is not valid UTF-8"},
		{"pool visibility", pool(func(p *Pool) { p.Visibility = 2 }), "visibility(2)"},
		{"pool meta json", pool(func(p *Pool) { p.Meta = "{" }), "meta is not valid JSON"},
		{"pool meta big", pool(func(p *Pool) { p.Meta = `"` + long(MaxJSONLen-1) + `"` }), "meta is 16385 bytes"},
		{"pool meta utf-8", pool(func(p *Pool) { p.Meta = "\"\xff\"" }), "meta is not valid UTF-8"},
		{"pool created", pool(func(p *Pool) { p.CreatedAt = -1 }), "created_at is negative"},
		{"pool updated", pool(func(p *Pool) { p.UpdatedAt = -1 }), "updated_at is negative"},
		{"bot empty id", bot(func(b *Bot) { b.AgentID = "" }), "agent_id is empty"},
		{"bot long id", bot(func(b *Bot) { b.AgentID = long(keys.MaxStringIDLen + 1) }), "agent_id is 129 bytes"},
		{"bot client id", bot(func(b *Bot) { b.ClientID = "a b" }), "client_id has byte 0x20"},
		{"bot tag", bot(func(b *Bot) { b.Tag = long(MaxTagLen + 1) }), "tag is 257 bytes"},
		{"bot status", bot(func(b *Bot) { b.Status = 3 }), "bot_status(3)"},
		{"bot pool", bot(func(b *Bot) { b.PoolID = "" }), "pool_id is empty"},
		{"bot owner", bot(func(b *Bot) { b.OwnerUserID = "\t" }), "owner_user_id has byte 0x09"},
		{"bot profile", bot(func(b *Bot) { b.Profile = "nope" }), "profile is not valid JSON"},
		{"bot created", bot(func(b *Bot) { b.CreatedAt = -1 }), "created_at is negative"},
		{"bot updated", bot(func(b *Bot) { b.UpdatedAt = -1 }), "updated_at is negative"},
		{"token key id only", bot(func(b *Bot) { b.Token = EncryptedToken{KeyID: "k"} }), "token.nonce is 0 bytes, want 12"},
		{"token no key id", bot(func(b *Bot) { b.Token.KeyID = "" }), "token.key_id is empty"},
		{"token long key id", bot(func(b *Bot) { b.Token.KeyID = long(MaxTokenKeyIDLen + 1) }), "token.key_id is 65 bytes"},
		{"token short nonce", bot(func(b *Bot) { b.Token.Nonce = b.Token.Nonce[:11] }), "token.nonce is 11 bytes, want 12"},
		{"token short ciphertext", bot(func(b *Bot) { b.Token.Ciphertext = make([]byte, 16) }), "token.ciphertext is 16 bytes, want 17..4096"},
		{"token long ciphertext", bot(func(b *Bot) { b.Token.Ciphertext = make([]byte, 4097) }), "token.ciphertext is 4097 bytes"},
		{"token ciphertext only", bot(func(b *Bot) { b.Token = EncryptedToken{Ciphertext: seq(0, 20)} }), "token.key_id is empty"},
		{"runner id", &Runner{}, "runner_id is empty"},
		{"runner last seen", &Runner{RunnerID: "r", LastSeen: -1}, "last_seen is negative"},
		{"runner meta", &Runner{RunnerID: "r", Meta: "[1,"}, "meta is not valid JSON"},
		{"guild id", &GuildSettings{}, "guild_id is empty"},
		{"guild pool", &GuildSettings{GuildID: "g", SelectedPoolID: long(65)}, "selected_pool_id is 65 bytes"},
		{"guild updated", &GuildSettings{GuildID: "g", UpdatedAt: -1}, "updated_at is negative"},
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
	// An id error wraps keys.ErrInvalidID too.
	if err := (&Pool{}).Validate(); !errors.Is(err, keys.ErrInvalidID) {
		t.Errorf("id error %v does not wrap keys.ErrInvalidID", err)
	}
}

// TestTokenNeverInErrors: a token's bytes never appear in a validation
// error.
func TestTokenNeverInErrors(t *testing.T) {
	secret := "TOPSECRET-TOKEN-BYTES"
	for _, tok := range []EncryptedToken{
		{KeyID: "k", Nonce: []byte(secret), Ciphertext: []byte(secret)},
		{KeyID: "k", Nonce: seq(0, 12), Ciphertext: []byte(secret[:10])},
		{KeyID: secret + " x", Nonce: seq(0, 12), Ciphertext: []byte(secret)},
	} {
		err := tok.Validate()
		if err == nil || strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("Validate = %v", err)
		}
	}
}

func TestPoolEnums(t *testing.T) {
	for v := Visibility(0); v.Valid(); v++ {
		if got, err := ParseVisibility(v.String()); err != nil || got != v {
			t.Errorf("ParseVisibility(%q) = %v, %v", v, got, err)
		}
	}
	for s := BotStatus(0); s.Valid(); s++ {
		if got, err := ParseBotStatus(s.String()); err != nil || got != s {
			t.Errorf("ParseBotStatus(%q) = %v, %v", s, got, err)
		}
	}
	if VisibilityPublic.String() != "public" || VisibilityPrivate.String() != "private" ||
		BotActive.String() != "active" || BotInactive.String() != "inactive" || BotDisabled.String() != "disabled" {
		t.Error("enum names differ from the seed's")
	}
	if Visibility(2).Valid() || BotStatus(3).Valid() {
		t.Error("out-of-range enum reported valid")
	}
	if _, err := ParseVisibility("secret"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseVisibility(secret): %v", err)
	}
	if _, err := ParseBotStatus("bot_status(3)"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseBotStatus: %v", err)
	}
	p := samplePool()
	if !p.UsableBy(p.OwnerUserID) || p.UsableBy("other") {
		t.Error("private pool: UsableBy wrong")
	}
	p.Visibility = VisibilityPublic
	if !p.UsableBy("other") {
		t.Error("public pool not usable by others")
	}
	if def := (&Pool{PoolID: DefaultPoolID, OwnerUserID: SystemUserID, Name: DefaultPoolName}); def.Validate() != nil {
		t.Error("the default pool does not validate")
	}
}

func FuzzDecodePool(f *testing.F) {
	fuzzDecode(f, func() *Pool { return new(Pool) }, samplePool(), &Pool{PoolID: DefaultPoolID})
}

func FuzzDecodeBot(f *testing.F) {
	noToken := sampleBot()
	noToken.Token = EncryptedToken{}
	fuzzDecode(f, func() *Bot { return new(Bot) }, sampleBot(), noToken)
}

func FuzzDecodeRunner(f *testing.F) {
	fuzzDecode(f, func() *Runner { return new(Runner) }, sampleRunner(), &Runner{RunnerID: "r"})
}

func FuzzDecodeGuildSettings(f *testing.F) {
	fuzzDecode(f, func() *GuildSettings { return new(GuildSettings) }, sampleGuild(), &GuildSettings{GuildID: "g"})
}

// TestPoolEncodingDeterministic: equal records encode to equal bytes,
// whatever the byte slices' capacities.
func TestPoolEncodingDeterministic(t *testing.T) {
	a, b := sampleBot(), sampleBot()
	b.Token.Nonce = append(make([]byte, 0, 64), b.Token.Nonce...)
	ea, _ := Encode(a)
	eb, _ := Encode(b)
	if !bytes.Equal(ea, eb) {
		t.Fatalf("%x vs %x", ea, eb)
	}
}
