package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
)

// etcdHarness is one FSM fed etcd commands one entry at a time.
type etcdHarness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newEtcdHarness(t testing.TB) *etcdHarness {
	return &etcdHarness{t: t, f: mustOpen(t, testConfig(1, t.TempDir()), nil)}
}

func (h *etcdHarness) apply(c *Command) *Result {
	h.t.Helper()
	h.index++
	out := h.f.ApplyBatch([]*raft.Log{cmdLog(h.index, mustEncode(h.t, c))})
	return out[0].(*Result)
}

func (h *etcdHarness) txn(t EtcdTxn) *Result {
	h.t.Helper()
	if t.NS == "" {
		t.NS = "default"
	}
	return h.apply(&Command{Op: OpEtcdTxn, Etcd: &t})
}

func (h *etcdHarness) put(k, v string) int64 {
	h.t.Helper()
	res := h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte(k), Value: []byte(v)}}})
	if res.Err != nil || !res.Succeeded {
		h.t.Fatalf("put %s: %+v", k, res)
	}
	return res.Etcd.Revision
}

func (h *etcdHarness) del(k, end string) *Result {
	h.t.Helper()
	return h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdDelete, Key: []byte(k), End: []byte(end), PrevKV: true}}})
}

func (h *etcdHarness) rng(q EtcdRange) (*EtcdRangeResult, int64, error) {
	var res *EtcdRangeResult
	var rev int64
	err := h.f.Read(keys.EtcdRoutingKey("default"), func(v View) error {
		var err error
		res, rev, err = v.EtcdRange("default", &q)
		return err
	})
	return res, rev, err
}

func kvsString(kvs []EtcdKV) string {
	var b bytes.Buffer
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%s(c%d,m%d,v%d) ", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
	}
	return b.String()
}

