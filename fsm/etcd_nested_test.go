package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func eput(k, v string) EtcdOp { return EtcdOp{Kind: EtcdPut, Key: []byte(k), Value: []byte(v)} }
func edel(k, end string) EtcdOp {
	return EtcdOp{Kind: EtcdDelete, Key: []byte(k), End: []byte(end)}
}
func eget(k string) EtcdOp  { return EtcdOp{Kind: EtcdRangeK, Range: &EtcdRange{Key: []byte(k)}} }
func nest(t EtcdTxn) EtcdOp { return EtcdOp{Kind: EtcdTxnK, Txn: &t} }
func valueIs(k, v string) EtcdCompare {
	return EtcdCompare{Target: EtcdTargetValue, Result: EtcdEqual, Key: []byte(k), Value: []byte(v)}
}

// TestEtcdNested: a nested txn runs in its place at the txn's one
// revision; its compares see the state before the whole txn (etcd's
// compareToPath), its ops the earlier writes; a rejection anywhere on the
// path chosen writes nothing, one in a branch not chosen does not count.
func TestEtcdNested(t *testing.T) {
	h := newEtcdHarness(t)
	h.put("a", "old") // 2
	// The put of a comes before the nested compare on a, which still sees
	// "old" (etcd), so the nested success branch runs; its range sees the
	// put of a.
	res := h.txn(EtcdTxn{Success: []EtcdOp{
		eput("a", "new"),
		nest(EtcdTxn{Compare: []EtcdCompare{valueIs("a", "old")},
			Success: []EtcdOp{eput("b", "then"), eget("a")},
			Failure: []EtcdOp{eput("b", "else")}}),
		eget("b"),
	}})
	if res.Err != nil || !res.Etcd.Succeeded || res.Etcd.Revision != 3 {
		t.Fatalf("nested txn: %+v %v", res.Etcd, res.Err)
	}
	n := res.Etcd.Results[1].Txn
	if n == nil || !n.Succeeded || n.Revision != 3 || kvsString(n.Results[1].Range.KVs) != "a=new(c2,m3,v2) " {
		t.Fatalf("nested answer: %+v", n)
	}
	if got := kvsString(res.Etcd.Results[2].Range.KVs); got != "b=then(c3,m3,v1) " {
		t.Fatalf("range after the nested txn: %q", got)
	}
	// One revision for all: the state at 2 is before the txn.
	if got, _, _ := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, Revision: 2}); kvsString(got.KVs) != "a=old(c2,m2,v1) " {
		t.Fatalf("at 2: %q", kvsString(got.KVs))
	}
	// A nested failure branch inside the top failure branch.
	res = h.txn(EtcdTxn{Compare: []EtcdCompare{valueIs("a", "old")},
		Failure: []EtcdOp{nest(EtcdTxn{Compare: []EtcdCompare{valueIs("b", "else")},
			Failure: []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{edel("b", "")}})}})}})
	if res.Err != nil || res.Etcd.Succeeded || res.Etcd.Revision != 4 || res.Etcd.Results[0].Txn.Succeeded ||
		res.Etcd.Results[0].Txn.Results[0].Txn.Results[0].Deleted != 1 {
		t.Fatalf("failure of failure: %+v %v", res.Etcd, res.Err)
	}
	// Rejections on the path chosen write nothing, also after writes of
	// the txn; one in a branch not chosen is not seen. ignore_value is
	// checked against the state before the txn (as etcd's checkTxn).
	before := mustDump(t, h.f)
	for name, txn := range map[string]EtcdTxn{
		"ignore_value of an absent key, nested": {Success: []EtcdOp{eput("p", "1"), nest(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("q"), IgnoreValue: true}}})}},
		"ignore_value of a key the txn creates": {Success: []EtcdOp{eput("p", "1"), nest(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("p2"), IgnoreValue: true}}}), eput("p2", "x")}},
		"future revision, nested twice":         {Success: []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{{Kind: EtcdRangeK, Range: &EtcdRange{Key: []byte("a"), Revision: 99}}}})}})}},
	} {
		if res := h.txn(txn); res.Err == nil {
			t.Errorf("%s: not refused: %+v", name, res.Etcd)
		}
	}
	if d := diffKVs(before, mustDump(t, h.f)); d != "" {
		t.Fatalf("a rejected txn wrote: %s", d)
	}
	res = h.txn(EtcdTxn{Success: []EtcdOp{nest(EtcdTxn{Compare: []EtcdCompare{valueIs("a", "new")},
		Success: []EtcdOp{eput("c", "1")},
		Failure: []EtcdOp{{Kind: EtcdPut, Key: []byte("absent"), IgnoreValue: true}}})}})
	if res.Err != nil || res.Etcd.Revision != 5 {
		t.Fatalf("a rejection in the branch not chosen: %+v %v", res.Etcd, res.Err)
	}
	// A put in an earlier nested txn and a delete in a later one (etcd's
	// check lets it): both run, the key ends deleted, one revision.
	res = h.txn(EtcdTxn{Success: []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eput("d", "1")}}), nest(EtcdTxn{Success: []EtcdOp{edel("d", "")}})}})
	if res.Err != nil || res.Etcd.Revision != 6 || res.Etcd.Results[1].Txn.Results[0].Deleted != 1 {
		t.Fatalf("put then delete in siblings: %+v %v", res.Etcd, res.Err)
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte("d")}); len(got.KVs) != 0 {
		t.Fatalf("d after put and delete: %q", kvsString(got.KVs))
	}
	// A nested txn that writes nothing takes no revision.
	if res := h.txn(EtcdTxn{Success: []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eget("a")}})}}); res.Err != nil || res.Etcd.Revision != 6 {
		t.Fatalf("read-only nested: %+v %v", res.Etcd, res.Err)
	}
}

