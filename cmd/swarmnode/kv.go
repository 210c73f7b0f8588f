package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/client"
)

// kvFlags are kv's flags.
type kvFlags struct {
	endpoints, user string
	lease           string
	stale           bool
	limit           int
	timeout         time.Duration
	conn            *connFlags
}

func newKVCmd() *cobra.Command {
	f := &kvFlags{}
	g := group("kv", "debug client: put, get, delete and scan a user's keys", "", "verb", "verb", []verb{
		{"put KEY VALUE", "write a key", 2, 2},
		{"get KEY", "read a key", 1, 1},
		{"del KEY", "delete a key", 1, 1},
		{"scan [PREFIX]", "list a user's keys (with a prefix)", 0, 1},
	}, f.run)
	fs := g.PersistentFlags()
	fs.StringVar(&f.endpoints, "endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of nodes")
	fs.StringVar(&f.user, "user", "", "routing key (the user id) the key belongs to (required)")
	fs.StringVar(&f.lease, "lease", "", "put: attach the key to this lease (an id from swarmnode lease grant for the same --user)")
	fs.BoolVar(&f.stale, "stale", false, "read from any replica (may lag the leader)")
	fs.IntVar(&f.limit, "limit", 100, "scan: at most this many keys")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long")
	f.conn = addConnFlags(fs)
	return g
}

func (f *kvFlags) run(ctx context.Context, verb string, pos []string, stdout, _ io.Writer) error {
	if f.user == "" {
		return usageError{errors.New("kv: --user is required")}
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ccfg, err := f.conn.clientConfig(f.endpoints)
	if err != nil {
		return err
	}
	c, err := client.New(ctx, ccfg)
	if err != nil {
		return err
	}
	defer c.Close()
	var opts []client.ReadOption
	if f.stale {
		opts = append(opts, client.Stale())
	}
	rk := []byte(f.user)
	switch verb {
	case "put":
		var wopts []client.WriteOption
		if f.lease != "" {
			id, err := client.ParseLeaseID(f.lease)
			if err != nil {
				return usageError{err}
			}
			wopts = append(wopts, client.WithLease(id))
		}
		if err := c.Put(ctx, rk, []byte(pos[0]), []byte(pos[1]), wopts...); err != nil {
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
		items, more, err := c.Scan(ctx, rk, prefix, nil, f.limit, opts...)
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
