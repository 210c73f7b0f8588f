// Package auth holds the pure parts of swarmkv's client authentication:
// the bearer token format, the Authorization header, and roles.
//
// Tokens. `swk_<id>_<secret>`: id is 16 hex digits (8 random bytes, the
// public handle used to list and revoke), secret is 64 hex digits (32
// random bytes). The cluster stores only SHA-256(secret), hex, next to the
// id; the token itself is shown once, when it is made.
//
//	swk_0123456789abcdef_<64 hex digits>
//	+--+ +--------------+ +-------------+
//	 |    id (16 hex)       secret (64 hex)
//	 prefix
//
// Roles. A role grants read or write on one keyspace, or admin:
//
//	registry:read  registry:write   (write includes read)
//	billing:...    assets:...   pools:...   kv:...   leases:...
//	*:read  *:write                 every keyspace
//	admin                           membership, tokens, the admin API
//	pools:secrets                   read a bot's decrypted token (GetBotToken)
//	pools:impersonate               an unbound credential may name any actor
//
// pools:secrets and pools:impersonate are grants of their own: they include
// neither pools:read nor pools:write, and no wildcard (*:read, *:write)
// grants them. admin grants both (an admin can make a token with them
// anyway). Node certificates are granted everything.
//
// Usage:
//
//	tok, id, hash := auth.NewToken()
//	id2, secret, err := auth.ParseToken(tok)            // id2 == id
//	ok := auth.CheckSecret(secret, hash)                 // true
//	roles, err := auth.ParseRoles("registry:read,kv:write")
//	auth.Allows(roles, auth.Perm{Keyspace: auth.KV, Write: true}) // true
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Keyspaces a role can name.
const (
	Registry = "registry"
	Billing  = "billing"
	Assets   = "assets"
	Pools    = "pools"
	KV       = "kv"
	// Leases: the Lease service (grant, keep alive, revoke, list). The
	// writes that attach a key to a lease need their own keyspace's write.
	Leases = "leases"
	// Etcd: the etcd v3 API front's namespaces (package etcdfront).
	Etcd = "etcd"
)

// Keyspaces lists every keyspace.
var Keyspaces = []string{Registry, Billing, Assets, Pools, KV, Leases, Etcd}

// RoleAdmin grants the admin API (membership, shards, tokens).
const RoleAdmin = "admin"

// Roles of their own in the pools keyspace (the Pools service's actors and
// bot tokens, docs/security.md). Each is also the pseudo keyspace of the
// Perm it grants.
const (
	// RolePoolsSecrets grants reading a bot's decrypted token.
	RolePoolsSecrets = "pools:secrets"
	// RolePoolsImpersonate lets a credential that is not bound to an actor
	// name any actor in Pools calls (a trusted front end acting for many
	// users). A bound credential always acts as its own actor.
	RolePoolsImpersonate = "pools:impersonate"
)

// special are the roles ParseRole accepts besides admin and
// <keyspace>:<read|write>.
var special = []string{RolePoolsSecrets, RolePoolsImpersonate}

// Perm is what a call needs.
type Perm struct {
	// Keyspace is one of Keyspaces, or one of the pseudo keyspaces
	// Public (anyone authenticated), Admin, Node (node certificates
	// only), PoolsSecrets and PoolsImpersonate.
	Keyspace string
	Write    bool
}

// Pseudo keyspaces of Perm.
const (
	// Anonymous needs no credential at all: only a call that checks a
	// credential itself (the etcd front's Auth/Authenticate, which takes a
	// token as its password).
	Anonymous = "anonymous"
	Public    = "public"
	Admin     = "admin"
	Node      = "node"
	// PoolsSecrets and PoolsImpersonate are granted by the roles of the
	// same names and by admin.
	PoolsSecrets     = RolePoolsSecrets
	PoolsImpersonate = RolePoolsImpersonate
)

// String is "kv:write", "admin", ...
func (p Perm) String() string {
	switch p.Keyspace {
	case Anonymous, Public, Admin, Node, PoolsSecrets, PoolsImpersonate:
		return p.Keyspace
	}
	if p.Write {
		return p.Keyspace + ":write"
	}
	return p.Keyspace + ":read"
}

// ErrBadRole is wrapped by ParseRole's errors.
var ErrBadRole = errors.New("auth: bad role")

