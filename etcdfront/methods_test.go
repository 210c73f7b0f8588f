package etcdfront

import (
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/api"
)

// TestEtcdFrontMethodsCovered: every method, unary and stream, of every
// service the front registers has its permission in the node's one
// authorization table (api.PermOf: grpcPerms), and every etcd entry of
// that table is a method the front registers (no stale row).
func TestEtcdFrontMethodsCovered(t *testing.T) {
	gs := grpc.NewServer()
	(&Front{}).register(gs)
	seen := map[string]bool{}
	streams := 0
	for svc, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			seen[full] = true
			if m.IsClientStream || m.IsServerStream {
				streams++
			}
			if _, ok := api.PermOf(full); !ok {
				t.Errorf("%s has no entry in the authorization table (api/auth.go grpcPerms)", full)
			}
		}
	}
	if len(seen) != 41 || streams != 3 {
		t.Errorf("the walk saw %d methods (%d streams), want etcd's 41 (3: Watch, LeaseKeepAlive, Snapshot)", len(seen), streams)
	}
	for _, m := range etcdTableMethods() {
		if !seen[m] {
			t.Errorf("the table's %s is no method of the front", m)
		}
	}
}

// etcdTableMethods are the etcd rows of the authorization table, found by
// asking it for every method name etcd's services could have.
func etcdTableMethods() []string {
	var out []string
	for _, svc := range []string{"KV", "Watch", "Lease", "Cluster", "Maintenance", "Auth"} {
		for _, m := range strings.Fields(etcdMethodNames) {
			full := "/etcdserverpb." + svc + "/" + m
			if _, ok := api.PermOf(full); ok {
				out = append(out, full)
			}
		}
	}
	return out
}

const etcdMethodNames = `Range Put DeleteRange Txn Compact Watch LeaseGrant LeaseRevoke LeaseKeepAlive
LeaseTimeToLive LeaseLeases MemberList MemberAdd MemberRemove MemberUpdate MemberPromote Status Alarm
Defragment Hash HashKV MoveLeader Downgrade Snapshot Authenticate AuthStatus AuthEnable AuthDisable
UserAdd UserGet UserList UserDelete UserChangePassword UserGrantRole UserRevokeRole RoleAdd RoleGet
RoleList RoleDelete RoleGrantPermission RoleRevokePermission`