// TestEtcdNestedDuplicates: etcd's duplicate-key rule across nested
// branches (v3rpc checkIntervals), case by case.
func TestEtcdNestedDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []EtcdOp
		dup  bool
	}{
		{"put and nested put", []EtcdOp{eput("a", ""), nest(EtcdTxn{Success: []EtcdOp{eput("a", "")}})}, true},
		{"nested put and put", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eput("a", "")}}), eput("a", "")}, true},
		{"then and else put one key", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eput("a", "")}, Failure: []EtcdOp{eput("a", "")}})}, false},
		{"two nested txns put one key", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eput("a", "")}}), nest(EtcdTxn{Failure: []EtcdOp{eput("a", "")}})}, true},
		{"delete and nested put", []EtcdOp{edel("a", "c"), nest(EtcdTxn{Success: []EtcdOp{eput("b", "")}})}, true},
		{"nested delete and put", []EtcdOp{nest(EtcdTxn{Failure: []EtcdOp{edel("a", "c")}}), eput("b", "")}, true},
		{"nested delete, then a nested put", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{edel("a", "c")}}), nest(EtcdTxn{Success: []EtcdOp{eput("b", "")}})}, true},
		{"nested put, then a nested delete", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eput("b", "")}}), nest(EtcdTxn{Success: []EtcdOp{edel("a", "c")}})}, false},
		{"then deletes, else puts", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{edel("a", "c")}, Failure: []EtcdOp{eput("b", "")}})}, false},
		{"duplicate two levels down", []EtcdOp{eput("a", ""), nest(EtcdTxn{Success: []EtcdOp{nest(EtcdTxn{Failure: []EtcdOp{eput("a", "")}})}})}, true},
		{"duplicate inside a nested branch", []EtcdOp{nest(EtcdTxn{Success: []EtcdOp{eput("a", ""), eput("a", "")}})}, true},
		{"delete from key, nested put", []EtcdOp{edel("a", "\x00"), nest(EtcdTxn{Success: []EtcdOp{eput("z", "")}})}, true},
		{"disjoint", []EtcdOp{eput("a", ""), edel("x", "z"), nest(EtcdTxn{Success: []EtcdOp{eput("b", "")}, Failure: []EtcdOp{edel("c", "")}})}, false},
	} {
		for _, branch := range []string{"success", "failure"} {
			txn := EtcdTxn{NS: "n", Success: tc.ops}
			if branch == "failure" {
				txn = EtcdTxn{NS: "n", Failure: tc.ops}
			}
			err := (&Command{Op: OpEtcdTxn, Etcd: &txn}).Validate(Limits{})
			if tc.dup != errors.Is(err, ErrEtcdDuplicateKey) || err != nil && !errors.Is(err, ErrInvalidCommand) {
				t.Errorf("%s (%s): %v, want duplicate %v", tc.name, branch, err, tc.dup)
			}
		}
	}
}

