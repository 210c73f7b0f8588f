package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// frontPackages are the fronts: they reach the core through the small
// interfaces they declare (api.Node, api.Replicas, admin.Node,
// redisfront.Node, etcdfront.Node, console.Source), never through the
// concrete node.
var frontPackages = []string{"api", "admin", "redisfront", "etcdfront", "console"}

// nodeNames returns where the non-test Go files of the package in dir
// name cluster.Node (the type of package cluster, whatever the import's
// local name), as file:line.
func nodeNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/swarmkv/swarmkv/cluster" {
				local = "cluster"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Node" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
					out = append(out, fset.Position(sel.Pos()).String())
				}
			}
			return true
		})
	}
	return out
}

// TestFrontsNameNoNode: no front's code names cluster.Node; this package,
// the composition root, is the one that does (and checks there that the
// node satisfies each front's interface). The walk finds a use: on the
// fronts before their interfaces, it reported every Start, Services and
// handler signature.
func TestFrontsNameNoNode(t *testing.T) {
	for _, p := range frontPackages {
		for _, at := range nodeNames(t, filepath.Join("..", p)) {
			t.Errorf("%s names cluster.Node: a front depends on the interface it declares", at)
		}
	}
	if len(nodeNames(t, ".")) == 0 {
		t.Error("the walk found no cluster.Node in package server, which names it")
	}
}
