package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/rpc"
)

// The tokens of the cluster state (package auth/authn has the rules, the
// request checks and the listed form, authn.TokenInfo; package admin
// serves them as /v1/tokens). Changes run on the meta leader (through
// n.metaUpdate): elsewhere they answer ErrMetaNotLeader and the caller
// runs them on MetaLeader. Every node learns the tokens through the sync
// loop (within about a second), so a new token works, and a revoked one
// stops working, on every node shortly after the call returns.

// tokenInfo is t as the admin API lists it (no hash, no secret).
func tokenInfo(t Token) authn.TokenInfo {
	return authn.TokenInfo{ID: t.ID, Name: t.Name, Roles: t.Roles, Actor: t.Actor, Created: t.Created, Revoked: t.Revoked}
}

// maxTokens bounds the tokens kept in the cluster state (revoked included).
const maxTokens = 1000

// Tokens lists the tokens of the committed cluster state (no hashes, no
// secrets).
func (n *Node) Tokens(ctx context.Context) ([]authn.TokenInfo, error) {
	st, err := n.fetchMeta(ctx)
	if err != nil {
		return nil, err
	}
	out := []authn.TokenInfo{}
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

// CreateToken makes a token with roles, bound to actor unless actor is "",
// on the meta leader (ErrMetaNotLeader elsewhere) and returns it with its
// secret, shown this once.
func (n *Node) CreateToken(ctx context.Context, name string, roles []string, actor string) (*authn.TokenInfo, error) {
	name, canon, err := authn.CheckTokenRequest(name, roles, actor)
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
func (n *Node) RevokeToken(ctx context.Context, id string) (*authn.TokenInfo, error) {
	if err := authn.CheckTokenID(id); err != nil {
		return nil, err
	}
	var out authn.TokenInfo
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
