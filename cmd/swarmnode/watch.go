package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/records"
)

// watchFlags are watch's flags.
type watchFlags struct {
	endpoints, user, table string
	from                   uint64
	list, json, follower   bool
	progress               time.Duration
	conn                   *connFlags
}

func newWatchCmd() *cobra.Command {
	f := &watchFlags{}
	cmd := &cobra.Command{
		Use:   "watch --user U [PREFIX]",
		Short: "print the changes of a user's keys (or a pools table) as they are committed",
		Long: `watch follows the committed changes of the user's kv keys (those that start
with PREFIX), or of a pools table (--table pools|bots|runners), and prints
one line per change: the revision, put or delete, the key and the value
(for a pools table, the record as JSON; a bot's sealed token left out).
It reconnects and resumes after the last revision by itself; it stops on
Ctrl-C. Without --from it starts at the shard's current revision.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd.Context(), args, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.endpoints, "endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of nodes")
	fs.StringVar(&f.user, "user", "", "routing key (the user id) whose keys to watch (required for the kv table)")
	fs.StringVar(&f.table, "table", "kv", "table: kv, pools, bots or runners")
	fs.Uint64Var(&f.from, "from", 0, "print the changes after this revision (0: from now)")
	fs.BoolVar(&f.list, "list", false, "print the current keys first (list, then watch)")
	fs.BoolVar(&f.json, "json", false, "one JSON object per line")
	fs.BoolVar(&f.follower, "any-replica", false, "let a follower serve the watch")
	fs.DurationVar(&f.progress, "progress", 0, "print a progress line when idle this long (0: never)")
	f.conn = addConnFlags(fs)
	return cmd
}

// watchLine is a --json line: Value for the kv table, Record (the
// decoded record) for a pools table.
type watchLine struct {
	Revision uint64          `json:"revision"`
	Type     string          `json:"type"`
	Key      string          `json:"key,omitempty"`
	Value    string          `json:"value,omitempty"`
	Record   json.RawMessage `json:"record,omitempty"`
}

// recordJSON decodes a pools table's stored value into its record and
// returns it as JSON (a bot without its sealed token).
func recordJSON(table client.WatchTable, value []byte) (json.RawMessage, error) {
	var rec any
	var err error
	switch table {
	case client.TablePools:
		p := new(records.Pool)
		err, rec = records.Decode(value, p), p
	case client.TableBots:
		b := new(records.Bot)
		err = records.Decode(value, b)
		b.Token = records.EncryptedToken{}
		rec = b
	case client.TableRunners:
		r := new(records.Runner)
		err, rec = records.Decode(value, r), r
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("watch: undecodable %s record: %w", table, err)
	}
	return json.Marshal(rec)
}

func (f *watchFlags) run(ctx context.Context, args []string, stdout io.Writer) error {
	tables := map[string]client.WatchTable{"kv": client.TableKV, "pools": client.TablePools, "bots": client.TableBots, "runners": client.TableRunners}
	table, ok := tables[f.table]
	if !ok {
		return usageError{fmt.Errorf("watch: --table %q: want kv, pools, bots or runners", f.table)}
	}
	if table == client.TableKV && f.user == "" {
		return usageError{errors.New("watch: --user is required")}
	}
	if table != client.TableKV && len(args) > 0 {
		return usageError{errors.New("watch: PREFIX is for the kv table only")}
	}
	if f.list && f.from != 0 {
		return usageError{errors.New("watch: --list starts at the listing: no --from")}
	}
	ccfg, err := f.conn.clientConfig(f.endpoints)
	if err != nil {
		return err
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.New(nctx, ccfg)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	rk := []byte(f.user)
	opts := []client.WatchOption{client.WithTable(table)}
	if len(args) == 1 {
		opts = append(opts, client.WithPrefix([]byte(args[0])))
	}
	if f.follower {
		opts = append(opts, client.WithAnyReplica())
	}
	progress := f.progress > 0
	if progress {
		opts = append(opts, client.WithProgress(f.progress))
	} else {
		opts = append(opts, client.WithProgress(time.Second)) // for --from 0 below
	}
	var ch <-chan client.WatchResponse
	switch {
	case f.list:
		ch = c.ListWatch(ctx, rk, opts...)
	case f.from > 0:
		ch = c.Watch(ctx, rk, append(opts, client.WithAfter(f.from))...)
	default:
		// From now: the shard's current revision, which a listing
		// gives without printing it.
		ch = c.ListWatch(ctx, rk, opts...)
	}
	quietList := !f.list && f.from == 0
	enc := json.NewEncoder(stdout)
	print := func(rev uint64, typ string, key, value []byte) {
		if rec, err := recordJSON(table, value); len(value) > 0 && (err != nil || rec != nil) {
			if err != nil {
				rec, _ = json.Marshal(err.Error())
			}
			if f.json {
				_ = enc.Encode(watchLine{Revision: rev, Type: typ, Key: string(key), Record: rec})
			} else {
				fmt.Fprintf(stdout, "%d %s %q %s\n", rev, typ, key, rec)
			}
			return
		}
		if f.json {
			_ = enc.Encode(watchLine{Revision: rev, Type: typ, Key: string(key), Value: string(value)})
			return
		}
		switch typ {
		case "delete":
			fmt.Fprintf(stdout, "%d delete %q\n", rev, key)
		case "progress":
			fmt.Fprintf(stdout, "%d progress\n", rev)
		default:
			fmt.Fprintf(stdout, "%d %s %q %q\n", rev, typ, key, value)
		}
	}
	for r := range ch {
		if r.Err != nil {
			return r.Err
		}
		if r.Listing {
			if !quietList {
				for _, e := range r.Events {
					print(r.Revision, "listed", e.Key, e.Value)
				}
			}
			continue
		}
		for _, e := range r.Events {
			print(r.Revision, e.Type.String(), e.Key, e.Value)
		}
		if r.Progress && progress {
			print(r.Revision, "progress", nil, nil)
		}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return ctx.Err()
}