func TestEtcdMVCC(t *testing.T) {
	h := newEtcdHarness(t)
	if _, rev, err := h.rng(EtcdRange{Key: []byte("a")}); err != nil || rev != 1 {
		t.Fatalf("fresh namespace: rev %d %v, want 1", rev, err)
	}
	if r := h.put("a", "1"); r != 2 {
		t.Fatalf("first put at %d, want 2", r)
	}
	h.put("b", "2")       // 3
	h.put("a", "3")       // 4
	res := h.del("b", "") // 5
	if res.Etcd.Revision != 5 || res.Etcd.Results[0].Deleted != 1 || kvsString(res.Etcd.Results[0].PrevKVs) != "b=2(c3,m3,v1) " {
		t.Fatalf("delete b: %+v", res.Etcd)
	}
	// A delete of nothing takes no revision.
	if res := h.del("zz", ""); res.Etcd.Revision != 5 || res.Etcd.Results[0].Deleted != 0 {
		t.Fatalf("delete of nothing: %+v", res.Etcd)
	}
	h.put("c/1", "x") // 6
	h.put("c/2", "y") // 7

	all := EtcdRange{Key: []byte{0}, End: []byte{0}}
	for _, tc := range []struct {
		rev  int64
		want string
	}{
		{0, "a=3(c2,m4,v2) c/1=x(c6,m6,v1) c/2=y(c7,m7,v1) "},
		{7, "a=3(c2,m4,v2) c/1=x(c6,m6,v1) c/2=y(c7,m7,v1) "},
		{1, ""},
		{2, "a=1(c2,m2,v1) "},
		{3, "a=1(c2,m2,v1) b=2(c3,m3,v1) "},
		{4, "a=3(c2,m4,v2) b=2(c3,m3,v1) "},
		{5, "a=3(c2,m4,v2) "},
		{6, "a=3(c2,m4,v2) c/1=x(c6,m6,v1) "},
	} {
		q := all
		q.Revision = tc.rev
		got, rev, err := h.rng(q)
		if err != nil || rev != 7 || kvsString(got.KVs) != tc.want || got.Count != int64(len(got.KVs)) {
			t.Errorf("range all at %d: %q (count %d) rev %d %v, want %q", tc.rev, kvsString(got.KVs), got.Count, rev, err, tc.want)
		}
	}
	// Prefix, limit, sort, keys_only, count_only.
	if got, _, _ := h.rng(EtcdRange{Key: []byte("c/"), End: []byte("c0")}); kvsString(got.KVs) != "c/1=x(c6,m6,v1) c/2=y(c7,m7,v1) " {
		t.Errorf("prefix c/: %q", kvsString(got.KVs))
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, Limit: 2}); len(got.KVs) != 2 || !got.More || got.Count != 3 {
		t.Errorf("limit 2: %q more %v count %d", kvsString(got.KVs), got.More, got.Count)
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, Limit: 1, SortOrder: EtcdSortDescend, SortTarget: EtcdSortByMod}); kvsString(got.KVs) != "c/2=y(c7,m7,v1) " || !got.More {
		t.Errorf("newest by mod: %q", kvsString(got.KVs))
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte("a"), KeysOnly: true}); len(got.KVs) != 1 || got.KVs[0].Value != nil {
		t.Errorf("keys only: %+v", got.KVs)
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, CountOnly: true}); got.KVs != nil || got.Count != 3 {
		t.Errorf("count only: %+v", got)
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, MinMod: 6}); kvsString(got.KVs) != "c/1=x(c6,m6,v1) c/2=y(c7,m7,v1) " || got.Count != 3 {
		t.Errorf("min mod 6: %q count %d", kvsString(got.KVs), got.Count)
	}
	if _, _, err := h.rng(EtcdRange{Key: []byte("a"), Revision: 8}); !errors.Is(err, ErrEtcdFutureRev) {
		t.Errorf("range at 8: %v, want ErrEtcdFutureRev", err)
	}

	// Txn: CAS on mod_revision, then/else, a range seeing the txn's put.
	cas := func(mod int64, v string) *Result {
		return h.txn(EtcdTxn{
			Compare: []EtcdCompare{{Target: EtcdTargetMod, Result: EtcdEqual, Key: []byte("a"), Int: mod}},
			Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a"), Value: []byte(v), PrevKV: true}, {Kind: EtcdRangeK, Range: &EtcdRange{Key: []byte("a")}}},
			Failure: []EtcdOp{{Kind: EtcdRangeK, Range: &EtcdRange{Key: []byte("a")}}},
		})
	}
	if res := cas(4, "cas"); !res.Etcd.Succeeded || res.Etcd.Revision != 8 || kvsString(res.Etcd.Results[1].Range.KVs) != "a=cas(c2,m8,v3) " ||
		kvsString([]EtcdKV{*res.Etcd.Results[0].PrevKV}) != "a=3(c2,m4,v2) " {
		t.Fatalf("cas at mod 4: %+v", res.Etcd)
	}
	if res := cas(4, "lost"); res.Etcd.Succeeded || res.Etcd.Revision != 8 || kvsString(res.Etcd.Results[0].Range.KVs) != "a=cas(c2,m8,v3) " {
		t.Fatalf("stale cas: %+v", res.Etcd)
	}
	// Compares on an absent key: version 0 holds, a value compare fails.
	if res := h.txn(EtcdTxn{Compare: []EtcdCompare{{Target: EtcdTargetVersion, Key: []byte("new")}}, Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("new"), Value: []byte("1")}}}); !res.Etcd.Succeeded {
		t.Fatalf("create if absent: %+v", res.Etcd)
	}
	if res := h.txn(EtcdTxn{Compare: []EtcdCompare{{Target: EtcdTargetValue, Result: EtcdNotEqual, Key: []byte("none"), Value: []byte("x")}}}); res.Etcd.Succeeded {
		t.Fatalf("value compare of an absent key held")
	}
	// Rejections write nothing.
	before := mustDump(t, h.f)
	if res := h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("p"), Value: []byte("1")}, {Kind: EtcdPut, Key: []byte("absent"), IgnoreValue: true}}}); !errors.Is(res.Err, ErrEtcdKeyNotFound) {
		t.Fatalf("ignore_value of an absent key: %v", res.Err)
	}
	if res := h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("p"), Value: []byte("1"), Lease: 5}}}); !errors.Is(res.Err, ErrEtcdLeaseNotFound) {
		t.Fatalf("put with a lease: %v", res.Err)
	}
	if diff := diffKVs(before, mustDump(t, h.f)); diff != "" {
		t.Fatalf("a rejected txn wrote: %s", diff)
	}
	// ignore_value keeps the value and bumps the version.
	if res := h.txn(EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a"), IgnoreValue: true}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, _, _ := h.rng(EtcdRange{Key: []byte("a")}); kvsString(got.KVs) != "a=cas(c2,m10,v4) " {
		t.Fatalf("after ignore_value: %q", kvsString(got.KVs))
	}

	// Compaction.
	compact := func(rev int64) *Result {
		return h.apply(&Command{Op: OpEtcdCompact, EtcdCompact: &EtcdCompact{NS: "default", Revision: rev}})
	}
	if res := compact(11); !errors.Is(res.Err, ErrEtcdFutureRev) {
		t.Fatalf("compact 11: %v", res.Err)
	}
	if res := compact(4); res.Err != nil || res.Etcd.Revision != 10 {
		t.Fatalf("compact 4: %+v", res)
	}
	if _, _, err := h.rng(EtcdRange{Key: []byte("a"), Revision: 3}); !errors.Is(err, ErrEtcdCompacted) {
		t.Fatalf("range at 3 after compact 4: %v", err)
	}
	if got, _, err := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, Revision: 4}); err != nil || kvsString(got.KVs) != "a=3(c2,m4,v2) b=2(c3,m3,v1) " {
		t.Fatalf("range at the compacted revision: %q %v", kvsString(got.KVs), err)
	}
	if res := compact(4); !errors.Is(res.Err, ErrEtcdCompacted) {
		t.Fatalf("compact 4 again: %v", res.Err)
	}
	// The events at and below 4 are gone.
	n := 0
	err := h.f.Read(nil, func(v View) error {
		kvs, err := v.Scan(keys.EtcdHistoryPrefix(keys.EtcdRoutingKey("default")), keys.PrefixEnd(keys.EtcdHistoryPrefix(keys.EtcdRoutingKey("default"))), 0)
		for _, kv := range kvs {
			if _, rev, _, _ := keys.DecodeEtcdHistory(kv.Key); rev <= 4 {
				t.Errorf("event of revision %d kept after compact 4", rev)
			}
		}
		n = len(kvs)
		return err
	})
	if err != nil || n == 0 {
		t.Fatalf("history after compaction: %d events, %v", n, err)
	}
}

