package api

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/secrets"
)

// Unit tests of the Pools service's pure helpers: input validation,
// conversions, deploy planning and error mapping. Scenario tests against a
// cluster live in pools_test.go.

const testToken = "MTA5ODc2NTQzMjEwOTg3NjU0.GaBcDe.unit-test-secret-token"

func testRing(t testing.TB) *secrets.Ring {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	for i := range key {
		key[i] = byte(i * 7)
	}
	r, err := secrets.ParseRing("unit:" + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func isInvalid(err error) bool { return errors.Is(err, cluster.ErrInvalidArgument) }

func TestPoolForCreate(t *testing.T) {
	p, err := poolForCreate("user-1", &rpc.Pool{PoolId: "pool_a", Name: "a", Visibility: 1, Meta: `{"region":"eu"}`,
		OwnerUserId: "someone-else", CreatedAt: 5, UpdatedAt: 6}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := records.Pool{PoolID: "pool_a", OwnerUserID: "user-1", Name: "a", Visibility: records.VisibilityPrivate,
		Meta: `{"region":"eu"}`, CreatedAt: 1000, UpdatedAt: 1000}
	if *p != want {
		t.Fatalf("pool %+v, want %+v (owner is the actor, times the server's)", *p, want)
	}
	for name, tc := range map[string]struct {
		actor string
		pool  *rpc.Pool
	}{
		"nil pool":       {"u", nil},
		"no actor":       {"", &rpc.Pool{PoolId: "p", Name: "n"}},
		"actor w/ space": {"u 1", &rpc.Pool{PoolId: "p", Name: "n"}},
		"no pool id":     {"u", &rpc.Pool{Name: "n"}},
		"long pool id":   {"u", &rpc.Pool{PoolId: strings.Repeat("p", keys.MaxPoolIDLen+1), Name: "n"}},
		"no name":        {"u", &rpc.Pool{PoolId: "p"}},
		"visibility 2":   {"u", &rpc.Pool{PoolId: "p", Name: "n", Visibility: 2}},
		"visibility 257": {"u", &rpc.Pool{PoolId: "p", Name: "n", Visibility: 257}},
		"bad meta":       {"u", &rpc.Pool{PoolId: "p", Name: "n", Meta: "{"}},
		"huge meta":      {"u", &rpc.Pool{PoolId: "p", Name: "n", Meta: `"` + strings.Repeat("m", records.MaxJSONLen) + `"`}},
	} {
		if _, err := poolForCreate(tc.actor, tc.pool, 1000); !isInvalid(err) {
			t.Errorf("%s: %v, want cluster.ErrInvalidArgument", name, err)
		}
	}
}

func TestBotFromRequest(t *testing.T) {
	ring := testRing(t)
	var sealed []string
	seal := func(agentID, token string) (records.EncryptedToken, error) {
		sealed = append(sealed, agentID)
		return ring.Encrypt(agentID, token)
	}
	in := &rpc.Bot{AgentId: "1203", Token: testToken, ClientId: "1203", Tag: "bot#1", Status: 1, PoolId: "pool_a",
		OwnerUserId: "someone-else", Profile: `{"voice":true}`, CreatedAt: 5, UpdatedAt: 6, HasToken: false}
	b, err := botFromRequest("user-1", in, 1000, true, records.DefaultPoolID, seal)
	if err != nil {
		t.Fatal(err)
	}
	if b.OwnerUserID != "user-1" || b.CreatedAt != 1000 || b.UpdatedAt != 1000 || b.PoolID != "pool_a" ||
		b.Status != records.BotInactive || b.Profile != in.Profile || b.ClientID != "1203" || b.Tag != "bot#1" {
		t.Fatalf("bot %+v", b)
	}
	if b.Token.KeyID != "unit" || strings.Contains(string(b.Token.Ciphertext), testToken) {
		t.Fatalf("token not sealed under the ring: key %q", b.Token.KeyID)
	}
	if got, err := ring.Decrypt("1203", b.Token); err != nil || got != testToken {
		t.Fatalf("sealed token does not open: %v", err)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}

	// An empty pool id takes the default given.
	b, err = botFromRequest("user-1", &rpc.Bot{AgentId: "1204", Token: "t", PoolId: ""}, 1000, true, records.DefaultPoolID, seal)
	if err != nil || b.PoolID != records.DefaultPoolID {
		t.Fatalf("default pool: %v, %+v", err, b)
	}

	// An update without a token keeps Token zero and seals nothing.
	sealed = nil
	b, err = botFromRequest("user-1", &rpc.Bot{AgentId: "1203", PoolId: "pool_a"}, 1000, false, "", seal)
	if err != nil || !b.Token.IsZero() || len(sealed) != 0 {
		t.Fatalf("update without token: %v, token zero %v, sealed %v", err, b.Token.IsZero(), sealed)
	}

	// Bad input is refused before anything is sealed, and no error quotes
	// the token.
	sealed = nil
	for name, tc := range map[string]struct {
		actor    string
		bot      *rpc.Bot
		required bool
	}{
		"nil bot":         {"u", nil, true},
		"no actor":        {"", &rpc.Bot{AgentId: "a", Token: testToken, PoolId: "p"}, true},
		"no agent id":     {"u", &rpc.Bot{Token: testToken, PoolId: "p"}, true},
		"agent id ctl":    {"u", &rpc.Bot{AgentId: "a\n", Token: testToken, PoolId: "p"}, true},
		"long agent id":   {"u", &rpc.Bot{AgentId: strings.Repeat("a", keys.MaxStringIDLen+1), Token: testToken, PoolId: "p"}, true},
		"no pool":         {"u", &rpc.Bot{AgentId: "a", Token: testToken}, false},
		"bad client id":   {"u", &rpc.Bot{AgentId: "a", Token: testToken, PoolId: "p", ClientId: "c d"}, true},
		"status 3":        {"u", &rpc.Bot{AgentId: "a", Token: testToken, PoolId: "p", Status: 3}, true},
		"status 256":      {"u", &rpc.Bot{AgentId: "a", Token: testToken, PoolId: "p", Status: 256}, true},
		"bad profile":     {"u", &rpc.Bot{AgentId: "a", Token: testToken, PoolId: "p", Profile: "not json"}, true},
		"missing token":   {"u", &rpc.Bot{AgentId: "a", PoolId: "p"}, true},
		"token too long":  {"u", &rpc.Bot{AgentId: "a", Token: testToken + strings.Repeat("x", maxTokenLen), PoolId: "p"}, true},
		"update too long": {"u", &rpc.Bot{AgentId: "a", Token: testToken + strings.Repeat("x", maxTokenLen), PoolId: "p"}, false},
	} {
		defPool := records.DefaultPoolID
		if name == "no pool" {
			defPool = ""
		}
		_, err := botFromRequest(tc.actor, tc.bot, 1000, tc.required, defPool, seal)
		if !isInvalid(err) {
			t.Errorf("%s: %v, want cluster.ErrInvalidArgument", name, err)
			continue
		}
		if strings.Contains(err.Error(), testToken[:12]) {
			t.Errorf("%s: error %q quotes the token", name, err)
		}
	}
	if len(sealed) != 0 {
		t.Fatalf("sealed tokens of refused requests: %v", sealed)
	}

	// The longest token fits the record's ciphertext limit.
	b, err = botFromRequest("u", &rpc.Bot{AgentId: "a", Token: strings.Repeat("x", maxTokenLen), PoolId: "p"}, 1, true, "", seal)
	if err != nil || b.Validate() != nil {
		t.Fatalf("longest token: %v", err)
	}

	// Without a key ring a token cannot be accepted.
	_, err = botFromRequest("u", &rpc.Bot{AgentId: "a", Token: testToken, PoolId: "p"}, 1, true, "", nil)
	if !errors.Is(err, cluster.ErrNoTokenKeys) {
		t.Fatalf("no ring: %v, want cluster.ErrNoTokenKeys", err)
	}
	if _, err := botFromRequest("u", &rpc.Bot{AgentId: "a", PoolId: "p"}, 1, false, "", nil); err != nil {
		t.Fatalf("update without token and without ring: %v", err)
	}
}

func TestRunnerForHeartbeat(t *testing.T) {
	r, err := runnerForHeartbeat(&rpc.Runner{RunnerId: "runner-1", LastSeen: 5, Meta: `{"host":"a"}`}, 1000)
	if err != nil || *r != (records.Runner{RunnerID: "runner-1", LastSeen: 1000, Meta: `{"host":"a"}`}) {
		t.Fatalf("runner %+v, %v (last_seen must be the server's clock)", r, err)
	}
	for _, in := range []*rpc.Runner{nil, {}, {RunnerId: "a b"}, {RunnerId: "r", Meta: "{"}} {
		if _, err := runnerForHeartbeat(in, 1000); !isInvalid(err) {
			t.Errorf("runner %v: %v, want cluster.ErrInvalidArgument", in, err)
		}
	}
}

func TestStaleRunners(t *testing.T) {
	rs := []*records.Runner{{RunnerID: "c", LastSeen: 900}, {RunnerID: "a", LastSeen: 100}, {RunnerID: "b", LastSeen: 500}, {RunnerID: "d", LastSeen: 1000}}
	ids := func(rs []*records.Runner) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.RunnerID)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		staleAfter int64
		want       string
	}{
		{0, "a,b,c,d"}, {1, "a,b,c"}, {100, "a,b,c"}, {101, "a,b"}, {500, "a,b"}, {501, "a"}, {900, "a"}, {901, ""},
	} {
		if got := ids(staleRunners(rs, 1000, tc.staleAfter)); got != tc.want {
			t.Errorf("stale after %d: %s, want %s", tc.staleAfter, got, tc.want)
		}
	}
}

func TestValidatePlanRequest(t *testing.T) {
	ok := &rpc.PlanDeployRequest{Actor: "u", GuildId: "g", Desired: 49, PresentAgentIds: []string{"a", "b", "a"}}
	if err := validatePlanRequest(ok); err != nil {
		t.Fatal(err)
	}
	err := validatePlanRequest(&rpc.PlanDeployRequest{Actor: "u", GuildId: "g", Desired: 50})
	if !isInvalid(err) || !strings.Contains(err.Error(), "desired 50 exceeds MAX_AGENTS_PER_GUILD 49") {
		t.Fatalf("desired 50: %v", err)
	}
	for name, req := range map[string]*rpc.PlanDeployRequest{
		"no actor":       {GuildId: "g"},
		"no guild":       {Actor: "u"},
		"bad pool":       {Actor: "u", GuildId: "g", PoolId: strings.Repeat("p", 65)},
		"bad present":    {Actor: "u", GuildId: "g", PresentAgentIds: []string{"a", ""}},
		"desired 1<<31":  {Actor: "u", GuildId: "g", Desired: 1 << 31},
		"present ctl id": {Actor: "u", GuildId: "g", PresentAgentIds: []string{"\x00"}},
	} {
		if err := validatePlanRequest(req); !isInvalid(err) {
			t.Errorf("%s: %v, want cluster.ErrInvalidArgument", name, err)
		}
	}
}

func TestInviteURL(t *testing.T) {
	const want = "https://discord.com/oauth2/authorize?client_id=1203456789012345678&scope=bot%20applications.commands&permissions=0"
	if got := inviteURL("1203456789012345678"); got != want {
		t.Fatalf("inviteURL = %s, want %s", got, want)
	}
	if got := inviteURL("a&b=c"); !strings.Contains(got, "client_id=a%26b%3Dc&scope=") {
		t.Fatalf("client id not escaped: %s", got)
	}
}

func bot(id string, st records.BotStatus, clientID string) *records.Bot {
	return &records.Bot{AgentID: id, Status: st, ClientID: clientID, PoolID: "p", OwnerUserID: "u"}
}

func TestPlanDeploy(t *testing.T) {
	bots := []*records.Bot{
		bot("e", records.BotActive, "ce"), bot("a", records.BotActive, "ca"), bot("b", records.BotInactive, "cb"),
		bot("c", records.BotDisabled, "cc"), bot("d", records.BotActive, "cd"), bot("f", records.BotActive, ""),
		bot("g", records.BotActive, "cg"),
	}
	for _, tc := range []struct {
		name    string
		desired uint32
		present []string
		missing uint32
		invites string
	}{
		{"empty guild", 3, nil, 3, "a,d,e"},
		{"all available", 10, nil, 10, "a,d,e,g"},
		{"present skipped", 3, []string{"a"}, 2, "d,e"},
		{"duplicates counted once", 3, []string{"a", "a", "x"}, 1, "d"},
		{"enough present", 2, []string{"x", "y", "z"}, 0, ""},
		{"exactly present", 2, []string{"x", "y"}, 0, ""},
		{"zero desired", 0, nil, 0, ""},
		{"max", records.MaxAgentsPerGuild, []string{"d"}, 48, "a,e,g"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planDeploy("p", tc.desired, tc.present, bots)
			var got []string
			for _, inv := range plan.Invites {
				got = append(got, inv.AgentId)
				if inv.ClientId != "c"+inv.AgentId || inv.Url != inviteURL(inv.ClientId) {
					t.Fatalf("invite %v", inv)
				}
			}
			if plan.PoolId != "p" || plan.Desired != tc.desired || plan.Missing != tc.missing || strings.Join(got, ",") != tc.invites {
				t.Fatalf("plan pool %s desired %d present %d missing %d invites %v; want missing %d invites %s",
					plan.PoolId, plan.Desired, plan.Present, plan.Missing, got, tc.missing, tc.invites)
			}
		})
	}
	if bots[0].AgentID != "e" {
		t.Fatal("planDeploy reordered its input")
	}
}

