package authn

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/keys"
)

// The admin API's tokens (package cluster keeps them in the cluster state
// and changes them through the meta group: CreateToken, RevokeToken,
// Tokens; package admin serves them as /v1/tokens). This file has the
// request checks and the listed form.

// TokenInfo is a token as the admin API lists it (no hash, no secret).
type TokenInfo struct {
	ID      string     `json:"id"`
	Name    string     `json:"name"`
	Roles   []string   `json:"roles"`
	Actor   string     `json:"actor,omitempty"` // the user id a bound token acts for
	Created time.Time  `json:"created"`
	Revoked *time.Time `json:"revoked,omitempty"`
	// Token is set only in the answer to a create.
	Token string `json:"token,omitempty"`
}

// ErrInvalidArgument is wrapped by the token request checks' errors (its
// text is that of cluster.ErrInvalidArgument, and package cluster's error
// table gives it the same kind: HTTP 400, codes.InvalidArgument).
var ErrInvalidArgument = errors.New("invalid argument")

// CheckTokenRequest validates a token request (POST /v1/tokens) and
// returns its name trimmed and its roles in canonical form. actor, when
// set, must be a valid user id (keys.ValidateStringID) and cannot be
// combined with pools:impersonate (a bound token acts only as its actor).
func CheckTokenRequest(name string, roles []string, actor string) (string, []string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", nil, fmt.Errorf("%w: token name: want 1-64 printable characters", ErrInvalidArgument)
	}
	canon, err := auth.ParseRoles(strings.Join(roles, ","))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if len(canon) == 0 {
		return "", nil, fmt.Errorf("%w: a token needs at least one role", ErrInvalidArgument)
	}
	if actor != "" {
		if err := keys.ValidateStringID("actor", actor, keys.MaxStringIDLen); err != nil {
			return "", nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if slices.Contains(canon, auth.RolePoolsImpersonate) {
			return "", nil, fmt.Errorf("%w: a token bound to an actor cannot have the %s role", ErrInvalidArgument, auth.RolePoolsImpersonate)
		}
	}
	return name, canon, nil
}

// CheckTokenID validates the token id of a revoke (16 hex digits); the
// error quotes at most 20 bytes of it.
func CheckTokenID(id string) error {
	if !auth.ValidID(id) {
		return fmt.Errorf("%w: token id %q: want 16 hex digits", ErrInvalidArgument, clipID(id))
	}
	return nil
}

func clipID(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
