package api

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/rpc"
)

// TestBindActor is bindActor's table: bound, unbound, impersonating and
// node callers on requests with and without an actor.
func TestBindActor(t *testing.T) {
	bound := caller{name: "token:b", roles: []string{"pools:write"}, actor: "u1"}
	unbound := caller{name: "token:u", roles: []string{"pools:write", "*:write"}}
	imp := caller{name: "token:i", roles: []string{"pools:write", auth.RolePoolsImpersonate}}
	admin := caller{name: "cert:a", roles: []string{"admin", "pools:write"}}
	node := caller{name: "node:n1", node: true}
	for _, tt := range []struct {
		id        caller
		claimed   string
		ok        bool
		wantActor string
	}{
		{bound, "", true, "u1"},
		{bound, "u1", true, "u1"},
		{bound, "u2", false, "u2"},
		{unbound, "u2", false, "u2"},
		{unbound, "", true, ""},
		{imp, "u2", true, "u2"},
		{admin, "u2", true, "u2"},
		{node, "u2", true, "u2"},
	} {
		req := &rpc.BotRef{Actor: tt.claimed, AgentId: "a"}
		err := bindActor(tt.id, req)
		if (err == nil) != tt.ok || req.GetActor() != tt.wantActor {
			t.Errorf("%s claiming %q: %v, actor %q; want ok=%v actor %q", tt.id.name, tt.claimed, err, req.GetActor(), tt.ok, tt.wantActor)
		}
		if err != nil && status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s claiming %q: %v, want PermissionDenied", tt.id.name, tt.claimed, err)
		}
	}
	// Requests without an actor are left alone.
	if err := bindActor(unbound, &rpc.HeartbeatRequest{}); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	// Every Pools request that names an actor has the field bindActor finds.
	for _, req := range []any{&rpc.CreatePoolRequest{}, &rpc.PoolRef{}, &rpc.UpdatePoolRequest{}, &rpc.DeletePoolRequest{},
		&rpc.ListPoolsRequest{}, &rpc.RegisterBotRequest{}, &rpc.UpdateBotRequest{}, &rpc.BotRef{}, &rpc.ListBotsRequest{},
		&rpc.SetGuildPoolRequest{}, &rpc.PlanDeployRequest{}} {
		if err := bindActor(unbound, withActor(req, "u9")); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%T: unbound caller naming an actor: %v", req, err)
		}
	}
}

// withActor sets req's actor field.
func withActor(req any, actor string) any {
	m, fd := actorField(req)
	if fd != nil {
		m.Set(fd, protoreflect.ValueOfString(actor))
	}
	return req
}

// FuzzBindActor: whatever actor a request names, a bound caller ends up
// acting as its own actor or is refused (PermissionDenied, the request
// unchanged); an unbound caller without pools:impersonate never names one.
func FuzzBindActor(f *testing.F) {
	f.Add("u1", "", uint8(0))
	f.Add("u1", "u1", uint8(0))
	f.Add("u1", "u2", uint8(0))
	f.Add("", "u2", uint8(1))
	f.Add("", "u2", uint8(2))
	f.Add("", "\x00", uint8(3))
	f.Fuzz(func(t *testing.T, bound, claimed string, kind uint8) {
		var id caller
		switch kind % 4 {
		case 0:
			id = caller{name: "token:b", roles: []string{"pools:write"}, actor: bound}
		case 1:
			id = caller{name: "token:u", roles: []string{"pools:write", "*:write", "pools:secrets"}}
		case 2:
			id = caller{name: "token:i", roles: []string{auth.RolePoolsImpersonate}}
		default:
			id = caller{name: "node:n1", node: true}
		}
		req := &rpc.ListBotsRequest{Actor: claimed, PoolId: "p"}
		err := bindActor(id, req)
		if err != nil && (status.Code(err) != codes.PermissionDenied || req.GetActor() != claimed) {
			t.Fatalf("refusal %v changed the actor to %q or has the wrong code", err, req.GetActor())
		}
		switch {
		case kind%4 == 0 && bound != "":
			if (err == nil) != (claimed == "" || claimed == bound) || (err == nil && req.GetActor() != bound) {
				t.Fatalf("bound %q claiming %q: %v, actor %q", bound, claimed, err, req.GetActor())
			}
		case kind%4 == 0 || kind%4 == 1:
			if (err == nil) != (claimed == "") || req.GetActor() != claimed {
				t.Fatalf("unbound claiming %q: %v, actor %q", claimed, err, req.GetActor())
			}
		default:
			if err != nil || req.GetActor() != claimed {
				t.Fatalf("%s claiming %q: %v, actor %q", id.name, claimed, err, req.GetActor())
			}
		}
	})
}
