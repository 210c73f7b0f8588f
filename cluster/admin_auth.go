package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
)

// The token admin API (auth.go has the rules):
//
//	POST /v1/tokens               {"name": "ci", "roles": ["registry:read"], "actor": "u1"}
//	                              -> {"id", "name", "roles", "actor", "created", "token"}; the
//	                                 token is shown this once, the cluster keeps only its hash;
//	                                 "actor" (optional) binds the token to a user id (Pools)
//	GET  /v1/tokens               -> [{"id", "name", "roles", "actor", "created", "revoked"}]
//	POST /v1/tokens/{id}/revoke   -> the record; idempotent
//
// Changes run on the meta leader (through n.metaUpdate); a node that does
// not lead the meta group forwards the request to the leader's HTTP
// address (with its node certificate, and the caller's Authorization).
// Every node learns the tokens through the sync loop (within about a
// second), so a new token works, and a revoked one stops working, on every
// node shortly after the call returns.

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

// forwardedHeader marks an admin request one node forwarded to the meta
// leader.
const forwardedHeader = "X-Swarmkv-Forwarded"

func (n *Node) adminAuthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tokens", n.tokenHandler(func(ctx context.Context, r *http.Request) (any, error) {
		var req struct {
			Name  string   `json:"name"`
			Roles []string `json:"roles"`
			Actor string   `json:"actor"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
			return nil, fmt.Errorf("%w: body: want {\"name\": ..., \"roles\": [...], \"actor\": ... (optional)}", ErrInvalidArgument)
		}
		return n.CreateToken(ctx, req.Name, req.Roles, req.Actor)
	}))
	mux.HandleFunc("GET /v1/tokens", n.tokenHandler(func(ctx context.Context, r *http.Request) (any, error) {
		st, err := n.fetchMeta(ctx)
		if err != nil {
			return nil, err
		}
		out := []TokenInfo{}
		for _, t := range st.Tokens {
			out = append(out, tokenInfo(t))
		}
		return out, nil
	}))
	mux.HandleFunc("POST /v1/tokens/{id}/revoke", n.tokenHandler(func(ctx context.Context, r *http.Request) (any, error) {
		return n.RevokeToken(ctx, r.PathValue("id"))
	}))
}

// tokenHandler runs fn, forwarding to the meta leader when fn answers
// errMetaNotLeader.
func (n *Node) tokenHandler(fn func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		w.Header().Set("Content-Type", "application/json")
		var v any
		var err error
		// Run here when this node leads the meta group, else on the
		// leader; retry for a few seconds while leadership settles.
		for try := 0; ; try++ {
			r.Body = io.NopCloser(bytes.NewReader(body))
			v, err = fn(ctx, r)
			if errors.Is(err, ErrLeaderNotReady) && try < 50 {
				// A new meta leader that has not read the state yet:
				// nothing was proposed, so running fn again is safe.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if !errors.Is(err, errMetaNotLeader) || r.Header.Get(forwardedHeader) != "" || try >= 50 {
				break
			}
			if a, ok := n.nodeAddrs(n.findMetaLeader(ctx)); ok && a.ID != n.cfg.ID && a.HTTPAddr != "" {
				n.forwardToMetaLeader(ctx, w, r, a, body)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			code := http.StatusInternalServerError
			switch {
			case errors.Is(err, ErrInvalidArgument):
				code = http.StatusBadRequest
			case errors.Is(err, errTokenNotFound):
				code = http.StatusNotFound
			case errors.Is(err, errMetaNotLeader), errors.Is(err, ErrLeaderNotReady), errors.Is(err, ErrNotLeader):
				code = http.StatusServiceUnavailable
			}
			w.WriteHeader(code)
			writeJSONError(w, err.Error())
			return
		}
		if r.Method == http.MethodPost {
			what := r.Method + " " + r.URL.Path
			if ti, ok := v.(*TokenInfo); ok {
				what += " id=" + ti.ID + " name=" + ti.Name + " roles=" + strings.Join(ti.Roles, ",")
				if ti.Actor != "" {
					what += " actor=" + ti.Actor
				}
			}
			n.log.Info("audit", "audit", true, "via", "http", "what", what, "done", true)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	}
}

// forwardToMetaLeader replays r on the meta leader a and copies its answer.
func (n *Node) forwardToMetaLeader(ctx context.Context, w http.ResponseWriter, r *http.Request, a NodeAddrs, body []byte) {
	fail := func(msg string) {
		w.WriteHeader(http.StatusServiceUnavailable)
		writeJSONError(w, msg)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	scheme := "http"
	if n.tls != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = n.tls.PeerConfig()
		hc.Transport, scheme = tr, "https"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+"://"+httpDialAddr(a)+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		fail(err.Error())
		return
	}
	req.Header.Set(forwardedHeader, n.cfg.ID)
	req.Header.Set("Content-Type", "application/json")
	if h := r.Header.Get("Authorization"); h != "" {
		req.Header.Set("Authorization", h)
	}
	resp, err := hc.Do(req)
	if err != nil {
		fail("cluster: forwarding to the meta leader " + a.ID + " failed")
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, 1<<20))
}

// findMetaLeader returns the meta leader's id as this node's meta replica
// or a meta voter knows it, or "". Callers ask after this node found it
// does not lead, so a local view naming this node is stale and skipped.
func (n *Node) findMetaLeader(ctx context.Context) string {
	if m := n.metaReplica(); m != nil {
		if l := m.leader(); l != "" && l != n.cfg.ID {
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

// httpDialAddr is where another node reaches a's HTTP server: its
// announced HTTP address, or, when that is bound to every interface
// (0.0.0.0:7102, [::]:7102), its advertised gRPC host with the HTTP port.
func httpDialAddr(a NodeAddrs) string {
	h, p, err := net.SplitHostPort(a.HTTPAddr)
	if err != nil {
		return a.HTTPAddr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		if gh, _, err := net.SplitHostPort(a.GRPCAddr); err == nil {
			return net.JoinHostPort(gh, p)
		}
	}
	return a.HTTPAddr
}

var errTokenNotFound = errors.New("cluster: no such token")

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
// on the meta leader (errMetaNotLeader elsewhere) and returns it with its
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

// RevokeToken marks token id revoked (idempotent) on the meta leader.
func (n *Node) RevokeToken(ctx context.Context, id string) (*TokenInfo, error) {
	if !auth.ValidID(id) {
		return nil, fmt.Errorf("%w: token id %q: want 16 hex digits", ErrInvalidArgument, clipID(id))
	}
	var out TokenInfo
	_, err := n.metaUpdate(ctx, func(st *State) error {
		i := slices.IndexFunc(st.Tokens, func(t Token) bool { return t.ID == id })
		if i < 0 {
			return errTokenNotFound
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