// ParseRole checks one role and returns it in canonical form.
func ParseRole(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == RoleAdmin || slices.Contains(special, s) {
		return s, nil
	}
	ks, lvl, ok := strings.Cut(s, ":")
	if !ok || (lvl != "read" && lvl != "write") || (ks != "*" && !slices.Contains(Keyspaces, ks)) {
		return "", fmt.Errorf("%w %q: want admin, %s or <%s|*>:<read|write>", ErrBadRole, clip(s), strings.Join(special, ", "), strings.Join(Keyspaces, "|"))
	}
	return ks + ":" + lvl, nil
}

// ParseRoles parses a comma-separated role list (empty items skipped),
// sorted and without duplicates.
func ParseRoles(spec string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(spec, ",") {
		if strings.TrimSpace(r) == "" {
			continue
		}
		c, err := ParseRole(r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Allows reports whether roles grant p. Anonymous needs nothing, Public
// any identity; Node is
// never granted by roles; PoolsSecrets and PoolsImpersonate only by their
// own role or admin (never by a wildcard).
func Allows(roles []string, p Perm) bool {
	switch p.Keyspace {
	case Anonymous, Public:
		return true
	case Node:
		return false
	case Admin:
		return slices.Contains(roles, RoleAdmin)
	case PoolsSecrets, PoolsImpersonate:
		return slices.Contains(roles, p.Keyspace) || slices.Contains(roles, RoleAdmin)
	}
	for _, r := range roles {
		ks, lvl, ok := strings.Cut(r, ":")
		if !ok || (ks != p.Keyspace && ks != "*") || (lvl != "read" && lvl != "write") {
			continue
		}
		if lvl == "write" || !p.Write {
			return true
		}
	}
	return false
}

// Token format constants.
const (
	TokenPrefix = "swk_"
	idHexLen    = 16
	secretLen   = 32
	tokenLen    = len(TokenPrefix) + idHexLen + 1 + 2*secretLen
)

// ErrBadToken is returned for a malformed token. Its text never quotes the
// token.
var ErrBadToken = errors.New("auth: malformed token")

// NewToken makes a token and returns it, its id and the hash to store.
func NewToken() (token, id, hash string) {
	var idb [idHexLen / 2]byte
	var sec [secretLen]byte
	rand.Read(idb[:])
	rand.Read(sec[:])
	id = hex.EncodeToString(idb[:])
	return TokenPrefix + id + "_" + hex.EncodeToString(sec[:]), id, HashSecret(sec[:])
}

// ParseToken splits a token into its id and secret.
func ParseToken(tok string) (id string, secret []byte, err error) {
	if len(tok) != tokenLen || !strings.HasPrefix(tok, TokenPrefix) || tok[len(TokenPrefix)+idHexLen] != '_' {
		return "", nil, ErrBadToken
	}
	id = tok[len(TokenPrefix) : len(TokenPrefix)+idHexLen]
	if !isLowerHex(id) {
		return "", nil, ErrBadToken
	}
	sh := tok[len(TokenPrefix)+idHexLen+1:]
	if !isLowerHex(sh) {
		return "", nil, ErrBadToken
	}
	secret, _ = hex.DecodeString(sh)
	return id, secret, nil
}

// ValidID reports whether s has the form of a token id.
func ValidID(s string) bool { return len(s) == idHexLen && isLowerHex(s) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// HashSecret is the stored form of a secret: hex SHA-256.
func HashSecret(secret []byte) string {
	h := sha256.Sum256(secret)
	return hex.EncodeToString(h[:])
}

// CheckSecret compares a presented secret with a stored hash in constant
// time.
func CheckSecret(secret []byte, hash string) bool {
	got := HashSecret(secret)
	return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1
}

// ErrBadAuthorization is returned for an Authorization value that is not
// "Bearer <token>". Its text never quotes the value.
var ErrBadAuthorization = errors.New("auth: authorization is not \"Bearer <token>\"")

// ParseBearer returns the token of an Authorization header value
// ("Bearer <token>", scheme case-insensitive, one space or more).
func ParseBearer(h string) (string, error) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrBadAuthorization
	}
	tok := strings.TrimLeft(rest, " ")
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", ErrBadAuthorization
	}
	return tok, nil
}

// clip keeps error messages short and free of control characters.
func clip(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
