package auth

import (
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	tok, id, hash := NewToken()
	if !strings.HasPrefix(tok, "swk_"+id+"_") || len(tok) != tokenLen {
		t.Fatalf("token %d chars", len(tok))
	}
	gid, sec, err := ParseToken(tok)
	if err != nil || gid != id || !CheckSecret(sec, hash) {
		t.Fatalf("parse: %v", err)
	}
	other, _, _ := NewToken()
	_, sec2, _ := ParseToken(other)
	if CheckSecret(sec2, hash) {
		t.Fatal("another secret matches")
	}
	for _, bad := range []string{"", tok[:len(tok)-1], tok + "0", "swk-" + tok[4:], strings.ToUpper(tok), strings.Replace(tok, "_", "-", 2)} {
		if _, _, err := ParseToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseBearer(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc": "abc", "BEARER x.y": "x.y"} {
		if got, err := ParseBearer(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "Bearerabc"} {
		if _, err := ParseBearer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRoles(t *testing.T) {
	roles, err := ParseRoles(" registry:read, kv:WRITE,admin,,kv:write")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(roles, ",") != "admin,kv:write,registry:read" {
		t.Fatalf("roles %v", roles)
	}
	for _, tt := range []struct {
		p    Perm
		want bool
	}{
		{Perm{Keyspace: Registry}, true},
		{Perm{Keyspace: Registry, Write: true}, false},
		{Perm{Keyspace: KV}, true},
		{Perm{Keyspace: KV, Write: true}, true},
		{Perm{Keyspace: Billing}, false},
		{Perm{Keyspace: Admin}, true},
		{Perm{Keyspace: Node}, false},
		{Perm{Keyspace: Public}, true},
	} {
		if got := Allows(roles, tt.p); got != tt.want {
			t.Errorf("%v: %v", tt.p, got)
		}
	}
	if !Allows([]string{"*:read"}, Perm{Keyspace: Pools}) || Allows([]string{"*:read"}, Perm{Keyspace: Pools, Write: true}) || Allows([]string{"*:write"}, Perm{Keyspace: Admin}) {
		t.Error("wildcards")
	}
	for _, bad := range []string{"root", "kv", "kv:admin", "users:read", ":read", "*:*"} {
		if _, err := ParseRoles(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	tok, _, _ := NewToken()
	f.Add(tok)
	f.Add("swk_")
	f.Add("swk_0123456789abcdef_")
	f.Fuzz(func(t *testing.T, s string) {
		id, sec, err := ParseToken(s)
		if err != nil {
			if len(s) >= 8 && strings.Contains(err.Error(), s) {
				t.Fatal("error quotes the token")
			}
			return
		}
		// Round trip: a parsed token is exactly its parts.
		if TokenPrefix+id+"_"+strings.ToLower(hexOf(sec)) != s || !ValidID(id) || len(sec) != secretLen {
			t.Fatalf("round trip of %q", s)
		}
	})
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func FuzzParseBearer(f *testing.F) {
	f.Add("Bearer swk_x")
	f.Add("bearer\tx")
	f.Add("Basic Zm9v")
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := ParseBearer(h)
		if err != nil {
			if len(h) >= 8 && strings.Contains(err.Error(), h) {
				t.Fatal("error quotes the header")
			}
			return
		}
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			t.Fatalf("token %q from %q", tok, h)
		}
		again, err := ParseBearer("Bearer " + tok)
		if err != nil || again != tok {
			t.Fatalf("round trip %q", tok)
		}
	})
}

func FuzzParseRoles(f *testing.F) {
	f.Add("registry:read,kv:write,admin")
	f.Add("*:read")
	f.Add(",,x:y")
	f.Fuzz(func(t *testing.T, spec string) {
		roles, err := ParseRoles(spec)
		if err != nil {
			return
		}
		// Canonical: parsing the canonical form gives it back.
		again, err := ParseRoles(strings.Join(roles, ","))
		if err != nil || strings.Join(again, ",") != strings.Join(roles, ",") {
			t.Fatalf("not canonical: %v -> %v %v", roles, again, err)
		}
		for _, r := range roles {
			if r != RoleAdmin && !strings.Contains(r, ":") {
				t.Fatalf("role %q", r)
			}
		}
	})
}

// TestPoolsSpecialRoles: pools:secrets and pools:impersonate are granted
// only by themselves and admin, never by a wildcard or pools:write, and
// grant no keyspace access of their own.
func TestPoolsSpecialRoles(t *testing.T) {
	roles, err := ParseRoles("POOLS:SECRETS, pools:impersonate")
	if err != nil || strings.Join(roles, ",") != "pools:impersonate,pools:secrets" {
		t.Fatalf("roles %v %v", roles, err)
	}
	secrets, imp := Perm{Keyspace: PoolsSecrets}, Perm{Keyspace: PoolsImpersonate}
	for _, tt := range []struct {
		roles         string
		secrets, impr bool
	}{
		{"pools:write", false, false},
		{"*:write,*:read", false, false},
		{"pools:secrets", true, false},
		{"pools:impersonate", false, true},
		{"admin", true, true},
	} {
		rs, err := ParseRoles(tt.roles)
		if err != nil {
			t.Fatal(err)
		}
		if got := Allows(rs, secrets); got != tt.secrets {
			t.Errorf("%s grants %s: %v", tt.roles, secrets, got)
		}
		if got := Allows(rs, imp); got != tt.impr {
			t.Errorf("%s grants %s: %v", tt.roles, imp, got)
		}
	}
	for _, r := range []string{"pools:secrets", "pools:impersonate"} {
		if Allows([]string{r}, Perm{Keyspace: Pools}) || Allows([]string{r}, Perm{Keyspace: Pools, Write: true}) {
			t.Errorf("%s grants pools access", r)
		}
	}
	for _, bad := range []string{"*:secrets", "kv:secrets", "*:impersonate", "registry:impersonate"} {
		if _, err := ParseRoles(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if secrets.String() != "pools:secrets" || imp.String() != "pools:impersonate" {
		t.Errorf("perm strings %s %s", secrets, imp)
	}
}