// TestPlanDeployModel checks planDeploy against a naive model on random
// inputs (seeded).
func TestPlanDeployModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for range 2000 {
		var bots []*records.Bot
		for i := range rng.IntN(12) {
			client := ""
			if rng.IntN(5) > 0 {
				client = fmt.Sprintf("c%d", i)
			}
			bots = append(bots, bot(fmt.Sprintf("b%02d", rng.IntN(40)), records.BotStatus(rng.IntN(3)), client))
		}
		// Agent ids are unique in a pool.
		slices.SortFunc(bots, func(a, b *records.Bot) int { return strings.Compare(a.AgentID, b.AgentID) })
		bots = slices.CompactFunc(bots, func(a, b *records.Bot) bool { return a.AgentID == b.AgentID })
		rng.Shuffle(len(bots), func(i, j int) { bots[i], bots[j] = bots[j], bots[i] })
		var present []string
		for range rng.IntN(8) {
			present = append(present, fmt.Sprintf("b%02d", rng.IntN(40)))
		}
		desired := uint32(rng.IntN(records.MaxAgentsPerGuild + 1))
		plan := planDeploy("p", desired, present, bots)

		// Model.
		uniq := map[string]bool{}
		for _, p := range present {
			uniq[p] = true
		}
		missing := max(0, int(desired)-len(uniq))
		var eligible []string
		for _, b := range bots {
			if b.Status == records.BotActive && b.ClientID != "" && !uniq[b.AgentID] {
				eligible = append(eligible, b.AgentID)
			}
		}
		slices.Sort(eligible)
		want := eligible[:min(missing, len(eligible))]
		var got []string
		for _, inv := range plan.Invites {
			got = append(got, inv.AgentId)
		}
		if plan.Present != uint32(len(uniq)) || plan.Missing != uint32(missing) || !slices.Equal(got, want) {
			t.Fatalf("desired %d present %v bots %d: plan present %d missing %d invites %v; model %d %d %v",
				desired, present, len(bots), plan.Present, plan.Missing, got, len(uniq), missing, want)
		}
	}
}

