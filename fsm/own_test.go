package fsm

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// TestOwnAppliesWithoutDecoding: an entry recorded in Own is applied from
// its commands, found by the address of its bytes, once; the same bytes in
// another array are decoded; and what the node's own entries do equals
// what the decoded entries do on a replica that proposed nothing.
func TestOwnAppliesWithoutDecoding(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	own := f.Own()

	// Commands that are not what the bytes encode (never so outside this
	// test) show which were applied.
	data := mustEncode(t, batchCmd(nil, put("\x20k", "decoded")))
	own.Add(data, batchCmd(nil, put("\x20k", "own")), nil)
	f.ApplyBatch([]*raft.Log{cmdLog(1, data)})
	if v, err := f.Get([]byte("\x20k")); err != nil || string(v) != "own" {
		t.Fatalf("k = %q, %v: the entry was not applied from its own command", v, err)
	}
	if own.Len() != 0 || own.Applied() != 1 {
		t.Fatalf("own: %d held, %d applied; want 0, 1", own.Len(), own.Applied())
	}
	data = mustEncode(t, batchCmd(nil, put("\x20j", "decoded")))
	own.Add(data, batchCmd(nil, put("\x20j", "own")), nil)
	f.ApplyBatch([]*raft.Log{cmdLog(2, bytes.Clone(data))})
	if v, err := f.Get([]byte("\x20j")); err != nil || string(v) != "decoded" {
		t.Fatalf("j = %q, %v: equal bytes in another array must be decoded", v, err)
	}
	if own.Len() != 1 {
		t.Fatalf("own holds %d entries, want the one not applied", own.Len())
	}
	own.Remove(data)
	if own.Len() != 0 {
		t.Fatal("Remove left the entry")
	}
	// An OpMulti without its commands, or with too few, is not recorded.
	multi := multiCmd(batchCmd(nil, put("\x20a", "1")), batchCmd(nil, put("\x20b", "2")))
	own.Add(mustEncode(t, multi), multi, nil)
	own.Add(mustEncode(t, multi), multi, []*Command{batchCmd(nil, put("\x20a", "1"))})
	if own.Len() != 0 {
		t.Fatal("an OpMulti whose commands do not match was recorded")
	}

	// The same entries, own on one replica and decoded on another.
	f1, f2 := mustOpen(t, testConfig(1, t.TempDir()), nil), mustOpen(t, testConfig(1, t.TempDir()), nil)
	invalid := processUsageCmd(4, 1, 1, -5, 9) // Validate refuses it: both replicas answer the same
	entries := [][]*Command{
		{putAccountCmd(account(4, 100, 100, 0))},
		{processUsageCmd(4, 1, 1, 30, 2)},
		{processUsageCmd(4, 1, 1, 30, 3), addCreditsCmd(4, 2, 50, 3), invalid, batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k")}}, put("\x20k", "v"))},
		{processUsageCmd(4, 3, 3, 500, 4), processUsageCmd(4, 4, 4, 120, 4), batchCmd([]Guard{{Kind: GuardAbsent, Key: []byte("\x20k")}}, put("\x20k", "w"))},
		{invalid},
	}
	for i, cmds := range entries {
		index := uint64(i + 1)
		entry, subs := cmds[0], []*Command(nil)
		if len(cmds) > 1 {
			entry, subs = multiCmd(cmds...), cmds
		}
		data := mustEncode(t, entry)
		f1.Own().Add(data, entry, subs)
		r1 := f1.ApplyBatch([]*raft.Log{cmdLog(index, data)})[0]
		r2 := f2.ApplyBatch([]*raft.Log{cmdLog(index, bytes.Clone(data))})[0]
		if d := diffResult(r1, r2); d != "" {
			t.Fatalf("entry %d: own vs decoded: %s", index, d)
		}
	}
	if f1.Own().Applied() != uint64(len(entries)) || f2.Own().Applied() != 0 {
		t.Fatalf("own entries applied: %d and %d", f1.Own().Applied(), f2.Own().Applied())
	}
	if d := diffKVs(mustDump(t, f1), mustDump(t, f2)); d != "" {
		t.Fatalf("own vs decoded state: %s", d)
	}
	checkAccountCache(t, f1)
}

// leaves returns the settable string and []byte fields reachable from v
// (through pointers, structs and slices of structs), in a fixed order.
func leaves(v reflect.Value, out []reflect.Value) []reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			out = leaves(v.Elem(), out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out = leaves(v.Field(i), out)
			}
		}
	case reflect.String:
		out = append(out, v)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			out = append(out, v)
			break
		}
		for i := range v.Len() {
			out = leaves(v.Index(i), out)
		}
	case reflect.Array:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := range v.Len() {
				out = leaves(v.Index(i), out)
			}
		}
	}
	return out
}

// checkOwnDecodesEqual fails unless c, when Validate accepts it, decodes
// from its encoding to the command Own.Add makes of it: what lets a leader
// apply its own commands without decoding them.
func checkOwnDecodesEqual(t *testing.T, c *Command) {
	t.Helper()
	if c.Validate(Limits{}) != nil {
		return
	}
	data, err := EncodeCommand(c)
	if err != nil {
		t.Fatalf("encode %+v: %v", c, err)
	}
	got, err := DecodeCommand(data)
	if err != nil {
		t.Fatalf("Validate accepts %+v, DecodeCommand refuses its encoding: %v", c, err)
	}
	var o Own
	o.Add(data, c, nil)
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("own command %+v, decoded %+v", c, got)
	}
}

// TestOwnCommandsDecodeEqual: for every op, with each text field made
// invalid UTF-8 and each byte field empty (not nil), a command Validate
// accepts decodes from its encoding to itself, normalized.
func TestOwnCommandsDecodeEqual(t *testing.T) {
	n := len(validCommands())
	for i := range n {
		checkOwnDecodesEqual(t, validCommands()[i])
		for j := 0; ; j++ {
			c := validCommands()[i]
			ls := leaves(reflect.ValueOf(c), nil)
			if j >= len(ls) {
				break
			}
			if l := ls[j]; l.Kind() == reflect.String {
				l.SetString(l.String() + "\xff")
			} else {
				l.SetBytes([]byte{})
			}
			checkOwnDecodesEqual(t, c)
		}
	}
}

// FuzzOwnCommandDecodesEqual is TestOwnCommandsDecodeEqual with any value
// in any text or byte field of any op's command.
func FuzzOwnCommandDecodesEqual(f *testing.F) {
	f.Add(uint8(11), uint8(0), []byte("evt-\xff"))
	f.Add(uint8(0), uint8(1), []byte{})
	f.Add(uint8(17), uint8(2), []byte("a\x00b"))
	f.Fuzz(func(t *testing.T, op, field uint8, value []byte) {
		cmds := validCommands()
		c := cmds[int(op)%len(cmds)]
		ls := leaves(reflect.ValueOf(c), nil)
		if len(ls) == 0 {
			return
		}
		if l := ls[int(field)%len(ls)]; l.Kind() == reflect.String {
			l.SetString(string(value))
		} else {
			l.SetBytes(value)
		}
		checkOwnDecodesEqual(t, c)
	})
}
