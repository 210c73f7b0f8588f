package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/internal/freeport"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// lockedBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runCmd runs the CLI with args and returns its error and outputs.
func runCmd(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestRunVersionAndHelp(t *testing.T) {
	usage := rootUsage(newRoot(false))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"version"}, "swarmnode " + version + "\n"},
		{[]string{"--version"}, "swarmnode " + version + "\n"},
		{[]string{"-version"}, "swarmnode " + version + "\n"},
		{[]string{"help"}, usage},
		{[]string{"-h"}, usage},
		{[]string{"--help"}, usage},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, err := runCmd(context.Background(), tc.args...)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if stdout != tc.want || stderr != "" {
				t.Fatalf("stdout %q, stderr %q; want stdout %q", stdout, stderr, tc.want)
			}
		})
	}
	if !strings.Contains(usage, "swarmnode kv put|get|del|scan") || !strings.Contains(usage, "SWARM_<FLAG>") ||
		!strings.Contains(usage, "\nCluster admin") {
		t.Errorf("usage lacks the commands or the environment: %q", usage)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"usage error", usageError{errors.New("bad")}, 2},
		{"wrapped usage error", fmt.Errorf("ctx: %w", usageError{errors.New("bad")}), 2},
		{"help", flag.ErrHelp, 2},
		{"help as usage error", usageError{flag.ErrHelp}, 2},
		{"runtime error", errors.New("boom"), 1},
		{"not found", client.ErrNotFound, 1},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestRunUsageErrors: bad command lines are usage errors (exit code 2)
