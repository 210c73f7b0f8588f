package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// TestUpdateHandlersAnswerFromResult: the handlers of the writes that
// answer with the record they stored (UpdateAgentStatus,
// UpdateSessionStatus, UpdatePool, RegisterBot, UpdateBot) take it from
// the state machine's Result (appliedRecord, fsm.Result.Record) and read
// nothing from the replica after proposing: a freeze and drop of the
// record's slot landing between the apply and a read-back would turn an
// applied write into a not-found answer. (The fsm tests check that
// Result.Record is the stored record: checkResultRecord.)
func TestUpdateHandlersAnswerFromResult(t *testing.T) {
	fset := token.NewFileSet()
	want := map[string]bool{"UpdateAgentStatus": false, "UpdateSessionStatus": false, "UpdatePool": false,
		"RegisterBot": false, "UpdateBot": false}
	reads := map[string]bool{"getRecord": true, "getPool": true, "getBot": true, "FSM": true, "visiblePool": true}
	for _, file := range []string{"registry.go", "pools.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Body == nil {
				continue
			}
			if _, ok := want[fn.Name.Name]; !ok {
				continue
			}
			want[fn.Name.Name] = true
			var proposed token.Pos
			usesResult := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				name := ""
				switch f := call.Fun.(type) {
				case *ast.Ident:
					name = f.Name
				case *ast.SelectorExpr:
					name = f.Sel.Name
				case *ast.IndexExpr: // a generic call with its type argument
					if id, ok := f.X.(*ast.Ident); ok {
						name = id.Name
					}
				}
				switch {
				case name == "propose" || name == "proposeTo":
					if !proposed.IsValid() {
						proposed = call.Pos()
					}
				case name == "appliedRecord":
					usesResult = true
				case reads[name] && proposed.IsValid() && call.Pos() > proposed:
					t.Errorf("%s: %s reads %s from the replica after proposing (%s): answer from the Result",
						file, fn.Name.Name, name, fset.Position(call.Pos()))
				}
				return true
			})
			if !proposed.IsValid() || !usesResult {
				t.Errorf("%s: %s: proposes %v, answers from appliedRecord %v", file, fn.Name.Name, proposed.IsValid(), usesResult)
			}
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("handler %s not found in registry.go or pools.go", name)
		}
	}
}