func TestPoolConversions(t *testing.T) {
	p := &records.Pool{PoolID: "pool_a", OwnerUserID: "u", Name: "a", Visibility: records.VisibilityPrivate, Meta: "{}", CreatedAt: 1, UpdatedAt: 2}
	back, err := rpc.PoolFromProto(rpc.PoolToProto(p))
	if err != nil || *back != *p {
		t.Fatalf("pool round trip: %+v, %v", back, err)
	}
	ring := testRing(t)
	tok, err := ring.Encrypt("a", testToken)
	if err != nil {
		t.Fatal(err)
	}
	b := &records.Bot{AgentID: "a", Token: tok, ClientID: "c", Tag: "t", Status: records.BotDisabled, PoolID: "pool_a",
		OwnerUserID: "u", Profile: "{}", CreatedAt: 1, UpdatedAt: 2}
	m := rpc.BotToProto(b)
	if m.GetToken() != "" || !m.GetHasToken() {
		t.Fatalf("BotToProto: token %q has_token %v", m.GetToken(), m.GetHasToken())
	}
	bb, err := rpc.BotFromProto(m)
	if err != nil {
		t.Fatal(err)
	}
	bb.Token = b.Token
	if fmt.Sprint(*bb) != fmt.Sprint(*b) {
		t.Fatalf("bot round trip: %+v, want %+v", bb, b)
	}
	if rpc.BotToProto(&records.Bot{AgentID: "a"}).GetHasToken() {
		t.Fatal("has_token for a bot without a token")
	}
	rn := &records.Runner{RunnerID: "r", LastSeen: 3, Meta: "{}"}
	if back, err := rpc.RunnerFromProto(rpc.RunnerToProto(rn)); err != nil || *back != *rn {
		t.Fatalf("runner round trip: %+v, %v", back, err)
	}
}

