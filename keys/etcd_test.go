package keys

import (
	"bytes"
	"errors"
	"testing"
)

func TestEtcdLayouts(t *testing.T) {
	rk := EtcdRoutingKey("default")
	if string(rk) != "etcd/default" {
		t.Fatalf("EtcdRoutingKey = %q", rk)
	}
	tests := []struct {
		name      string
		got, want []byte
	}{
		{"key", EtcdKey(rk, []byte("a/b")), append([]byte{0x60, 12}, "etcd/defaulta/b"...)},
		{"key prefix", EtcdKeyPrefix(rk), append([]byte{0x60, 12}, "etcd/default"...)},
		{"history", EtcdHistory(rk, 0x0102, 3), append(append([]byte{0x61, 12}, "etcd/default"...), 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 3)},
		{"revs", EtcdRevs(rk), append([]byte{0x62, 12}, "etcd/default"...)},
	}
	for _, tc := range tests {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: got %x want %x", tc.name, tc.got, tc.want)
		}
	}
	// Round trips and routing.
	k := EtcdKey(rk, []byte("x"))
	if grk, key, err := DecodeEtcdKey(k); err != nil || string(grk) != "etcd/default" || string(key) != "x" {
		t.Fatalf("DecodeEtcdKey = %q %q %v", grk, key, err)
	}
	h := EtcdHistory(rk, 7, 2)
	if grk, rev, sub, err := DecodeEtcdHistory(h); err != nil || !bytes.Equal(grk, rk) || rev != 7 || sub != 2 {
		t.Fatalf("DecodeEtcdHistory = %q %d %d %v", grk, rev, sub, err)
	}
	for _, key := range [][]byte{k, h, EtcdRevs(rk)} {
		got, route, err := RoutingKeyOf(key)
		if err != nil || route != RouteKey || !bytes.Equal(got, rk) {
			t.Errorf("RoutingKeyOf(%x) = %q %v %v, want %q RouteKey", key, got, route, err, rk)
		}
	}
	// The keys of namespace "a" and "ab" never interleave; history is in
	// revision order.
	a, ab := EtcdRoutingKey("a"), EtcdRoutingKey("ab")
	lo, hi := EtcdKeyPrefix(a), PrefixEnd(EtcdKeyPrefix(a))
	if inRange(EtcdKey(ab, nil), lo, hi) || !inRange(EtcdKey(a, []byte("b\xff")), lo, hi) {
		t.Error("namespace prefixes overlap")
	}
	if bytes.Compare(EtcdHistory(rk, 255, 9), EtcdHistory(rk, 256, 0)) >= 0 {
		t.Error("history not in revision order")
	}
}

func TestEtcdNamespace(t *testing.T) {
	for _, ns := range []string{"default", "a", "k8s.prod-1_x", string(bytes.Repeat([]byte("n"), 64))} {
		if err := ValidateEtcdNamespace(ns); err != nil {
			t.Errorf("%q: %v", ns, err)
		}
		if got, ok := EtcdNamespaceOf(EtcdRoutingKey(ns)); !ok || got != ns {
			t.Errorf("EtcdNamespaceOf(%q) = %q %v", ns, got, ok)
		}
	}
	for _, ns := range []string{"", "a/b", "sp ace", "é", string(bytes.Repeat([]byte("n"), 65))} {
		if err := ValidateEtcdNamespace(ns); !errors.Is(err, ErrEtcdNamespace) {
			t.Errorf("%q: %v, want ErrEtcdNamespace", ns, err)
		}
	}
	if _, ok := EtcdNamespaceOf([]byte("asset")); ok {
		t.Error("asset is not an etcd routing key")
	}
}

func TestEtcdDecodeRejects(t *testing.T) {
	rk := EtcdRoutingKey("ns")
	for _, k := range [][]byte{
		{TableEtcdKeys},
		{TableEtcdKeys, 9, 'e'},                              // length past the end
		append([]byte{TableEtcdKeys, 3}, "abc"...),           // not etcd/
		append([]byte{TableEtcdKeys, 5}, "etcd/"...),         // empty namespace
		EtcdHistory(rk, 1, 1)[:len(EtcdHistory(rk, 1, 1))-1], // short
		append(EtcdRevs(rk), 'x'),
	} {
		if _, _, err := RoutingKeyOf(k); !errors.Is(err, ErrMalformed) {
			t.Errorf("RoutingKeyOf(%x) = %v, want ErrMalformed", k, err)
		}
	}
}

func FuzzDecodeEtcdKey(f *testing.F) {
	addSeeds(f, TableEtcdKeys, EtcdKey(EtcdRoutingKey("default"), []byte("k")))
	f.Fuzz(func(t *testing.T, k []byte) {
		rk, key, err := DecodeEtcdKey(k)
		checkDecode(t, k, err, func() []byte { return EtcdKey(rk, key) })
	})
}

func FuzzDecodeEtcdHistory(f *testing.F) {
	addSeeds(f, TableEtcdHistory, EtcdHistory(EtcdRoutingKey("default"), 42, 1))
	f.Fuzz(func(t *testing.T, k []byte) {
		rk, rev, sub, err := DecodeEtcdHistory(k)
		checkDecode(t, k, err, func() []byte { return EtcdHistory(rk, rev, sub) })
	})
}

func FuzzDecodeEtcdRevs(f *testing.F) {
	addSeeds(f, TableEtcdRevs, EtcdRevs(EtcdRoutingKey("default")))
	f.Fuzz(func(t *testing.T, k []byte) {
		rk, err := DecodeEtcdRevs(k)
		checkDecode(t, k, err, func() []byte { return EtcdRevs(rk) })
	})
}