// and never reach the network: they return at once.
func TestRunUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		errSub string // in the error
		stderr string // in stderr, if not ""
	}{
		{name: "unknown command", args: []string{"frobnicate"}, errSub: `unknown command "frobnicate"`, stderr: "Usage:"},
		{name: "kv without verb", args: []string{"kv"}, errSub: "kv: missing verb", stderr: "swarmnode kv put"},
		{name: "kv unknown verb", args: []string{"kv", "list", "--user", "a"}, errSub: `kv: unknown verb "list"`, stderr: "swarmnode kv put"},
		{name: "kv put one argument", args: []string{"kv", "put", "--user", "a", "k"}, errSub: "kv put: got 1 arguments"},
		{name: "kv put three arguments", args: []string{"kv", "put", "--user", "a", "k", "v", "w"}, errSub: "kv put: got 3 arguments"},
		{name: "kv get no argument", args: []string{"kv", "get", "--user", "a"}, errSub: "kv get: got 0 arguments"},
		{name: "kv get two arguments", args: []string{"kv", "get", "--user", "a", "k", "l"}, errSub: "kv get: got 2 arguments"},
		{name: "kv del no argument", args: []string{"kv", "del", "--user", "a"}, errSub: "kv del: got 0 arguments"},
		{name: "kv scan two arguments", args: []string{"kv", "scan", "--user", "a", "p", "q"}, errSub: "kv scan: got 2 arguments"},
		{name: "kv without user", args: []string{"kv", "get", "k"}, errSub: "kv: --user is required"},
		{name: "kv empty user", args: []string{"kv", "put", "--user=", "k", "v"}, errSub: "kv: --user is required"},
		{name: "kv unknown flag", args: []string{"kv", "get", "--user", "a", "k", "--nope"}, errSub: "kv get: unknown flag: --nope"},
		{name: "kv bad limit", args: []string{"kv", "scan", "--user", "a", "--limit", "many"}, errSub: `invalid argument "many" for "--limit" flag`},
		{name: "kv bad timeout", args: []string{"kv", "get", "--user", "a", "k", "--timeout", "soon"}, errSub: `invalid argument "soon" for "--timeout" flag`},
		{name: "kv help", args: []string{"kv", "get", "-h"}, errSub: "help requested", stderr: "-endpoints"},
		{name: "lease without verb", args: []string{"lease"}, errSub: "lease: missing verb", stderr: "swarmnode lease grant"},
		{name: "lease grant without user", args: []string{"lease", "grant"}, errSub: "lease grant: --user is required"},
		{name: "lease bad id", args: []string{"lease", "ttl", "xyz"}, errSub: `lease id "xyz": want the hex id a grant printed`},
		{name: "lease id 0", args: []string{"lease", "revoke", "0"}, errSub: `lease id "0"`},
		{name: "lease keepalive no id", args: []string{"lease", "keepalive"}, errSub: "lease keepalive: got 0 arguments"},
		{name: "kv help first", args: []string{"kv", "-h"}, errSub: "help requested", stderr: "-endpoints"},
		{name: "kv flags before verb", args: []string{"kv", "--user", "a", "get"}, errSub: "kv get: got 0 arguments"},
		{name: "registry help", args: []string{"registry", "-h"}, errSub: "help requested", stderr: "-endpoints"},
		{name: "billing help", args: []string{"billing", "--help"}, errSub: "help requested", stderr: "-endpoints"},
		{name: "certs help", args: []string{"certs", "-h"}, errSub: "help requested", stderr: "-dir"},
		{name: "token help", args: []string{"token", "-h"}, errSub: "help requested", stderr: "-admin"},
		{name: "token without command", args: []string{"token", "--admin", "127.0.0.1:1"}, errSub: "token: missing create, list or revoke"},
		{name: "bench help", args: []string{"bench", "-h"}, errSub: "help requested", stderr: "-clients"},
		{name: "bench workload help", args: []string{"bench", "put", "--help"}, errSub: "help requested", stderr: "-clients"},
		{name: "bench without workload", args: []string{"bench", "--clients", "3"}, errSub: "bench: missing workload", stderr: "-clients"},
		{name: "bench unknown workload", args: []string{"bench", "--clients", "3", "nope"}, errSub: `bench: unknown workload "nope"`},
		{name: "bench two workloads", args: []string{"bench", "put", "get"}, errSub: "bench put: got 1 arguments, want 0"},
		{name: "bench bad keepalive call", args: []string{"bench", "lease-keepalive", "--keepalive-call", "x"}, errSub: `bench: --keepalive-call "x": want stream or once`},
		{name: "bench watch short keys", args: []string{"bench", "watch", "--key-size", "4"}, errSub: "bench: --key-size 4: watch wants at least 8"},
		{name: "serve bad int", args: []string{"serve", "--shards", "x"}, errSub: `invalid argument "x" for "--shards" flag`},
		{name: "serve bad duration", args: []string{"serve", "--election-timeout", "5"}, errSub: `invalid argument "5" for "--election-timeout" flag`},
		{name: "serve unknown flag", args: []string{"serve", "--shard", "3"}, errSub: "serve: unknown flag: --shard"},
		{name: "serve positional", args: []string{"serve", "extra"}, errSub: "serve: got 1 arguments, want 0"},
		{name: "flags without command", args: []string{"--shards", "x"}, errSub: `swarmnode serve: invalid argument "x" for "--shards" flag`},
		{name: "single-dash long flag", args: []string{"serve", "-shards", "x"}, errSub: `invalid argument "x" for "--shards" flag`},
		{name: "registry unknown command", args: []string{"registry", "agentz", "00"}, errSub: `registry: unknown command "agentz"`, stderr: "agents USER_ID"},
		{name: "token list argument", args: []string{"token", "list", "x"}, errSub: "token list: got 1 arguments, want 0"},
		{name: "admin command arguments", args: []string{"transfer-leader", "1", "n1", "n2"}, errSub: "transfer-leader: got 3 arguments, want 1..2"},
		{name: "kv verb help", args: []string{"kv", "put", "--help"}, errSub: "help requested", stderr: "kv put KEY VALUE"},
		{name: "serve bad env", args: []string{"serve"}, env: map[string]string{"SWARM_SHARDS": "x"}, errSub: `SWARM_SHARDS="x"`},
		{name: "serve bad env duration", args: []string{"serve"}, env: map[string]string{"SWARM_HEARTBEAT_TIMEOUT": "1"}, errSub: `SWARM_HEARTBEAT_TIMEOUT="1"`},
		{name: "serve bad log level", args: []string{"serve", "--log-level", "loud"}, errSub: `log level "loud"`},
		{name: "serve bad log level env", args: []string{"serve"}, env: map[string]string{"SWARM_LOG_LEVEL": "loud"}, errSub: `log level "loud"`},
		{name: "serve invalid config", args: []string{"serve", "--shards", "300"}, errSub: "shards 300: want 1..256"},
		{name: "serve invalid id", args: []string{"serve", "--id", "a b"}, errSub: `id "a b"`},
		{name: "serve keepalive min time over the client's", args: []string{"serve", "--grpc-keepalive-min-time", "1m"}, errSub: "grpc keepalive min time 1m0s: want 1s..15s"},
		{name: "serve raft conns env", args: []string{"serve"}, env: map[string]string{"SWARM_RAFT_MAX_CONNS_PER_IP": "-1"}, errSub: "raft max connections 16384, per IP -1"},
		{name: "serve commit timeout too low", args: []string{"serve", "--commit-timeout", "500us"}, errSub: "CommitTimeout is too low"},
		{name: "serve election below heartbeat", args: []string{"serve", "--heartbeat-timeout", "2s", "--election-timeout", "1s"}, errSub: "election timeout 1s is below heartbeat timeout 2s"},
		{name: "serve bad gossip profile env", args: []string{"serve"}, env: map[string]string{"SWARM_GOSSIP_PROFILE": "wan"}, errSub: `gossip profile "wan"`},
		{name: "serve bad address", args: []string{"serve", "--grpc-addr", "nowhere"}, errSub: `grpc address "nowhere"`},
		{name: "serve request timeout too short", args: []string{"serve", "--request-timeout", "1ms"}, errSub: "request timeout 1ms: want 10ms..1h"},
		{name: "serve conns per ip too high env", args: []string{"serve"}, env: map[string]string{"SWARM_MAX_CONNS_PER_IP": "2000000"}, errSub: "max connections per IP 2000000"},
		{name: "serve streams out of range", args: []string{"serve", "--max-concurrent-streams", "2000000"}, errSub: "--max-concurrent-streams 2000000"},
		{name: "serve cache too large", args: []string{"serve", "--block-cache-mib", "70000"}, errSub: "--block-cache-mib 70000: want 1..65536"},
		{name: "serve memtable too small", args: []string{"serve", "--memtable-kib", "8"}, errSub: "--memtable-kib 8: want 256..1048576"},
		{name: "serve scan page too high", args: []string{"serve", "--max-scan-page", "100001"}, errSub: "max scan page 100001"},
		{name: "serve keys reply too high", args: []string{"serve", "--max-keys-reply", "10000001"}, errSub: "max keys reply 10000001: want 1..10000000"},
		{name: "serve page bytes too low", args: []string{"serve", "--max-page-bytes", "100"}, errSub: "max page bytes 100: want 4096..268435456"},
		{name: "serve page bytes too high env", args: []string{"serve"}, env: map[string]string{"SWARM_MAX_PAGE_BYTES": "268435457"}, errSub: "max page bytes 268435457"},
		{name: "serve redis idle too short", args: []string{"serve", "--redis-idle-timeout", "10ms"}, errSub: "redis idle timeout 10ms"},
		{name: "serve redis max bulk too large env", args: []string{"serve"}, env: map[string]string{"SWARM_REDIS_MAX_BULK": "1073741824"}, errSub: "redis max bulk 1073741824"},
		{name: "serve redis max multi commands too many", args: []string{"serve", "--redis-max-multi-commands", "4097"}, errSub: "redis max multi commands 4097"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			// A data dir that must stay untouched: nothing is created
			// before the command line is checked.
			dir := filepath.Join(t.TempDir(), "data")
			args := slices.Clone(tc.args)
			if len(args) > 0 && args[0] == "serve" {
				args = append(args, "--data-dir", dir)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stdout, stderr, err := runCmd(ctx, args...)
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("run(%q) = %v, want a usage error", args, err)
			}
			if exitCode(err) != 2 {
				t.Fatalf("exitCode(%v) = %d, want 2", err, exitCode(err))
			}
			if !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("error %q does not contain %q", err, tc.errSub)
			}
			if tc.stderr != "" && !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("stderr %q does not contain %q", stderr, tc.stderr)
			}
			if stdout != "" {
				t.Fatalf("stdout %q, want nothing", stdout)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a rejected command line created the data dir %s (stat: %v)", dir, err)
			}
		})
	}
}

