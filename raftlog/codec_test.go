package raftlog

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func sampleLogs() []*raft.Log {
	return []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf")},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: bytes.Repeat([]byte{7}, 300), AppendedAt: time.Unix(1_790_000_000, 123456789)},
		{Index: math.MaxUint64, Term: math.MaxUint64, Type: raft.LogType(255), Data: []byte{0}, Extensions: []byte("ext"), AppendedAt: time.Unix(0, -5)},
		{Index: 9, Term: 3, Type: raft.LogBarrier, Extensions: []byte{1, 2}, AppendedAt: time.Unix(0, 0)},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, l := range sampleLogs() {
		b := appendEntry(nil, l)
		if len(b) != entryLen(l) {
			t.Fatalf("index %d: encoded %d bytes, entryLen %d", l.Index, len(b), entryLen(l))
		}
		var got raft.Log
		if err := decodeEntry(l.Index, b, &got); err != nil {
			t.Fatalf("index %d: %v", l.Index, err)
		}
		assertLogEqual(t, l, &got)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := appendEntry(nil, &raft.Log{Term: 5, Data: []byte("x")})
	cases := map[string][]byte{
		"empty":            nil,
		"short":            {1, 0},
		"version":          append([]byte{2}, good[1:]...),
		"unknown flag":     {1, 0, 0x02, 5, 1, 'x', 0},
		"trailing":         append(append([]byte{}, good...), 0),
		"truncated data":   good[:len(good)-2],
		"non-canonical":    {1, 0, 0, 0x85, 0x00, 1, 'x', 0},
		"data too long":    {1, 0, 0, 5, 9, 'x', 0},
		"appended missing": {1, 0, 1},
	}
	for name, b := range cases {
		var l raft.Log
		if err := decodeEntry(1, b, &l); err == nil {
			t.Errorf("%s: decoded %x", name, b)
		}
	}
}

func assertLogEqual(t *testing.T, want, got *raft.Log) {
	t.Helper()
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) || got.AppendedAt.IsZero() != want.AppendedAt.IsZero() {
		t.Fatalf("log mismatch:\n got  %+v\n want %+v", got, want)
	}
}

// FuzzDecodeEntry: the decoder never panics, and whatever it accepts
// re-encodes to the same bytes (the encoding is canonical).
func FuzzDecodeEntry(f *testing.F) {
	for _, l := range sampleLogs() {
		f.Add(appendEntry(nil, l))
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 1, 0x80, 0x01, 0x01, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeEntry(42, b, &l); err != nil {
			return
		}
		if l.Index != 42 {
			t.Fatalf("index %d", l.Index)
		}
		if again := appendEntry(nil, &l); !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n in  %x\n out %x", b, again)
		}
	})
}

func BenchmarkEncodeDecode(b *testing.B) {
	l := &raft.Log{Index: 10, Term: 3, Type: raft.LogCommand, Data: bytes.Repeat([]byte{1}, 300), AppendedAt: time.Now()}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendEntry(buf[:0], l)
		var got raft.Log
		if err := decodeEntry(10, buf, &got); err != nil {
			b.Fatal(err)
		}
	}
}