func TestEtcdValidate(t *testing.T) {
	// A raw batch may not write the etcd tables (it would bypass the
	// revisions).
	for _, k := range [][]byte{keys.EtcdKey(keys.EtcdRoutingKey("n"), []byte("a")), keys.EtcdRevs(keys.EtcdRoutingKey("n"))} {
		if err := batchCmd(nil, Mutation{Kind: MutPut, Key: k, Value: []byte("x")}).Validate(Limits{}); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("a batch writing %x: %v, want ErrInvalidCommand", k, err)
		}
	}
	ok := EtcdTxn{NS: "default", Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a")}}}
	if err := (&Command{Op: OpEtcdTxn, Etcd: &ok}).Validate(Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, txn := range map[string]EtcdTxn{
		"bad namespace":   {NS: "a/b"},
		"empty key":       {NS: "n", Success: []EtcdOp{{Kind: EtcdPut}}},
		"two puts":        {NS: "n", Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a")}, {Kind: EtcdPut, Key: []byte("a")}}},
		"put in a delete": {NS: "n", Failure: []EtcdOp{{Kind: EtcdPut, Key: []byte("b")}, {Kind: EtcdDelete, Key: []byte("a"), End: []byte("c")}}},
		"unknown kind":    {NS: "n", Success: []EtcdOp{{Kind: 9, Key: []byte("a")}}},
		"range w/o req":   {NS: "n", Success: []EtcdOp{{Kind: EtcdRangeK, Key: []byte("a")}}},
		"bad compare":     {NS: "n", Compare: []EtcdCompare{{Key: []byte("a"), Target: 7}}},
		"too many":        {NS: "n", Compare: make([]EtcdCompare, MaxEtcdTxnOps+1)},
	} {
		err := (&Command{Op: OpEtcdTxn, Etcd: &txn}).Validate(Limits{})
		if !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("%s: %v, want ErrInvalidCommand", name, err)
		}
		if name == "two puts" || name == "put in a delete" {
			if !errors.Is(err, ErrEtcdDuplicateKey) {
				t.Errorf("%s: %v, want ErrEtcdDuplicateKey", name, err)
			}
		}
	}
}

// etcdModel is the naive reference: the whole keyspace at every revision.
type etcdModel struct {
	states    []map[string]EtcdKV // states[rev]
	compacted int64
}

func newEtcdModel() *etcdModel {
	return &etcdModel{states: []map[string]EtcdKV{nil, {}}}
}

func (m *etcdModel) cur() map[string]EtcdKV { return m.states[len(m.states)-1] }

// write applies puts and deletes (a txn's writes) at the next revision.
func (m *etcdModel) write(puts map[string]string, dels [][2]string) int64 {
	next := map[string]EtcdKV{}
	for k, v := range m.cur() {
		next[k] = v
	}
	rev := int64(len(m.states))
	wrote := false
	for _, d := range dels {
		for k := range next {
			if etcdInRange([]byte(k), []byte(d[0]), []byte(d[1])) {
				delete(next, k)
				wrote = true
			}
		}
	}
	for k, v := range puts {
		old, ok := next[k]
		kv := EtcdKV{Key: []byte(k), Value: []byte(v), CreateRevision: rev, ModRevision: rev, Version: 1}
		if ok {
			kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
		}
		next[k] = kv
		wrote = true
	}
	if wrote {
		m.states = append(m.states, next)
	}
	return int64(len(m.states) - 1)
}

func (m *etcdModel) at(rev int64) string {
	st := m.states[rev]
	ks := make([]string, 0, len(st))
	for k := range st {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	kvs := make([]EtcdKV, 0, len(ks))
	for _, k := range ks {
		kvs = append(kvs, st[k])
	}
	return kvsString(kvs)
}

// TestEtcdModel: random puts, deletes, multi-key txns, txns with nested
// txns (compares against the state before the txn, as etcd) and compactions
// agree with the naive model at every revision still retained, and ranges
// below the compacted revision are refused.
func TestEtcdModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 2))
	h := newEtcdHarness(t)
	m := newEtcdModel()
	key := func() string { return string(rune('a' + rng.IntN(6))) }
	for step := range 400 {
		switch p := rng.IntN(10); {
		case p < 6: // a txn of up to 3 puts and a delete of different keys
			puts := map[string]string{}
			var ops []EtcdOp
			for range 1 + rng.IntN(3) {
				k := key()
				if _, dup := puts[k]; dup {
					continue
				}
				puts[k] = fmt.Sprint(step)
				ops = append(ops, EtcdOp{Kind: EtcdPut, Key: []byte(k), Value: []byte(puts[k])})
			}
			var dels [][2]string
			if d := key(); rng.IntN(2) == 0 {
				if _, put := puts[d]; !put {
					dels = append(dels, [2]string{d, ""})
					ops = append(ops, EtcdOp{Kind: EtcdDelete, Key: []byte(d)})
				}
			}
			res := h.txn(EtcdTxn{Success: ops})
			if want := m.write(puts, dels); res.Err != nil || res.Etcd.Revision != want {
				t.Fatalf("step %d: txn at %+v %v, model %d", step, res.Etcd, res.Err, want)
			}
		case p < 7: // a txn with nested txns
			pool := rng.Perm(6)
			fresh := func() (string, bool) {
				if len(pool) == 0 {
					return "", false
				}
				k := string(rune('a' + pool[0]))
				pool = pool[1:]
				return k, true
			}
			puts := map[string]string{}
			var dels [][2]string
			var path []bool
			// gen builds a txn of depth at most d whose compare holds or
			// not at random (against the model's state before the txn),
			// and records the writes of the branches the model chooses.
			var gen func(d int, chosen bool) EtcdTxn
			gen = func(d int, chosen bool) EtcdTxn {
				var txn EtcdTxn
				k := key()
				ver := m.cur()[k].Version
				holds := rng.IntN(2) == 0
				if !holds {
					ver++
				}
				txn.Compare = []EtcdCompare{{Target: EtcdTargetVersion, Result: EtcdEqual, Key: []byte(k), Int: ver}}
				if chosen {
					path = append(path, holds)
				}
				for _, then := range []bool{true, false} {
					var ops []EtcdOp
					runs := chosen && then == holds
					if pk, ok := fresh(); ok {
						ops = append(ops, EtcdOp{Kind: EtcdPut, Key: []byte(pk), Value: []byte(fmt.Sprint(step))})
						if runs {
							puts[pk] = fmt.Sprint(step)
						}
					}
					if dk, ok := fresh(); ok && rng.IntN(2) == 0 {
						ops = append(ops, EtcdOp{Kind: EtcdDelete, Key: []byte(dk)})
						if runs {
							dels = append(dels, [2]string{dk, ""})
						}
					}
					if d > 0 && rng.IntN(2) == 0 {
						n := gen(d-1, runs)
						ops = append(ops, EtcdOp{Kind: EtcdTxnK, Txn: &n})
					}
					if then {
						txn.Success = ops
					} else {
						txn.Failure = ops
					}
				}
				return txn
			}
			txn := gen(2, true)
			var got []bool
			var walk func(r *EtcdResult)
			walk = func(r *EtcdResult) {
				got = append(got, r.Succeeded)
				for i := range r.Results {
					if r.Results[i].Txn != nil {
						walk(r.Results[i].Txn)
					}
				}
			}
			res := h.txn(txn)
			if res.Err != nil {
				t.Fatalf("step %d: nested txn: %v", step, res.Err)
			}
			walk(res.Etcd)
			if want := m.write(puts, dels); res.Etcd.Revision != want || fmt.Sprint(got) != fmt.Sprint(path) {
				t.Fatalf("step %d: nested txn at %d, path %v; model %d, path %v", step, res.Etcd.Revision, got, want, path)
			}
		case p < 8: // a range delete
			lo := key()
			hi := string(rune(lo[0] + byte(1+rng.IntN(3))))
			res := h.del(lo, hi)
			if want := m.write(nil, [][2]string{{lo, hi}}); res.Err != nil || res.Etcd.Revision != want {
				t.Fatalf("step %d: delete [%s,%s) at %+v %v, model %d", step, lo, hi, res.Etcd, res.Err, want)
			}
		default: // a compaction somewhere in the retained history
			cur := int64(len(m.states) - 1)
			if cur <= m.compacted+1 {
				continue
			}
			rev := m.compacted + 1 + rng.Int64N(cur-m.compacted)
			res := h.apply(&Command{Op: OpEtcdCompact, EtcdCompact: &EtcdCompact{NS: "default", Revision: rev}})
			if res.Err != nil {
				t.Fatalf("step %d: compact %d: %v", step, rev, res.Err)
			}
			m.compacted = rev
		}
		cur := int64(len(m.states) - 1)
		for rev := max(m.compacted, 1); rev <= cur; rev++ {
			got, hrev, err := h.rng(EtcdRange{Key: []byte{0}, End: []byte{0}, Revision: rev})
			if err != nil || hrev != cur || kvsString(got.KVs) != m.at(rev) {
				t.Fatalf("step %d: range at %d (current %d): %q %v, model %q", step, rev, cur, kvsString(got.KVs), err, m.at(rev))
			}
		}
		if m.compacted > 1 {
			if _, _, err := h.rng(EtcdRange{Key: []byte("a"), Revision: m.compacted - 1}); !errors.Is(err, ErrEtcdCompacted) {
				t.Fatalf("step %d: range below the compacted revision: %v", step, err)
			}
		}
	}
}

