package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// swarmnode shards: the shard table and the elastic shards' operations
// (split, merge, moves, cancel, the automatic policy), over the admin API
// (admin/shards.go).

const shardsLong = `Without a command: the shard table (slots, size: the leader's state
machine's disk space, load: commands per second over the last ~10 s,
leader, replicas), the automatic policy and the moves in progress.

split SHARD moves some of its slots (--slots, default the upper half) to a
new shard; merge A B moves every slot of B into A and removes B. With
--wait they print each phase change and return when the move is done, or
fail (exit 1) with the reason it was aborted.

policy shows the automatic shard policy, or changes the fields given:
--auto (the count rule: one shard per --nodes-per-shard active members),
--max-shard-size (split a larger shard; 0: off), --max-shard-load
(split a shard applying more commands per second; 0: off).

` + adminLong

type shardsFlags struct {
	*adminFlags
	slots         string
	auto          bool
	nodesPerShard int
	maxSize       sizeValue
	maxLoad       float64
	cmd           *cobra.Command
}

func newShardsCmd() *cobra.Command {
	f := &shardsFlags{}
	g := group("shards", "the shard table; split, merge and the automatic policy", shardsLong, "command", "command", []verb{
		{"split SHARD [--slots SPEC]", "split a shard: its slots SPEC (e.g. 128-255; default the upper half) move to a new shard", 1, 1},
		{"merge INTO FROM", "merge shard FROM into shard INTO (FROM is removed)", 2, 2},
		{"moves", "list the moves in progress", 0, 0},
		{"cancel MOVE_ID", "cancel a move before its target adopted the slots", 1, 1},
		{"policy", "show or change the automatic shard policy", 0, 0},
	}, f.run)
	g.Use = "shards [split|merge|moves|cancel|policy]"
	usageErr := g.RunE
	g.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErr(c, args)
		}
		return f.table(c.Context(), c.OutOrStdout())
	}
	fs := g.PersistentFlags()
	f.adminFlags = addAdminFlags(fs)
	fs.BoolVar(&f.wait, "wait", false, "split, merge: wait until the move is done (printing its phases); exit 1 if it is aborted")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "split, merge: how long --wait waits")
	fs.StringVar(&f.slots, "slots", "", "split: the slots to move, e.g. 128-255 or 0-15,32 (default the upper half)")
	fs.BoolVar(&f.auto, "auto", false, "policy: the count rule on or off (--auto=false)")
	fs.IntVar(&f.nodesPerShard, "nodes-per-shard", 0, "policy: one shard per this many active members (count rule)")
	fs.Var(&f.maxSize, "max-shard-size", "policy: split a shard whose leader's store uses more disk space, e.g. 1GiB, 512MiB (0: off)")
	fs.Float64Var(&f.maxLoad, "max-shard-load", 0, "policy: split a shard applying more commands per second (0: off)")
	for _, c := range g.Commands() {
		c := c
		run := c.RunE
		c.RunE = func(cc *cobra.Command, args []string) error { f.cmd = cc; return run(cc, args) }
	}
	return g
}

func (f *shardsFlags) run(ctx context.Context, verb string, args []string, stdout, _ io.Writer) error {
	switch verb {
	case "split":
		if _, err := shardArg(args[0]); err != nil {
			return err
		}
		q := ""
		if f.cmd != nil && f.cmd.Flags().Changed("slots") {
			s, err := shard.ParseSlotSet(strings.TrimSpace(f.slots))
			if err != nil || s.IsEmpty() {
				return usageError{fmt.Errorf("shards split: --slots %q: want slots such as 128-255 or 0-15,32", f.slots)}
			}
			q = "?slots=" + url.QueryEscape(s.String())
		}
		return f.startMove(ctx, stdout, "/v1/shards/"+args[0]+"/split"+q)
	case "merge":
		for _, a := range args {
			if _, err := shardArg(a); err != nil {
				return err
			}
		}
		return f.startMove(ctx, stdout, "/v1/shards/merge?into="+args[0]+"&from="+args[1])
	case "moves":
		return show(ctx, f.adminFlags, "/v1/moves", stdout, func(ms []placement.Move) error {
			printMoves(stdout, ms)
			return nil
		})
	case "cancel":
		id, err := strconv.ParseUint(args[0], 10, 64)
		if err != nil || id == 0 {
			return usageError{fmt.Errorf("shards cancel: move id %q: want a positive number", args[0])}
		}
		var m placement.Move
		body, err := f.call(ctx, "DELETE", "/v1/moves/"+args[0], &m)
		if err != nil {
			return err
		}
		if f.json {
			_, err := stdout.Write(body)
			return err
		}
		fmt.Fprintf(stdout, "move %d: %s (%s)\n", m.ID, m.Phase, m.Error)
		return nil
	case "policy":
		return f.policy(ctx, stdout)
	}
	return usageError{fmt.Errorf("shards: unknown command %q", verb)}
}

