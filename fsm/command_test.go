package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func TestValidate(t *testing.T) {
	big := func(n int) []byte { return bytes.Repeat([]byte{0x20}, n) }
	manyOps := make([]Mutation, 1025)
	for i := range manyOps {
		manyOps[i] = del("\x20k")
	}
	for _, tc := range []struct {
		name   string
		cmd    *Command
		limits Limits
		want   string // "" = valid
	}{
		{"put", batchCmd(nil, put("\x20k", "v")), Limits{}, ""},
		{"put empty value", batchCmd(nil, put("\x20k", "")), Limits{}, ""},
		{"guards only", batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20k")}}), Limits{}, ""},
		{"empty batch", batchCmd(nil), Limits{}, ""},
		{"equals empty", batchCmd([]Guard{{Kind: GuardEquals, Key: []byte("\x20k")}}), Limits{}, ""},
		{"max sizes", batchCmd(nil, Mutation{Kind: MutPut, Key: big(4096), Value: big(1 << 20)}), Limits{}, ""},
		{"max ops", batchCmd(nil, manyOps[:1024]...), Limits{}, ""},
		{"unknown op", &Command{Op: 7, Batch: &Batch{}}, Limits{}, "unknown op 7"},
		{"zero op", &Command{}, Limits{}, "unknown op 0"},
		{"missing batch", &Command{Op: OpBatch}, Limits{}, "op batch: missing batch"},
		{"noop with batch", &Command{Op: OpNoop, Batch: &Batch{}}, Limits{}, "op noop: carries a batch"},
		{"empty key", batchCmd(nil, put("", "v")), Limits{}, "mutation 0: empty key"},
		{"guard empty key", batchCmd([]Guard{{Kind: GuardExists}}), Limits{}, "guard 0: empty key"},
		{"key too long", batchCmd(nil, put("\x20a", ""), Mutation{Kind: MutPut, Key: big(4097)}), Limits{}, "mutation 1: key is 4097 bytes, limit 4096"},
		{"key over custom limit", batchCmd(nil, put("\x20abcdefgh", "")), Limits{MaxKeySize: 8}, "mutation 0: key is 9 bytes, limit 8"},
		{"meta key", batchCmd(nil, put("\x00applied", "x")), Limits{}, "mutation 0: key is in the reserved meta table (first byte 0x00)"},
		{"meta guard", batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte{0}}}), Limits{}, "guard 0: key is in the reserved meta table"},
		{"value too large", batchCmd(nil, Mutation{Kind: MutPut, Key: []byte("\x20k"), Value: big(1<<20 + 1)}), Limits{}, "mutation 0: value is 1048577 bytes, limit 1048576"},
		{"guard value too large", batchCmd([]Guard{{Kind: GuardEquals, Key: []byte("\x20k"), Value: big(11)}}), Limits{MaxValueSize: 10}, "guard 0: value is 11 bytes, limit 10"},
		{"too many ops", batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20k")}}, manyOps[:1024]...), Limits{}, "batch has 1025 guards+mutations, limit 1024"},
		{"unknown guard kind", batchCmd([]Guard{{Kind: 9, Key: []byte("\x20k")}}), Limits{}, "guard 0: unknown guard kind 9"},
		{"unknown mutation kind", batchCmd(nil, Mutation{Key: []byte("\x20k")}), Limits{}, "mutation 0: unknown mutation kind 0"},
		{"value for exists", batchCmd([]Guard{{Kind: GuardExists, Key: []byte("\x20k"), Value: []byte("v")}}), Limits{}, "guard 0: value given for an exists/absent guard"},
		{"value for absent", batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k"), Value: []byte("v")}}), Limits{}, "guard 0: value given for an exists/absent guard"},
		{"value for delete", batchCmd(nil, Mutation{Kind: MutDelete, Key: []byte("\x20k"), Value: []byte("v")}), Limits{}, "mutation 0: value given for a delete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cmd.Validate(tc.limits)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want ErrInvalidCommand containing %q", err, tc.want)
			}
		})
	}
}

// TestRejectedCommandsChangeNothing applies rejected commands to an FSM
// holding data: each gets its error in the Result, the data stays, the
// applied index advances.
func TestRejectedCommandsChangeNothing(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil, put("\x20a", "1"), put("\x20b", "2")))))
	before := mustDump(t, f)
	valid := mustEncode(t, batchCmd(nil, del("\x20a")))
	for i, tc := range []struct {
		data []byte
		want error
	}{
		{mustEncode(t, batchCmd(nil, del("\x20a"), put("\x00applied", "x"))), ErrInvalidCommand},
		{mustEncode(t, batchCmd(nil, del("\x20a"), Mutation{Kind: MutDelete, Key: []byte("\x20b"), Value: []byte("x")})), ErrInvalidCommand},
		{mustEncode(t, &Command{Op: 99, Batch: &Batch{Mutations: []Mutation{del("\x20a")}}}), ErrInvalidCommand},
		{nil, ErrMalformedCommand},
		{append([]byte{2}, valid[1:]...), ErrMalformedCommand},
		{append(append([]byte{}, valid...), 0), ErrMalformedCommand},
		{valid[:len(valid)-1], ErrMalformedCommand},
	} {
		index := uint64(2 + i)
		r, _ := f.Apply(cmdLog(index, tc.data)).(*Result)
		if r == nil || !errors.Is(r.Err, tc.want) || r.Succeeded || r.Index != index || r.FailedGuard != -1 {
			t.Fatalf("case %d: result %+v, want Err %v", i, r, tc.want)
		}
		if d := diffKVs(before, mustDump(t, f)); d != "" {
			t.Fatalf("case %d: state changed: %s", i, d)
		}
		if f.AppliedIndex() != index {
			t.Fatalf("case %d: applied index %d, want %d", i, f.AppliedIndex(), index)
		}
	}
}

