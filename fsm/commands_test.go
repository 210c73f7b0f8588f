package fsm

import (
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// opConst is an Op constant of the package's source.
type opConst struct {
	name string
	op   Op
	file string
}

// parseOps returns the Op constants declared in the package's non-test
// files, and the file of each commands.register call, by op constant.
func parseOps(t *testing.T) (consts []opConst, registeredIn map[string]string) {
	t.Helper()
	fset := gotoken.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	registeredIn = map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "Op" {
					return false
				}
				for i, name := range n.Names {
					lit, ok := n.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != gotoken.INT {
						t.Fatalf("%s: Op constant %s: want an integer literal", path, name.Name)
					}
					v, err := strconv.ParseUint(lit.Value, 0, 8)
					if err != nil {
						t.Fatalf("%s: Op constant %s: %v", path, name.Name, err)
					}
					consts = append(consts, opConst{name.Name, Op(v), path})
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "register" && len(n.Args) == 2 {
					if id, ok := n.Args[0].(*ast.Ident); ok {
						registeredIn[id.Name] = path
					}
				}
			}
			return true
		})
	}
	if len(consts) == 0 {
		t.Fatal("no Op constant found")
	}
	return consts, registeredIn
}

var camelWord = regexp.MustCompile(`[A-Z][a-z0-9]*`)

// snake is the op name of an Op constant: OpPutAgent -> put_agent.
func snake(constName string) string {
	words := camelWord.FindAllString(strings.TrimPrefix(constName, "Op"), -1)
	for i := range words {
		words[i] = strings.ToLower(words[i])
	}
	return strings.Join(words, "_")
}

// unregistered lists what is wrong between the Op constants and table t:
// a constant without a spec, or whose spec has another name than the
// constant's, and a spec of no constant.
func unregistered(consts []opConst, t *commandTable) []string {
	var out []string
	known := map[Op]bool{}
	for _, c := range consts {
		known[c.op] = true
		switch sp := t[c.op]; {
		case sp == nil:
			out = append(out, fmt.Sprintf("%s (%d, %s) has no registered spec", c.name, c.op, c.file))
		case sp.name != snake(c.name):
			out = append(out, fmt.Sprintf("%s is registered as %q, want %q", c.name, sp.name, snake(c.name)))
		}
	}
	for op, sp := range t {
		if sp != nil && !known[Op(op)] {
			out = append(out, fmt.Sprintf("op %d (%s) is registered but declared by no Op constant", op, sp.name))
		}
	}
	return out
}

// TestEveryOpRegistered: every Op constant of the package's source has a
// spec in the dispatch table, registered in its own file
// cmd_<name>.go under its snake_case name, and every spec has its
// constant. A new op without its file fails here, not in a replica.
func TestEveryOpRegistered(t *testing.T) {
	consts, registeredIn := parseOps(t)
	if len(consts) < 41 {
		t.Fatalf("found %d Op constants, want at least 41: %v", len(consts), consts)
	}
	for _, problem := range unregistered(consts, &commands) {
		t.Error(problem)
	}
	for _, c := range consts {
		if want := "cmd_" + snake(c.name) + ".go"; registeredIn[c.name] != want {
			t.Errorf("%s is registered in %q, want %s", c.name, registeredIn[c.name], want)
		}
	}
	// The check itself: a table without one registration fails it.
	for _, drop := range []Op{OpPutAgent, OpMulti, OpLeaseExpire, OpCompactHistory} {
		table := commands
		table[drop] = nil
		got := unregistered(consts, &table)
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, "has no registered spec") }) {
			t.Errorf("without %s: %q, want it reported as unregistered", drop, got)
		}
	}
	renamed := commands
	sp := *renamed[OpNoop]
	sp.name = "nothing"
	renamed[OpNoop] = &sp
	if got := unregistered(consts, &renamed); !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, `"nothing"`) }) {
		t.Errorf("with noop renamed: %q, want it reported", got)
	}
	// No cmd_ file registers nothing or an op of another file.
	cmdFiles, _ := filepath.Glob("cmd_*.go")
	var registering []string
	for _, f := range registeredIn {
		registering = append(registering, f)
	}
	for _, f := range cmdFiles {
		if !strings.HasSuffix(f, "_test.go") && !slices.Contains(registering, f) {
			t.Errorf("%s registers no op", f)
		}
	}
}