func TestEnvDefaults(t *testing.T) {
	newFS := func() (*pflag.FlagSet, *string, *int, *time.Duration, *bool) {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, fs.String("data-dir", "./data", ""), fs.Int("shards", 8, ""),
			fs.Duration("election-timeout", time.Second, ""), fs.Bool("verbose", false, "")
	}
	// A flag annotated noEnv (--trust-unsigned) is never set from the
	// environment.
	t.Run("noEnv flag", func(t *testing.T) {
		t.Setenv("SWARM_TRUST_UNSIGNED", "true")
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		trust := fs.Bool("trust-unsigned", false, "")
		if err := fs.SetAnnotation("trust-unsigned", noEnv, []string{"true"}); err != nil {
			t.Fatal(err)
		}
		if err := envDefaults(fs); err != nil || *trust {
			t.Fatalf("envDefaults = %v, trust-unsigned %t: want it left false", err, *trust)
		}
	})
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		dir      string
		shards   int
		election time.Duration
		verbose  bool
		errSub   string
	}{
		{name: "defaults", dir: "./data", shards: 8, election: time.Second},
		{name: "env sets unset flags", env: map[string]string{"SWARM_DATA_DIR": "/srv/kv", "SWARM_SHARDS": "16", "SWARM_ELECTION_TIMEOUT": "250ms", "SWARM_VERBOSE": "true"},
			dir: "/srv/kv", shards: 16, election: 250 * time.Millisecond, verbose: true},
		{name: "command line wins", args: []string{"--data-dir", "cli", "--shards=4"}, env: map[string]string{"SWARM_DATA_DIR": "/srv/kv", "SWARM_SHARDS": "16", "SWARM_ELECTION_TIMEOUT": "250ms"},
			dir: "cli", shards: 4, election: 250 * time.Millisecond},
		{name: "command line default value still wins", args: []string{"--shards", "8"}, env: map[string]string{"SWARM_SHARDS": "16"}, dir: "./data", shards: 8, election: time.Second},
		{name: "empty env value is set", env: map[string]string{"SWARM_DATA_DIR": ""}, dir: "", shards: 8, election: time.Second},
		{name: "names are upper case with underscores", env: map[string]string{"swarm_shards": "3", "SWARM_DATA-DIR": "x", "SWARMSHARDS": "5"}, dir: "./data", shards: 8, election: time.Second},
		{name: "bad value", env: map[string]string{"SWARM_SHARDS": "many"}, errSub: `SWARM_SHARDS="many"`},
		{name: "bad value of a flag given on the command line is ignored", args: []string{"--shards", "2"}, env: map[string]string{"SWARM_SHARDS": "many"}, dir: "./data", shards: 2, election: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs, dir, shards, election, verbose := newFS()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := envDefaults(fs)
			if tc.errSub != "" {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("envDefaults = %v, want a usage error containing %q", err, tc.errSub)
				}
				return
			}
			if err != nil {
				t.Fatalf("envDefaults: %v", err)
			}
			if *dir != tc.dir || *shards != tc.shards || *election != tc.election || *verbose != tc.verbose {
				t.Fatalf("got data-dir %q shards %d election %v verbose %t; want %q %d %v %t",
					*dir, *shards, *election, *verbose, tc.dir, tc.shards, tc.election, tc.verbose)
			}
		})
	}
}

