package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/client"
)

// leaseFlags are lease's flags.
type leaseFlags struct {
	endpoints, user string
	ttl, timeout    time.Duration
	once, keys      bool
	asJSON          bool
	conn            *connFlags
}

func newLeaseCmd() *cobra.Command {
	f := &leaseFlags{}
	g := group("lease", "leases: grant, keep alive, revoke, inspect and list", `A lease lives in the slot of the routing key it is granted for (--user); keys
written with "kv put --lease ID" under that routing key end with it. A lease
not kept alive expires within its TTL plus the shard leader's bound
(docs/architecture.md, "Leases"). Lease ids print as 16 hex digits.
With --auth a lease belongs to the token or certificate that granted it:
another one's revoke, keepalive and ttl are refused (permission denied,
"belongs to another identity") unless it is an admin, and ending a lease
or listing its keys needs the roles of their keyspaces
(docs/security.md, "Lease owners").`, "verb", "verb", []verb{
		{"grant", "grant a lease of --ttl for --user; prints its id", 0, 0},
		{"keepalive ID", "keep a lease alive until interrupted (--once: renew once)", 1, 1},
		{"revoke ID", "end a lease now: its keys are deleted", 1, 1},
		{"ttl ID", "a lease's TTL, time left and attached keys (--keys lists them)", 1, 1},
		{"list", "the leases of the cluster (with --auth: the caller's and those without an owner)", 0, 0},
	}, f.run)
	fs := g.PersistentFlags()
	fs.StringVar(&f.endpoints, "endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of nodes")
	fs.StringVar(&f.user, "user", "", "grant: the routing key (the user id) the lease is for (required)")
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "grant: the lease's TTL, 2s..24h")
	fs.BoolVar(&f.once, "once", false, "keepalive: renew once and exit")
	fs.BoolVar(&f.keys, "keys", false, "ttl: list the attached keys")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long (keepalive: per renewal)")
	f.conn = addConnFlags(fs)
	return g
}

// leaseJSON is a lease as --json prints it.
type leaseJSON struct {
	ID          string    `json:"id"`
	RoutingKey  string    `json:"routing_key,omitempty"`
	TTLMs       int64     `json:"ttl_ms,omitempty"`
	RemainingMs int64     `json:"remaining_ms,omitempty"`
	GrantedAt   int64     `json:"granted_at,omitempty"`
	KeyCount    *int      `json:"key_count,omitempty"`
	Keys        []keyJSON `json:"keys,omitempty"`
	Deleted     *int      `json:"deleted,omitempty"`
}

type keyJSON struct {
	Kind       string `json:"kind"`
	RoutingKey string `json:"routing_key,omitempty"`
	Key        string `json:"key"`
}

func leaseOut(l *client.LeaseInfo) leaseJSON {
	return leaseJSON{ID: l.ID.String(), RoutingKey: string(l.RoutingKey), TTLMs: l.TTL.Milliseconds(),
		RemainingMs: l.Remaining.Milliseconds(), GrantedAt: l.GrantedAt.UnixMilli()}
}

// attachedText is an attached key as the CLI prints it: kv keys as
// routing_key/key, runners by id, agents as user_id/agent_id in hex.
func attachedText(k client.AttachedKey) (kind, text string) {
	switch k.Kind {
	case "kv":
		return k.Kind, fmt.Sprintf("%s/%s", k.RoutingKey, k.Key)
	case "runner":
		return k.Kind, string(k.Key)
	}
	return k.Kind, fmt.Sprintf("%x/%x", k.RoutingKey, k.Key)
}

func (f *leaseFlags) run(ctx context.Context, verb string, pos []string, stdout, stderr io.Writer) error {
	var id client.LeaseID
	if len(pos) == 1 {
		var err error
		if id, err = client.ParseLeaseID(pos[0]); err != nil {
			return usageError{err}
		}
	}
	if verb == "grant" && f.user == "" {
		return usageError{errors.New("lease grant: --user is required")}
	}
	ccfg, err := f.conn.clientConfig(f.endpoints)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := client.New(cctx, ccfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ls := c.Leases()
	print := func(v any, text string, args ...any) error {
		if f.asJSON {
			return json.NewEncoder(stdout).Encode(v)
		}
		_, err := fmt.Fprintf(stdout, text+"\n", args...)
		return err
	}
	switch verb {
	case "grant":
		id, err := ls.Grant(cctx, []byte(f.user), f.ttl)
		if err != nil {
			return err
		}
		return print(leaseJSON{ID: id.String(), RoutingKey: f.user, TTLMs: f.ttl.Milliseconds()}, "lease %s granted for %q with TTL %v", id, f.user, f.ttl)
	case "revoke":
		n, err := ls.Revoke(cctx, id)
		if err != nil {
			return err
		}
		return print(leaseJSON{ID: id.String(), Deleted: &n}, "lease %s revoked, %d keys deleted", id, n)
	case "ttl":
		info, err := ls.TimeToLive(cctx, id, f.keys)
		if err != nil {
			return err
		}
		if f.asJSON {
			out := leaseOut(info)
			out.KeyCount = &info.KeyCount
			for _, k := range info.Keys {
				kind, text := attachedText(k)
				out.Keys = append(out.Keys, keyJSON{Kind: kind, Key: text})
			}
			return json.NewEncoder(stdout).Encode(out)
		}
		fmt.Fprintf(stdout, "lease %s of %q: TTL %v, remaining %v, %d keys\n", id, info.RoutingKey, info.TTL, info.Remaining, info.KeyCount)
		for _, k := range info.Keys {
			kind, text := attachedText(k)
			fmt.Fprintf(stdout, "  %s\t%s\n", kind, text)
		}
		return nil
	case "list":
		all, err := ls.List(cctx)
		if err != nil {
			return err
		}
		if f.asJSON {
			out := make([]leaseJSON, 0, len(all))
			for i := range all {
				out = append(out, leaseOut(&all[i]))
			}
			return json.NewEncoder(stdout).Encode(out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tROUTING KEY\tTTL\tREMAINING")
		for _, l := range all {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%v\n", l.ID, l.RoutingKey, l.TTL, l.Remaining)
		}
		return tw.Flush()
	case "keepalive":
		if f.once {
			ttl, err := ls.KeepAliveOnce(cctx, id)
			if err != nil {
				return err
			}
			return print(leaseJSON{ID: id.String(), TTLMs: ttl.Milliseconds()}, "lease %s kept alive, TTL %v", id, ttl)
		}
		return f.keepAlive(ctx, cctx, ls, id, stdout, print)
	}
	return nil
}

// keepAlive renews lease id in the background until ctx ends (Ctrl-C),
// printing each renewal; it fails when the lease ends or is lost.
func (f *leaseFlags) keepAlive(ctx, first context.Context, ls *client.Leases, id client.LeaseID, stdout io.Writer, print func(any, string, ...any) error) error {
	ka, err := ls.KeepAlive(first, id)
	if err != nil {
		return err
	}
	defer ka.Stop()
	var last time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ttl, renewed := ka.TTL(); renewed != last {
			last = renewed
			if err := print(leaseJSON{ID: id.String(), TTLMs: ttl.Milliseconds()}, "lease %s kept alive, TTL %v", id, ttl); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ka.Done():
			return ka.Err()
		case <-tick.C:
		}
	}
}