func TestPoolsStatus(t *testing.T) {
	s := &server{}
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{fmt.Errorf("apply: %w", fsm.ErrPermissionDenied), codes.PermissionDenied, "permission denied"},
		{fsm.ErrAlreadyExists, codes.AlreadyExists, "already exists"},
		{fsm.ErrNotFound, codes.NotFound, "not found"},
		{&fsm.PoolNotEmptyError{PoolID: "pool_a", Bots: 3}, codes.FailedPrecondition, "not empty"},
		{cluster.ErrNoTokenKeys, codes.FailedPrecondition, "no token key ring configured"},
		{secrets.ErrNoRing, codes.FailedPrecondition, "no token key ring configured"},
		{fmt.Errorf("%w %q", secrets.ErrUnknownKey, "k9"), codes.FailedPrecondition, `"k9"`},
		{secrets.ErrDecrypt, codes.Internal, "does not decrypt"},
		{fmt.Errorf("x: %w", keys.ErrInvalidID), codes.InvalidArgument, "invalid id"},
	} {
		st := status.Convert(s.statusErr(0, tc.err))
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%v: %v %q, want %v containing %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
	st := status.Convert(s.statusErr(0, &fsm.PoolNotEmptyError{PoolID: "pool_a", Bots: 3}))
	var d *rpc.PoolNotEmpty
	for _, x := range st.Details() {
		if v, ok := x.(*rpc.PoolNotEmpty); ok {
			d = v
		}
	}
	if d == nil || d.GetPoolId() != "pool_a" || d.GetBots() != 3 {
		t.Fatalf("PoolNotEmpty detail: %v", st.Details())
	}
}

