package api

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/fsm"
)

// TestLeaseCallerRules: the owner rule and the keyspace roles each caller
// needs (leaseauth.go).
func TestLeaseCallerRules(t *testing.T) {
	owned := &fsm.LeaseRecord{Owner: "token:0123456789abcdef"}
	ownerless := &fsm.LeaseRecord{}
	id := &authn.Identity{}
	for _, tc := range []struct {
		name           string
		c              leaseCaller
		owned, openAll bool
		missRead       uint8
		missWrite      uint8
	}{
		{"auth off", leaseCaller{}, true, true, 0, 0},
		{"owner", leaseCaller{id: id, owner: "token:0123456789abcdef", roles: []string{"kv:write", "leases:write"}}, true, true, fsm.LeaseKindRunner | fsm.LeaseKindAgent, fsm.LeaseKindRunner | fsm.LeaseKindAgent},
		{"other", leaseCaller{id: id, owner: "token:ffffffffffffffff", roles: []string{"leases:write"}}, false, true, 7, 7},
		{"reader", leaseCaller{id: id, owner: "cert:r", roles: []string{"*:read"}}, false, true, 0, 7},
		{"admin", leaseCaller{id: id, owner: "cert:ops", privileged: true, roles: []string{auth.RoleAdmin}}, true, true, 0, 0},
	} {
		if got := tc.c.open(owned); got != tc.owned {
			t.Errorf("%s: open(owned) %v", tc.name, got)
		}
		if got := tc.c.open(ownerless); got != tc.openAll {
			t.Errorf("%s: open(ownerless) %v", tc.name, got)
		}
		if got := tc.c.missing(false); got != tc.missRead {
			t.Errorf("%s: missing read %b, want %b", tc.name, got, tc.missRead)
		}
		if got := tc.c.missing(true); got != tc.missWrite {
			t.Errorf("%s: missing write %b, want %b", tc.name, got, tc.missWrite)
		}
	}
	if got := kindRoles(fsm.LeaseKindKV|fsm.LeaseKindAgent, true); got != "kv:write and registry:write" {
		t.Errorf("kindRoles: %q", got)
	}
}

// FuzzLeaseOwner: the owner recorded for any identity name fits the
// state machine's bound, is stable (the owner of an owner is itself),
// and a token's owner is its id without the display name, so renaming
// nothing and any name of the same token give the same owner.
func FuzzLeaseOwner(f *testing.F) {
	f.Add("token:0123456789abcdef(alice)", false)
	f.Add("token:0123456789abcdef((", false)
	f.Add("cert:bob(x)", false)
	f.Add("node:n1", true)
	f.Add(strings.Repeat("x", 300), false)
	f.Fuzz(func(t *testing.T, name string, node bool) {
		o := leaseOwner(name, node)
		if len(o) > fsm.MaxLeaseOwner {
			t.Fatalf("owner of %d bytes", len(o))
		}
		if leaseOwner(o, node) != o {
			t.Fatalf("owner %q of %q is not stable", o, name)
		}
		if !node && strings.HasPrefix(name, "token:") && utf8.ValidString(name) {
			if i := strings.IndexByte(name, '('); i > 0 && i <= fsm.MaxLeaseOwner && o != name[:i] {
				t.Fatalf("token %q: owner %q", name, o)
			}
		}
		if !strings.HasPrefix(name, "token:") && !strings.HasPrefix(o, name[:min(len(name), fsm.MaxLeaseOwner)]) {
			t.Fatalf("%q: owner %q", name, o)
		}
	})
}
