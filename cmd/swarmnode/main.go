// Command swarmnode runs a swarmkv node and talks to a cluster.
//
//	swarmnode                      one-node cluster with embedded defaults
//	swarmnode serve [flags]        a node (see `swarmnode serve -h`)
//	swarmnode kv put|get|del|scan  debug client
//	swarmnode registry|billing ... inspect the typed stores
//	swarmnode members|status|join|remove|transfer-leader|snapshot  operate a cluster
//	swarmnode version
//
// It is the composition root: it parses flags (each also settable as
// SWARM_<FLAG>), builds the node, derives the root context from SIGINT and
// SIGTERM, and shuts down in reverse order. Nothing else calls os.Exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "swarmnode:", err)
		}
		os.Exit(exitCode(err))
	}
}

// usageError marks errors caused by bad command-line input (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

const usage = `swarmnode: a sharded, Raft-replicated key-value store node.

Usage:
  swarmnode                       start a one-node cluster with the embedded
                                  defaults (data under ./data, 127.0.0.1 ports)
  swarmnode serve [flags]         start a node (swarmnode serve -h for flags)
  swarmnode kv put|get|del|scan   debug client (swarmnode kv -h)
  swarmnode registry ...          inspect agents, sessions, users (swarmnode registry -h)
  swarmnode billing ...           inspect accounts, transactions, usage events
  swarmnode bench put|get|mixed|ledger   load generator (swarmnode bench -h)
  swarmnode health [--ready]      probe nodes' /healthz or /readyz (swarmnode health -h)
  swarmnode members|status        list members / cluster overview with a shard table
  swarmnode join|remove NODE_ID   admit a node / decommission one (moves its replicas first)
  swarmnode transfer-leader SHARD [NODE_ID]   move a shard's leadership
  swarmnode snapshot SHARD        snapshot every replica of a shard
                                  (operator commands: --admin host:port of any member's
                                  --http-addr, --json; swarmnode status -h)
  swarmnode certs ca|node|client  make a cluster CA, node and client certificates (swarmnode certs -h)
  swarmnode token create|list|revoke   bearer tokens and their roles (swarmnode token -h)
  swarmnode version               print the version

Every serve flag can also be set as an environment variable SWARM_<FLAG>,
e.g. SWARM_DATA_DIR=/var/lib/swarmkv.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return serve(ctx, nil, stdout, stderr)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "kv":
		return kv(ctx, args[1:], stdout, stderr)
	case "registry":
		return registry(ctx, args[1:], stdout, stderr)
	case "billing":
		return billing(ctx, args[1:], stdout, stderr)
	case "bench":
		return bench(ctx, args[1:], stdout, stderr)
	case "health":
		return health(ctx, args[1:], stdout, stderr)
	case "members":
		return members(ctx, args[1:], stdout, stderr)
	case "status":
		return status(ctx, args[1:], stdout, stderr)
	case "join":
		return join(ctx, args[1:], stdout, stderr)
	case "remove":
		return remove(ctx, args[1:], stdout, stderr)
	case "transfer-leader":
		return transferLeader(ctx, args[1:], stdout, stderr)
	case "snapshot":
		return snapshot(ctx, args[1:], stdout, stderr)
	case "certs":
		return certs(ctx, args[1:], stdout, stderr)
	case "token":
		return token(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "swarmnode", version)
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if strings.HasPrefix(args[0], "-") {
		// Flags without a subcommand: serve.
		return serve(ctx, args, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Errorf("unknown command %q", args[0])}
}

// envDefaults sets every flag not given on the command line from
// SWARM_<NAME> (dashes become underscores), and reports bad values.
func envDefaults(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		env := "SWARM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usageError{fmt.Errorf("%s=%q: %v", env, v, e)}
			}
		}
	})
	return err
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("log level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