func TestDecodeCommandStrict(t *testing.T) {
	enc := func(v any) []byte {
		b, err := cbor.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{commandVersion}, b...)
	}
	manyGuards := make([]map[string]any, maxDecodeArray+1)
	for i := range manyGuards {
		manyGuards[i] = map[string]any{}
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"version only", []byte{commandVersion}},
		{"unknown version", []byte{0x02, 0xa0}},
		{"trailing bytes", append(mustEncode(t, batchCmd(nil)), 0x00)},
		{"unknown field", enc(map[string]any{"op": 1, "extra": 1})},
		{"unknown nested field", enc(map[string]any{"op": 1, "batch": map[string]any{"x": 1}})},
		{"case-folded field", enc(map[string]any{"OP": 1})},
		{"duplicate key", []byte{commandVersion, 0xa2, 0x62, 'o', 'p', 0x01, 0x62, 'o', 'p', 0x01}},
		{"indefinite map", []byte{commandVersion, 0xbf, 0x62, 'o', 'p', 0x01, 0xff}},
		{"tag", []byte{commandVersion, 0xc1, 0xa1, 0x62, 'o', 'p', 0x01}},
		{"op overflow", enc(map[string]any{"op": 300})},
		{"negative op", enc(map[string]any{"op": -1})},
		{"kind overflow", enc(map[string]any{"op": 1, "batch": map[string]any{"m": []any{map[string]any{"k": 256}}}})},
		{"key not bytes", enc(map[string]any{"op": 1, "batch": map[string]any{"m": []any{map[string]any{"key": 5}}}})},
		{"oversized array", enc(map[string]any{"op": 1, "batch": map[string]any{"g": manyGuards}})},
		{"not a map", enc([]int{1, 2})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := DecodeCommand(tc.data); !errors.Is(err, ErrMalformedCommand) {
				t.Fatalf("DecodeCommand = %+v, %v; want ErrMalformedCommand", c, err)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, c := range seedCommands() {
		b := mustEncode(t, c)
		if b[0] != commandVersion {
			t.Fatalf("version byte %#x", b[0])
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: got %+v, want %+v", got, c)
		}
		if b2 := mustEncode(t, got); !bytes.Equal(b, b2) {
			t.Fatalf("encoding not deterministic: %x vs %x", b, b2)
		}
	}
	if _, err := EncodeCommand(nil); err == nil {
		t.Fatal("EncodeCommand(nil) succeeded")
	}
}

func seedCommands() []*Command {
	return []*Command{
		{Op: OpBatch, Batch: &Batch{}},
		batchCmd(nil, put("\x20k", "v")),
		batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k")}}, put("\x20k", "v"), del("\x20j")),
		batchCmd([]Guard{
			{Kind: GuardEquals, Key: []byte("\x20k"), Value: []byte("v")},
			{Kind: GuardExists, Key: []byte("\x21k")},
		}, del("\x20k")),
		{Op: 9},
	}
}

// FuzzDecodeCommand: decoding never panics; whatever decodes re-encodes to
// bytes that decode to an equal command and re-encode identically.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{commandVersion, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedCommand) {
				t.Fatalf("error %v does not wrap ErrMalformedCommand", err)
			}
			return
		}
		_ = c.Validate(Limits{})
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		c2, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode of re-encoding %x: %v", b, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip: %+v vs %+v", c, c2)
		}
		if b2, _ := EncodeCommand(c2); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding not stable: %x vs %x", b, b2)
		}
	})
}

// FuzzApply: arbitrary bytes as a command entry never panic, agree with the
// reference model, and change nothing when rejected.
func FuzzApply(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{commandVersion, 0xff})
	fsm := mustOpen(f, testConfig(1, f.TempDir()), nil)
	m := newModel()
	var index uint64
	step := func(t testing.TB, data []byte) {
		index++
		l := cmdLog(index, data)
		before := mustDump(t, fsm)
		got, want := fsm.Apply(l), m.apply(l)
		if d := diffResult(got, want); d != "" {
			t.Fatalf("fsm vs model: %s", d)
		}
		after := mustDump(t, fsm)
		if d := diffKVs(after, m.dump()); d != "" {
			t.Fatalf("state vs model: %s", d)
		}
		if r := got.(*Result); r.Err != nil || !r.Succeeded {
			if d := diffKVs(before, after); d != "" {
				t.Fatalf("rejected or failed command changed state: %s", d)
			}
		}
		if fsm.AppliedIndex() != index {
			t.Fatalf("applied index %d, want %d", fsm.AppliedIndex(), index)
		}
	}
	step(f, mustEncode(f, batchCmd(nil, put("\x20k", "v"), put("\x20j", ""))))
	f.Fuzz(func(t *testing.T, data []byte) { step(t, data) })
}

func BenchmarkEncodeCommand(b *testing.B) {
	value := bytes.Repeat([]byte{0xab}, 256)
	c := &Command{Op: OpBatch, Batch: &Batch{
		Guards: []Guard{{Kind: GuardAbsent, Key: []byte("\x20user/0001/agent/0001")}},
		Mutations: []Mutation{
			{Kind: MutPut, Key: []byte("\x20user/0001/agent/0001"), Value: value},
			{Kind: MutPut, Key: []byte("\x21user/0001/status/0001"), Value: value},
		},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeCommand(c); err != nil {
			b.Fatal(err)
		}
	}
}
