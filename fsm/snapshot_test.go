package fsm

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// fakeSink is a raft.SnapshotSink writing to memory.
type fakeSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *fakeSink) ID() string    { return "fake" }
func (s *fakeSink) Close() error  { s.closed = true; return nil }
func (s *fakeSink) Cancel() error { s.cancelled = true; return nil }

var _ raft.SnapshotSink = (*fakeSink)(nil)

// snapshotBytes takes, persists and releases a snapshot of f.
func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	var sink fakeSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func persist(t testing.TB, f *FSM) io.ReadCloser {
	return io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))
}

func reader(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// populated returns an FSM of shard 1 with the first n entries of a seeded
// random log applied, and the whole log (of 2n entries).
func populated(t testing.TB, seed uint64, n int) (*FSM, []*raft.Log) {
	rng := rand.New(rand.NewPCG(seed, 1))
	logs := genLog(rng, 2*n)
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	applyRuns(t, f, logs[:n], rng)
	return f, logs
}

func TestSnapshotRestore(t *testing.T) {
	a, logs := populated(t, 1, 800)
	want := mustDump(t, a)
	if len(want) < 10 {
		t.Fatalf("only %d keys", len(want))
	}
	snap := snapshotBytes(t, a)

	b := mustOpen(t, testConfig(1, t.TempDir()), nil)
	c, _ := populated(t, 2, 300) // other data, including keys starting 0xff
	for name, f := range map[string]*FSM{"fresh": b, "with other data": c} {
		if err := f.Restore(reader(snap)); err != nil {
			t.Fatalf("%s: Restore: %v", name, err)
		}
		if d := diffKVs(mustDump(t, f), want); d != "" {
			t.Fatalf("%s: restored state differs: %s", name, d)
		}
		if f.AppliedIndex() != 800 {
			t.Fatalf("%s: applied index %d, want 800", name, f.AppliedIndex())
		}
	}
	// All three continue identically.
	rng := rand.New(rand.NewPCG(3, 3))
	for _, f := range []*FSM{a, b, c} {
		applyRuns(t, f, logs[800:], rng)
	}
	if d := diffKVs(mustDump(t, a), mustDump(t, b)); d != "" {
		t.Fatal(d)
	}
	if d := diffKVs(mustDump(t, a), mustDump(t, c)); d != "" {
		t.Fatal(d)
	}
}

// TestSnapshotLargeRecords: records larger than the read chunk, and a
// restore spanning several 4 MiB batches.
func TestSnapshotLargeRecords(t *testing.T) {
	a := mustOpen(t, testConfig(1, t.TempDir()), nil)
	for i := range 6 {
		key := append([]byte{0x20, byte(i)}, bytes.Repeat([]byte{0xee}, 4094)...)
		val := bytes.Repeat([]byte{byte(i)}, 1<<20)
		a.Apply(cmdLog(uint64(i+1), mustEncode(t, batchCmd(nil, Mutation{Kind: MutPut, Key: key, Value: val}))))
	}
	b := mustOpen(t, testConfig(1, t.TempDir()), nil)
	if err := b.Restore(persist(t, a)); err != nil {
		t.Fatal(err)
	}
	if d := diffKVs(mustDump(t, a), mustDump(t, b)); d != "" || b.AppliedIndex() != 6 {
		t.Fatalf("%s, applied %d", d, b.AppliedIndex())
	}
}

// TestSnapshotIsPointInTime: applies after Snapshot do not leak into it.
func TestSnapshotIsPointInTime(t *testing.T) {
	a, logs := populated(t, 4, 300)
	want := mustDump(t, a)
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	applyRuns(t, a, logs[300:], rand.New(rand.NewPCG(1, 1)))
	var sink fakeSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	b := mustOpen(t, testConfig(1, t.TempDir()), nil)
	if err := b.Restore(reader(sink.Bytes())); err != nil {
		t.Fatal(err)
	}
	if d := diffKVs(mustDump(t, b), want); d != "" {
		t.Fatal(d)
	}
	if b.AppliedIndex() != 300 {
		t.Fatalf("applied index %d", b.AppliedIndex())
	}
}

// decodeAll reads a whole snapshot stream.
func decodeAll(b []byte) (snapshotHeader, []KV, error) {
	sr, err := newSnapshotReader(bytes.NewReader(b))
	if err != nil {
		return snapshotHeader{}, nil, err
	}
	var kvs []KV
	for {
		k, v, err := sr.next()
		if err == io.EOF {
			return sr.hdr, kvs, nil
		}
		if err != nil {
			return sr.hdr, kvs, err
		}
		if k[0] == metaPrefix { // the replicated meta records: owned slots, moves
			continue
		}
		kvs = append(kvs, KV{slices.Clone(k), slices.Clone(v)})
	}
}

func TestSnapshotCorruptionDetected(t *testing.T) {
	a, _ := populated(t, 5, 40)
	good := snapshotBytes(t, a)
	hdr, kvs, err := decodeAll(good)
	if err != nil || hdr.index != 40 || hdr.shard != 1 {
		t.Fatalf("decode good snapshot: %+v %v", hdr, err)
	}
	if d := diffKVs(kvs, mustDump(t, a)); d != "" {
		t.Fatal(d)
	}
	for i := range good {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := slices.Clone(good)
			bad[i] ^= x
			if _, _, err := decodeAll(bad); !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("byte %d ^ %#x: %v, want ErrBadSnapshot", i, x, err)
			}
		}
	}
	for n := range good {
		if _, _, err := decodeAll(good[:n]); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, _, err := decodeAll(append(slices.Clone(good), 0)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("trailing byte: %v", err)
	}

	// Restore of a snapshot corrupted in its records: ErrBadSnapshot, the
	// replica is unusable until a good Restore.
	b, _ := populated(t, 6, 20)
	bad := slices.Clone(good)
	bad[len(bad)-10] ^= 0x01
	if err := b.Restore(reader(bad)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore corrupt: %v", err)
	}
	if b.AppliedIndex() != 0 {
		t.Fatalf("applied index after failed restore %d", b.AppliedIndex())
	}
	if _, err := b.Get([]byte("\x20k00")); !errors.Is(err, ErrRestoring) {
		t.Fatalf("Get after failed restore: %v", err)
	}
	if r, _ := b.Apply(cmdLog(41, mustEncode(t, batchCmd(nil, put("\x20a", "1"))))).(*Result); r == nil || !errors.Is(r.Err, ErrRestoring) {
		t.Fatalf("Apply after failed restore: %+v", r)
	}
	if _, err := b.Snapshot(); !errors.Is(err, ErrRestoring) {
		t.Fatalf("Snapshot after failed restore: %v", err)
	}
	// A corrupt header is rejected before anything changes.
	c, _ := populated(t, 7, 20)
	before := mustDump(t, c)
	badHdr := slices.Clone(good)
	badHdr[9] ^= 0x01 // the applied index
	if err := c.Restore(reader(badHdr)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore bad header: %v", err)
	}
	if d := diffKVs(before, mustDump(t, c)); d != "" || c.AppliedIndex() != 20 {
		t.Fatalf("bad header changed state: %s, applied %d", d, c.AppliedIndex())
	}
	// The next Restore runs and succeeds.
	if err := b.Restore(reader(good)); err != nil {
		t.Fatal(err)
	}
	if d := diffKVs(mustDump(t, b), kvs); d != "" || b.AppliedIndex() != 40 {
		t.Fatalf("restore after failure: %s, applied %d", d, b.AppliedIndex())
	}
}

