package shard

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// SlotSet is a set of slots, one bit per slot (256 bits). The zero value is
// the empty set. It is a value: copy it freely.
//
// Its binary form (MarshalBinary, which CBOR encoders such as
// fxamacker/cbor use for a byte string) is 32 bytes, slot s at bit s%8 of
// byte s/8; its text form (String, MarshalText) is a comma-separated list
// of slots and inclusive ranges, "0-15,32,40-47", "" for the empty set.
type SlotSet struct {
	w [NumSlots / 64]uint64
}

// slotSetBytes is the length of SlotSet's binary form.
const slotSetBytes = NumSlots / 8

// AllSlots returns the set of every slot.
func AllSlots() SlotSet {
	var s SlotSet
	for i := range s.w {
		s.w[i] = ^uint64(0)
	}
	return s
}

// SlotSetOf returns the set of the given slots.
func SlotSetOf(slots ...Slot) SlotSet {
	var s SlotSet
	for _, x := range slots {
		s.Add(x)
	}
	return s
}

// Has reports whether x is in s.
func (s SlotSet) Has(x Slot) bool { return s.w[x/64]&(1<<(x%64)) != 0 }

// Add adds x to s.
func (s *SlotSet) Add(x Slot) { s.w[x/64] |= 1 << (x % 64) }

// Remove removes x from s.
func (s *SlotSet) Remove(x Slot) { s.w[x/64] &^= 1 << (x % 64) }

// Len returns the number of slots in s.
func (s SlotSet) Len() int {
	n := 0
	for _, w := range s.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether s holds no slot.
func (s SlotSet) IsEmpty() bool { return s == SlotSet{} }

// IsFull reports whether s holds every slot.
func (s SlotSet) IsFull() bool { return s == AllSlots() }

// Union returns s ∪ o.
func (s SlotSet) Union(o SlotSet) SlotSet {
	for i := range s.w {
		s.w[i] |= o.w[i]
	}
	return s
}

// Intersect returns s ∩ o.
func (s SlotSet) Intersect(o SlotSet) SlotSet {
	for i := range s.w {
		s.w[i] &= o.w[i]
	}
	return s
}

// Minus returns s \ o.
func (s SlotSet) Minus(o SlotSet) SlotSet {
	for i := range s.w {
		s.w[i] &^= o.w[i]
	}
	return s
}

// Overlaps reports whether s and o share a slot.
func (s SlotSet) Overlaps(o SlotSet) bool { return !s.Intersect(o).IsEmpty() }

// Contains reports whether every slot of o is in s.
func (s SlotSet) Contains(o SlotSet) bool { return o.Minus(s).IsEmpty() }

// Slots returns the slots of s in increasing order (nil when empty).
func (s SlotSet) Slots() []Slot {
	var out []Slot
	for i, w := range s.w {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, Slot(i*64+b))
			w &= w - 1
		}
	}
	return out
}

// First returns the lowest slot of s; ok is false when s is empty.
func (s SlotSet) First() (x Slot, ok bool) {
	for i, w := range s.w {
		if w != 0 {
			return Slot(i*64 + bits.TrailingZeros64(w)), true
		}
	}
	return 0, false
}

// String returns the text form: "0-15,32,40-47" ("" when empty).
func (s SlotSet) String() string {
	var b strings.Builder
	for x := 0; x < NumSlots; {
		if !s.Has(Slot(x)) {
			x++
			continue
		}
		y := x
		for y+1 < NumSlots && s.Has(Slot(y+1)) {
			y++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(x))
		if y > x {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(y))
		}
		x = y + 1
	}
	return b.String()
}

// ParseSlotSet parses the text form String writes; slots and ranges may
// come in any order and overlap.
func ParseSlotSet(text string) (SlotSet, error) {
	var s SlotSet
	if text == "" {
		return s, nil
	}
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseSlot(lo)
		if err != nil {
			return SlotSet{}, err
		}
		b := a
		if isRange {
			if b, err = parseSlot(hi); err != nil {
				return SlotSet{}, err
			}
			if b < a {
				return SlotSet{}, fmt.Errorf("shard: slot range %q is reversed", part)
			}
		}
		for x := a; x <= b; x++ {
			s.Add(Slot(x))
		}
	}
	return s, nil
}

func parseSlot(t string) (int, error) {
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n >= NumSlots || strconv.Itoa(n) != t {
		return 0, fmt.Errorf("shard: bad slot %q, want 0..%d", t, NumSlots-1)
	}
	return n, nil
}

// MarshalBinary returns the 32-byte form: slot x is bit x%8 of byte x/8.
func (s SlotSet) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// AppendBinary appends the 32-byte form to b.
func (s SlotSet) AppendBinary(b []byte) ([]byte, error) {
	for _, w := range s.w {
		for i := 0; i < 8; i++ {
			b = append(b, byte(w>>(8*i)))
		}
	}
	return b, nil
}

// UnmarshalBinary parses the 32-byte form; any other length is an error.
func (s *SlotSet) UnmarshalBinary(b []byte) error {
	if len(b) != slotSetBytes {
		return fmt.Errorf("shard: slot set of %d bytes, want %d", len(b), slotSetBytes)
	}
	var n SlotSet
	for i := range n.w {
		for j := 0; j < 8; j++ {
			n.w[i] |= uint64(b[i*8+j]) << (8 * j)
		}
	}
	*s = n
	return nil
}

// MarshalText returns String's form.
func (s SlotSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses String's form (see ParseSlotSet).
func (s *SlotSet) UnmarshalText(text []byte) error {
	n, err := ParseSlotSet(string(text))
	if err != nil {
		return err
	}
	*s = n
	return nil
}
