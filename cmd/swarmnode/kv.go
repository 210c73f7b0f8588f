package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

const kvUsage = `Usage:
  swarmnode kv put  [flags] KEY VALUE
  swarmnode kv get  [flags] KEY
  swarmnode kv del  [flags] KEY
  swarmnode kv scan [flags] [PREFIX]

Flags:
`

// parseInterleaved parses flags that may come before or after the
// positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			// "--" ends the flags: everything after it is positional.
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseVerb parses the command line of a command with verbs (swarmnode kv
// get ..., swarmnode token create ...): the flags may come before or after
// the verb, which is the first positional argument, and -h anywhere asks
// for the usage (flag.ErrHelp). Every error is a usageError; without a
// verb it prints the usage and the error says missing.
func parseVerb(fs *flag.FlagSet, args []string, missing string) (verb string, pos []string, err error) {
	pos, err = parseInterleaved(fs, args)
	if err != nil {
		return "", nil, usageError{err}
	}
	if len(pos) == 0 {
		fs.Usage()
		return "", nil, usageError{errors.New(missing)}
	}
	return pos[0], pos[1:], nil
}

func kv(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, kvUsage); fs.PrintDefaults() }
	endpoints := fs.String("endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of nodes")
	user := fs.String("user", "", "routing key (the user id) the key belongs to (required)")
	stale := fs.Bool("stale", false, "read from any replica (may lag the leader)")
	limit := fs.Int("limit", 100, "scan: at most this many keys")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	conn := addConnFlags(fs)
	verb, pos, err := parseVerb(fs, args, "kv: missing verb")
	if err != nil {
		return err
	}
	want := map[string][2]int{"put": {2, 2}, "get": {1, 1}, "del": {1, 1}, "scan": {0, 1}}[verb]
	if want == [2]int{} {
		fs.Usage()
		return usageError{fmt.Errorf("kv: unknown verb %q", verb)}
	}
	if len(pos) < want[0] || len(pos) > want[1] {
		fs.Usage()
		return usageError{fmt.Errorf("kv %s: got %d arguments", verb, len(pos))}
	}
	if *user == "" {
		return usageError{errors.New("kv: --user is required")}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ccfg, err := conn.clientConfig(*endpoints)
	if err != nil {
		return err
	}
	c, err := client.New(ctx, ccfg)
	if err != nil {
		return err
	}
	defer c.Close()
	var opts []client.ReadOption
	if *stale {
		opts = append(opts, client.Stale())
	}
	rk := []byte(*user)
	switch verb {
	case "put":
		if err := c.Put(ctx, rk, []byte(pos[0]), []byte(pos[1])); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "OK")
	case "get":
		v, err := c.Get(ctx, rk, []byte(pos[0]), opts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", v)
	case "del":
		existed, err := c.Delete(ctx, rk, []byte(pos[0]))
		if err != nil {
			return err
		}
		if !existed {
			return client.ErrNotFound
		}
		fmt.Fprintln(stdout, "deleted")
	case "scan":
		var prefix []byte
		if len(pos) == 1 {
			prefix = []byte(pos[0])
		}
		items, more, err := c.Scan(ctx, rk, prefix, nil, *limit, opts...)
		if err != nil {
			return err
		}
		for _, it := range items {
			fmt.Fprintf(stdout, "%s\t%s\n", it.Key, it.Value)
		}
		if more {
			fmt.Fprintln(stdout, "... (more keys; raise --limit)")
		}
	}
	return nil
}