// TestEtcdNestedLimits: nesting depth, etcd's ops budget (a nested txn has
// what its parent left of MaxEtcdTxnOps) and the total bound.
func TestEtcdNestedLimits(t *testing.T) {
	deep := func(depth int) EtcdTxn {
		t := EtcdTxn{Success: []EtcdOp{eput("k", "v")}}
		for range depth {
			t = EtcdTxn{Success: []EtcdOp{nest(t)}}
		}
		t.NS = "n"
		return t
	}
	puts := func(n int, prefix string) []EtcdOp {
		ops := make([]EtcdOp, n)
		for i := range ops {
			ops[i] = eput(prefix+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), "")
		}
		return ops
	}
	withNested := func(top, nested int) EtcdTxn {
		ops := append(puts(top-1, "t"), nest(EtcdTxn{Success: puts(nested, "n")}))
		return EtcdTxn{NS: "n", Success: ops}
	}
	many := EtcdTxn{NS: "n"}
	for i := range 9 {
		many.Success = append(many.Success, nest(EtcdTxn{Success: puts(1000, string(rune('A'+i)))}))
	}
	for _, tc := range []struct {
		name string
		txn  EtcdTxn
		ok   bool
	}{
		{"depth max", deep(MaxEtcdTxnDepth), true},
		{"depth max+1", deep(MaxEtcdTxnDepth + 1), false},
		{"budget used up", withNested(24, MaxEtcdTxnOps-24), true},
		{"budget exceeded", withNested(24, MaxEtcdTxnOps-23), false},
		{"total over the bound", many, false},
		{"namespace in a nested txn", EtcdTxn{NS: "n", Success: []EtcdOp{nest(EtcdTxn{NS: "n"})}}, false},
		{"nested kind without a txn", EtcdTxn{NS: "n", Success: []EtcdOp{{Kind: EtcdTxnK}}}, false},
		{"a put carrying a txn", EtcdTxn{NS: "n", Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a"), Txn: &EtcdTxn{}}}}, false},
	} {
		c := &Command{Op: OpEtcdTxn, Etcd: &tc.txn}
		err := c.Validate(Limits{})
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
		if !tc.ok {
			continue
		}
		// What validates decodes (the decoder's nesting bound is enough)
		// and applies.
		b := mustEncode(t, c)
		d, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", tc.name, err)
		}
		if res := newEtcdHarness(t).apply(d); res.Err != nil {
			t.Fatalf("%s: apply: %v", tc.name, res.Err)
		}
	}
}

// TestEtcdTxnEncodingUnchanged: a txn without nested txns encodes to the
// bytes it did before nesting existed (captured from the binary of
// protocol version 5), so old entries replay, and old binaries decode new
// flat entries, alike; it needs VersionEtcd only, a nested one
// VersionEtcdNested.
func TestEtcdTxnEncodingUnchanged(t *testing.T) {
	const v5 = "01a2626f7018506465746364a4616382a3616903616b4161617402a461654163616b416261740361764176616681a2616f026172a76165417a616b4161616c02626b6ff562736f02627374036372657601617382a4616b4161616f016170f561764131a461654100616b4164616f036170f5626e736764656661756c74"
	for _, c := range validCommands() {
		if c.Op != OpEtcdTxn || c.Etcd.Nested() {
			continue
		}
		if got := hex.EncodeToString(mustEncode(t, c)); got != v5 {
			t.Fatalf("flat txn encodes as %s, was %s", got, v5)
		}
		if c.Since() != VersionEtcd {
			t.Fatalf("flat txn needs %d", c.Since())
		}
		old, _ := hex.DecodeString(v5)
		d, err := DecodeCommand(old)
		if err != nil || !bytes.Equal(mustEncode(t, d), old) {
			t.Fatalf("the old entry decodes as %+v, %v", d, err)
		}
	}
	n := &Command{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "n", Success: []EtcdOp{nest(EtcdTxn{})}}}
	if n.Since() != VersionEtcdNested {
		t.Fatalf("nested txn needs %d", n.Since())
	}
}
