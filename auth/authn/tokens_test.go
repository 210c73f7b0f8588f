package authn

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/keys"
)

// FuzzCheckTokenRequest: an accepted token request has a printable name of
// 1-64 bytes, at least one canonical role, and an actor that is empty or a
// valid user id, never combined with pools:impersonate; a refusal is
// ErrInvalidArgument (authn's; cluster's error table gives it the kind of
// cluster.ErrInvalidArgument).
func FuzzCheckTokenRequest(f *testing.F) {
	f.Add("ci", "pools:write,pools:secrets", "u1")
	f.Add("ci", "pools:impersonate", "u1")
	f.Add(" x ", "admin", "")
	f.Add("", "kv:read", "has space")
	f.Fuzz(func(t *testing.T, name, roles, actor string) {
		n, canon, err := CheckTokenRequest(name, strings.Split(roles, ","), actor)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("refusal %v is not ErrInvalidArgument", err)
			}
			return
		}
		if n == "" || len(n) > 64 || n != strings.TrimSpace(n) || len(canon) == 0 {
			t.Fatalf("accepted name %q roles %v", n, canon)
		}
		for _, r := range canon {
			if c, err := auth.ParseRole(r); err != nil || c != r {
				t.Fatalf("accepted role %q (%v)", r, err)
			}
		}
		if actor != "" && (keys.ValidateStringID("actor", actor, keys.MaxStringIDLen) != nil || slices.Contains(canon, auth.RolePoolsImpersonate)) {
			t.Fatalf("accepted actor %q with roles %v", actor, canon)
		}
	})
}
