package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// TestReadHistorySelectedEqualsFiltered: a selected read returns exactly
// the events a full read returns that the selector keeps, plus markers.
func TestReadHistorySelectedEqualsFiltered(t *testing.T) {
	r := newReplica(t, 1, nil)
	for i := range 30 {
		rk := []byte(fmt.Sprintf("u%d", i%3))
		r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV(rk, []byte(fmt.Sprintf("k%d", i))), Value: []byte{byte(i)}},
			Mutation{Kind: MutDelete, Key: keys.KV(rk, []byte("x"))}))
	}
	sel := func(rk, key []byte) bool { return string(rk) == "u1" }
	var want []Event
	for _, e := range allHistory(t, r.f, 0) {
		if e.Kind != EventPut && e.Kind != EventDelete || sel(e.RoutingKey, e.Key) {
			want = append(want, e)
		}
	}
	var got []Event
	if err := r.f.ReadHistorySelected(0, r.f.AppliedIndex(), sel, func(rev uint64, evs []Event) error {
		got = append(got, evs...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) < 10 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("selected read:\n got %v\nwant %v", got, want)
	}
}

// TestReadHistorySelectedSkipsValues: a catch-up of one key over a
// history of another routing key's large values copies none of them
// (issue 37 item 8: each catch-up copied and decoded every record, so
// 1,200 watches from revision 0 took a node to 6.7 GB). It fails when
// the read copies each record or decodes every event's value.
//
// Pebble's own reads are kept out of the figure: its first memtable is
// 256 KiB and grows, so some of the history is flushed in the background,
// and a read of a table's blocks not yet cached allocates them. The test
// flushes everything, reads once to fill the block cache (129 MiB here),
// and takes the least of three reads, so a background table-stats pass
// does not count either. Copying the records allocates 16 MiB every read.
func TestReadHistorySelectedSkipsValues(t *testing.T) {
	cfg := testConfig(1, t.TempDir())
	cfg.MemTableSize = 128 << 20
	r := &replica{t: t, f: mustOpen(t, cfg, nil)}
	big := bytes.Repeat([]byte{'v'}, 1<<20)
	for i := range 16 {
		r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte("other"), []byte(fmt.Sprintf("k%d", i))), Value: big}))
	}
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte("me"), []byte("a")), Value: []byte("1")}))
	mine := func(rk, key []byte) bool { return string(rk) == "me" }
	if err := r.f.db.Flush(); err != nil {
		t.Fatal(err)
	}
	read := func() {
		n := 0
		if err := r.f.ReadHistorySelected(0, r.f.AppliedIndex(), mine, func(rev uint64, evs []Event) error {
			n += len(evs)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("selected %d events, want 1", n)
		}
	}
	read() // fills the block cache
	allocated := uint64(math.MaxUint64)
	for range 3 {
		allocated = min(allocated, allocatedBy(read))
	}
	// The 16 MiB of values must not be copied.
	if allocated > 4<<20 {
		t.Fatalf("a selected read over 16 MiB of other keys' values allocated %d bytes", allocated)
	}
	t.Logf("selected read allocated %d bytes", allocated)
}

// allocatedBy returns the bytes the heap allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestListingPages: a listing streams its range in pages within the byte
// bound, from one snapshot (writes after it opened are not seen), and
// ends with ErrClosed when the state machine closes.
func TestListingPages(t *testing.T) {
	r := newReplica(t, 1, nil)
	rk := []byte("u")
	val := bytes.Repeat([]byte{'x'}, 1000)
	for i := range 50 {
		r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV(rk, []byte(fmt.Sprintf("k%02d", i))), Value: val}))
	}
	p := keys.KVPrefix(rk, nil)
	l, err := r.f.OpenListing(p, keys.PrefixEnd(p))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Revision() != 50 {
		t.Fatalf("revision %d, want 50", l.Revision())
	}
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV(rk, []byte("k99")), Value: val})) // after the snapshot
	var all []KV
	pages := 0
	for done := false; !done; {
		var kvs []KV
		kvs, done, err = l.Next(1000, 8000)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, kv := range kvs {
			size += len(kv.Key) + len(kv.Value) + listItemOverhead
		}
		if size > 8000 || len(kvs) == 0 && !done {
			t.Fatalf("page of %d items, %d bytes", len(kvs), size)
		}
		all = append(all, kvs...)
		pages++
	}
	if len(all) != 50 || pages < 7 {
		t.Fatalf("%d keys in %d pages, want 50 in 7 or more", len(all), pages)
	}
	for i, kv := range all {
		if _, k, _ := keys.DecodeKV(kv.Key); string(k) != fmt.Sprintf("k%02d", i) {
			t.Fatalf("key %d is %q", i, k)
		}
	}
	// One item over the bound still makes a page.
	l2, err := r.f.OpenListing(p, keys.PrefixEnd(p))
	if err != nil {
		t.Fatal(err)
	}
	if kvs, _, err := l2.Next(10, 10); err != nil || len(kvs) != 1 {
		t.Fatalf("page over the bound: %d items, %v", len(kvs), err)
	}
	if err := r.f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l2.Next(10, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	l2.Close()
}

// FuzzDecodeHistorySelected: a selected decode agrees with the full
// decode filtered by the selector, errors included, and its events own
// their memory (the record may be overwritten).
func FuzzDecodeHistorySelected(f *testing.F) {
	var h histRecorder
	h.reset()
	k := keys.KV([]byte("u"), []byte("k"))
	{
		b := mustOpen(f, testConfig(1, f.TempDir()), nil).db.NewBatch()
		_ = b.Set(k, []byte("v"), nil)
		_ = b.Delete(keys.KV([]byte("w"), []byte("z")), nil)
		_ = b.Set([]byte{keys.TablePools, 'p'}, []byte("pool"), nil)
		if err := h.addWrites(append([]byte(nil), b.Repr()[12:]...), 1, []byte("pools")); err != nil {
			f.Fatal(err)
		}
		_ = b.Close()
	}
	h.addMarker(0, EventAdopted, 7, shard.AllSlots())
	f.Add(h.buf, byte('u'))
	f.Add([]byte{historyVersion}, byte(0))
	f.Add([]byte{historyVersion, 0, 1, 0, 1, 0x20}, byte('p'))
	f.Fuzz(func(t *testing.T, data []byte, first byte) {
		sel := func(rk, key []byte) bool { return len(rk) > 0 && rk[0] == first }
		full, ferr := DecodeHistory(1, bytes.Clone(data))
		rec := bytes.Clone(data)
		got, gerr := decodeHistory(1, rec, sel)
		if (ferr == nil) != (gerr == nil) {
			t.Fatalf("full decode %v, selected %v", ferr, gerr)
		}
		if ferr != nil {
			return
		}
		for i := range rec {
			rec[i] = 0xff
		}
		var want []Event
		for _, e := range full {
			if e.Kind != EventPut && e.Kind != EventDelete || sel(e.RoutingKey, e.Key) {
				want = append(want, e)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("selected decode\n got %v\nwant %v", got, want)
		}
	})
}
