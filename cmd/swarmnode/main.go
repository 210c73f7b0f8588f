// Command swarmnode runs a swarmkv node and talks to a cluster.
//
//	swarmnode                      one-node cluster with embedded defaults
//	swarmnode serve [flags]        a node (see `swarmnode serve -h`)
//	swarmnode kv|watch|lease ...   read and write a user's keys, follow them, leases
//	swarmnode registry|billing ... inspect the typed stores
//	swarmnode members|status|join|remove|transfer-leader|snapshot|shards  operate a cluster
//	swarmnode backup|restore       back a cluster up, seed a new one from a backup
//	swarmnode version
//
// `swarmnode --help` lists every command by group (commandGroups).
// It is the composition root: its commands are a github.com/spf13/cobra
// tree (help, shell completion, flags before or after the arguments), every
// flag also settable as SWARM_<FLAG>; serve builds the node, the root
// context comes from SIGINT and SIGTERM, and shutdown runs in reverse
// order. Nothing else calls os.Exit.
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

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

// commandGroups sorts the root's commands for `swarmnode --help`, in the
// order listed. Every command is in one (TestHelpListsEveryCommand).
var commandGroups = []struct {
	cobra.Group
	commands []string
}{
	{cobra.Group{ID: "node", Title: "Run a node:"}, []string{"serve", "health"}},
	{cobra.Group{ID: "data", Title: "Data (gRPC API of any member: --endpoints host:port,..., --user ROUTING_KEY):"},
		[]string{"kv", "watch", "lease", "registry", "billing"}},
	{cobra.Group{ID: "admin", Title: "Cluster admin (admin HTTP API of any member: --admin host:port of its --http-addr, --json):"},
		[]string{"members", "status", "join", "remove", "transfer-leader", "snapshot", "shards"}},
	{cobra.Group{ID: "backup", Title: "Backup:"}, []string{"backup", "restore"}},
	{cobra.Group{ID: "security", Title: "Security:"}, []string{"certs", "token"}},
	{cobra.Group{ID: "tools", Title: "Tools:"}, []string{"bench", "completion", "help", "version"}},
}

// rootUsage is `swarmnode --help`: the root's commands by group, each
// with its use line and what it does.
func rootUsage(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("swarmnode: a sharded, Raft-replicated key-value store node.\n\n" +
		"Usage: swarmnode COMMAND [ARGS] [flags]; swarmnode COMMAND -h for a command's flags.\n")
	const width = 38
	line := func(use, short string) {
		if len(use) > width-2 {
			fmt.Fprintf(&b, "  %s\n  %-*s  %s\n", use, width, "", short)
			return
		}
		fmt.Fprintf(&b, "  %-*s  %s\n", width, use, short)
	}
	byName := map[string]*cobra.Command{}
	for _, c := range root.Commands() {
		byName[c.Name()] = c
	}
	for _, g := range commandGroups { // in the table's order: Execute re-adds help last
		fmt.Fprintf(&b, "\n%s\n", g.Title)
		if g.ID == "node" {
			line("swarmnode", "a one-node cluster: embedded defaults, data in ./data, 127.0.0.1 ports")
		}
		for _, name := range g.commands {
			if c := byName[name]; c != nil && c.GroupID == g.ID && (c.IsAvailableCommand() || name == "help") {
				line(strings.TrimSuffix("swarmnode "+c.Use, " [flags]"), c.Short)
			}
		}
	}
	b.WriteString(`
Flags come before or after the arguments (--flag VALUE or --flag=VALUE).
Every flag can also be set as an environment variable SWARM_<FLAG>,
e.g. SWARM_DATA_DIR=/var/lib/swarmkv; the command line wins.
`)
	return b.String()
}

// run executes one command line. With no arguments it serves the embedded
// one-node cluster; flags without a command are serve's.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	embedded := len(args) == 0
	switch {
	case embedded:
		args = []string{"serve"}
	case args[0] == "--version" || args[0] == "-version":
		args = []string{"version"}
	case strings.HasPrefix(args[0], "-") && !isHelp(args[0]):
		args = append([]string{"serve"}, args...)
	}
	root := newRoot(embedded)
	// A subcommand's -h/--help prints its help to stderr and exits 2 (the
	// command line did not run anything); `swarmnode -h` and `swarmnode
	// help [COMMAND]` print to stdout and exit 0.
	helped := false
	cobraHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, a []string) {
		if c == root {
			fmt.Fprint(c.OutOrStdout(), rootUsage(root))
			return
		}
		if h := c.Flags().Lookup("help"); h != nil && h.Changed {
			helped = true
			c.SetOut(c.ErrOrStderr())
		}
		cobraHelp(c, a)
	})
	root.SetArgs(longFlags(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil && helped {
		err = usageError{flag.ErrHelp}
	}
	return err
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// Verbs are listed in the order written (set once: tests run commands
// concurrently).
func init() { cobra.EnableCommandSorting = false }

func newRoot(embedded bool) *cobra.Command {
	root := &cobra.Command{
		Use:           "swarmnode",
		Short:         "a sharded, Raft-replicated key-value store node",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(c *cobra.Command, args []string) error {
			fmt.Fprint(c.ErrOrStderr(), rootUsage(c))
			return usageError{fmt.Errorf("unknown command %q", args[0])}
		},
		// Reached only with an unknown command (run maps no arguments
		// to serve): Args refuses it first.
		RunE: func(*cobra.Command, []string) error { return nil },
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			return envDefaults(c.Flags())
		},
	}
	root.SetUsageFunc(printUsage)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%s: %w", c.CommandPath(), err)}
	})
	root.AddCommand(newServeCmd(embedded), newKVCmd(), newWatchCmd(), newLeaseCmd(), newRegistryCmd(), newBillingCmd(),
		newBenchCmd(), newHealthCmd(), newCertsCmd(), newTokenCmd(),
		newVersionCmd())
	root.AddCommand(newAdminCmds()...)
	root.AddCommand(newShardsCmd(), newBackupCmd(), newRestoreCmd())
	root.InitDefaultHelpCmd() // Execute would add them; here to group them
	root.InitDefaultCompletionCmd()
	group := map[string]string{}
	for _, g := range commandGroups {
		root.AddGroup(&g.Group)
		for _, name := range g.commands {
			group[name] = g.ID
		}
	}
	for _, c := range root.Commands() {
		c.GroupID = group[c.Name()] // none: TestHelpListsEveryCommand fails
		switch c.Name() {
		case "help":
			c.Short = "help about any command (swarmnode help COMMAND)"
		case "completion":
			c.Short = "shell completion script (source <(swarmnode completion bash))"
		}
	}
	return root
}

