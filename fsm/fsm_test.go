package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
)

// TestDeterminism feeds one random log to an FSM in random runs, to another
// entry by entry, and to the reference model: responses, dumps and applied
// indexes must agree.
func TestDeterminism(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 42))
		logs := genLog(rng, 2000)

		a := mustOpen(t, testConfig(1, t.TempDir()), nil)
		b := mustOpen(t, testConfig(1, t.TempDir()), nil)
		m := newModel()

		resA := applyRuns(t, a, logs, rng)
		var stats [4]int // succeeded, guard failed, rejected, nil
		for i, l := range logs {
			rb := b.Apply(l)
			rm := m.apply(l)
			if d := diffResult(resA[i], rb); d != "" {
				t.Fatalf("seed %d index %d: batched vs single: %s", seed, l.Index, d)
			}
			if d := diffResult(rb, rm); d != "" {
				t.Fatalf("seed %d index %d: fsm vs model: %s", seed, l.Index, d)
			}
			switch r, _ := rm.(*Result); {
			case r == nil:
				stats[3]++
			case r.Err != nil:
				stats[2]++
			case r.Succeeded:
				stats[0]++
			default:
				stats[1]++
			}
		}
		dumpA, dumpB := mustDump(t, a), mustDump(t, b)
		if d := diffKVs(dumpA, dumpB); d != "" {
			t.Fatalf("seed %d: dumps differ: %s", seed, d)
		}
		if d := diffKVs(dumpA, m.dump()); d != "" {
			t.Fatalf("seed %d: fsm vs model: %s", seed, d)
		}
		if a.AppliedIndex() != 2000 || b.AppliedIndex() != 2000 {
			t.Fatalf("applied index %d, %d, want 2000", a.AppliedIndex(), b.AppliedIndex())
		}
		// The mix must exercise every outcome.
		for i, n := range stats {
			if n < 20 {
				t.Fatalf("seed %d: outcome %d seen only %d times: %v", seed, i, n, stats)
			}
		}
	}
}

// TestGuardsSeeEarlierEntriesOfTheRun checks that a guard sees writes of
// earlier entries in the same ApplyBatch run, and the Deleted count.
func TestGuardsSeeEarlierEntriesOfTheRun(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	k := "\x20k"
	res := f.ApplyBatch([]*raft.Log{
		cmdLog(1, mustEncode(t, batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte(k)}}, put(k, "1")))),
		cmdLog(2, mustEncode(t, batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte(k)}}, put(k, "2")))),
		cmdLog(3, mustEncode(t, batchCmd([]Guard{{Kind: GuardEquals, Key: []byte(k), Value: []byte("1")}}, del(k), del(k), del("\x20other")))),
		cmdLog(4, mustEncode(t, batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20x")}, {Kind: GuardExists, Key: []byte(k)}}, put(k, "4")))),
	})
	want := []Result{
		{Index: 1, Succeeded: true, FailedGuard: -1},
		{Index: 2, FailedGuard: 0},
		{Index: 3, Succeeded: true, FailedGuard: -1, Deleted: 1},
		{Index: 4, FailedGuard: 0},
	}
	for i, w := range want {
		if d := diffResult(res[i], &w); d != "" {
			t.Errorf("entry %d: %s", i+1, d)
		}
	}
	if kvs := mustDump(t, f); len(kvs) != 0 {
		t.Fatalf("dump %q, want empty", kvs)
	}
}