// TestParseInterleaved: a command's flags come before, between or after
// its arguments, also as Go-flag-style single-dash long flags.
func TestParseInterleaved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		pos    []string
		user   string
		limit  int
		errSub string
	}{
		{name: "nothing", limit: 1},
		{name: "flags first", args: []string{"--user", "u", "k", "v"}, pos: []string{"k", "v"}, user: "u", limit: 1},
		{name: "flags last", args: []string{"k", "v", "--user", "u", "--limit=5"}, pos: []string{"k", "v"}, user: "u", limit: 5},
		{name: "flags between", args: []string{"k", "-user", "u", "v", "--limit", "7"}, pos: []string{"k", "v"}, user: "u", limit: 7},
		{name: "single dash with value", args: []string{"-limit=4", "k"}, pos: []string{"k"}, limit: 4},
		{name: "single dash is positional", args: []string{"-", "--user", "u"}, pos: []string{"-"}, user: "u", limit: 1},
		{name: "a flag's value is not a flag", args: []string{"--user", "-limit", "k"}, pos: []string{"k"}, user: "-limit", limit: 1},
		{name: "double dash ends flags", args: []string{"--user", "u", "--", "-k"}, pos: []string{"-k"}, user: "u", limit: 1},
		{name: "double dash ends flags for every later argument", args: []string{"--user", "u", "--", "-k", "-v", "-limit"}, pos: []string{"-k", "-v", "-limit"}, user: "u", limit: 1},
		{name: "later flag wins", args: []string{"--limit", "2", "p", "--limit", "3"}, pos: []string{"p"}, limit: 3},
		{name: "unknown flag after positional", args: []string{"k", "--nope"}, errSub: "unknown flag: --nope"},
		{name: "unknown single-dash flag", args: []string{"k", "-nope"}, errSub: "unknown shorthand flag: 'n' in -nope"},
		{name: "missing flag value", args: []string{"k", "--user"}, errSub: "flag needs an argument: --user"},
		{name: "bad flag value", args: []string{"--limit", "x", "k"}, errSub: `invalid argument "x" for "--limit" flag`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pos []string
			c := &cobra.Command{Use: "test", Args: cobra.ArbitraryArgs, SilenceErrors: true, SilenceUsage: true,
				RunE: func(_ *cobra.Command, args []string) error { pos = args; return nil }}
			user := c.Flags().String("user", "", "")
			limit := c.Flags().Int("limit", 1, "")
			c.SetOut(io.Discard)
			c.SetErr(io.Discard)
			c.SetArgs(longFlags(c, tc.args))
			err := c.Execute()
			if tc.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("parse = %q, %v; want an error containing %q", pos, err, tc.errSub)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !slices.Equal(pos, tc.pos) || *user != tc.user || *limit != tc.limit {
				t.Fatalf("got positionals %q user %q limit %d; want %q %q %d", pos, *user, *limit, tc.pos, tc.user, tc.limit)
			}
		})
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// pollUntil calls f until it returns nil or the deadline passes.
func pollUntil(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeAndKV runs a one-node cluster in process with `serve`, talks to
// it with `kv put|get|scan|del`, and shuts it down through the context.
func TestServeAndKV(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	grpcAddr, httpAddr, raftAddr, gossipAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	var serveOut, serveErr lockedBuffer
	serveCtx, stop := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var serveRunErr error // set before exited is closed
	go func() {
		defer close(exited)
		serveRunErr = run(serveCtx, []string{"serve",
			"--id", "t1", "--data-dir", dataDir,
			"--grpc-addr", grpcAddr, "--raft-addr", raftAddr, "--http-addr", httpAddr, "--gossip-addr", gossipAddr,
			"--shards", "2", "--gossip-profile", "local",
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--log-level", "warn",
		}, &serveOut, &serveErr)
	}()
	// Whatever happens, the node is stopped and joined before the data
	// dir is removed (cleanups run last in, first out).
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Error("serve did not return within 30s of its context ending")
		}
		if t.Failed() {
			t.Logf("serve stdout:\n%s\nserve stderr:\n%s", serveOut.String(), serveErr.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv := func(args ...string) (string, error) {
		stdout, _, err := runCmd(ctx, append([]string{"kv", args[0], "--endpoints", grpcAddr, "--user", "alice", "--timeout", "5s"}, args[1:]...)...)
		return stdout, err
	}

	pollUntil(t, 30*time.Second, "first put", func() error {
		select {
		case <-exited:
			t.Fatalf("serve returned early: %v", serveRunErr)
		default:
		}
		out, err := kv("put", "k", "v")
		if err == nil && out != "OK\n" {
			t.Fatalf("put printed %q, want OK", out)
		}
		return err
	})
	if out := serveOut.String(); !strings.Contains(out, "node t1 serving") || !strings.Contains(out, grpcAddr) || !strings.Contains(out, dataDir) {
		t.Errorf("serve printed %q, want the node, its grpc address and data dir", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "k"}, "v\n"},
		{[]string{"get", "k", "--stale"}, "v\n"},
		{[]string{"put", "k2", "--", "-v2"}, "OK\n"},
		{[]string{"put", "other", "w"}, "OK\n"},
		{[]string{"scan"}, "k\tv\nk2\t-v2\nother\tw\n"},
		{[]string{"scan", "k"}, "k\tv\nk2\t-v2\n"},
		{[]string{"scan", "--limit", "1"}, "k\tv\n... (more keys; raise --limit)\n"},
		{[]string{"del", "k"}, "deleted\n"},
		{[]string{"scan"}, "k2\t-v2\nother\tw\n"},
	} {
		if out, err := kv(tc.args...); err != nil || out != tc.want {
			t.Fatalf("kv %q = %v, %q; want %q", tc.args, err, out, tc.want)
		}
	}
	for _, args := range [][]string{{"get", "k"}, {"del", "k"}} {
		out, err := kv(args...)
		if !errors.Is(err, client.ErrNotFound) || out != "" {
			t.Fatalf("kv %q after del = %v, %q; want ErrNotFound", args, err, out)
		}
		if exitCode(err) != 1 {
			t.Fatalf("exitCode(%v) = %d, want 1", err, exitCode(err))
		}
	}
	// Another routing key sees none of alice's keys.
	if out, _, err := runCmd(ctx, "kv", "scan", "--endpoints", grpcAddr, "--user", "bob"); err != nil || out != "" {
		t.Fatalf("kv scan --user bob = %v, %q; want nothing", err, out)
	}

	checkStoreCLI(ctx, t, grpcAddr)
	checkLeaseCLI(ctx, t, grpcAddr)
	checkBench(ctx, t, grpcAddr)
	checkAdminCLI(ctx, t, httpAddr)
	checkShardsCLI(ctx, t, httpAddr)
	checkBackupCLI(ctx, t, httpAddr)

	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatalf("readyz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ready\n" {
		t.Fatalf("readyz: %d %q", resp.StatusCode, body)
	}

	stop()
	select {
	case <-exited:
		if serveRunErr != nil {
			t.Fatalf("serve after cancel: %v, want a clean shutdown", serveRunErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30s of its context ending")
	}
	if out := serveOut.String(); !strings.HasSuffix(out, "swarmnode: shutting down\n") {
		t.Errorf("serve printed %q, want it to end with the shutdown line", out)
	}
	// The node is gone: its gRPC port refuses.
	if c, err := net.DialTimeout("tcp", grpcAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("gRPC address %s still accepts connections after shutdown", grpcAddr)
	}
}

// checkAdminCLI runs the operator commands against the one-node cluster.
func checkAdminCLI(ctx context.Context, t *testing.T, httpAddr string) {
	t.Helper()
	admin := func(args ...string) (string, error) {
		out, _, err := runCmd(ctx, append(args, "--admin", httpAddr)...)
		return out, err
	}
	out, err := admin("members")
	if err != nil || !strings.Contains(out, "NODE") || !regexp.MustCompile(fmt.Sprintf(`t1\s+active\s+alive\s+%[1]d\s+1\.\.%[1]d\s+-\s+\S+\s+2\s+2\s+leader`, cluster.ProtocolVersion)).MatchString(out) {
		t.Fatalf("members = %v\n%s", err, out)
	}
	out, err = admin("members", "--json")
	var ms []cluster.MemberInfo
	if err != nil || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 1 || ms[0].ID != "t1" || ms[0].Replicas != 2 || !ms[0].MetaLeader {
		t.Fatalf("members --json = %v, %s", err, out)
	}
	out, err = admin("status")
	if err != nil || !strings.Contains(out, fmt.Sprintf("1 members  2 shards (3 of 3 groups settled)  replication factor 3  protocol version %d\n", cluster.ProtocolVersion)) || !strings.Contains(out, "t1:voter:0") {
		t.Fatalf("status = %v\n%s", err, out)
	}
	var st cluster.ClusterStatus
	if out, err = admin("status", "--json"); err != nil || json.Unmarshal([]byte(out), &st) != nil || len(st.Shards) != 3 || st.Shards[1].Leader != "t1" ||
		st.ProtocolVersion != cluster.ProtocolVersion || st.Protocol.Target != cluster.ProtocolVersion {
		t.Fatalf("status --json = %v, %s", err, out)
	}
	if out, err = admin("snapshot", "0"); err != nil || !strings.HasPrefix(out, "t1: snapshot at index ") {
		t.Fatalf("snapshot 0 = %v, %q", err, out)
	}
	if out, err = admin("transfer-leader", "1", "t1"); err != nil || out != "shard 1: leader t1\n" {
		t.Fatalf("transfer-leader to the leader itself = %v, %q", err, out)
	}
	// Refusals: clear errors, exit 1, nothing changed.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"remove", "t1"}, "last active member"},
		{[]string{"remove", "ghost"}, "not a member"},
		{[]string{"join", "ghost"}, "not alive in gossip"},
		{[]string{"snapshot", "9"}, `no shard "9"`},
		{[]string{"transfer-leader", "0", "ghost"}, "not a voter"},
	} {
		out, err := admin(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != 1 {
			t.Errorf("%q = %v, %q; want an error containing %q", tc.args, err, out, tc.want)
		}
	}
	if _, err := admin("join"); exitCode(err) != 2 {
		t.Errorf("join without a node id: %v, want a usage error", err)
	}
	if out, err = admin("members", "--json"); err != nil || !strings.Contains(out, `"status": "active"`) {
		t.Fatalf("after refusals: %v %s", err, out)
	}
}

// checkLeaseCLI grants a lease, attaches a key to it with kv put --lease,
// inspects, renews, lists and revokes it through swarmnode lease.
func checkLeaseCLI(ctx context.Context, t *testing.T, grpcAddr string) {
	t.Helper()
	lease := func(args ...string) (string, error) {
		stdout, _, err := runCmd(ctx, append([]string{"lease", args[0], "--endpoints", grpcAddr, "--timeout", "5s"}, args[1:]...)...)
		return stdout, err
	}
	out, err := lease("grant", "--user", "carol", "--ttl", "30s")
	var id string
	if _, scanErr := fmt.Sscanf(out, "lease %s granted", &id); err != nil || scanErr != nil || !strings.Contains(out, `for "carol" with TTL 30s`) {
		t.Fatalf("lease grant = %v, %q", err, out)
	}
	if out, _, err := runCmd(ctx, "kv", "put", "--endpoints", grpcAddr, "--user", "carol", "--lease", id, "presence", "online"); err != nil || out != "OK\n" {
		t.Fatalf("kv put --lease = %v, %q", err, out)
	}
	if out, err := lease("ttl", id, "--keys"); err != nil || !strings.Contains(out, `of "carol": TTL 30s, remaining `) || !strings.Contains(out, "1 keys\n  kv\tcarol/presence\n") {
		t.Fatalf("lease ttl --keys = %v, %q", err, out)
	}
	if out, err := lease("keepalive", id, "--once"); err != nil || out != "lease "+id+" kept alive, TTL 30s\n" {
		t.Fatalf("lease keepalive --once = %v, %q", err, out)
	}
	if out, err := lease("list"); err != nil || !strings.Contains(out, "ID") || !strings.Contains(out, id+"  carol") {
		t.Fatalf("lease list = %v, %q", err, out)
	}
	if out, err := lease("list", "--json"); err != nil || !strings.Contains(out, `"id":"`+id+`","routing_key":"carol","ttl_ms":30000`) {
		t.Fatalf("lease list --json = %v, %q", err, out)
	}
	if out, err := lease("revoke", id); err != nil || out != "lease "+id+" revoked, 1 keys deleted\n" {
		t.Fatalf("lease revoke = %v, %q", err, out)
	}
	if _, _, err := runCmd(ctx, "kv", "get", "--endpoints", grpcAddr, "--user", "carol", "presence"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("kv get after the revoke: %v", err)
	}
	if _, err := lease("ttl", id); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("lease ttl after the revoke: %v", err)
	}
	if _, err := lease("grant", "--user", "carol", "--ttl", "1ms"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("lease grant --ttl 1ms: %v", err)
	}
}

// checkStoreCLI writes registry and billing records through the client and
// reads them back through `swarmnode registry` and `swarmnode billing`.
func checkStoreCLI(ctx context.Context, t *testing.T, grpcAddr string) {
	t.Helper()
	c, err := client.New(ctx, client.Config{Endpoints: []string{grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var user keys.UserID
	var agent keys.AgentID
	var acct keys.AccountID
	user[0], agent[0], acct[0] = 0xaa, 0xbb, 0xcc
	now := time.Now().UnixMilli()
	if err := c.Registry().PutAgent(ctx, &records.AgentRecord{AgentID: agent, UserID: user, Name: "scout",
		Status: records.AgentRunning, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := c.Billing().PutAccount(ctx, &records.Account{UserID: acct, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	tx := &records.CreditTransaction{TransactionID: client.NewTransactionID(time.Now()), UserID: acct,
		AmountCents: 500, TransactionType: records.TxPurchase, CreatedAt: now, Description: "first"}
	if _, err := c.Billing().AddCredits(ctx, acct, 500, tx); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, _, err := runCmd(ctx, append(args, "--endpoints", grpcAddr)...)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return out
	}
	hexUser, hexAgent, hexAcct := hex.EncodeToString(user[:]), hex.EncodeToString(agent[:]), hex.EncodeToString(acct[:])
	for _, tc := range []struct {
		args []string
		want []string // substrings of the output
	}{
		{[]string{"registry", "agents", hexUser}, []string{"AGENT", hexAgent, "scout", "running"}},
		{[]string{"registry", "agent", hexAgent}, []string{hexUser, "scout"}},
		{[]string{"registry", "status", "running"}, []string{hexAgent}},
		{[]string{"registry", "all", "--json"}, []string{`"agent_id": "` + hexAgent + `"`, `"name": "scout"`}},
		{[]string{"billing", "account", hexAcct}, []string{"BALANCE", "500"}},
		{[]string{"billing", "transactions", hexAcct}, []string{"purchase", "500", "first"}},
		{[]string{"billing", "transaction", ulid.ULID(tx.TransactionID).String()}, []string{"purchase", "first"}},
		{[]string{"billing", "account", hexAcct, "--json"}, []string{`"balance_cents": 500`}},
	} {
		out := cli(tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q printed %q, want it to contain %q", tc.args, out, w)
			}
		}
	}
	if _, _, err := runCmd(ctx, "registry", "agent", "00", "--endpoints", grpcAddr); exitCode(err) != 2 {
		t.Errorf("registry agent with a short id: %v, want a usage error", err)
	}
	var missing keys.AgentID
	missing[0] = 0x01
	if _, _, err := runCmd(ctx, "registry", "agent", hex.EncodeToString(missing[:]), "--endpoints", grpcAddr); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("registry agent of an unknown id: %v, want ErrNotFound", err)
	}
}

// checkBench runs each bench workload briefly and checks its JSON report.
func checkBench(ctx context.Context, t *testing.T, grpcAddr string) {
	t.Helper()
	for _, w := range []string{"put", "get", "mixed", "ledger"} {
		out, _, err := runCmd(ctx, "bench", w, "--endpoints", grpcAddr, "--total", "200", "--clients", "8", "--conns", "2",
			"--key-space", "50", "--accounts", "20", "--progress=false", "--json")
		if err != nil {
			t.Fatalf("bench %s: %v", w, err)
		}
		var res BenchResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bench %s printed %q: %v", w, out, err)
		}
		if res.Ops != 200 || res.Errors != 0 || res.Throughput <= 0 || res.P50Ms <= 0 || res.P99Ms < res.P50Ms {
			t.Errorf("bench %s: %+v", w, res)
		}
	}
	// lease-keepalive: 200 keep-alives of 20 leases, on the shared stream
	// and as calls.
	for _, call := range []string{"stream", "once"} {
		out, _, err := runCmd(ctx, "bench", "lease-keepalive", "--endpoints", grpcAddr, "--total", "200", "--clients", "8", "--conns", "2",
			"--leases", "20", "--lease-ttl", "10s", "--keepalive-call", call, "--progress=false", "--json")
		var res BenchResult
		if err != nil || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("bench lease-keepalive --keepalive-call %s: %v, %q", call, err, out)
		}
		if res.Ops != 200 || res.Errors != 0 || res.Leases != 20 || res.P99Ms <= 0 {
			t.Errorf("bench lease-keepalive --keepalive-call %s: %+v", call, res)
		}
	}
	// watch: 4 watchers over 2 routing keys each see every put of theirs,
	// exactly once: 2 events a put.
	out, _, err := runCmd(ctx, "bench", "watch", "--endpoints", grpcAddr, "--total", "200", "--clients", "8", "--conns", "2",
		"--watchers", "4", "--routing-keys", "2", "--key-space", "50", "--progress=false", "--json")
	var wres BenchResult
	if err != nil || json.Unmarshal([]byte(out), &wres) != nil {
		t.Fatalf("bench watch: %v, %q", err, out)
	}
	if wres.Ops != 200 || wres.Errors != 0 || wres.Watchers != 4 || wres.EventsExpected != 400 || wres.Events != 400 ||
		wres.EventsPerSec <= 0 || wres.EventP99Ms <= 0 || wres.FirstError != "" {
		t.Errorf("bench watch: %+v", wres)
	}
	// Flags may come before the workload.
	out, _, err = runCmd(ctx, "bench", "--endpoints", grpcAddr, "--total", "50", "--clients", "2", "--conns", "1",
		"--key-space", "50", "--progress=false", "--json", "put")
	var res BenchResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Workload != "put" || res.Ops != 50 {
		t.Errorf("bench with the workload after the flags: %v, %q", err, out)
	}
	if _, _, err := runCmd(ctx, "bench", "nope", "--endpoints", grpcAddr); exitCode(err) != 2 {
		t.Errorf("bench with an unknown workload: %v, want a usage error", err)
	}
}