func TestRestoreOlderIsNoop(t *testing.T) {
	a, logs := populated(t, 8, 100)
	snap := snapshotBytes(t, a)
	applyRuns(t, a, logs[100:150], rand.New(rand.NewPCG(1, 1)))
	before := mustDump(t, a)
	for range 2 {
		if err := a.Restore(reader(snap)); err != nil {
			t.Fatal(err)
		}
		if d := diffKVs(before, mustDump(t, a)); d != "" || a.AppliedIndex() != 150 {
			t.Fatalf("restore of an older snapshot changed state: %s, applied %d", d, a.AppliedIndex())
		}
	}
	// Same index: also a no-op.
	if err := a.Restore(persist(t, a)); err != nil || a.AppliedIndex() != 150 {
		t.Fatalf("restore at the same index: %v, applied %d", err, a.AppliedIndex())
	}
}

func TestRestoreWrongShard(t *testing.T) {
	a, _ := populated(t, 9, 10)
	b := mustOpen(t, testConfig(2, t.TempDir()), nil)
	if err := b.Restore(persist(t, a)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore of another shard's snapshot: %v", err)
	}
	if b.AppliedIndex() != 0 {
		t.Fatal("state changed")
	}
}

// crashReader returns n bytes of b, then calls crash and fails.
type crashReader struct {
	b     []byte
	n     int
	crash func()
}

