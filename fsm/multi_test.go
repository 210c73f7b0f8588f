package fsm

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestMultiMatchesSeparateEntries applies one random command sequence three
// ways: each command as its own entry, the commands grouped into OpMulti
// entries of random sizes (both in random ApplyBatch runs), and the grouped
// log through the reference model. Every command's result (but its log
// index) and the final state must agree.
func TestMultiMatchesSeparateEntries(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 3))
		var cmds [][]byte
		for _, l := range genLog(rng, 3000) {
			if l.Type == raft.LogCommand {
				cmds = append(cmds, l.Data)
			}
		}

		single := make([]*raft.Log, len(cmds))
		for i, c := range cmds {
			single[i] = cmdLog(uint64(i+1), c)
		}
		var grouped []*raft.Log
		var sizes []int // commands per grouped entry; 0: a plain entry
		for rest := cmds; len(rest) > 0; {
			n := min(1+rng.IntN(40), len(rest))
			idx := uint64(len(grouped) + 1)
			if n == 1 && rng.IntN(2) == 0 {
				grouped, sizes = append(grouped, cmdLog(idx, rest[0])), append(sizes, 0)
			} else {
				multi := mustEncode(t, &Command{Op: OpMulti, Multi: rest[:n]})
				grouped, sizes = append(grouped, cmdLog(idx, multi)), append(sizes, n)
			}
			rest = rest[n:]
		}

		a := mustOpen(t, testConfig(1, t.TempDir()), nil)
		b := mustOpen(t, testConfig(1, t.TempDir()), nil)
		m := newModel()
		resA := applyRuns(t, a, single, rng)
		resB := applyRuns(t, b, grouped, rng)
		var flat []*Result
		for i, r := range resB {
			if d := diffResult(r, m.apply(grouped[i])); d != "" {
				t.Fatalf("seed %d entry %d: fsm vs model: %s", seed, i+1, d)
			}
			if sizes[i] == 0 {
				flat = append(flat, r.(*Result))
				continue
			}
			rs, ok := r.([]*Result)
			if !ok || len(rs) != sizes[i] {
				t.Fatalf("seed %d entry %d: response %#v, want %d results", seed, i+1, r, sizes[i])
			}
			flat = append(flat, rs...)
		}
		multis, succeeded := 0, 0
		for _, n := range sizes {
			if n > 0 {
				multis++
			}
		}
		for i := range cmds {
			ra, rb := *resA[i].(*Result), *flat[i]
			ra.Index, rb.Index = 0, 0
			if d := diffResult(&ra, &rb); d != "" {
				t.Fatalf("seed %d command %d: separate vs multi: %s", seed, i, d)
			}
			if ra.Err == nil && ra.Succeeded {
				succeeded++
			}
		}
		if d := diffKVs(mustDump(t, a), mustDump(t, b)); d != "" {
			t.Fatalf("seed %d: separate vs multi state: %s", seed, d)
		}
		if d := diffKVs(mustDump(t, b), m.dump()); d != "" {
			t.Fatalf("seed %d: fsm vs model state: %s", seed, d)
		}
		if got, want := b.AppliedIndex(), uint64(len(grouped)); got != want {
			t.Fatalf("seed %d: applied index %d, want %d", seed, got, want)
		}
		if multis < 50 || succeeded < len(cmds)/3 {
			t.Fatalf("seed %d: weak mix: %d multi entries, %d of %d commands succeeded", seed, multis, succeeded, len(cmds))
		}
	}
}