// shardArg checks a shard number argument.
func shardArg(s string) (shard.ID, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v >= shard.MaxShards {
		return 0, usageError{fmt.Errorf("shards: shard %q: want a shard number (0..%d)", s, shard.MaxShards-1)}
	}
	return shard.ID(v), nil
}

// startMove posts a split or merge and, with --wait, follows the move.
func (f *shardsFlags) startMove(ctx context.Context, stdout io.Writer, path string) error {
	var m placement.Move
	body, err := f.call(ctx, "POST", path, &m)
	if err != nil {
		return err
	}
	if !f.wait {
		if f.json {
			_, err := stdout.Write(body)
			return err
		}
		fmt.Fprintf(stdout, "move %d: %s\n", m.ID, moveLine(m))
		return nil
	}
	return f.waitMove(ctx, stdout, m)
}

func moveLine(m placement.Move) string {
	s := fmt.Sprintf("%s %d -> %d, slots %s: %s", m.Kind, m.Source, m.Target, m.Slots.String(), m.Phase)
	if m.Error != "" {
		s += " (" + m.Error + ")"
	}
	return s
}

// waitMove polls the moves until m is gone, printing each phase it sees.
// A move that disappears is done if the map gives its slots to its
// target; it was aborted otherwise (the error is the reason last seen).
func (f *shardsFlags) waitMove(ctx context.Context, stdout io.Writer, m placement.Move) error {
	deadline := time.Now().Add(f.timeout)
	last, reason := "", ""
	for {
		var ms []placement.Move
		_, err := f.call(ctx, "GET", "/v1/moves", &ms)
		var ae *adminError
		if err != nil && !errors.As(err, &ae) {
			return err
		}
		if err == nil {
			var cur *placement.Move
			for i := range ms {
				if ms[i].ID == m.ID {
					cur = &ms[i]
				}
			}
			if cur == nil {
				return f.moveEnded(ctx, stdout, m, reason)
			}
			if cur.Error != "" {
				reason = cur.Error
			}
			if line := moveLine(*cur); line != last && !f.json {
				fmt.Fprintf(stdout, "move %d: %s\n", cur.ID, line)
				last = line
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("move %d: not done within %v (last: %s); it goes on (swarmnode shards moves)", m.ID, f.timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// moveEnded reports a move that is no longer in progress: done when the
// map gives every slot of it to its target.
func (f *shardsFlags) moveEnded(ctx context.Context, stdout io.Writer, m placement.Move, reason string) error {
	var st cluster.State
	if _, err := f.call(ctx, "GET", "/v1/state", &st); err != nil {
		return err
	}
	done := len(st.Slots) == shard.NumSlots && !m.Slots.IsEmpty()
	for _, x := range m.Slots.Slots() {
		done = done && st.Slots[x] == m.Target
	}
	if !done {
		if reason == "" {
			reason = "its slots stayed with shard " + strconv.Itoa(int(m.Source))
		}
		return fmt.Errorf("move %d (%s %d -> %d) aborted: %s", m.ID, m.Kind, m.Source, m.Target, reason)
	}
	if f.json {
		m.Phase = "done"
		b, _ := json.MarshalIndent(m, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "move %d: done (map version %d)\n", m.ID, st.MapVersion)
	return nil
}

func printMoves(w io.Writer, ms []placement.Move) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MOVE\tKIND\tSOURCE\tTARGET\tSLOTS\tPHASE\tAGE\tERROR")
	for _, m := range ms {
		e := m.Error
		if e == "" {
			e = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", m.ID, m.Kind, m.Source, m.Target, m.Slots.String(), m.Phase,
			time.Since(m.Created).Round(time.Second), e)
	}
	tw.Flush()
}

// table prints the shard table, the policy and the moves.
func (f *shardsFlags) table(ctx context.Context, stdout io.Writer) error {
	return show(ctx, f.adminFlags, "/v1/status", stdout, func(st cluster.ClusterStatus) error { return printShards(stdout, st) })
}

func printShards(stdout io.Writer, st cluster.ClusterStatus) error {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSLOTS\tSIZE\tLOAD\tLEADER\tREPLICAS\tSURVIVES")
	for _, s := range st.Shards {
		if s.Shard == "meta" {
			continue
		}
		leader := s.Leader
		if leader == "" {
			leader = "(none)"
		}
		var reps []string
		for _, r := range s.Replicas {
			n := r.Node
			if r.Role != "voter" {
				n += "(" + r.Role + ")"
			}
			reps = append(reps, n)
		}
		slots := fmt.Sprint(s.Slots)
		if r := s.SlotRanges; r != "" {
			if len(r) > 24 { // the whole text is in --json
				r = r[:strings.LastIndexByte(r[:24], ',')+1] + "…"
			}
			slots += " (" + r + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f/s\t%s\t%s\t%s\n", s.Shard, slots, formatBytes(s.Bytes), s.Load, leader, strings.Join(reps, ","), survives(s))
	}
	tw.Flush()
	if st.Policy != nil {
		fmt.Fprintf(stdout, "\npolicy: %s\n", policyLine(*st.Policy))
	} else {
		fmt.Fprintln(stdout, "\npolicy: none (no automatic split or merge; swarmnode shards policy sets one)")
	}
	if len(st.Moves) > 0 {
		fmt.Fprintln(stdout)
		printMoves(stdout, st.Moves)
	}
	return nil
}

func policyLine(p placement.ShardPolicy) string {
	count := "off (explicit shard count)"
	if p.Auto {
		count = fmt.Sprintf("on, one shard per %d active members", p.NodesPerShard)
	}
	size, load := "off", "off"
	if p.MaxShardBytes > 0 {
		size = formatSize(p.MaxShardBytes)
	}
	if p.MaxShardLoad > 0 {
		load = strconv.FormatFloat(p.MaxShardLoad, 'g', -1, 64) + " ops/s"
	}
	return fmt.Sprintf("count rule %s; split above %s (size), %s (load)", count, size, load)
}

// policy shows the policy, or changes the fields given as flags.
func (f *shardsFlags) policy(ctx context.Context, stdout io.Writer) error {
	patch := map[string]any{}
	if c := f.cmd; c != nil {
		fl := c.Flags()
		if fl.Changed("auto") {
			patch["auto"] = f.auto
		}
		if fl.Changed("nodes-per-shard") {
			if f.nodesPerShard < 1 {
				return usageError{fmt.Errorf("shards policy: --nodes-per-shard %d: want 1 or more", f.nodesPerShard)}
			}
			patch["nodes_per_shard"] = f.nodesPerShard
		}
		if fl.Changed("max-shard-size") {
			patch["max_shard_bytes"] = uint64(f.maxSize)
		}
		if fl.Changed("max-shard-load") {
			if f.maxLoad < 0 || math.IsNaN(f.maxLoad) || math.IsInf(f.maxLoad, 0) {
				return usageError{fmt.Errorf("shards policy: --max-shard-load %v: want a number >= 0 (0: off)", f.maxLoad)}
			}
			patch["max_shard_load"] = f.maxLoad
		}
	}
	var p placement.ShardPolicy
	var body []byte
	var err error
	if len(patch) == 0 {
		body, err = f.call(ctx, "GET", "/v1/shards/policy", &p)
	} else {
		body, err = f.callBody(ctx, "POST", "/v1/shards/policy", patch, &p)
	}
	if err != nil {
		return err
	}
	if f.json {
		_, err := stdout.Write(body)
		return err
	}
	fmt.Fprintf(stdout, "policy: %s\n", policyLine(p))
	return nil
}

// sizeValue is a byte size flag: a number with an optional binary unit
// (B, K/KiB, M/MiB, G/GiB, T/TiB; case-insensitive).
type sizeValue uint64

func (s *sizeValue) String() string { return formatSize(uint64(*s)) }
func (s *sizeValue) Type() string   { return "size" }
func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

var sizeUnits = []struct {
	names []string
	shift uint
}{
	{[]string{"tib", "t", "tb"}, 40}, {[]string{"gib", "g", "gb"}, 30}, {[]string{"mib", "m", "mb"}, 20},
	{[]string{"kib", "k", "kb"}, 10}, {[]string{"b", ""}, 0},
}

// parseSize parses a byte size: digits, then an optional binary unit
// (KB, MB... mean KiB, MiB... too).
func parseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KiB, MiB, GiB, TiB)", s)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", s, errors.Unwrap(err))
	}
	for _, u := range sizeUnits {
		for _, name := range u.names {
			if unit == name {
				if n > math.MaxUint64>>u.shift {
					return 0, fmt.Errorf("size %q: too large", s)
				}
				return n << u.shift, nil
			}
		}
	}
	return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB or TiB)", s, unit)
}

// formatSize prints n in the largest binary unit that divides it ("0",
// "512MiB", "1GiB", "1500").
func formatSize(n uint64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return strconv.FormatUint(n, 10)
}

// formatBytes prints a size for people: 1 decimal in the largest unit.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