// TestReplaySkip: entries at or below the applied index are skipped after a
// reopen, as when raft replays its log on restart.
func TestReplaySkip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	logs := genLog(rng, 150)
	dir := t.TempDir()

	f, err := open(testConfig(3, dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	applyRuns(t, f, logs[:100], rng)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = mustOpen(t, testConfig(3, dir), nil)
	if got := f.AppliedIndex(); got != 100 {
		t.Fatalf("applied index after reopen %d, want 100", got)
	}
	res := applyRuns(t, f, logs, rng)
	checkAccountCache(t, f)
	checkIDFilter(t, f)
	for i, r := range res[:100] {
		if r != nil {
			t.Fatalf("replayed entry %d returned %+v, want nil", i+1, r)
		}
	}

	once := mustOpen(t, testConfig(3, t.TempDir()), nil)
	applyRuns(t, once, logs, rng)
	if d := diffKVs(mustDump(t, f), mustDump(t, once)); d != "" {
		t.Fatalf("replayed state differs: %s", d)
	}
	if f.AppliedIndex() != 150 {
		t.Fatalf("applied index %d, want 150", f.AppliedIndex())
	}
}

func TestWrongShard(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(testConfig(1, dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testConfig(2, dir)); !errors.Is(err, ErrWrongShard) {
		t.Fatalf("open with another shard: %v, want ErrWrongShard", err)
	}
	f, err = Open(testConfig(1, dir))
	if err != nil {
		t.Fatalf("reopen with the right shard: %v", err)
	}
	_ = f.Close()
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: "x", Limits: Limits{MaxKeySize: maxKeySizeCap + 1}},
		{Dir: "x", Limits: Limits{MaxValueSize: maxValueSizeCap + 1}},
		{Dir: "x", Limits: Limits{MaxBatchOps: maxBatchOpsCap + 1}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
		if _, err := Open(c); err == nil {
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
	if err := (Config{Dir: "x"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	if l := (Limits{}).WithDefaults(); l != (Limits{4096, 1 << 20, 1024}) {
		t.Errorf("defaults %+v", l)
	}
}

func TestGetScan(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil,
		put("\x20a", "1"), put("\x20b", ""), put("\x20c", "3"), put("\x21a", "4"), put("\xff\xff", "5")))))

	if _, err := f.Get([]byte("\x20z")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get absent: %v", err)
	}
	for _, k := range []string{"\x00applied", "\x00shard", ""} {
		if _, err := f.Get([]byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get meta %q: %v, want ErrNotFound", k, err)
		}
	}
	v, err := f.Get([]byte("\x20b"))
	if err != nil || v == nil || len(v) != 0 {
		t.Fatalf("Get empty value: %q %v", v, err)
	}
	v, _ = f.Get([]byte("\x20a"))
	v[0] = 'x' // a copy
	if v2, _ := f.Get([]byte("\x20a")); string(v2) != "1" {
		t.Fatalf("Get returned a shared slice")
	}

	keys := func(kvs []KV) (s []string) {
		for _, kv := range kvs {
			s = append(s, string(kv.Key))
		}
		return s
	}
	for _, tc := range []struct {
		start, end string
		limit      int
		want       []string
	}{
		{"", "", 0, []string{"\x20a", "\x20b", "\x20c", "\x21a", "\xff\xff"}},
		{"\x20", "\x21", 0, []string{"\x20a", "\x20b", "\x20c"}},
		{"\x20b", "\x20c", 0, []string{"\x20b"}},
		{"\x20", "\x21", 2, []string{"\x20a", "\x20b"}},
		{"\x00", "\x01", 0, nil},
		{"\x20c", "\x20a", 0, nil},
		{"\x21", "", 0, []string{"\x21a", "\xff\xff"}},
	} {
		kvs, err := f.Scan([]byte(tc.start), []byte(tc.end), tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(kvs); !slices.Equal(got, tc.want) {
			t.Errorf("Scan(%q, %q, %d) = %q, want %q", tc.start, tc.end, tc.limit, got, tc.want)
		}
	}
}

func TestWaitApplied(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	ctx := context.Background()
	if err := f.WaitApplied(ctx, 0); err != nil {
		t.Fatalf("WaitApplied(0): %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- f.WaitApplied(ctx, 3) }()
	f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil, put("\x20a", "1")))))
	f.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogNoop}, {Index: 3, Type: raft.LogConfiguration}})
	if err := <-done; err != nil {
		t.Fatalf("WaitApplied on apply: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- f.WaitApplied(cctx, 10) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitApplied on cancel: %v", err)
	}

	go func() { done <- f.WaitApplied(ctx, 10) }()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitApplied on close: %v", err)
	}
}

func TestClosed(t *testing.T) {
	f, err := Open(testConfig(1, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.Get([]byte("\x20a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get: %v", err)
	}
	if _, err := f.Dump(); !errors.Is(err, ErrClosed) {
		t.Errorf("Dump: %v", err)
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Errorf("Snapshot: %v", err)
	}
	if r, _ := f.Apply(cmdLog(1, []byte{1})).(*Result); r == nil || !errors.Is(r.Err, ErrClosed) {
		t.Errorf("Apply: %+v", r)
	}
	if err := f.WaitApplied(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitApplied: %v", err)
	}
}

// TestCrashRecovery loses every unsynced write (as SIGKILL or power loss
// may) and checks that the DB holds a consistent prefix, that a snapshot's
// state survived, and that replaying the log converges to the model.
func TestCrashRecovery(t *testing.T) {
	for _, pct := range []int{0, 50, 100} {
		rng := rand.New(rand.NewPCG(uint64(pct), 9))
		logs := genLog(rng, 1200)
		m := newModel()
		for _, l := range logs {
			m.apply(l)
		}
		fs := vfs.NewCrashableMem()
		cfg := testConfig(5, "db")
		cfg.MemTableSize = 256 << 10 // force flushes and WAL rotations
		f := mustOpen(t, cfg, fs)
		applyRuns(t, f, logs[:500], rng)
		snap, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		snapIndex := snap.(*fsmSnapshot).index
		snap.Release()
		applyRuns(t, f, logs[500:], rng)

		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(1, uint64(pct)))})
		g := mustOpen(t, cfg, crashed)
		if got := g.AppliedIndex(); got < snapIndex || got > 1200 {
			t.Fatalf("pct %d: recovered applied index %d, snapshot was at %d", pct, got, snapIndex)
		}
		t.Logf("pct %d: snapshot at %d, recovered applied index %d", pct, snapIndex, g.AppliedIndex())
		// The recovered state is exactly the model's at the recovered index.
		pm := newModel()
		for _, l := range logs[:g.AppliedIndex()] {
			pm.apply(l)
		}
		if d := diffKVs(mustDump(t, g), pm.dump()); d != "" {
			t.Fatalf("pct %d: recovered state is not the prefix at %d: %s", pct, g.AppliedIndex(), d)
		}
		// Raft replays from its snapshot; replay everything.
		applyRuns(t, g, logs[snapIndex:], rng)
		if d := diffKVs(mustDump(t, g), m.dump()); d != "" {
			t.Fatalf("pct %d: after replay: %s", pct, d)
		}
	}
}