func (r *crashReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		if r.crash != nil {
			r.crash()
			r.crash = nil
		}
		return 0, errors.New("connection reset")
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b, r.n = r.b[k:], r.n-k
	return k, nil
}

// TestRestoreInterrupted crashes the process in the middle of a Restore
// over a replica holding other data: after reopening, the partial data is
// gone, AppliedIndex is 0, and the next Restore runs.
func TestRestoreInterrupted(t *testing.T) {
	a, _ := populated(t, 10, 200)
	want := mustDump(t, a)
	snap := snapshotBytes(t, a)

	rng := rand.New(rand.NewPCG(11, 1))
	fs := vfs.NewCrashableMem()
	cfg := testConfig(1, "db")
	c := mustOpen(t, cfg, fs)
	applyRuns(t, c, genLog(rng, 100), rng)

	var crashed *vfs.MemFS
	r := &crashReader{b: snap, n: len(snap) / 2, crash: func() {
		crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
	}}
	if err := c.Restore(io.NopCloser(r)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("interrupted Restore: %v", err)
	}
	if c.AppliedIndex() != 0 {
		t.Fatalf("applied index during failed restore %d", c.AppliedIndex())
	}

	d := mustOpen(t, cfg, crashed)
	if d.AppliedIndex() != 0 {
		t.Fatalf("applied index after crash mid-restore %d, want 0", d.AppliedIndex())
	}
	if kvs := mustDump(t, d); len(kvs) != 0 {
		t.Fatalf("partial data kept: %d keys", len(kvs))
	}
	if err := d.Restore(reader(snap)); err != nil {
		t.Fatal(err)
	}
	if diff := diffKVs(mustDump(t, d), want); diff != "" || d.AppliedIndex() != 200 {
		t.Fatalf("after restore: %s, applied %d", diff, d.AppliedIndex())
	}

	// The same without a crash: close and reopen the FSM whose restore failed.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, cfg, fs)
	if c.AppliedIndex() != 0 || len(mustDump(t, c)) != 0 {
		t.Fatalf("reopen after failed restore: applied %d", c.AppliedIndex())
	}
}

// TestCloseWithUnreleasedSnapshot: Close releases pending snapshots; using
// them afterwards fails cleanly.
func TestCloseWithUnreleasedSnapshot(t *testing.T) {
	f, err := Open(testConfig(1, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil, put("\x20a", "1")))))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close with an unreleased snapshot: %v", err)
	}
	var sink fakeSink
	if err := snap.Persist(&sink); err == nil || !sink.cancelled {
		t.Fatalf("Persist after Close: %v, cancelled %v", err, sink.cancelled)
	}
	snap.Release()
	snap.Release()
}

// FuzzSnapshotDecode: arbitrary bytes never panic and fail with
// ErrBadSnapshot; records derived from the input, written by the
// snapshot writer, decode back exactly.
func FuzzSnapshotDecode(f *testing.F) {
	empty := mustOpen(f, testConfig(1, f.TempDir()), nil)
	f.Add(snapshotBytes(f, empty))
	small, _ := populated(f, 12, 8)
	f.Add(snapshotBytes(f, small))
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, _, err := decodeAll(data); err != nil && !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("error %v does not wrap ErrBadSnapshot", err)
		}

		// Round trip: split data into records at 0x2c bytes.
		seen := map[string]bool{}
		var kvs []KV
		for i, part := range bytes.Split(data, []byte{0x2c}) {
			k := append([]byte{0x20}, part...)
			if !seen[string(k)] {
				seen[string(k)] = true
				kvs = append(kvs, KV{k, bytes.Repeat(part, i%3)})
			}
		}
		slices.SortFunc(kvs, func(a, b KV) int { return bytes.Compare(a.Key, b.Key) })
		var buf bytes.Buffer
		hdr := snapshotHeader{shard: uint32(len(data)), index: uint64(len(data)) << 40}
		w := newSnapshotWriter(&buf, hdr.shard, hdr.index)
		for _, kv := range kvs {
			if err := w.record(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.finish(); err != nil {
			t.Fatal(err)
		}
		gotHdr, got, err := decodeAll(buf.Bytes())
		if err != nil {
			t.Fatalf("decode written snapshot: %v", err)
		}
		if gotHdr != hdr {
			t.Fatalf("header %+v, want %+v", gotHdr, hdr)
		}
		if d := diffKVs(got, kvs); d != "" {
			t.Fatal(d)
		}
	})
}
