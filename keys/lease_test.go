package keys

import (
	"bytes"
	"errors"
	"testing"
)

func TestLeaseLayouts(t *testing.T) {
	id := LeaseIDOf(0xab, 0x0102030405)
	if id != 0xab00000102030405 || LeaseSlot(id) != 0xab || !ValidLeaseID(id) {
		t.Fatalf("lease id %x", id)
	}
	if ValidLeaseID(LeaseIDOf(7, 0)) || LeaseIDOf(1, MaxLeaseSeq+1) != LeaseIDOf(1, 0) {
		t.Fatal("sequence 0 (or one that overflows into the slot) must not make a valid id")
	}
	kv := KV([]byte("rk"), []byte("k"))
	for _, tc := range []struct {
		name      string
		got, want []byte
	}{
		{"leases", Lease(id), []byte{0x50, 0xab, 0, 0, 1, 2, 3, 4, 5}},
		{"lease_keys", LeaseKey(id, kv), append([]byte{0x51, 0xab, 0, 0, 1, 2, 3, 4, 5}, kv...)},
		{"lease_keys prefix", LeaseKeysPrefix(id), []byte{0x51, 0xab, 0, 0, 1, 2, 3, 4, 5}},
		{"key_lease", KeyLease(kv), append([]byte{0x52}, kv...)},
		{"lease_seq", LeaseSeq(9), []byte{0x53, 9}},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: got %x, want %x", tc.name, tc.got, tc.want)
		}
	}
}

func TestLeaseRoundTripAndRouting(t *testing.T) {
	id := LeaseIDOf(42, 7)
	u := UserID{3}
	for _, attached := range [][]byte{KV([]byte("alice"), []byte("k")), Runner("r1"), Agent(u, AgentID{4})} {
		gotID, gotKey, err := DecodeLeaseKey(LeaseKey(id, attached))
		if err != nil || gotID != id || !bytes.Equal(gotKey, attached) {
			t.Fatalf("DecodeLeaseKey: %x %x %v", gotID, gotKey, err)
		}
		k, err := DecodeKeyLease(KeyLease(attached))
		if err != nil || !bytes.Equal(k, attached) {
			t.Fatalf("DecodeKeyLease: %x %v", k, err)
		}
		// key_lease routes as the key it names.
		wantRK, wantRoute, _ := RoutingKeyOf(attached)
		rk, route, err := RoutingKeyOf(KeyLease(attached))
		if err != nil || route != wantRoute || !bytes.Equal(rk, wantRK) {
			t.Fatalf("RoutingKeyOf(key_lease %x) = %q %d %v", attached, rk, route, err)
		}
		slot, err := LeaseSlotOf(LeaseKey(id, attached))
		if err != nil || slot != 42 {
			t.Fatalf("LeaseSlotOf(lease_keys): %d %v", slot, err)
		}
	}
	if got, err := DecodeLease(Lease(id)); err != nil || got != id {
		t.Fatalf("DecodeLease: %x %v", got, err)
	}
	if s, err := DecodeLeaseSeq(LeaseSeq(200)); err != nil || s != 200 {
		t.Fatalf("DecodeLeaseSeq: %d %v", s, err)
	}
	for _, k := range [][]byte{Lease(id), LeaseKey(id, Runner("r")), LeaseSeq(42)} {
		rk, route, err := RoutingKeyOf(k)
		if err != nil || route != RouteSlot || rk != nil {
			t.Fatalf("RoutingKeyOf(%x) = %q %d %v, want RouteSlot", k, rk, route, err)
		}
		if s, err := LeaseSlotOf(k); err != nil || s != 42 {
			t.Fatalf("LeaseSlotOf(%x) = %d %v", k, s, err)
		}
	}
}

func TestLeaseDecodeRejects(t *testing.T) {
	id := LeaseIDOf(1, 1)
	for _, bad := range [][]byte{
		{TableLeases}, append(Lease(id), 0), {TableLeaseKeys, 1, 2},
		LeaseKeysPrefix(id),                              // no attached key
		LeaseKey(id, Pool("p")),                          // not attachable
		LeaseKey(id, []byte{TableKV, 0}),                 // malformed kv key
		{TableKeyLease}, KeyLease(Session(SessionID{1})), // not attachable
		KeyLease(KeyLease(KV([]byte("a"), []byte("b")))), // nested
		{TableLeaseSeq}, {TableLeaseSeq, 1, 2},
	} {
		if _, _, err := RoutingKeyOf(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("RoutingKeyOf(%x): %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := LeaseSlotOf(KV([]byte("a"), []byte("b"))); !errors.Is(err, ErrMalformed) {
		t.Errorf("LeaseSlotOf of a kv key: %v", err)
	}
	if _, err := LeaseSlotOf(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("LeaseSlotOf(nil): %v", err)
	}
}

// FuzzDecodeLeaseTables: the lease decoders never panic, and what they
// accept re-encodes to the same key.
func FuzzDecodeLeaseTables(f *testing.F) {
	id := LeaseIDOf(5, 9)
	f.Add(Lease(id))
	f.Add(LeaseKey(id, KV([]byte("rk"), []byte("k"))))
	f.Add(KeyLease(Runner("r1")))
	f.Add(LeaseSeq(3))
	f.Fuzz(func(t *testing.T, k []byte) {
		if id, err := DecodeLease(k); err == nil && !bytes.Equal(Lease(id), k) {
			t.Fatalf("leases %x re-encodes as %x", k, Lease(id))
		}
		if id, a, err := DecodeLeaseKey(k); err == nil && !bytes.Equal(LeaseKey(id, a), k) {
			t.Fatalf("lease_keys %x re-encodes as %x", k, LeaseKey(id, a))
		}
		if a, err := DecodeKeyLease(k); err == nil && !bytes.Equal(KeyLease(a), k) {
			t.Fatalf("key_lease %x re-encodes as %x", k, KeyLease(a))
		}
		if s, err := DecodeLeaseSeq(k); err == nil && !bytes.Equal(LeaseSeq(s), k) {
			t.Fatalf("lease_seq %x re-encodes as %x", k, LeaseSeq(s))
		}
		_, _ = LeaseSlotOf(k)
	})
}
