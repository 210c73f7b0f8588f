package raftlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// pebbleBatchLimit is Pebble's batch size limit: a batch that grows to it
// panics (pebble.ErrBatchTooLarge).
const pebbleBatchLimit = 4 << 30

// batchSize is the size of the Pebble batch holding logs: its header and
// each record's kind, key and value with their length varints.
func batchSize(logs []*raft.Log) int {
	n := 12
	for _, l := range logs {
		n += 1 + uvarintLen(logKeyLen) + logKeyLen + uvarintLen(uint64(entryLen(l))) + entryLen(l)
	}
	return n
}

// bigEntries returns n entries from index 1 whose data are size bytes
// (one shared buffer, so that many large entries cost one allocation).
func bigEntries(n, size int) []*raft.Log {
	data := make([]byte, size)
	var ls []*raft.Log
	for i := range n {
		ls = append(ls, &raft.Log{Index: uint64(i + 1), Term: 3, Type: raft.LogCommand, Data: data})
	}
	return ls
}

// TestSplitLogsLargestValues: with the largest values the cluster allows
// (64 MiB, plus a request's framing) in a full append of hashicorp/raft
// (the cluster's MaxAppendEntries, 256), one batch would be 16 GiB, four
// times Pebble's limit; StoreLogs's runs keep every batch at MaxBatchBytes,
// or one entry, in order and complete.
func TestSplitLogsLargestValues(t *testing.T) {
	const maxAppendEntries, maxValue = 256, 64<<20 + 1<<20
	logs := bigEntries(maxAppendEntries, maxValue)
	if total := batchSize(logs); total < pebbleBatchLimit {
		t.Fatalf("the unsplit append is %d bytes: not over Pebble's limit, the test proves nothing", total)
	}
	runs := splitLogs(logs, MaxBatchBytes)
	var joined []*raft.Log
	for i, r := range runs {
		if len(r) == 0 {
			t.Fatalf("run %d is empty", i)
		}
		if n := batchSize(r); n >= pebbleBatchLimit || (len(r) > 1 && n > MaxBatchBytes+12) {
			t.Fatalf("run %d: %d entries, %d bytes", i, len(r), n)
		}
		joined = append(joined, r...)
	}
	if !slices.Equal(joined, logs) {
		t.Fatalf("the runs are not the append in order")
	}
	// Small entries: one run, so an ordinary append stays atomic.
	if runs := splitLogs(entries(1, maxAppendEntries), MaxBatchBytes); len(runs) != 1 {
		t.Fatalf("%d runs for 256 small entries, want 1", len(runs))
	}
	// The largest entry StoreLogs accepts fits a batch of its own.
	if n := 12 + 1 + 1 + logKeyLen + uvarintLen(MaxEntryBytes) + MaxEntryBytes; n >= pebbleBatchLimit {
		t.Fatalf("MaxEntryBytes %d does not fit a Pebble batch", MaxEntryBytes)
	}
}

// TestStoreLogsSplitsLargeAppends runs the splitting on Pebble with a
// lowered bound: an append over it is committed in several batches, each
// within the bound (or one entry), and reads back whole.
func TestStoreLogsSplitsLargeAppends(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	const bound = 16 << 10
	s.batchBytes = bound
	var sizes []int
	s.testCommitHook = func(lo, hi uint64) error { sizes = append(sizes, int(hi-lo+1)); return nil }
	g := group(t, s, 1)
	var logs []*raft.Log
	for i := range 100 {
		l := entry(uint64(i + 1))
		l.Data = make([]byte, 500+i*37) // 0.5 to 4 KiB
		for j := range l.Data {
			l.Data[j] = byte(i + j)
		}
		logs = append(logs, l)
	}
	huge := entry(101)
	huge.Data = make([]byte, 3*bound) // over the bound: a batch of its own
	logs = append(logs, huge, entry(102))
	if err := g.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	runs := splitLogs(logs, bound)
	if len(runs) < 10 || int(s.batches.Load()) != len(runs) || len(sizes) != len(runs) {
		t.Fatalf("%d batches committed (%v), %d runs planned; want the plan, over 10", s.batches.Load(), sizes, len(runs))
	}
	for i, r := range runs {
		if n := batchSize(r); len(r) > 1 && n > bound+12 {
			t.Errorf("run %d: %d entries in %d bytes, bound %d", i, len(r), n, bound)
		}
	}
	if r := runs[len(runs)-2]; len(r) != 1 || r[0] != huge {
		t.Errorf("the entry over the bound is not alone in its batch")
	}
	assertBounds(t, g, 1, 102)
	for _, want := range logs {
		var l raft.Log
		if err := g.GetLog(want.Index, &l); err != nil {
			t.Fatal(err)
		}
		assertLogEqual(t, want, &l)
	}
	// An ordinary append is one batch.
	before := s.batches.Load()
	if err := g.StoreLogs(entries(103, 130)); err != nil {
		t.Fatal(err)
	}
	if n := s.batches.Load() - before; n != 1 {
		t.Fatalf("28 small entries took %d batches", n)
	}
}

