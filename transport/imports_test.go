package transport

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOneWay: the transport's code imports no swarmkv package but
// internal/ ones (never cluster, which imports it).
func TestImportsOneWay(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/swarmkv/swarmkv/"
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
			if strings.HasPrefix(path, module) && !strings.HasPrefix(path, module+"internal/") {
				t.Errorf("%s imports %s: transport may import only %sinternal/...", f, path, module)
			}
		}
	}
}
