package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
)

// The tokens of the cluster state (auth.go has the rules; package admin
// serves them as /v1/tokens). Changes run on the meta leader (through
// n.metaUpdate): elsewhere they answer ErrMetaNotLeader and the caller
// runs them on MetaLeader. Every node learns the tokens through the sync
// loop (within about a second), so a new token works, and a revoked one
// stops working, on every node shortly after the call returns.

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

func tokenInfo(t Token) TokenInfo {
	return TokenInfo{ID: t.ID, Name: t.Name, Roles: t.Roles, Actor: t.Actor, Created: t.Created, Revoked: t.Revoked}
}

// maxTokens bounds the tokens kept in the cluster state (revoked included).
const maxTokens = 1000

// Tokens lists the tokens of the committed cluster state (no hashes, no
// secrets).
func (n *Node) Tokens(ctx context.Context) ([]TokenInfo, error) {
	st, err := n.fetchMeta(ctx)
	if err != nil {
		return nil, err
	}
	out := []TokenInfo{}
	for _, t := range st.Tokens {
		out = append(out, tokenInfo(t))
	}
	return out, nil
}

// MetaLeader returns the addresses of the meta group's leader as this node
// knows or can learn them (findMetaLeader), for a caller that got
// ErrMetaNotLeader here; false when no leader is known.
func (n *Node) MetaLeader(ctx context.Context) (NodeAddrs, bool) {
	return n.nodeAddrs(n.findMetaLeader(ctx))
}

// findMetaLeader returns the meta leader's id as this node's meta replica
// or a meta voter knows it, or "". Callers ask after this node found it
// does not lead, so a local view naming this node is stale and skipped.
func (n *Node) findMetaLeader(ctx context.Context) string {
	if m := n.metaReplica(); m != nil {
		if l := m.Leader(); l != "" && l != n.cfg.ID {
			return l
		}
	}
	for _, id := range n.metaCandidates() {
		if id == n.cfg.ID {
			continue
		}
		c, err := n.adminClient(id)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.MetaState(cctx, &rpc.MetaStateRequest{})
		cancel()
		if err == nil && resp.LeaderId != "" {
			return resp.LeaderId
		}
	}
	return ""
}

// ErrTokenNotFound is RevokeToken's answer for an id no token has.
var ErrTokenNotFound = errors.New("cluster: no such token")

// redactTokenHashes returns a copy of st without the tokens' secret hashes
// (for /v1/state). A hash of 32 random bytes does not reveal the secret,
// but nothing outside the nodes needs it, so it is not shown.
func redactTokenHashes(st *State) *State {
	if st == nil || len(st.Tokens) == 0 {
		return st
	}
	c := st.Clone()
	for i := range c.Tokens {
		c.Tokens[i].Hash = ""
	}
	return c
}

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

// CreateToken makes a token with roles, bound to actor unless actor is "",
// on the meta leader (ErrMetaNotLeader elsewhere) and returns it with its
// secret, shown this once.
func (n *Node) CreateToken(ctx context.Context, name string, roles []string, actor string) (*TokenInfo, error) {
	name, canon, err := CheckTokenRequest(name, roles, actor)
	if err != nil {
		return nil, err
	}
	tok, id, hash := auth.NewToken()
	rec := Token{ID: id, Name: name, Roles: canon, Actor: actor, Hash: hash, Created: time.Now().UTC().Truncate(time.Second)}
	if _, err := n.metaUpdate(ctx, func(st *State) error {
		if len(st.Tokens) >= maxTokens {
			return fmt.Errorf("%w: %d tokens already; revoke and prune some", ErrInvalidArgument, len(st.Tokens))
		}
		st.Tokens = append(st.Tokens, rec)
		return nil
	}); err != nil {
		return nil, err
	}
	ti := tokenInfo(rec)
	ti.Token = tok
	return &ti, nil
}

// RevokeToken marks token id revoked (idempotent) on the meta leader
// (ErrMetaNotLeader elsewhere; ErrTokenNotFound for an unknown id).
func (n *Node) RevokeToken(ctx context.Context, id string) (*TokenInfo, error) {
	if !auth.ValidID(id) {
		return nil, fmt.Errorf("%w: token id %q: want 16 hex digits", ErrInvalidArgument, clipID(id))
	}
	var out TokenInfo
	_, err := n.metaUpdate(ctx, func(st *State) error {
		i := slices.IndexFunc(st.Tokens, func(t Token) bool { return t.ID == id })
		if i < 0 {
			return ErrTokenNotFound
		}
		if st.Tokens[i].Revoked != nil {
			out = tokenInfo(st.Tokens[i])
			return errNoChange
		}
		now := time.Now().UTC().Truncate(time.Second)
		st.Tokens[i].Revoked = &now
		out = tokenInfo(st.Tokens[i])
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func clipID(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
