package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// checkIDFilter fails unless the filter may have every transaction and
// usage event the DB holds: its "absent" must be exact.
func checkIDFilter(t testing.TB, f *FSM) {
	t.Helper()
	for _, tb := range []byte{keys.TableTransactions, keys.TableUsageEvents} {
		lo := keys.TablePrefix(tb)
		it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keys.PrefixEnd(lo)})
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			if !f.ids.mayHave(it.Key()) {
				_ = it.Close()
				t.Fatalf("the id filter says %x is absent; the DB has it", it.Key())
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestIDFilter(t *testing.T) {
	var f idFilter
	key := func(i int) []byte {
		if i%2 == 0 {
			k, _ := keys.UsageEvent(fmt.Sprintf("ev-%d", i))
			return k
		}
		var id keys.TransactionID
		binary.BigEndian.PutUint64(id[8:], uint64(i))
		return keys.Transaction(id)
	}
	if f.mayHave(key(1)) {
		t.Fatal("an empty filter may have a key")
	}
	if !f.mayHave(keys.Account(acct(1))) {
		t.Fatal("a key of another table must always be maybe")
	}
	const n = 3 * idFilterFirstSegment // three segments
	for i := range n {
		f.add(key(i))
	}
	if len(f.segs) != 2 {
		t.Fatalf("%d segments for %d keys, want 2", len(f.segs), n)
	}
	for i := range n {
		if !f.mayHave(key(i)) {
			t.Fatalf("false negative for key %d", i)
		}
	}
	fp := 0
	for i := n; i < 2*n; i++ {
		if f.mayHave(key(i)) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 2*2*idFilterFalsePos { // two segments
		t.Fatalf("false positive rate %.4f", rate)
	}
	// Past the bound it turns off: every answer is maybe.
	f.total = maxIDFilterKeys
	f.add(key(2 * n))
	if !f.off || f.segs != nil || !f.mayHave(key(2*n+1)) {
		t.Fatalf("past the bound: off %v, %d segments", f.off, len(f.segs))
	}
	f.reset()
	if f.off || f.mayHave(key(1)) {
		t.Fatal("reset: still off, or not empty")
	}
}

// TestIDFilterReads: with the account cached and the filter built, a new
// charge reads nothing from Pebble.
func TestIDFilterReads(t *testing.T) {
	f := chargedFSM(t)
	checkIDFilter(t, f)
	b := f.db.NewIndexedBatch()
	defer b.Close()
	ch := &change{b: b, acct: &f.accounts, ids: &f.ids}
	c := processUsageCmd(0, 3, 4, 100, 80)
	if balance, err := ch.processUsage(c.Event, c.Tx, c.Time); err != nil || balance != 600 {
		t.Fatalf("charge: balance %d, %v; want 600", balance, err)
	}
	if ch.reads != 0 {
		t.Fatalf("%d point reads, want 0", ch.reads)
	}
	// The same event again is read (the filter has it) and is a retry.
	c = processUsageCmd(0, 1, 2, 300, 90)
	if balance, err := ch.processUsage(c.Event, c.Tx, c.Time); err != nil || balance != 700 {
		t.Fatalf("retry: balance %d, %v; want 700", balance, err)
	}
	if ch.reads != 2 {
		t.Fatalf("retry: %d point reads, want 2 (event, transaction)", ch.reads)
	}
}

// TestIDFilterCoherent: every path that stores a transaction or usage event
// other than a change adds it to the filter, so that the next charge of
// that event is a duplicate, not a second charge.
func TestIDFilterCoherent(t *testing.T) {
	isDup := func(t *testing.T, r *Result) {
		t.Helper()
		var de *DuplicateEventError
		if !errors.As(r.Err, &de) {
			t.Fatalf("charge of a recorded event: %+v, want a duplicate", r)
		}
	}
	funded := func(t *testing.T, f *FSM) {
		t.Helper()
		if r := f.Apply(cmdLog(1, mustEncode(t, putAccountCmd(account(0, 1000, 1500, 500))))).(*Result); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	t.Run("raw batch", func(t *testing.T) {
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		funded(t, f)
		ek, _ := keys.UsageEvent(usageEvent(0, 1).EventID)
		v, err := records.Encode(usageEvent(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		if r := f.Apply(cmdLog(2, mustEncode(t, batchCmd(nil, Mutation{Kind: MutPut, Key: ek, Value: v})))).(*Result); !r.Succeeded {
			t.Fatalf("raw batch: %+v", r)
		}
		checkIDFilter(t, f)
		isDup(t, f.Apply(cmdLog(3, mustEncode(t, processUsageCmd(0, 1, 2, 300, 70)))).(*Result))
	})
	t.Run("reopen", func(t *testing.T) {
		dir := t.TempDir()
		f, err := open(testConfig(1, dir), nil)
		if err != nil {
			t.Fatal(err)
		}
		funded(t, f)
		if r := f.Apply(cmdLog(2, mustEncode(t, processUsageCmd(0, 1, 2, 300, 70)))).(*Result); r.Err != nil {
			t.Fatal(r.Err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		f = mustOpen(t, testConfig(1, dir), nil)
		checkIDFilter(t, f)
		isDup(t, f.Apply(cmdLog(3, mustEncode(t, processUsageCmd(0, 1, 5, 300, 80)))).(*Result))
	})
	t.Run("restore", func(t *testing.T) {
		leader := mustOpen(t, testConfig(1, t.TempDir()), nil)
		funded(t, leader)
		for i := uint64(2); i <= 10; i++ {
			c := &Command{Op: OpNoop}
			if i == 2 {
				c = processUsageCmd(0, 1, 2, 300, 70)
			}
			if r := leader.Apply(cmdLog(i, mustEncode(t, c))).(*Result); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		funded(t, f)
		if err := f.Restore(reader(snapshotBytes(t, leader))); err != nil {
			t.Fatal(err)
		}
		checkIDFilter(t, f)
		isDup(t, f.Apply(cmdLog(11, mustEncode(t, processUsageCmd(0, 1, 5, 300, 80)))).(*Result))
	})
	t.Run("ingest", func(t *testing.T) {
		S := shard.SlotSetOf(shard.SlotOf(func() []byte { a := acct(0); return a[:] }()))
		src := newReplica(t, 1, nil)
		dst := newReplica(t, 2, ptr(shard.AllSlots().Minus(S)))
		src.must(putAccountCmd(account(0, 1000, 1500, 500)))
		src.must(processUsageCmd(0, 1, 2, 300, 70))
		src.must(freezeCmd(7, S, 2, 7))
		var pairs []Pair
		if err := src.f.ExportChunks(t.Context(), 7, nil, Limits{}, 0, func(p []Pair) error { pairs = append(pairs, p...); return nil }); err != nil {
			t.Fatal(err)
		}
		dst.must(ingestCmd(7, S, pairs...))
		dst.must(adoptCmd(7, S))
		checkIDFilter(t, dst.f)
		isDup(t, dst.apply(processUsageCmd(0, 1, 5, 300, 80)))
	})
}

// BenchmarkIDFilter checks ids absent from a filter of 1M ids (five
// segments), as a new charge does twice, and adds one.
func BenchmarkIDFilter(b *testing.B) {
	var f idFilter
	var id keys.TransactionID
	for i := range 1 << 20 {
		binary.BigEndian.PutUint64(id[8:], uint64(i))
		f.add(keys.Transaction(id))
	}
	b.ReportAllocs()
	i, fp := uint64(1<<40), 0
	for b.Loop() {
		i++
		binary.BigEndian.PutUint64(id[8:], i)
		k := keys.Transaction(id)
		if f.mayHave(k) {
			fp++
		}
	}
	b.ReportMetric(float64(fp)/float64(b.N), "false-pos/op")
}
