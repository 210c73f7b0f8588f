package fsm

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestExportState: the records ExportState streams, written with
// SnapshotWriter at the index it reports, are byte for byte the stream
// Persist writes of the same state, so Restore takes them; chunks stay
// within their bound.
func TestExportState(t *testing.T) {
	a, _ := populated(t, 7, 600)
	want := snapshotBytes(t, a)

	var buf bytes.Buffer
	var w *SnapshotWriter
	chunks := 0
	err := a.ExportState(context.Background(), 4<<10, func(index uint64) error {
		if index != a.AppliedIndex() {
			t.Errorf("index %d, applied %d", index, a.AppliedIndex())
		}
		w = NewSnapshotWriter(&buf, 1, index)
		return nil
	}, func(pairs []Pair) error {
		chunks++
		size := 0
		for _, p := range pairs {
			size += len(p.Key) + len(p.Value)
			if err := w.Record(p.Key, p.Value); err != nil {
				return err
			}
		}
		if len(pairs) > 1 && size > 4<<10+len(pairs[len(pairs)-1].Key)+len(pairs[len(pairs)-1].Value) {
			t.Errorf("chunk of %d bytes", size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if chunks < 2 {
		t.Fatalf("%d chunks", chunks)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("exported stream (%d bytes) differs from Persist's (%d bytes)", buf.Len(), len(want))
	}
	b := mustOpen(t, testConfig(1, t.TempDir()), nil)
	if err := b.Restore(reader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if d := diffKVs(mustDump(t, a), mustDump(t, b)); d != "" {
		t.Fatal(d)
	}

	// A cancelled export and an error of fn end it with that error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.ExportState(ctx, 0, func(uint64) error { return nil }, func([]Pair) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled export: %v", err)
	}
	stop := errors.New("stop")
	if err := a.ExportState(context.Background(), 0, func(uint64) error { return stop }, nil); !errors.Is(err, stop) {
		t.Fatalf("begin's error: %v", err)
	}
}

// TestCheckSnapshotRecord: the records a snapshot may carry.
func TestCheckSnapshotRecord(t *testing.T) {
	for _, c := range []struct {
		name   string
		k, v   []byte
		wantOK bool
	}{
		{"data", []byte{0x01, 'a'}, []byte("v"), true},
		{"empty value", []byte{0x01, 'a'}, nil, true},
		{"empty key", nil, nil, false},
		{"key over the cap", bytes.Repeat([]byte{1}, MaxRecordKey+1), nil, false},
		{"applied index", metaApplied, make([]byte, 8), false},
		{"owned slots", metaSlots, make([]byte, 32), true},
		{"owned slots, short", metaSlots, make([]byte, 31), false},
		{"move record, garbage", moveKey(3), []byte{0xff}, false},
	} {
		err := CheckSnapshotRecord(c.k, c.v)
		if (err == nil) != c.wantOK || (err != nil && !errors.Is(err, ErrBadSnapshot)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
