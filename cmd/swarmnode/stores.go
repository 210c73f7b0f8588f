package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// storeFlags are the flags every registry/billing command takes.
type storeFlags struct {
	endpoints     string
	asJSON, stale bool
	timeout       time.Duration
	limit, offset int
	conn          *connFlags
}

// storeGroup is registry's or billing's command: run gets the flags.
func storeGroup(name, short string, verbs []verb, run func(context.Context, *storeFlags, string, []string, io.Writer) error) *cobra.Command {
	f := &storeFlags{}
	g := group(name, short, "", "command", "command", verbs, func(ctx context.Context, verb string, pos []string, stdout, _ io.Writer) error {
		return run(ctx, f, verb, pos, stdout)
	})
	fs := g.PersistentFlags()
	fs.StringVar(&f.endpoints, "endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of nodes")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	fs.BoolVar(&f.stale, "stale", false, "read from any replica (may lag the leader)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
	fs.IntVar(&f.limit, "limit", 50, "transactions: page size")
	fs.IntVar(&f.offset, "offset", 0, "transactions: skip this many newest")
	f.conn = addConnFlags(fs)
	return g
}

// connect bounds ctx by --timeout and connects; done closes both.
func (f *storeFlags) connect(ctx context.Context) (context.Context, *client.Client, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	ccfg, err := f.conn.clientConfig(f.endpoints)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	c, err := client.New(ctx, ccfg)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, c, func() { c.Close(); cancel() }, nil
}

func (f *storeFlags) readOpts() []client.ReadOption {
	if f.stale {
		return []client.ReadOption{client.Stale()}
	}
	return nil
}

func hexID(s string, dst []byte, what string) error {
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(dst) {
		return usageError{fmt.Errorf("%s %q: want %d hex digits", what, s, 2*len(dst))}
	}
	copy(dst, b)
	return nil
}

func newRegistryCmd() *cobra.Command {
	return storeGroup("registry", "inspect agents, sessions and users", []verb{
		{"agents USER_ID", "agents of a user (user id: 64 hex digits)", 1, 1},
		{"agent AGENT_ID", "one agent, found by its id alone", 1, 1},
		{"status STATE", "agents in a state (pending, provisioning, running, stopping, stopped, failed)", 1, 1},
		{"all", "every agent", 0, 0},
		{"sessions AGENT_ID", "sessions of an agent", 1, 1},
		{"session SESSION_ID", "one session (32 hex digits)", 1, 1},
		{"user USER_ID", "a cached user", 1, 1},
	}, registry)
}

func registry(ctx context.Context, f *storeFlags, verb string, pos []string, stdout io.Writer) error {
	var err error
	var user keys.UserID
	var agent keys.AgentID
	var session keys.SessionID
	var state records.AgentState
	switch verb {
	case "agents", "user":
		err = hexID(pos[0], user[:], "user id")
	case "agent", "sessions":
		err = hexID(pos[0], agent[:], "agent id")
	case "session":
		err = hexID(pos[0], session[:], "session id")
	case "status":
		if state, err = records.ParseAgentState(pos[0]); err != nil {
			err = usageError{err}
		}
	}
	if err != nil {
		return err
	}
	ctx, c, done, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	r := c.Registry()
	var out any
	switch verb {
	case "agents":
		out, err = r.ListAgentsByUser(ctx, user)
	case "agent":
		var a *records.AgentRecord
		a, err = r.GetAgent(ctx, agent)
		out = []*records.AgentRecord{a}
	case "status":
		out, err = r.ListAgentsByStatus(ctx, state)
	case "all":
		out, err = r.ListAllAgents(ctx)
	case "sessions":
		out, err = r.ListSessionsByAgent(ctx, agent)
	case "session":
		var s *records.SessionRecord
		s, err = r.GetSession(ctx, session)
		out = []*records.SessionRecord{s}
	case "user":
		var u *records.UserRecord
		u, err = r.GetUser(ctx, user)
		out = []*records.UserRecord{u}
	}
	if err != nil {
		return err
	}
	return printRecords(stdout, out, f.asJSON)
}

func parseAccountID(s string) (keys.AccountID, error) {
	var id keys.AccountID
	return id, hexID(s, id[:], "user id")
}

func parseTransactionID(s string) (keys.TransactionID, error) {
	if u, err := ulid.ParseStrict(s); err == nil {
		return keys.TransactionID(u), nil
	}
	var id keys.TransactionID
	if err := hexID(s, id[:], "transaction id"); err != nil {
		return id, usageError{fmt.Errorf("transaction id %q: want a ULID or 32 hex digits", s)}
	}
	return id, nil
}

func newBillingCmd() *cobra.Command {
	return storeGroup("billing", "inspect accounts, transactions and usage events", []verb{
		{"account USER_ID", "an account (UUID or 32 hex digits)", 1, 1},
		{"transactions USER_ID", "a user's transactions, newest first", 1, 1},
		{"transaction TX_ID", "one transaction (ULID or 32 hex digits)", 1, 1},
		{"event EVENT_ID", "one usage event", 1, 1},
	}, billing)
}

func billing(ctx context.Context, f *storeFlags, verb string, pos []string, stdout io.Writer) error {
	var err error
	var user keys.AccountID
	var txID keys.TransactionID
	switch verb {
	case "account", "transactions":
		user, err = parseAccountID(pos[0])
	case "transaction":
		txID, err = parseTransactionID(pos[0])
	}
	if err != nil {
		return err
	}
	ctx, c, done, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	b := c.Billing()
	var out any
	switch verb {
	case "account":
		var a *records.Account
		a, err = b.GetAccount(ctx, user)
		out = []*records.Account{a}
	case "transactions":
		out, err = b.ListTransactionsByUser(ctx, user, f.limit, f.offset)
	case "transaction":
		var t *records.CreditTransaction
		t, err = b.GetTransaction(ctx, txID)
		out = []*records.CreditTransaction{t}
	case "event":
		var e *records.UsageEvent
		e, err = b.GetUsageEvent(ctx, pos[0])
		out = []*records.UsageEvent{e}
	}
	if err != nil {
		return err
	}
	return printRecords(stdout, out, f.asJSON)
}

func ms(t int64) string { return time.UnixMilli(t).UTC().Format(time.RFC3339) }

func optMs(t *int64) string {
	if t == nil {
		return "-"
	}
	return ms(*t)
}

// printRecords prints a slice of records as a table or as JSON.
func printRecords(w io.Writer, v any, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	switch rs := v.(type) {
	case []*records.AgentRecord:
		fmt.Fprintln(tw, "AGENT\tUSER\tNAME\tSTATUS\tCPU(m)\tMEM(MB)\tRUNTIME\tUPDATED\tHEARTBEAT")
		for _, a := range rs {
			fmt.Fprintf(tw, "%x\t%x\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", a.AgentID, a.UserID, a.Name, a.Status,
				a.Spec.CPUMillicores, a.Spec.MemoryMB, a.Spec.RuntimeVersion, ms(a.UpdatedAt), optMs(a.LastHeartbeatAt))
		}
	case []*records.SessionRecord:
		fmt.Fprintln(tw, "SESSION\tAGENT\tUSER\tSTATUS\tCREATED\tCLOSED")
		for _, s := range rs {
			fmt.Fprintf(tw, "%x\t%x\t%x\t%s\t%s\t%s\n", s.SessionID, s.AgentID, s.UserID, s.Status, ms(s.CreatedAt), optMs(s.ClosedAt))
		}
	case []*records.UserRecord:
		fmt.Fprintln(tw, "USER\tEMAIL\tCREATED\tLAST SEEN")
		for _, u := range rs {
			fmt.Fprintf(tw, "%x\t%s\t%s\t%s\n", u.UserID, u.Email, ms(u.CreatedAt), ms(u.LastSeenAt))
		}
	case []*records.Account:
		fmt.Fprintln(tw, "USER\tBALANCE(c)\tLIFETIME CREDITS(c)\tLIFETIME USAGE(c)\tUPDATED")
		for _, a := range rs {
			fmt.Fprintf(tw, "%x\t%d\t%d\t%d\t%s\n", a.UserID, a.BalanceCents, a.LifetimeCreditsCents, a.LifetimeUsageCents, ms(a.UpdatedAt))
		}
	case []*records.CreditTransaction:
		fmt.Fprintln(tw, "TRANSACTION\tTYPE\tAMOUNT(c)\tBALANCE AFTER(c)\tEVENT\tCREATED\tDESCRIPTION")
		for _, t := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", ulid.ULID(t.TransactionID), t.TransactionType, t.AmountCents,
				t.BalanceAfterCents, t.EventID, ms(t.CreatedAt), t.Description)
		}
	case []*records.UsageEvent:
		fmt.Fprintln(tw, "EVENT\tUSER\tAGENT\tRESOURCE\tQUANTITY\tCOST(c)\tCREATED")
		for _, e := range rs {
			fmt.Fprintf(tw, "%s\t%x\t%s\t%s\t%d\t%d\t%s\n", e.EventID, e.UserID, e.AgentID, e.Resource, e.Quantity, e.CostCents, ms(e.CreatedAt))
		}
	default:
		return errors.New("internal: unprintable records")
	}
	return tw.Flush()
}
