package fsm

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// testConfig is a Config for tests: shard, dir, quiet logger.
func testConfig(shard uint32, dir string) Config {
	return Config{Shard: shard, Dir: dir, Logger: slog.New(slog.DiscardHandler)}
}

// mustOpen opens an FSM (on fs, nil = OS) and closes it at the end of t.
func mustOpen(t testing.TB, cfg Config, fs vfs.FS) *FSM {
	t.Helper()
	f, err := open(cfg, fs)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func mustEncode(t testing.TB, c *Command) []byte {
	t.Helper()
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

func mustDump(t testing.TB, f *FSM) []KV {
	t.Helper()
	kvs, err := f.Dump()
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return kvs
}

func batchCmd(guards []Guard, muts ...Mutation) *Command {
	return &Command{Op: OpBatch, Batch: &Batch{Guards: guards, Mutations: muts}}
}

func put(k, v string) Mutation { return Mutation{Kind: MutPut, Key: []byte(k), Value: []byte(v)} }
func del(k string) Mutation    { return Mutation{Kind: MutDelete, Key: []byte(k)} }

// cmdLog is a LogCommand entry.
func cmdLog(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// applyRuns feeds logs to f with ApplyBatch in runs of random size 1..64
// and returns the responses in log order.
func applyRuns(t testing.TB, f *FSM, logs []*raft.Log, rng *rand.Rand) []interface{} {
	t.Helper()
	var out []interface{}
	for len(logs) > 0 {
		n := min(1+rng.IntN(64), len(logs))
		res := f.ApplyBatch(logs[:n])
		if len(res) != n {
			t.Fatalf("ApplyBatch returned %d results for %d logs", len(res), n)
		}
		out = append(out, res...)
		logs = logs[n:]
	}
	return out
}

// model is the naive reference: a Go map with the documented semantics.
type model struct {
	kv      map[string][]byte
	applied uint64
	limits  Limits
}

func newModel() *model { return &model{kv: map[string][]byte{}} }

func (m *model) apply(l *raft.Log) interface{} {
	if l.Index <= m.applied {
		return nil
	}
	m.applied = l.Index
	if l.Type != raft.LogCommand {
		return nil
	}
	c, err := DecodeCommand(l.Data)
	if err == nil {
		err = c.Validate(m.limits)
	}
	if err != nil {
		return &Result{Index: l.Index, FailedGuard: -1, Err: err}
	}
	if c.Op != OpMulti {
		return m.exec(l.Index, c)
	}
	out := make([]*Result, len(c.Multi))
	for i, data := range c.Multi {
		sub, err := DecodeCommand(data)
		if err == nil {
			err = sub.Validate(m.limits)
		}
		if err == nil && !sub.Op.Coalescable() {
			err = fmt.Errorf("%w: op %s cannot be part of a multi", ErrInvalidCommand, sub.Op)
		}
		if err != nil {
			out[i] = &Result{Index: l.Index, FailedGuard: -1, Err: err}
			continue
		}
		out[i] = m.exec(l.Index, sub)
	}
	return out
}

// exec is the model of one validated command other than OpMulti.
func (m *model) exec(index uint64, c *Command) *Result {
	res := &Result{Index: index, FailedGuard: -1}
	switch c.Op {
	case OpNoop:
		res.Succeeded = true
		return res
	case OpBatch:
	default:
		if isPoolOp(c.Op) {
			res.Removed, res.Err = m.applyPoolOp(c)
			if res.Err != nil {
				res.Removed = 0
			}
			res.Succeeded = res.Err == nil
			return res
		}
		res.Balance, res.Err = m.applyRecordOp(c)
		if res.Err != nil {
			res.Balance = 0
		}
		res.Succeeded = res.Err == nil
		return res
	}
	for i, g := range c.Batch.Guards {
		v, ok := m.kv[string(g.Key)]
		hold := (g.Kind == GuardExists && ok) || (g.Kind == GuardAbsent && !ok) ||
			(g.Kind == GuardEquals && ok && bytes.Equal(v, g.Value))
		if !hold {
			res.FailedGuard = i
			return res
		}
	}
	for _, mu := range c.Batch.Mutations {
		switch mu.Kind {
		case MutPut:
			m.kv[string(mu.Key)] = append([]byte{}, mu.Value...)
		case MutDelete:
			if _, ok := m.kv[string(mu.Key)]; ok {
				res.Deleted++
				delete(m.kv, string(mu.Key))
			}
		}
	}
	res.Succeeded = true
	return res
}

func (m *model) dump() []KV {
	keys := make([]string, 0, len(m.kv))
	for k := range m.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]KV, 0, len(keys))
	for _, k := range keys {
		out = append(out, KV{Key: []byte(k), Value: m.kv[k]})
	}
	return out
}

// diffKVs describes the first difference between two dumps, or "".
func diffKVs(a, b []KV) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return fmt.Sprintf("entry %d: %q=%q vs %q=%q", i, a[i].Key, a[i].Value, b[i].Key, b[i].Value)
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("lengths %d vs %d", len(a), len(b))
	}
	return ""
}

