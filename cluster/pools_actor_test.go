package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
)

// Actors bound to credentials in the Pools service (issue 22, item 2;
// docs/security.md, "Pools: actors").

// tokenWithActor is the admin API's token record as JSON (authn.TokenInfo).
type tokenWithActor struct {
	ID    string `json:"id"`
	Token string `json:"token"`
	Actor string `json:"actor"`
}

// poolsBearer is per-call credentials sending a bearer token.
type poolsBearer string

func (b poolsBearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (poolsBearer) RequireTransportSecurity() bool { return true }

// TestPoolsActorBinding runs the Pools service with auth on (TLS) and
// tokens made through the admin API: a token bound to an actor acts only
// as that actor, an unbound pools:write token names no actor, pools:impersonate
// lifts that, GetBotToken needs pools:secrets, and readers who are neither
// a bot's contributor nor its pool's owner do not see the contributor's id.
func TestPoolsActorBinding(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 1, ca, func(c *Config) { c.TokenKeys = poolsRing(t, "k1") })
	ctx := ctxT(t, 2*time.Minute)
	ops := &tlsHTTP{cfg: ca.client("ops", "admin")}
	tokensURL := "https://" + tc.nodes[0].Addrs().HTTPAddr + "/v1/tokens"

	create := func(name, actor string, roles ...string) tokenWithActor {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"name": name, "roles": roles, "actor": actor})
		code, body, err := ops.do("POST", tokensURL, strings.NewReader(string(b)))
		if err != nil || code != 200 {
			t.Fatalf("create token %s: %d %s %v", name, code, body, err)
		}
		var ti tokenWithActor
		if err := json.Unmarshal([]byte(body), &ti); err != nil || ti.Token == "" {
			t.Fatalf("create answer %q: %v", body, err)
		}
		if ti.Actor != actor {
			t.Fatalf("token %s: actor %q, want %q", name, ti.Actor, actor)
		}
		return ti
	}
	owner := create("owner", poolsOwner, "pools:write")
	ownerSecrets := create("owner-secrets", poolsOwner, "pools:write", "pools:secrets")
	other := create("other", poolsOther, "pools:write")
	otherSecrets := create("other-secrets", poolsOther, "pools:write", "pools:secrets")
	third := create("third", poolsThird, "pools:read")
	unbound := create("unbound", "", "pools:write", "*:write")
	unboundSecrets := create("unbound-secrets", "", "pools:write", "pools:secrets")
	frontend := create("frontend", "", "pools:write", "pools:impersonate")
	// Bad requests: a malformed actor, a bound token that could impersonate.
	for _, body := range []string{
		`{"name":"x","roles":["pools:write"],"actor":"has space"}`,
		`{"name":"x","roles":["pools:write","pools:impersonate"],"actor":"u1"}`,
		`{"name":"x","roles":["*:secrets"]}`,
	} {
		if code, resp, _ := ops.do("POST", tokensURL, strings.NewReader(body)); code != 400 {
			t.Errorf("create %s: %d %s, want 400", body, code, resp)
		}
	}
	code, body, err := ops.do("GET", tokensURL, nil)
	if err != nil || code != 200 {
		t.Fatalf("token list: %d %v", code, err)
	}
	var listed []tokenWithActor
	if err := json.Unmarshal([]byte(body), &listed); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(listed, func(ti tokenWithActor) bool { return ti.ID == owner.ID }); i < 0 || listed[i].Actor != poolsOwner {
		t.Fatalf("token list does not show the owner token's actor: %s", body)
	}
	waitFor(t, 10*time.Second, "tokens known", func() error {
		if _, ok := tc.nodes[0].Authn().IdentifyToken(frontend.Token); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	as := func(ti tokenWithActor) *client.Pools {
		t.Helper()
		c, err := tlsClient(t, tc, client.Config{TLS: ca.client(""), Token: ti.Token})
		if err != nil {
			t.Fatal(err)
		}
		return c.Pools()
	}
	pOwner, pOwnerSec, pOther, pOtherSec, pThird := as(owner), as(ownerSecrets), as(other), as(otherSecrets), as(third)
	pUnbound, pUnboundSec, pFront := as(unbound), as(unboundSecrets), as(frontend)
	waitDefaultPool(t, ctx, pThird)

	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("%s: %v, want ErrPermissionDenied", what, err)
		}
	}

	// The owner's world, made with actor "" (the token's own actor) and
	// with the actor named.
	priv, err := pOwner.CreatePool(ctx, "", client.PoolSpec{PoolID: "ab-priv", Name: "priv", Visibility: records.VisibilityPrivate})
	if err != nil || priv.OwnerUserID != poolsOwner {
		t.Fatalf("create with the bound actor: %+v %v", priv, err)
	}
	if _, err := pOwner.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "ab-pub", Name: "pub"}); err != nil {
		t.Fatal(err)
	}
	toks := newPoolsTokens(0xac7)
	privTok, pubTok, otherTok := toks.token(24), toks.token(24), toks.token(24)
	if _, err := pOwner.RegisterBot(ctx, poolsOwner, client.BotSpec{AgentID: "ab-bot", Token: privTok, ClientID: "cid-ab", PoolID: "ab-priv"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pOwner.RegisterBot(ctx, "", client.BotSpec{AgentID: "ab-pubbot", Token: pubTok, ClientID: "cid-ab2", PoolID: "ab-pub"}); err != nil {
		t.Fatal(err)
	}
	if b, err := pOther.RegisterBot(ctx, "", client.BotSpec{AgentID: "ab-otherbot", Token: otherTok, ClientID: "cid-ab3", PoolID: "ab-pub"}); err != nil || b.OwnerUserID != poolsOther {
		t.Fatalf("register as other: %+v %v", b, err)
	}

	// A token bound to another actor claiming the owner: refused, runs nothing.
	denied("other claims owner: get private pool", errOf(pOther.GetPool(ctx, poolsOwner, "ab-priv")))
	denied("other claims owner: list bots", errOf(pOther.ListBots(ctx, poolsOwner, "ab-priv")))
	denied("other claims owner: update pool", errOf(pOther.UpdatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "ab-priv", Name: "stolen", Visibility: records.VisibilityPublic})))
	denied("other claims owner: delete pool", errOf(pOther.DeletePool(ctx, poolsOwner, "ab-priv", true)))
	denied("other claims owner: register", errOf(pOther.RegisterBot(ctx, poolsOwner, client.BotSpec{AgentID: "ab-evil", Token: toks.token(24), PoolID: "ab-priv"})))
	denied("other claims owner: remove bot", pOther.RemoveBot(ctx, poolsOwner, "ab-bot"))
	denied("other+secrets claims owner: token", errOf(pOtherSec.GetBotToken(ctx, poolsOwner, "ab-bot")))
	denied("other+secrets claims owner: token (public pool)", errOf(pOtherSec.GetBotToken(ctx, poolsOwner, "ab-pubbot")))
	if got, err := pOwner.GetPool(ctx, "", "ab-priv"); err != nil || got.Name != "priv" || got.Visibility != records.VisibilityPrivate {
		t.Fatalf("pool after refused calls: %+v %v", got, err)
	}
	if bs, err := pOwner.ListBots(ctx, "", "ab-priv"); err != nil || !slices.Equal(botIDs(bs), []string{"ab-bot"}) {
		t.Fatalf("bots after refused calls: %v %v", botIDs(bs), err)
	}
	// The same call through a raw request (no client checks): refused too.
	rawOther, err := tlsClient(t, tc, client.Config{TLS: ca.client(""), Token: otherSecrets.Token})
	if err != nil {
		t.Fatal(err)
	}
	err = poolsRaw(ctx, rawOther, func(ctx context.Context, pc rpc.PoolsClient) error {
		_, err := pc.GetBotToken(ctx, &rpc.BotRef{Actor: poolsOwner, AgentId: "ab-bot"})
		return err
	})
	if !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("raw GetBotToken claiming another actor: %v", err)
	}

	// And pipelined (the Pipeline stream runs the same interceptors).
	cc, err := grpc.NewClient(tc.nodes[0].Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(ca.client(""))),
		grpc.WithPerRPCCredentials(poolsBearer(otherSecrets.Token)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := rpc.NewPipelineClient(cc).Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call, _ := proto.Marshal(&rpc.BotRef{Actor: poolsOwner, AgentId: "ab-bot"})
	if err := st.Send(&rpc.PipelineCalls{Calls: []*rpc.PipelineCall{{Id: 1, Method: rpc.Pools_GetBotToken_FullMethodName, Request: call}}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Recv()
	if err != nil || len(res.GetResults()) != 1 || codes.Code(res.GetResults()[0].GetCode()) != codes.PermissionDenied || len(res.GetResults()[0].GetResponse()) != 0 {
		t.Fatalf("pipelined GetBotToken claiming another actor: %v %v", res, err)
	}
	st.CloseSend()

	// GetBotToken needs pools:secrets; with it, the bound owner reads its token.
	denied("owner with pools:write only: token", errOf(pOwner.GetBotToken(ctx, poolsOwner, "ab-bot")))
	for _, actor := range []string{poolsOwner, ""} {
		if got, err := pOwnerSec.GetBotToken(ctx, actor, "ab-bot"); err != nil || got != privTok {
			t.Errorf("owner with pools:secrets, actor %q: wrong token or %v", actor, err)
		}
	}
	// The pool owner reads a contributor's token in its pool; the
	// contributor reads its own.
	if got, err := pOwnerSec.GetBotToken(ctx, "", "ab-otherbot"); err != nil || got != otherTok {
		t.Errorf("pool owner reads a contributed token: %v", err)
	}
	if got, err := pOtherSec.GetBotToken(ctx, "", "ab-otherbot"); err != nil || got != otherTok {
		t.Errorf("contributor reads its token: %v", err)
	}

	// Unbound tokens: no actor may be named without pools:impersonate;
	// calls without an actor run.
	denied("unbound: get pool", errOf(pUnbound.GetPool(ctx, poolsOwner, "ab-pub")))
	denied("unbound: create pool", errOf(pUnbound.CreatePool(ctx, poolsThird, client.PoolSpec{PoolID: "ab-unbound", Name: "u"})))
	denied("unbound+secrets: token", errOf(pUnboundSec.GetBotToken(ctx, poolsOwner, "ab-bot")))
	if _, err := pUnbound.ListRunners(ctx); err != nil {
		t.Errorf("unbound: list runners: %v", err)
	}
	if _, err := pUnbound.GetGuildPool(ctx, "g1"); err != nil {
		t.Errorf("unbound: guild pool: %v", err)
	}
	if _, err := pUnbound.GetPool(ctx, "", "ab-pub"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("unbound with an empty actor: %v, want ErrInvalidArgument", err)
	}
	// pools:impersonate acts for anyone, but reads no secret without pools:secrets.
	if got, err := pFront.GetPool(ctx, poolsOwner, "ab-priv"); err != nil || got.OwnerUserID != poolsOwner {
		t.Errorf("impersonator: %+v %v", got, err)
	}
	denied("impersonator without pools:secrets: token", errOf(pFront.GetBotToken(ctx, poolsOwner, "ab-bot")))

	// Disclosure: a public pool's owner is shown (documented); a bot's
	// contributor only to itself and the pool's owner.
	contributors := func(p *client.Pools) map[string]string {
		t.Helper()
		bs, err := p.ListBots(ctx, "", "ab-pub")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, b := range bs {
			out[b.AgentID] = b.OwnerUserID
		}
		return out
	}
	for name, tt := range map[string]struct {
		p    *client.Pools
		want map[string]string
	}{
		"pool owner":  {pOwner, map[string]string{"ab-pubbot": poolsOwner, "ab-otherbot": poolsOther}},
		"contributor": {pOther, map[string]string{"ab-pubbot": "", "ab-otherbot": poolsOther}},
		"third":       {pThird, map[string]string{"ab-pubbot": "", "ab-otherbot": ""}},
	} {
		if got := contributors(tt.p); !maps.Equal(got, tt.want) {
			t.Errorf("ListBots as %s: contributors %v, want %v", name, got, tt.want)
		}
		for id, want := range tt.want {
			if b, err := tt.p.GetBot(ctx, "", id); err != nil || b.OwnerUserID != want {
				t.Errorf("GetBot(%s) as %s: %+v %v, want contributor %q", id, name, b, err, want)
			}
		}
	}
	ps, err := pThird.ListPools(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Visibility != records.VisibilityPublic {
			t.Errorf("third sees private pool %s", p.PoolID)
		}
	}
	if !slices.Contains(poolIDs(ps), "ab-pub") || slices.Contains(poolIDs(ps), "ab-priv") {
		t.Errorf("third lists %v", poolIDs(ps))
	}

	// Watches of the pool tables stream every pool's records, private
	// ones included: only a credential trusted to act for anyone (here
	// pools:impersonate, unbound) may watch pools and bots; the runners
	// table has no actor, a pools reader may watch it.
	firstErr := func(ch <-chan client.PoolWatchResponse) error {
		for m := range ch {
			if m.Err != nil || m.ListDone {
				return m.Err
			}
		}
		return errors.New("closed")
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for name, p := range map[string]*client.Pools{"owner (bound)": pOwner, "third (bound, read)": pThird, "unbound pools:write": pUnbound} {
		denied("pools watch as "+name, firstErr(p.ListWatchPools(wctx)))
		for m := range p.ListWatchBots(wctx, "") {
			denied("bots watch as "+name, m.Err)
			break
		}
	}
	if err := firstErr(pFront.ListWatchPools(wctx)); err != nil {
		t.Errorf("pools watch as the impersonating front end: %v", err)
	}
	for m := range pUnbound.ListWatchRunners(wctx) {
		if m.Err != nil || m.ListDone {
			if m.Err != nil {
				t.Errorf("runners watch as unbound pools:write: %v", m.Err)
			}
			break
		}
	}
}