// FuzzBotFromRequest: arbitrary requests never panic; an accepted one
// validates and its token opens to the request's; no error quotes the
// token.
func FuzzBotFromRequest(f *testing.F) {
	ring := testRing(f)
	f.Add("user-1", "1203", testToken, "1203", "bot#1", uint32(0), "pool_a", `{"a":1}`, true)
	f.Add("user-1", "1203", "", "", "", uint32(2), "", "", false)
	f.Add("", "a b", "tok", "c", "t", uint32(7), "p", "{", true)
	f.Fuzz(func(t *testing.T, actor, agent, token, client, tag string, st uint32, pool, profile string, required bool) {
		in := &rpc.Bot{AgentId: agent, Token: token, ClientId: client, Tag: tag, Status: st, PoolId: pool, Profile: profile}
		b, err := botFromRequest(actor, in, 1000, required, records.DefaultPoolID, ring.Encrypt)
		if err != nil {
			if !isInvalid(err) {
				t.Fatalf("error %v is not cluster.ErrInvalidArgument", err)
			}
			if len(token) >= 12 && strings.Contains(err.Error(), token) {
				for _, other := range []string{actor, agent, client, tag, pool, profile} {
					if strings.Contains(other, token) {
						return // the token is also another field, which errors may name
					}
				}
				t.Fatalf("error %q quotes the token", err)
			}
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("accepted bot does not validate: %v", err)
		}
		if b.OwnerUserID != actor || b.AgentID != agent {
			t.Fatalf("owner %q agent %q", b.OwnerUserID, b.AgentID)
		}
		switch {
		case token == "" && (required || !b.Token.IsZero()):
			t.Fatal("empty token accepted as a token")
		case token != "":
			got, err := ring.Decrypt(agent, b.Token)
			if err != nil || got != token {
				t.Fatalf("token does not open: %v", err)
			}
		}
	})
}
