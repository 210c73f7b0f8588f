package cluster

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
	bound := &identity{name: "token:b", roles: []string{"pools:write"}, actor: "u1"}
	unbound := &identity{name: "token:u", roles: []string{"pools:write", "*:write"}}
	imp := &identity{name: "token:i", roles: []string{"pools:write", auth.RolePoolsImpersonate}}
	admin := &identity{name: "cert:a", roles: []string{"admin", "pools:write"}}
	node := &identity{name: "node:n1", node: true}
	for _, tt := range []struct {
		id        *identity
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
