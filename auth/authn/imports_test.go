package authn

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestImportsLeaf: authn's code imports of swarmkv only auth, keys,
// transport and internal/ packages (never cluster or anything above it).
func TestImportsLeaf(t *testing.T) {
	const module = "github.com/swarmkv/swarmkv/"
	allowed := []string{"auth", "keys", "transport"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(path, module)
			if ok && !slices.Contains(allowed, rel) && !strings.HasPrefix(rel, "internal/") {
				t.Errorf("%s imports %s: authn may import only %v and internal/... of swarmkv", f, path, allowed)
			}
		}
	}
}