// TestStorageErrorIsSticky: after a storage error the FSM refuses applies
// until a Restore succeeds.
func TestStorageErrorIsSticky(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	boom := errors.New("disk on fire")
	f.failed.Store(&boom)
	r, _ := f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil, put("\x20a", "1"))))).(*Result)
	if r == nil || !errors.Is(r.Err, boom) || f.AppliedIndex() != 0 {
		t.Fatalf("apply after a storage error: %+v, applied %d", r, f.AppliedIndex())
	}
	src := mustOpen(t, testConfig(1, t.TempDir()), nil)
	src.Apply(cmdLog(5, mustEncode(t, batchCmd(nil, put("\x20a", "1")))))
	if err := f.Restore(persist(t, src)); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.Apply(cmdLog(6, mustEncode(t, batchCmd(nil, put("\x20b", "2"))))).(*Result); r == nil || !r.Succeeded {
		t.Fatalf("apply after restore: %+v", r)
	}
}

func TestOpenWithSharedCache(t *testing.T) {
	c := pebble.NewCache(8 << 20)
	defer c.Unref()
	dir := t.TempDir()
	for i := range 3 {
		cfg := testConfig(uint32(i), filepath.Join(dir, string(rune('a'+i))))
		cfg.Cache = c
		f := mustOpen(t, cfg, nil)
		f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil, put("\x20a", "1")))))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaitAppliedManyWaiters: every waiter wakes; the deadline only turns a
// lost wake-up into a failure instead of a hang.
func TestWaitAppliedManyWaiters(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- f.WaitApplied(ctx, uint64(1+i%10)) }()
	}
	for i := uint64(1); i <= 10; i++ {
		f.Apply(&raft.Log{Index: i, Type: raft.LogNoop})
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkApplyBatchLarge applies runs of 64 KiB puts, the values of
// scripts/large-shard.sh: what a replica catching up on a large shard
// applies. A run of 256 entries is a follower's batch (MaxAppendEntries,
// cluster/replica); one of 1024 spans several Pebble batches at any
// maxRunBytes. The peak heap per op shows the Pebble batch's size.
func BenchmarkApplyBatchLarge(b *testing.B) {
	for _, run := range []int{256, 1024} {
		b.Run(fmt.Sprintf("run=%d", run), func(b *testing.B) {
			f := mustOpen(b, testConfig(1, b.TempDir()), nil)
			value := bytes.Repeat([]byte{0xab}, 64<<10)
			data := make([][]byte, run)
			for i := range data {
				key := keys.KV([]byte(fmt.Sprintf("user-%d", i%100)), []byte(fmt.Sprintf("key-%d", i)))
				data[i] = mustEncode(b, batchCmd(nil, Mutation{Kind: MutPut, Key: key, Value: value}))
			}
			logs := make([]*raft.Log, run)
			for i := range logs {
				logs[i] = &raft.Log{Type: raft.LogCommand, Data: data[i]}
			}
			b.ReportAllocs()
			b.SetBytes(int64(run) * int64(len(value)))
			b.ResetTimer()
			var index uint64
			for i := 0; i < b.N; i++ {
				for _, l := range logs {
					index++
					l.Index = index
				}
				for _, r := range f.ApplyBatch(logs) {
					if !r.(*Result).Succeeded {
						b.Fatal(r)
					}
				}
			}
		})
	}
}

func BenchmarkApplyBatch(b *testing.B) {
	f := mustOpen(b, testConfig(1, b.TempDir()), nil)
	value := bytes.Repeat([]byte{0xab}, 256)
	const run = 64
	data := make([][]byte, 4096)
	for i := range data {
		// Well-formed kv keys, as a client's puts carry (a malformed one
		// costs the history's routing-key decode an error to build).
		key := keys.KV([]byte(fmt.Sprintf("user-%d", i%100)), []byte(fmt.Sprintf("key-%d", i)))
		data[i] = mustEncode(b, batchCmd(nil, Mutation{Kind: MutPut, Key: key, Value: value}))
	}
	logs := make([]*raft.Log, run)
	for i := range logs {
		logs[i] = &raft.Log{Type: raft.LogCommand}
	}
	b.ReportAllocs()
	b.SetBytes(run * 256)
	b.ResetTimer()
	var index uint64
	for i := 0; i < b.N; i++ {
		for j, l := range logs {
			index++
			l.Index = index
			l.Data = data[(i*run+j)%len(data)]
		}
		for _, r := range f.ApplyBatch(logs) {
			if !r.(*Result).Succeeded {
				b.Fatal(r)
			}
		}
	}
}
