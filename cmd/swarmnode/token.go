package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
)

const tokenLong = `Bearer tokens and their roles.

Roles: admin, or KEYSPACE:read / KEYSPACE:write with KEYSPACE one of
registry, billing, assets, pools, kv, or * (every keyspace); pools:secrets
(read bots' decrypted tokens) and pools:impersonate (an unbound token may
act as any user in the Pools service) are granted only by name or admin.
--actor binds the token to a user id: its Pools calls act only as that
user (docs/security.md, "Pools: actors"). Clients send
the token as "authorization: Bearer <token>" (Go client: Config.Token; CLI:
SWARM_TOKEN; Redis: AUTH <user> <token>). The caller needs the admin role.
The first token of a node with --auth without TLS (no client certificate):
sign with the cluster secret, e.g.
  swarmnode token create --name ops --role admin --cluster-secret-file <data-dir>/cluster-secret`

func init() {
	checkRoles = func(roles []string) error {
		_, err := auth.ParseRoles(strings.Join(roles, ","))
		return err
	}
}

// roleList is a repeatable, comma-splitting --role flag.
type roleList []string

func (r *roleList) String() string { return strings.Join(*r, ",") }
func (r *roleList) Type() string   { return "roles" }
func (r *roleList) Set(s string) error {
	*r = append(*r, splitList(s)...)
	return nil
}

// tokenFlags are token's flags.
type tokenFlags struct {
	*adminFlags
	name, actor string
	roles       roleList
}

func newTokenCmd() *cobra.Command {
	f := &tokenFlags{}
	g := group("token", "bearer tokens and their roles", tokenLong, "create, list or revoke", "command", []verb{
		{"create --name NAME --role ROLE[,ROLE...] [--actor USER]", "make a bearer token (printed once)", 0, 0},
		{"list", "list tokens (never their secrets)", 0, 0},
		{"revoke ID", "revoke a token (idempotent)", 1, 1},
	}, f.run)
	fs := g.PersistentFlags()
	f.adminFlags = addAdminFlags(fs)
	fs.StringVar(&f.name, "name", "", "create: the token's name (who uses it)")
	fs.Var(&f.roles, "role", "create: a role, or a comma-separated list; repeatable")
	fs.StringVar(&f.actor, "actor", "", "create: the user id the token acts for in the Pools service (default: not bound)")
	return g
}

func (f *tokenFlags) run(ctx context.Context, verb string, pos []string, stdout, _ io.Writer) error {
	switch verb {
	case "create":
		if f.name == "" || len(f.roles) == 0 {
			return usageError{errors.New("token create: want --name and at least one --role")}
		}
		if _, _, err := authn.CheckTokenRequest(f.name, f.roles, f.actor); err != nil {
			return usageError{err}
		}
		req := map[string]any{"name": f.name, "roles": []string(f.roles)}
		if f.actor != "" {
			req["actor"] = f.actor
		}
		var ti authn.TokenInfo
		body, err := f.callBody(ctx, "POST", "/v1/tokens", req, &ti)
		if err != nil {
			return err
		}
		if f.json {
			_, err := stdout.Write(body)
			return err
		}
		bound := ""
		if ti.Actor != "" {
			bound = ", acts for " + ti.Actor
		}
		fmt.Fprintf(stdout, "token %s (%s, roles %s%s); shown only now, store it safely:\n%s\n", ti.ID, ti.Name, strings.Join(ti.Roles, ","), bound, ti.Token)
		return nil
	case "list":
		return show(ctx, f.adminFlags, "/v1/tokens", stdout, func(ts []authn.TokenInfo) error { return printTokens(stdout, ts) })
	case "revoke":
		var ti authn.TokenInfo
		body, err := f.call(ctx, "POST", "/v1/tokens/"+pos[0]+"/revoke", &ti)
		if err != nil {
			return err
		}
		if f.json {
			_, err := stdout.Write(body)
			return err
		}
		fmt.Fprintf(stdout, "token %s (%s) revoked\n", ti.ID, ti.Name)
		return nil
	}
	return nil
}

func printTokens(stdout io.Writer, ts []authn.TokenInfo) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLES\tACTOR\tCREATED\tREVOKED")
	for _, t := range ts {
		rev := "-"
		if t.Revoked != nil {
			rev = t.Revoked.Format(time.RFC3339)
		}
		act := "-"
		if t.Actor != "" {
			act = t.Actor
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(t.Roles, ","), act, t.Created.Format(time.RFC3339), rev)
	}
	return tw.Flush()
}