// FuzzEtcdCommand: any bytes as an etcd command either fail to decode or
// validate, or apply deterministically: two replicas fed the command (one
// decoded, one as given) answer alike and hold the same state, and a
// rejection writes nothing.
func FuzzEtcdCommand(f *testing.F) {
	for _, c := range validCommands() {
		if c.Op == OpEtcdTxn || c.Op == OpEtcdCompact {
			f.Add(mustEncode(f, c))
		}
	}
	f.Add(mustEncode(f, &Command{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default", Success: []EtcdOp{
		{Kind: EtcdPut, Key: []byte("a"), Value: []byte("1")}, {Kind: EtcdDelete, Key: []byte("b"), End: []byte{0}}}}}))
	f.Add(mustEncode(f, &Command{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default", Success: []EtcdOp{
		{Kind: EtcdPut, Key: []byte("a"), IgnoreValue: true}}}}))
	// Nested txns: compares against the state before the txn, a
	// duplicate across branches, a rejection on the path.
	f.Add(mustEncode(f, &Command{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default", Success: []EtcdOp{
		{Kind: EtcdPut, Key: []byte("a"), Value: []byte("9")},
		{Kind: EtcdTxnK, Txn: &EtcdTxn{Compare: []EtcdCompare{{Target: EtcdTargetValue, Key: []byte("a"), Value: []byte("0")}},
			Success: []EtcdOp{{Kind: EtcdDelete, Key: []byte("b"), End: []byte("d"), PrevKV: true}, {Kind: EtcdRangeK, Range: &EtcdRange{Key: []byte{0}, End: []byte{0}}}},
			Failure: []EtcdOp{{Kind: EtcdPut, Key: []byte("c"), Value: []byte("x")}}}}}}}))
	f.Add(mustEncode(f, &Command{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default", Failure: []EtcdOp{
		{Kind: EtcdTxnK, Txn: &EtcdTxn{Success: []EtcdOp{{Kind: EtcdPut, Key: []byte("a")}}}},
		{Kind: EtcdTxnK, Txn: &EtcdTxn{Failure: []EtcdOp{{Kind: EtcdPut, Key: []byte("a")}}}}}}}))
	f.Add(mustEncode(f, &Command{Op: OpEtcdTxn, Etcd: &EtcdTxn{NS: "default", Success: []EtcdOp{
		{Kind: EtcdTxnK, Txn: &EtcdTxn{Success: []EtcdOp{{Kind: EtcdTxnK, Txn: &EtcdTxn{Success: []EtcdOp{
			{Kind: EtcdPut, Key: []byte("z"), Value: []byte("1")}, {Kind: EtcdPut, Key: []byte("absent"), IgnoreLease: true}}}}}}}}}}))
	a, b := newEtcdHarness(f), newEtcdHarness(f)
	for _, h := range []*etcdHarness{a, b} {
		h.put("a", "0")
		h.put("b", "1")
		h.put("c", "2")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a.t, b.t = t, t
		c, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedCommand) {
				t.Fatalf("decode error %v does not wrap ErrMalformedCommand", err)
			}
			return
		}
		if c.Op != OpEtcdTxn && c.Op != OpEtcdCompact {
			return
		}
		if err := c.Validate(Limits{}); err != nil {
			if !errors.Is(err, ErrInvalidCommand) {
				t.Fatalf("validate error %v does not wrap ErrInvalidCommand", err)
			}
			return
		}
		before := mustDump(t, a.f)
		ra, rb := a.apply(c), b.apply(c)
		ra.Index, rb.Index = 0, 0
		if fmt.Sprint(ra.Err) != fmt.Sprint(rb.Err) || !reflect.DeepEqual(ra.Etcd, rb.Etcd) {
			t.Fatalf("replicas differ: %+v / %+v", ra, rb)
		}
		if d := diffKVs(mustDump(t, a.f), mustDump(t, b.f)); d != "" {
			t.Fatalf("replicas' states differ: %s", d)
		}
		if ra.Err != nil {
			if d := diffKVs(before, mustDump(t, a.f)); d != "" {
				t.Fatalf("a rejection wrote: %s", d)
			}
		}
	})
}