// TestRegisterRefuses: register panics (at init) on a spec the table
// cannot dispatch or that collides with another.
func TestRegisterRefuses(t *testing.T) {
	apply := func(*applier, *Command, uint64, *Result) error { return nil }
	run := func(*change, *Command) (int64, int, error) { return 0, 0, nil }
	entry := func(*applier, uint64, *Command, []*Command) (interface{}, error) { return nil, nil }
	validate := func(*Command, Limits) error { return nil }
	rule := func(*Command) error { return nil }
	rk := func(*Command) []byte { return nil }
	for _, tc := range []struct {
		name string
		op   Op
		sp   *commandSpec
		want string // in the panic; "" : no panic
	}{
		{"ok apply", 7, &commandSpec{name: "x", apply: apply}, ""},
		{"ok run", 7, &commandSpec{name: "x", run: run, rule: rule, recordKey: rk, fields: fTime, optional: fTxID}, ""},
		{"ok entry", 7, &commandSpec{name: "x", entry: entry}, ""},
		{"nil spec", 7, nil, "nil spec"},
		{"op 0", 0, &commandSpec{name: "x", apply: apply}, "op 0 is not an op"},
		{"duplicate op", OpNoop, &commandSpec{name: "x", apply: apply}, "registered twice"},
		{"no name", 7, &commandSpec{apply: apply}, "no name"},
		{"duplicate name", 7, &commandSpec{name: "noop", apply: apply}, "name taken by op 2"},
		{"nil apply", 7, &commandSpec{name: "x"}, "want exactly one of apply, run and entry"},
		{"apply and run", 7, &commandSpec{name: "x", apply: apply, run: run}, "want exactly one of apply, run and entry"},
		{"apply and entry", 7, &commandSpec{name: "x", apply: apply, entry: entry}, "want exactly one of apply, run and entry"},
		{"required and optional", 7, &commandSpec{name: "x", apply: apply, fields: fTime, optional: fTime | fTxID}, "both required and optional"},
		{"rule without run", 7, &commandSpec{name: "x", apply: apply, rule: rule}, "rule or recordKey without run"},
		{"recordKey without run", 7, &commandSpec{name: "x", apply: apply, recordKey: rk}, "rule or recordKey without run"},
		{"run with validate", 7, &commandSpec{name: "x", run: run, validate: validate}, "validates with rule"},
		{"negative version", 7, &commandSpec{name: "x", apply: apply, since: -1}, "negative version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var table commandTable
			table.register(OpNoop, &commandSpec{name: "noop", apply: apply})
			got := func() (msg string) {
				defer func() {
					if r := recover(); r != nil {
						msg = fmt.Sprint(r)
					}
				}()
				table.register(tc.op, tc.sp)
				return ""
			}()
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("refused: %s", got)
			case tc.want == "" && table[tc.op] != tc.sp:
				t.Fatal("not in the table")
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("panic %q, want one containing %q", got, tc.want)
			case tc.want != "" && tc.op != OpNoop && table[tc.op] != nil:
				t.Fatal("refused but in the table")
			}
			if tc.sp != nil && tc.sp.run != nil && tc.want == "" && (table[tc.op].apply == nil || table[tc.op].validate == nil) {
				t.Fatal("a change's spec lacks applyRecord or validateRecordCmd")
			}
		})
	}
}

// TestCommandFilesDoNotSwitchOnOp: dispatch is the table's; no non-test
// file of the package switches on an Op or lists Op constants in a case.
func TestCommandFilesDoNotSwitchOnOp(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	caseOp := regexp.MustCompile(`(?m)^\s*case Op[A-Z]`)
	switchOp := regexp.MustCompile(`(?m)^\s*switch (c\.|cmd\.)?(Op|op)\s*\{`)
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if m := caseOp.Find(src); m != nil {
			t.Errorf("%s: %q: dispatch on an op belongs in its spec (commands.go)", path, strings.TrimSpace(string(m)))
		}
		if m := switchOp.Find(src); m != nil {
			t.Errorf("%s: %q: dispatch on an op belongs in its spec (commands.go)", path, strings.TrimSpace(string(m)))
		}
	}
}
