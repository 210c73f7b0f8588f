package redisfront

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/resp"
)

// RESP authentication (package auth/authn has the rules). With auth on, a connection
// authenticates with its TLS client certificate, or with
//
//	AUTH <user> <token>    (or AUTH <token>; HELLO 3 AUTH <user> <token>)
//
// where <token> is a token of `swarmnode token create` (the user name is
// not checked). Before that every command but AUTH, HELLO and QUIT answers
// NOAUTH. Then each command needs assets:read (reads, KEYS, SCAN, DBSIZE,
// WATCH) or assets:write (writes, queued or not); a refused one answers
// NOPERM and a MULTI block it was queued in is aborted.
//
// A token is checked again before every command (authn.Authenticator.TokenLive: an id
// lookup in the node's current cluster state): once the sync loop brings
// a revocation (within about a second, as for gRPC) every open connection
// authenticated with that token is logged out, its MULTI block dropped,
// and the command answers NOAUTH without running.

// redisAuth is a connection's authentication state.
type redisAuth struct {
	id      *authn.Identity
	token   string // kept to forward calls without TLS (memory only)
	tokenID string // the token's id, checked before each command
}

const (
	redisNoAuth    = "NOAUTH Authentication required."
	redisWrongPass = "WRONGPASS invalid username-password pair or user is disabled."
)

// authGate runs before a command. It answers AUTH itself, refuses commands
// of an unauthenticated connection or without the role, and returns
// answered=false when the command may run. (A TLS client certificate's
// identity is set when the connection opens: serveConn.)
func (f *Front) authGate(st *redisConn, argv [][]byte) (resp.Value, bool) {
	an := f.n.Authn()
	if !an.On() {
		return resp.Value{}, false
	}
	a := &st.auth
	name := strings.ToLower(string(argv[0]))
	switch name {
	case "auth":
		if len(argv) < 2 || len(argv) > 3 {
			return resp.WrongArgs("auth"), true
		}
		return f.login(a, string(argv[len(argv)-1])), true
	case "hello":
		for i := 2; i+2 < len(argv); i++ {
			if strings.EqualFold(string(argv[i]), "auth") {
				if v := f.login(a, string(argv[i+2])); v.IsError() {
					return v, true
				}
				break
			}
		}
		return resp.Value{}, false
	case "quit":
		return resp.Value{}, false
	}
	if a.tokenID != "" && !an.TokenLive(a.tokenID) {
		an.Audit("redis", a.id, strings.ToUpper(name), false, "token revoked")
		*a = redisAuth{}
		st.resetTx()
	}
	if a.id == nil {
		return errReply(redisNoAuth), true
	}
	perm, ok := redisCmdPerm(name, argv)
	if !ok {
		return resp.Value{}, false // answered by the front without data
	}
	if allowed, why := an.Allows(a.id, perm); !allowed {
		an.Audit("redis", a.id, strings.ToUpper(name), false, why)
		if st.multi {
			st.dirty = true
		}
		return errReply("NOPERM User " + a.id.Name() + " has no permissions to run the '" + name + "' command"), true
	}
	return resp.Value{}, false
}

// login checks a token for AUTH; the reply never quotes it.
func (f *Front) login(a *redisAuth, tok string) resp.Value {
	id, ok := f.n.Authn().IdentifyToken(tok)
	if !ok {
		f.n.Authn().Audit("redis", nil, "AUTH", false, authn.MsgBadToken)
		return errReply(redisWrongPass)
	}
	tokID, _, _ := auth.ParseToken(tok)
	*a = redisAuth{id: id, token: tok, tokenID: tokID}
	return resp.OK
}

// redisCmdPerm returns the permission a command needs; ok=false for
// commands that touch no data (PING, CLIENT, MULTI, DISCARD, ...).
func redisCmdPerm(name string, argv [][]byte) (auth.Perm, bool) {
	switch name {
	case "keys", "scan", "dbsize", "watch":
		return auth.Perm{Keyspace: auth.Assets}, true
	case "exec":
		return auth.Perm{Keyspace: auth.Assets}, true // each queued command was checked
	}
	if _, conn := redisConnCmds[name]; conn {
		return auth.Perm{}, false
	}
	switch name {
	case "multi", "discard", "unwatch":
		return auth.Perm{}, false
	}
	c := fsm.LookupRedis(argv[0])
	if c == nil {
		return auth.Perm{}, false // unknown: the front answers it
	}
	return auth.Perm{Keyspace: auth.Assets, Write: c.Write}, true
}

// forwardCreds adds the connection's token to a forwarded call when the
// cluster runs auth without TLS (with TLS the node certificate is enough).
func (f *Front) forwardCreds(ctx context.Context, st *redisConn) context.Context {
	if f.peer != nil || st == nil || st.auth.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+st.auth.token)
}
