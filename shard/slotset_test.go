package shard

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func TestSlotSet(t *testing.T) {
	var s SlotSet
	if !s.IsEmpty() || s.Len() != 0 || s.Slots() != nil || s.String() != "" {
		t.Fatalf("zero set: %v", s)
	}
	for _, x := range []Slot{0, 1, 2, 3, 63, 64, 200, 255} {
		s.Add(x)
	}
	if s.Len() != 8 || !s.Has(63) || !s.Has(64) || s.Has(4) || s.Has(254) {
		t.Fatalf("set %v", s)
	}
	if got := s.String(); got != "0-3,63-64,200,255" {
		t.Fatalf("String %q", got)
	}
	if f, ok := s.First(); !ok || f != 0 {
		t.Fatalf("First %d %v", f, ok)
	}
	s.Remove(0)
	if f, _ := s.First(); f != 1 || s.Len() != 7 {
		t.Fatalf("after Remove: %v", s)
	}
	all := AllSlots()
	if !all.IsFull() || all.Len() != NumSlots || all.String() != "0-255" {
		t.Fatalf("AllSlots %v", all)
	}
	o := SlotSetOf(1, 5, 255)
	if got := s.Intersect(o); got != SlotSetOf(1, 255) {
		t.Fatalf("Intersect %v", got)
	}
	if got := s.Union(o).Len(); got != 8 {
		t.Fatalf("Union len %d", got)
	}
	if got := s.Minus(o); got.Has(1) || got.Has(255) || !got.Has(2) {
		t.Fatalf("Minus %v", got)
	}
	if !all.Contains(s) || s.Contains(all) || !s.Overlaps(o) || s.Overlaps(SlotSetOf(7)) {
		t.Fatal("Contains/Overlaps")
	}
}

func TestSlotSetEncodings(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		var s SlotSet
		for j := r.IntN(NumSlots + 1); j > 0; j-- {
			s.Add(Slot(r.IntN(NumSlots)))
		}
		b, _ := s.MarshalBinary()
		if len(b) != 32 {
			t.Fatalf("binary of %d bytes", len(b))
		}
		for _, x := range s.Slots() {
			if b[x/8]&(1<<(x%8)) == 0 {
				t.Fatalf("slot %d not at bit %d of byte %d", x, x%8, x/8)
			}
		}
		var back SlotSet
		if err := back.UnmarshalBinary(b); err != nil || back != s {
			t.Fatalf("binary round trip: %v %v", back, err)
		}
		p, err := ParseSlotSet(s.String())
		if err != nil || p != s {
			t.Fatalf("text round trip of %q: %v %v", s.String(), p, err)
		}
		// CBOR: a 32-byte byte string, through BinaryMarshaler.
		type rec struct {
			S SlotSet  `cbor:"s"`
			P *SlotSet `cbor:"p,omitempty"`
		}
		in := rec{S: s, P: &s}
		cb, err := cbor.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out rec
		if err := cbor.Unmarshal(cb, &out); err != nil || !reflect.DeepEqual(in, out) {
			t.Fatalf("cbor round trip: %+v %v", out, err)
		}
		j, _ := json.Marshal(in)
		var jo rec
		if err := json.Unmarshal(j, &jo); err != nil || !reflect.DeepEqual(in, jo) {
			t.Fatalf("json round trip %s: %+v %v", j, jo, err)
		}
	}
	var s SlotSet
	if err := s.UnmarshalBinary(make([]byte, 31)); err == nil {
		t.Fatal("31 bytes accepted")
	}
	if err := cbor.Unmarshal([]byte{0x41, 0x00}, &s); err == nil {
		t.Fatal("cbor byte string of 1 byte accepted")
	}
	for _, bad := range []string{"256", "-1", "3-1", "a", "1,,2", "01", " 1"} {
		if _, err := ParseSlotSet(bad); err == nil {
			t.Errorf("ParseSlotSet(%q) accepted", bad)
		}
	}
	if p, err := ParseSlotSet("5,1-3,2"); err != nil || p != SlotSetOf(1, 2, 3, 5) {
		t.Fatalf("overlapping ranges: %v %v", p, err)
	}
}

// FuzzSlotSetBinary: the 32-byte form (a Redis fan-out leg's slots, a
// move record's): any input either decodes and encodes back to itself,
// or is refused and leaves the set unchanged.
func FuzzSlotSetBinary(f *testing.F) {
	full, _ := AllSlots().MarshalBinary()
	f.Add(full)
	f.Add(make([]byte, slotSetBytes))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := SlotSetOf(7)
		if err := s.UnmarshalBinary(b); err != nil {
			if s != SlotSetOf(7) {
				t.Fatalf("a refused input changed the set to %v", s)
			}
			return
		}
		out, _ := s.MarshalBinary()
		if string(out) != string(b) {
			t.Fatalf("%x decoded to %v, which encodes to %x", b, s, out)
		}
		if s.Len() > NumSlots {
			t.Fatalf("%d slots", s.Len())
		}
	})
}

// FuzzParseSlotSet: the slot list text of the Admin requests (split
// --slots, a live export, a pull) either is refused or parses to a set
// whose text form parses back to it.
func FuzzParseSlotSet(f *testing.F) {
	for _, s := range []string{"", "0", "0-255", "5,1-3,2", "3-1", "256", "01", "-", "1,,2", " 1", "7-7,9-12"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSlotSet(text)
		if err != nil {
			if s != (SlotSet{}) {
				t.Fatalf("%q refused (%v) with a set %v", text, err, s)
			}
			return
		}
		back, err := ParseSlotSet(s.String())
		if err != nil || back != s {
			t.Fatalf("%q: %v prints %q, which parses to %v, %v", text, s, s.String(), back, err)
		}
	})
}