// ownUse is the annotation of a command with subcommands that also runs
// itself: its own arguments, listed first in its usage.
const ownUse = "own-use"

// printUsage prints a command's usage: its use line, or a group's verbs
// with their use lines, and every flag it takes (a group's included).
func printUsage(c *cobra.Command) error {
	w := c.OutOrStderr()
	fmt.Fprintln(w, "Usage:")
	if c.HasAvailableSubCommands() {
		var lines, shorts []string
		width := 0
		if u := c.Annotations[ownUse]; u != "" { // a command that runs itself too
			lines, shorts, width = append(lines, c.CommandPath()+" "+u), append(shorts, c.Short), len(c.CommandPath()+" "+u)
		}
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				lines = append(lines, strings.TrimSuffix(s.UseLine(), " [flags]"))
				shorts = append(shorts, s.Short)
				width = max(width, len(lines[len(lines)-1]))
			}
		}
		for i, l := range lines {
			fmt.Fprintf(w, "  %-*s  %s\n", width, l, shorts[i])
		}
	} else {
		fmt.Fprintf(w, "  %s\n", c.UseLine())
	}
	c.InheritedFlags() // merges the group's flags into c.Flags()
	if fs := c.Flags(); fs.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags (also SWARM_<FLAG>; before or after the arguments):\n%s", fs.FlagUsages())
	}
	return nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "print the version", Args: nargs(0, 0),
		Run: func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), "swarmnode", version) }}
}

// nargs accepts min..max positional arguments; others are a usage error
// that prints the command's usage.
func nargs(min, max int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) >= min && len(args) <= max {
			return nil
		}
		want := fmt.Sprint(min)
		if max > min {
			want += fmt.Sprintf("..%d", max)
		}
		fmt.Fprint(c.ErrOrStderr(), c.UsageString())
		return usageError{fmt.Errorf("%s: got %d arguments, want %s", strings.TrimPrefix(c.CommandPath(), "swarmnode "), len(args), want)}
	}
}

// verb is one subcommand of a group: its use line ("put KEY VALUE"), what
// it does, and how many arguments it takes.
type verb struct {
	use, short string
	min, max   int
}

// verbRun runs a group's verb with its arguments.
type verbRun func(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error

// group is a command with one subcommand per verb (swarmnode kv get ...):
// its flags, defined by the caller on PersistentFlags, may come before or
// after the verb; a missing verb or an unknown one prints the usage and is
// a usage error ("NAME: missing WHAT", "NAME: unknown NOUN %q").
func group(name, short, long, what, noun string, verbs []verb, run verbRun) *cobra.Command {
	var names []string
	for _, v := range verbs {
		names = append(names, strings.Fields(v.use)[0])
	}
	g := &cobra.Command{Use: name + " " + strings.Join(names, "|"), Short: short, Long: long,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			if len(args) == 0 {
				return usageError{fmt.Errorf("%s: missing %s", name, what)}
			}
			return usageError{fmt.Errorf("%s: unknown %s %q", name, noun, args[0])}
		}}
	for _, v := range verbs {
		g.AddCommand(&cobra.Command{Use: v.use, Short: v.short, Args: nargs(v.min, v.max),
			RunE: func(c *cobra.Command, args []string) error {
				return run(c.Context(), c.Name(), args, c.OutOrStdout(), c.ErrOrStderr())
			}})
	}
	return g
}

// noEnv is the annotation of a flag that only the command line sets
// (envDefaults skips it): one that lowers a safety check, such as
// --trust-unsigned, must be asked for on each command, never inherited
// from a shell profile.
const noEnv = "swarmkv-no-env"

// envDefaults sets every flag not given on the command line from
// SWARM_<NAME> (dashes become underscores), and reports bad values. A
// flag annotated noEnv is left alone.
func envDefaults(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || err != nil || f.Annotations[noEnv] != nil {
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

// longFlags rewrites the single-dash long flags Go's flag package took
// (-data-dir, -user=a) as pflag's --data-dir, for the flag names of the
// command tree, so older command lines keep working. It leaves "-" and
// flag values alone, and everything after "--".
func longFlags(root *cobra.Command, args []string) []string {
	takesValue := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { takesValue[f.Name] = f.NoOptDefVal == "" })
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	takesValue["help"] = false
	out := make([]string, 0, len(args))
	value := false // args[i] is the previous flag's value
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if !value && len(a) > 2 && a[0] == '-' && a[1] != '-' {
			if _, ok := takesValue[strings.SplitN(a[1:], "=", 2)[0]]; ok {
				a = "-" + a
			}
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		value = !value && strings.HasPrefix(a, "--") && !hasValue && takesValue[name]
		out = append(out, a)
	}
	return out
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("log level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
