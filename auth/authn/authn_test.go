package authn

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/transport"
)

// fakeState is a cluster state of members and tokens.
type fakeState struct {
	noState bool
	members map[string]bool
	tokens  map[string]Token
}

func (s *fakeState) IsMember(id string) bool { return s.noState || s.members[id] }

func (s *fakeState) Token(id string) (Token, bool) {
	if s.noState {
		return Token{}, false
	}
	t, ok := s.tokens[id]
	return t, ok
}

// revokedToken is the token string of newTestAuth's revoked token.
var revokedToken string

// newTestAuth returns an authenticator (with secret, if not nil) over a
// state with member n1 and two tokens (the other one revoked: its string
// is revokedToken), the live one's token string, and the audit log.
func newTestAuth(secret []byte) (*Authenticator, *fakeState, string, *bytes.Buffer) {
	tok, id, hash := auth.NewToken()
	var rid, rhash string
	revokedToken, rid, rhash = auth.NewToken()
	st := &fakeState{members: map[string]bool{"n1": true}, tokens: map[string]Token{
		id:  {ID: id, Name: "ci", Roles: []string{"kv:read"}, Actor: "u1", Hash: hash},
		rid: {ID: rid, Name: "old", Roles: []string{"admin"}, Hash: rhash, Revoked: true},
	}}
	var logs bytes.Buffer
	a := New(Config{Auth: true, Secret: secret, State: st, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	return a, st, tok, &logs
}

// TestAuthenticatorTokens: a live token identifies its caller with its
// roles and actor; a revoked, unknown, wrong or malformed one does not;
// TokenLive follows revocation and the state's presence.
func TestAuthenticatorTokens(t *testing.T) {
	a, st, tok, _ := newTestAuth(nil)
	if !a.On() || New(Config{State: st}).On() || !New(Config{TLS: true, State: st}).On() {
		t.Fatal("On: want TLS or Auth")
	}
	id, ok := a.IdentifyToken(tok)
	if !ok || !strings.HasPrefix(id.Name(), "token:") || !strings.HasSuffix(id.Name(), "(ci)") || id.Actor() != "u1" || id.IsNode() || len(id.Roles()) != 1 {
		t.Fatalf("live token: %+v %v", id, ok)
	}
	tid, _, _ := auth.ParseToken(tok)
	if !a.TokenLive(tid) {
		t.Fatal("live token not live")
	}
	other, _, _ := auth.NewToken()
	wrong := tok[:len(tok)-1] + "0" // the same id, another secret
	if tok[len(tok)-1] == '0' {
		wrong = tok[:len(tok)-1] + "1"
	}
	for name, bad := range map[string]string{"unknown": other, "wrong secret": wrong, "revoked": revokedToken, "malformed": "swk_x", "empty": ""} {
		if id, ok := a.IdentifyToken(bad); ok || id != nil {
			t.Errorf("%s token accepted", name)
		}
	}
	for rid, rt := range st.tokens {
		if rt.Revoked && a.TokenLive(rid) {
			t.Error("revoked token live")
		}
	}
	st.noState = true
	if _, ok := a.IdentifyToken(tok); ok || a.TokenLive(tid) {
		t.Fatal("a token accepted without a cluster state")
	}
}

// TestAuthenticatorAllows: no identity, a non-member node and a caller
// without the role are refused with their messages; a member node and a
// caller with the role pass.
func TestAuthenticatorAllows(t *testing.T) {
	a, _, tok, _ := newTestAuth(nil)
	kvRead, kvWrite := auth.Perm{Keyspace: auth.KV}, auth.Perm{Keyspace: auth.KV, Write: true}
	if ok, why := a.Allows(nil, kvRead); ok || why != MsgNoCredentials {
		t.Fatalf("nil identity: %v %q", ok, why)
	}
	if ok, why := a.Allows(&Identity{name: "node:n1", node: true, nodeID: "n1"}, auth.Perm{Keyspace: auth.Node}); !ok || why != "" {
		t.Fatalf("member node: %v %q", ok, why)
	}
	if ok, why := a.Allows(&Identity{name: "node:n9", node: true, nodeID: "n9"}, kvRead); ok || why != MsgNotMember("n9") {
		t.Fatalf("removed node: %v %q", ok, why)
	}
	id, _ := a.IdentifyToken(tok)
	if ok, _ := a.Allows(id, kvRead); !ok {
		t.Fatal("kv:read token refused kv:read")
	}
	if ok, why := a.Allows(id, kvWrite); ok || why != "needs kv:write" {
		t.Fatalf("kv:read token on kv:write: %v %q", ok, why)
	}
	if ok, _ := a.Allows(id, auth.Perm{Keyspace: auth.Node}); ok {
		t.Fatal("a token passed a node-only permission")
	}
}

// TestAuthenticatorHTTP: the messages of IdentifyHTTP with and without a
// cluster secret, and its bearer and signed callers.
func TestAuthenticatorHTTP(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	withSecret, _, _, _ := newTestAuth(secret)
	a, _, tok, _ := newTestAuth(nil)
	do := func(a *Authenticator, authz string) (*Identity, string) {
		r := httptest.NewRequest("POST", "/v1/tokens", nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		return a.IdentifyHTTP(r)
	}
	signed := AdminSecretAuth(secret, "POST", "/v1/tokens", "", time.Now())
	for _, tt := range []struct {
		name  string
		a     *Authenticator
		authz string
		want  string
	}{
		{"none", a, "", MsgNoCredentials},
		{"none, secret", withSecret, "", msgNoCredentialsSecret},
		{"bad bearer", a, "Bearer swk_x", MsgBadToken},
		{"not bearer", a, "Basic abc", MsgBadToken},
		{"signature without secret", a, signed, msgSecretAuthWithTLS},
		{"bad signature", withSecret, "SwarmkvSecret 1.00", msgBadSecretAuth},
	} {
		if id, msg := do(tt.a, tt.authz); id != nil || msg != tt.want {
			t.Errorf("%s: %v %q, want %q", tt.name, id, msg, tt.want)
		}
	}
	if id, msg := do(a, "Bearer "+tok); id == nil || msg != "" {
		t.Fatalf("bearer: %v %q", id, msg)
	}
	id, msg := do(withSecret, signed)
	if id == nil || msg != "" || id.Name() != adminSecretIdentity || id.IsNode() {
		t.Fatalf("signed: %v %q", id, msg)
	}
	if ok, _ := withSecret.Allows(id, auth.Perm{Keyspace: auth.Admin}); !ok {
		t.Fatal("the signed operator is not admin")
	}
}

// TestAuthenticatorGRPC: a gRPC call's node credential (with the cluster
// secret) names a node; a bearer token a client; nothing, or a bad token,
// the refusal messages. The audit record names the caller, never a
// secret.
func TestAuthenticatorGRPC(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	a, _, tok, logs := newTestAuth(secret)
	const method = "/swarmkv.v1.Admin/MetaState"
	var out metadata.MD
	capture := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		out, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	if err := transport.NodeCredUnary(secret, "n1")(context.Background(), method, nil, nil, nil, capture); err != nil {
		t.Fatal(err)
	}
	in := func(md metadata.MD) context.Context { return metadata.NewIncomingContext(context.Background(), md) }
	id, msg := a.IdentifyGRPC(in(out), method)
	if id == nil || !id.IsNode() || id.NodeID() != "n1" || id.Name() != "node:n1" || msg != "" {
		t.Fatalf("node credential: %v %q", id, msg)
	}
	if id, _ := a.IdentifyGRPC(in(out), "/swarmkv.v1.Admin/JoinNode"); id != nil {
		t.Fatal("a node credential for another method accepted")
	}
	if id, msg := a.IdentifyGRPC(context.Background(), method); id != nil || msg != MsgNoCredentials {
		t.Fatalf("no credentials: %v %q", id, msg)
	}
	if id, msg := a.IdentifyGRPC(in(metadata.Pairs("authorization", "Bearer nope")), method); id != nil || msg != MsgBadToken {
		t.Fatalf("bad token: %v %q", id, msg)
	}
	if id, msg := a.IdentifyGRPC(in(metadata.Pairs("authorization", "Bearer "+tok)), method); id == nil || msg != "" {
		t.Fatalf("bearer: %v %q", id, msg)
	}
	id, _ = a.IdentifyGRPC(in(metadata.Pairs("authorization", "Bearer "+tok)), method)
	a.Audit("grpc", id, method, false, "needs admin")
	a.Audit("grpc", nil, method, false, MsgNoCredentials)
	log := logs.String()
	if !strings.Contains(log, "level=WARN msg=audit audit=true via=grpc who="+id.Name()) || !strings.Contains(log, "who=anonymous") || strings.Contains(log, tok) {
		t.Fatalf("audit log:\n%s", log)
	}
	if got := CallerOf(WithCaller(context.Background(), id)); got != id {
		t.Fatal("WithCaller/CallerOf lost the identity")
	}
	if CallerOf(context.Background()) != nil {
		t.Fatal("a caller in an empty context")
	}
}