// diffResult describes how two apply responses differ, or "".
func diffResult(a, b interface{}) string {
	ma, aMulti := a.([]*Result)
	mb, bMulti := b.([]*Result)
	if aMulti || bMulti {
		if aMulti != bMulti || len(ma) != len(mb) {
			return fmt.Sprintf("%#v vs %#v", a, b)
		}
		for i := range ma {
			if d := diffResult(ma[i], mb[i]); d != "" {
				return fmt.Sprintf("multi command %d: %s", i, d)
			}
		}
		return ""
	}
	ra, _ := a.(*Result)
	rb, _ := b.(*Result)
	if (a == nil) != (b == nil) || (a != nil && (ra == nil || rb == nil)) {
		return fmt.Sprintf("%#v vs %#v", a, b)
	}
	if ra == nil {
		return ""
	}
	ea, eb := "", ""
	if ra.Err != nil {
		ea = ra.Err.Error()
	}
	if rb.Err != nil {
		eb = rb.Err.Error()
	}
	if ra.Index != rb.Index || ra.Succeeded != rb.Succeeded || ra.FailedGuard != rb.FailedGuard ||
		ra.Deleted != rb.Deleted || ra.Balance != rb.Balance || ra.Removed != rb.Removed || ea != eb {
		return fmt.Sprintf("%+v vs %+v", *ra, *rb)
	}
	return ""
}

// genLog returns a seeded random log of n entries, indexes 1..n: mostly
// guarded batches over a small key space (so guards fail sometimes) and
// registry, billing and pool commands over small id spaces (so they collide),
// plus malformed bytes, invalid commands and non-command entries.
func genLog(rng *rand.Rand, n int) []*raft.Log {
	keys := make([][]byte, 0, 32)
	for i := range 28 {
		keys = append(keys, []byte(fmt.Sprintf("\x20k%02d", i)))
	}
	keys = append(keys, []byte{0x01}, []byte{0xff}, []byte{0xff, 0xff, 0x01}, []byte{0xff, 0xff, 0xff})
	values := [][]byte{nil, []byte("a"), []byte("b"), []byte("value-c"), bytes.Repeat([]byte{0xfe}, 300)}
	key := func() []byte { return keys[rng.IntN(len(keys))] }
	value := func() []byte {
		if rng.IntN(4) == 0 {
			v := make([]byte, rng.IntN(64))
			for i := range v {
				v[i] = byte(rng.UintN(256))
			}
			return v
		}
		return values[rng.IntN(len(values))]
	}
	logs := make([]*raft.Log, 0, n)
	for i := 1; i <= n; i++ {
		l := &raft.Log{Index: uint64(i), Term: 1 + uint64(i/500), Type: raft.LogCommand}
		switch r := rng.IntN(100); {
		case r < 5:
			l.Type = []raft.LogType{raft.LogConfiguration, raft.LogNoop, raft.LogBarrier}[rng.IntN(3)]
			l.Data = []byte{byte(rng.UintN(256))}
		case r < 10:
			l.Data = genMalformed(rng)
		case r < 15:
			l.Data, _ = EncodeCommand(genInvalid(rng))
		case r < 17:
			l.Data, _ = EncodeCommand(&Command{Op: OpNoop})
		case r < 42:
			l.Data, _ = EncodeCommand(genRecordCmd(rng))
		case r < 55:
			l.Data, _ = EncodeCommand(genPoolCmd(rng))
		default:
			b := &Batch{}
			for range rng.IntN(3) {
				g := Guard{Kind: GuardKind(1 + rng.IntN(3)), Key: key()}
				if g.Kind == GuardEquals {
					g.Value = value()
				}
				b.Guards = append(b.Guards, g)
			}
			for range rng.IntN(5) {
				if rng.IntN(3) == 0 {
					b.Mutations = append(b.Mutations, Mutation{Kind: MutDelete, Key: key()})
				} else {
					b.Mutations = append(b.Mutations, Mutation{Kind: MutPut, Key: key(), Value: value()})
				}
			}
			l.Data, _ = EncodeCommand(&Command{Op: OpBatch, Batch: b})
		}
		logs = append(logs, l)
	}
	return logs
}

