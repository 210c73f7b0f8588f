package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/cluster"
)

const tokenUsage = `Usage:
  swarmnode token create --name NAME --role ROLE[,ROLE...] [--actor USER] [flags]
                                                                     make a bearer token (printed once)
  swarmnode token list [flags]                                       list tokens (never their secrets)
  swarmnode token revoke [flags] ID                                  revoke a token (idempotent)

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
  swarmnode token create --name ops --role admin --cluster-secret-file <data-dir>/cluster-secret

Flags:
`

func init() {
	checkRoles = func(roles []string) error {
		_, err := auth.ParseRoles(strings.Join(roles, ","))
		return err
	}
}

// roleList is a repeatable, comma-splitting --role flag.
type roleList []string

func (r *roleList) String() string { return strings.Join(*r, ",") }
func (r *roleList) Set(s string) error {
	*r = append(*r, splitList(s)...)
	return nil
}

func token(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tokenUsage); fs.PrintDefaults() }
	f := &adminFlags{}
	fs.StringVar(&f.admin, "admin", "127.0.0.1:7102", "admin HTTP address of any member (its --http-addr)")
	fs.BoolVar(&f.json, "json", false, "print the API's JSON")
	f.conn = addConnFlags(fs)
	f.addSecretFlag(fs)
	name := fs.String("name", "", "create: the token's name (who uses it)")
	var roles roleList
	fs.Var(&roles, "role", "create: a role, or a comma-separated list; repeatable")
	actor := fs.String("actor", "", "create: the user id the token acts for in the Pools service (default: not bound)")
	verb, pos, err := parseVerb(fs, args, "token: missing create, list or revoke")
	if err != nil {
		return err
	}
	if v, ok := lookupEnv("SWARM_ADMIN"); ok && !flagGiven(fs, "admin") {
		f.admin = v
	}
	if v, ok := lookupEnv("SWARM_CLUSTER_SECRET_FILE"); ok && !flagGiven(fs, "cluster-secret-file") {
		f.secretFile = v
	}
	switch verb {
	case "create":
		if len(pos) != 0 || *name == "" || len(roles) == 0 {
			return usageError{errors.New("token create: want --name and at least one --role")}
		}
		if _, _, err := cluster.CheckTokenRequest(*name, roles, *actor); err != nil {
			return usageError{err}
		}
		req := map[string]any{"name": *name, "roles": []string(roles)}
		if *actor != "" {
			req["actor"] = *actor
		}
		var ti cluster.TokenInfo
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
		if len(pos) != 0 {
			return usageError{errors.New("token list: no arguments")}
		}
		var ts []cluster.TokenInfo
		body, err := f.call(ctx, "GET", "/v1/tokens", &ts)
		if err != nil {
			return err
		}
		if f.json {
			_, err := stdout.Write(body)
			return err
		}
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
	case "revoke":
		if len(pos) != 1 {
			return usageError{errors.New("token revoke: want one token ID")}
		}
		var ti cluster.TokenInfo
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
	fs.Usage()
	return usageError{fmt.Errorf("token: unknown command %q", verb)}
}

func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