// TestStoreLogsEntryTooLarge: an entry over the entry bound is refused
// with ErrEntryTooLarge, and nothing of the append is stored.
func TestStoreLogsEntryTooLarge(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	s.entryBytes = 1 << 10
	g := group(t, s, 1)
	logs := entries(1, 3)
	logs[2].Data = make([]byte, 2<<10)
	if err := g.StoreLogs(logs); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("StoreLogs = %v, want ErrEntryTooLarge", err)
	}
	assertBounds(t, g, 0, 0)
}

// TestStoreLogsPartialFailure: a run that fails after earlier runs of the
// append committed leaves exactly their prefix, and the group refuses log
// writes until the store is reopened.
func TestStoreLogsPartialFailure(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	s.batchBytes = 4 << 10
	g := group(t, s, 1)
	if err := g.StoreLogs(entries(1, 10)); err != nil {
		t.Fatal(err)
	}
	logs := bigEntries(12, 1500)
	for i, l := range logs {
		l.Index = uint64(11 + i)
	}
	runs := splitLogs(logs, s.batchBytes)
	if len(runs) < 3 {
		t.Fatalf("%d runs, want 3 or more", len(runs))
	}
	stored := runs[0][0].Index + uint64(len(runs[0])+len(runs[1])) - 1
	boom := errors.New("injected")
	s.testCommitHook = func(lo, hi uint64) error {
		if lo > stored {
			return boom
		}
		return nil
	}
	if err := g.StoreLogs(logs); !errors.Is(err, boom) {
		t.Fatalf("StoreLogs = %v, want the injected error", err)
	}
	assertBounds(t, g, 1, stored)
	s.testCommitHook = nil
	if err := g.StoreLogs(entries(stored+1, stored+1)); !errors.Is(err, boom) {
		t.Errorf("StoreLogs after a partial append = %v, want refused", err)
	}
	if err := g.DeleteRange(1, 5); !errors.Is(err, boom) {
		t.Errorf("DeleteRange after a partial append = %v, want refused", err)
	}
	// A failure of the first run stores nothing and does not poison:
	// raft may retry.
	g2 := group(t, s, 2)
	s.testCommitHook = func(uint64, uint64) error { return boom }
	if err := g2.StoreLogs(logs); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	s.testCommitHook = nil
	if err := g2.StoreLogs(logs); err != nil {
		t.Fatalf("retry after a failed first run: %v", err)
	}
	s.Close()

	s2 := openTest(t, dir, nil)
	g = group(t, s2, 1)
	assertBounds(t, g, 1, stored)
	for i := uint64(1); i <= stored; i++ {
		var l raft.Log
		if err := g.GetLog(i, &l); err != nil {
			t.Fatalf("index %d: %v", i, err)
		}
	}
	if err := g.StoreLogs(entries(stored+1, stored+2)); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
}

// TestStoreLogsCrashBetweenRuns: a power loss while a split append is
// being committed leaves a contiguous prefix of it, never a gap.
func TestStoreLogsCrashBetweenRuns(t *testing.T) {
	for _, crashAt := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(crashAt), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			s := openTest(t, "/db", fs)
			s.batchBytes = 4 << 10
			g := group(t, s, 1)
			logs := bigEntries(20, 1000)
			runs := splitLogs(logs, s.batchBytes)
			var crashed *vfs.MemFS
			n := 0
			s.testCommitHook = func(lo, hi uint64) error {
				if n++; n == crashAt+1 {
					crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(crashAt), 0))})
				}
				return nil
			}
			if err := g.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			s.Close()
			var want uint64
			for _, r := range runs[:crashAt] {
				want += uint64(len(r))
			}
			s2 := openTest(t, "/db", crashed)
			g = group(t, s2, 1)
			first, _ := g.FirstIndex()
			last, _ := g.LastIndex()
			if first != 1 || last < want || last > uint64(len(logs)) {
				t.Fatalf("after a crash at run %d: bounds [%d, %d], want [1, >= %d]", crashAt, first, last, want)
			}
			for i := uint64(1); i <= last; i++ {
				var l raft.Log
				if err := g.GetLog(i, &l); err != nil {
					t.Fatalf("gap at %d of [1, %d]: %v", i, last, err)
				}
			}
		})
	}
}