func genMalformed(rng *rand.Rand) []byte {
	valid, _ := EncodeCommand(batchCmd(nil, put("\x20k", "v")))
	switch rng.IntN(6) {
	case 0, 1:
		valid, _ = EncodeCommand(genRecordCmd(rng))
	case 2:
		valid, _ = EncodeCommand(genPoolCmd(rng))
	}
	switch rng.IntN(6) {
	case 5: // a fixed-size id one byte short
		return shortIDCommand(rng.IntN(2) == 0)
	case 0: // random bytes
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	case 1: // truncated
		return valid[:rng.IntN(len(valid))]
	case 2: // wrong version
		return append([]byte{0x02}, valid[1:]...)
	case 3: // trailing byte
		return append(append([]byte{}, valid...), 0x00)
	default: // a byte flipped
		b := append([]byte{}, valid...)
		b[rng.IntN(len(b))] ^= byte(1 + rng.UintN(255))
		return b
	}
}

// shortIDCommand is a delete command whose user id (or, nested, whose
// agent record's agent id) is a 31-byte string: well-formed CBOR, in
// canonical order, that a plain decoder would zero-fill into the array.
func shortIDCommand(nested bool) []byte {
	m := map[string]any{"op": uint8(OpDeleteAgent), "user_id": make([]byte, 31), "agent_id": make([]byte, 32)}
	if nested {
		m = map[string]any{"op": uint8(OpPutAgent), "agent": map[string]any{
			"agent_id": make([]byte, 31), "user_id": make([]byte, 32), "name": "n", "status": 0,
			"spec":       map[string]any{"cpu_millicores": 0, "memory_mb": 0, "runtime_version": ""},
			"created_at": 0, "updated_at": 0}}
	}
	b, err := encMode.Marshal(m)
	if err != nil {
		panic(err)
	}
	return append([]byte{commandVersion}, b...)
}

func genInvalid(rng *rand.Rand) *Command {
	switch rng.IntN(6) {
	case 0:
		return &Command{Op: Op(2 + rng.IntN(10)), Batch: &Batch{}}
	case 1:
		return &Command{Op: OpBatch}
	case 2:
		return batchCmd(nil, put("\x20ok", "v"), put("\x00applied", "x"))
	case 3:
		return batchCmd(nil, put("\x20ok", "v"), Mutation{Kind: MutDelete, Key: []byte("\x20ok"), Value: []byte("x")})
	case 4:
		return batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k"), Value: []byte("v")}}, put("\x20k", "v"))
	default:
		return batchCmd(nil, put("", "v"))
	}
}

// isSlotOp reports whether op is a slot move op (move.go).
func isSlotOp(op Op) bool { return op >= OpFreezeSlots && op <= OpSyncSlots }

// isPoolOp reports whether op is an agent pool op (pools.go).
func isPoolOp(op Op) bool { return op >= OpEnsureDefaultPool && op <= OpSetGuildPool }
