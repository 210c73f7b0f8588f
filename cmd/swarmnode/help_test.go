package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpListsEveryCommand walks the command tree: every command under
// the root is in one of the root's command groups and on a line of
// `swarmnode --help`, and every deeper command is on a line of its
// parent's help. A command added without a group, or left out of the
// help, fails here (watch and lease once were).
func TestHelpListsEveryCommand(t *testing.T) {
	rootHelp, stderr, err := runCmd(context.Background(), "--help")
	if err != nil || stderr != "" {
		t.Fatalf("swarmnode --help: %v, stderr %q", err, stderr)
	}
	root := newRoot(false)
	root.InitDefaultHelpCmd() // as Execute does
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command, help string)
	walk = func(parent *cobra.Command, help string) {
		listed := listedNames(help, parent.CommandPath())
		for _, c := range parent.Commands() {
			if !c.IsAvailableCommand() && c.Name() != "help" {
				continue
			}
			if parent == root {
				if c.GroupID == "" {
					t.Errorf("swarmnode %s is in no command group", c.Name())
				} else if !root.ContainsGroup(c.GroupID) {
					t.Errorf("swarmnode %s: group %q is not one of the root's", c.Name(), c.GroupID)
				}
			}
			if !listed[c.Name()] {
				t.Errorf("%s is missing from `%s --help`", c.CommandPath(), parent.CommandPath())
			}
			if c.HasAvailableSubCommands() && c.Name() != "help" {
				path := strings.Fields(strings.TrimPrefix(c.CommandPath(), "swarmnode"))
				_, sub, err := runCmd(context.Background(), append(path, "--help")...)
				if exitCode(err) != 2 {
					t.Errorf("%s --help: %v, want the help as a usage error", c.CommandPath(), err)
				}
				walk(c, sub)
			}
		}
	}
	walk(root, rootHelp)
	if t.Failed() {
		t.Logf("swarmnode --help:\n%s", rootHelp)
	}
}

// listedNames returns the command names on the lines of help that
// start with path and a name ("  swarmnode kv put|get ..." lists kv;
// "  swarmnode members|status" lists members and status).
func listedNames(help, path string) map[string]bool {
	names := map[string]bool{}
	n := len(strings.Fields(path))
	for _, line := range strings.Split(help, "\n") {
		f := strings.Fields(line)
		if len(f) <= n || strings.Join(f[:n], " ") != path {
			continue
		}
		for _, name := range strings.Split(f[n], "|") {
			names[name] = true
		}
	}
	return names
}