// TestMultiSubCommandsIndependent: each command of an OpMulti gets its own
// result; a rejected one (malformed, invalid, not coalescable, failed
// guard) writes nothing and does not stop the others, and later commands
// see the writes of earlier ones.
func TestMultiSubCommandsIndependent(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	k := "\x20k"
	redisSet := &Command{Op: OpRedis, Redis: &RedisTx{Cmds: []RedisArgv{{[]byte("SET"), []byte("a"), []byte("1")}}}}
	multi := multiCmd(
		batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte(k)}}, put(k, "1")),
		batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte(k)}}, put(k, "2"), put("\x20x", "")),
		batchCmd(nil, put("\x20y", "y"), put("\x00applied", "x")),
		redisSet,
		multiCmd(batchCmd(nil, put("\x20z", "z"))),
		&Command{Op: OpNoop},
		batchCmd([]Guard{{Kind: GuardEquals, Key: []byte(k), Value: []byte("1")}}, put("\x20w", "w"), del(k)),
	)
	multi.Multi = append(multi.Multi, []byte{commandVersion, 0xa0}, nil)
	res := f.ApplyBatch([]*raft.Log{cmdLog(1, mustEncode(t, multi))})
	rs, ok := res[0].([]*Result)
	if !ok || len(rs) != 9 {
		t.Fatalf("response %#v, want 9 results", res[0])
	}
	want := []struct {
		succeeded   bool
		failedGuard int
		deleted     int
		err         error
		msg         string
	}{
		{succeeded: true, failedGuard: -1},
		{failedGuard: 0},
		{failedGuard: -1, err: ErrInvalidCommand, msg: "reserved meta table"},
		{failedGuard: -1, err: ErrInvalidCommand, msg: "op redis cannot be part of a multi"},
		{failedGuard: -1, err: ErrInvalidCommand, msg: "op multi cannot be part of a multi"},
		{succeeded: true, failedGuard: -1},
		{succeeded: true, failedGuard: -1, deleted: 1},
		{failedGuard: -1, err: ErrMalformedCommand, msg: "not in canonical form"},
		{failedGuard: -1, err: ErrMalformedCommand, msg: "empty"},
	}
	for i, w := range want {
		r := rs[i]
		if r.Index != 1 || r.Succeeded != w.succeeded || r.FailedGuard != w.failedGuard || r.Deleted != w.deleted ||
			!errors.Is(r.Err, w.err) || (w.err != nil && !strings.Contains(r.Err.Error(), w.msg)) {
			t.Errorf("command %d: %+v, want %+v", i, *r, w)
		}
	}
	kvs := mustDump(t, f)
	if len(kvs) != 1 || string(kvs[0].Key) != "\x20w" || f.AppliedIndex() != 1 {
		t.Fatalf("state %q at index %d, want only \\x20w at 1", kvs, f.AppliedIndex())
	}

	// An OpMulti over its bounds is rejected whole: one Result, no writes.
	tooMany := &Command{Op: OpMulti, Multi: make([][]byte, MaxMultiCmds+1)}
	for i := range tooMany.Multi {
		tooMany.Multi[i] = mustEncode(t, batchCmd(nil, put("\x20v", "v")))
	}
	res = f.ApplyBatch([]*raft.Log{cmdLog(2, mustEncode(t, tooMany))})
	if r, ok := res[0].(*Result); !ok || !errors.Is(r.Err, ErrInvalidCommand) {
		t.Fatalf("oversized multi: %#v, want an invalid-command Result", res[0])
	}
	if d := diffKVs(mustDump(t, f), kvs); d != "" || f.AppliedIndex() != 2 {
		t.Fatalf("oversized multi changed state (%s) or index %d", d, f.AppliedIndex())
	}
}

// BenchmarkApplyMulti compares applying 32 puts as 32 entries with applying
// them as one OpMulti entry (one ApplyBatch run either way).
func BenchmarkApplyMulti(b *testing.B) {
	value := make([]byte, 256)
	cmds := make([][]byte, 32)
	for i := range cmds {
		cmds[i] = mustEncode(b, batchCmd(nil, Mutation{Kind: MutPut, Key: []byte{0x20, byte(i), 'k'}, Value: value}))
	}
	multi := mustEncode(b, &Command{Op: OpMulti, Multi: cmds})
	for _, mode := range []string{"entries", "multi"} {
		b.Run("mode="+mode, func(b *testing.B) {
			f := mustOpen(b, testConfig(1, b.TempDir()), nil)
			var index uint64
			b.ReportAllocs()
			for b.Loop() {
				var logs []*raft.Log
				if mode == "multi" {
					index++
					logs = []*raft.Log{cmdLog(index, multi)}
				} else {
					logs = make([]*raft.Log, len(cmds))
					for i, c := range cmds {
						index++
						logs[i] = cmdLog(index, c)
					}
				}
				f.ApplyBatch(logs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(cmds)), "ns/cmd")
		})
	}
}