// FuzzEtcdRangeValidate: a Range request that validates is answered (or
// refused with the compacted or future-revision error), never a panic.
func FuzzEtcdRangeValidate(f *testing.F) {
	f.Add([]byte("a"), []byte{}, int64(0), int64(0), uint8(0), uint8(0), false)
	f.Add([]byte{0}, []byte{0}, int64(2), int64(3), uint8(2), uint8(3), true)
	h := newEtcdHarness(f)
	h.put("a", "1")
	h.put("b", "2")
	f.Fuzz(func(t *testing.T, key, end []byte, limit, rev int64, order, target uint8, keysOnly bool) {
		q := EtcdRange{Key: key, End: end, Limit: limit, Revision: rev, SortOrder: order, SortTarget: target, KeysOnly: keysOnly}
		if err := q.Validate(Limits{}); err != nil {
			if !errors.Is(err, ErrInvalidCommand) {
				t.Fatalf("%v does not wrap ErrInvalidCommand", err)
			}
			return
		}
		res, _, err := h.rng(q)
		if err != nil {
			if !errors.Is(err, ErrEtcdFutureRev) && !errors.Is(err, ErrEtcdCompacted) {
				t.Fatalf("range %+v: %v", q, err)
			}
			return
		}
		if limit > 0 && int64(len(res.KVs)) > limit || int64(len(res.KVs)) > res.Count {
			t.Fatalf("range %+v: %d kvs, count %d", q, len(res.KVs), res.Count)
		}
	})
}
