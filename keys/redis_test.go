package keys

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestRedisRoutingKey(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"asset:metadata:google_search", "asset"},
		{"asset:index", "asset"},
		{"asset:sync:changed", "asset"},
		{"asset", "asset"},
		{"{u1}:cart", "u1"},
		{"cart:{u1}", "u1"},
		{"a:{b}:{c}", "b"},
		{"x{}y:z", "x{}y"},
		{"x{y", "x{y"},
		{"x{y:z", "x{y"},
		{"{}", "{}"},
		{"}{a}", "a"},
		{":a", ""},
		{"", ""},
		{"key:__rand_int__", "key"},
	} {
		if got := string(RedisRoutingKey([]byte(tc.key))); got != tc.want {
			t.Errorf("RedisRoutingKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestRedisMetaRoundTrip(t *testing.T) {
	for _, m := range []RedisMeta{
		{Type: RedisString, Version: 7, Created: 3, Value: []byte("hello")},
		{Type: RedisString, Version: 1, Created: 1},
		{Type: RedisHash, Version: 9, Created: 2, Count: 12},
		{Type: RedisSet, Version: math.MaxUint64, Created: 5, Count: 1},
		{Type: RedisList, Version: 4, Created: 4, Head: -3, Tail: 2},
	} {
		b := AppendRedisMeta(nil, &m)
		got, err := DecodeRedisMeta(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", m, err)
		}
		if got.Type != m.Type || got.Version != m.Version || got.Created != m.Created || got.Count != m.Count ||
			got.Head != m.Head || got.Tail != m.Tail || !bytes.Equal(got.Value, m.Value) {
			t.Fatalf("round trip %+v -> %+v", m, got)
		}
	}
	for _, bad := range [][]byte{
		nil, {1, 2, 3},
		AppendRedisMeta(nil, &RedisMeta{Type: 9}),
		AppendRedisMeta(nil, &RedisMeta{Type: RedisHash, Count: 0}),
		AppendRedisMeta(nil, &RedisMeta{Type: RedisList, Head: 2, Tail: 2}),
		AppendRedisMeta(nil, &RedisMeta{Type: RedisSet, Count: 1})[:20],
	} {
		if _, err := DecodeRedisMeta(bad); !errors.Is(err, ErrMalformedRecord) {
			t.Errorf("DecodeRedisMeta(%x) = %v, want ErrMalformedRecord", bad, err)
		}
	}
}

func TestRedisKeyLayouts(t *testing.T) {
	if got, want := RedisKey([]byte("ab")), []byte{0x40, 'a', 'b'}; !bytes.Equal(got, want) {
		t.Errorf("RedisKey = %x, want %x", got, want)
	}
	if got, want := RedisHashField([]byte("ab"), []byte("f")), []byte{0x42, 0, 2, 'a', 'b', 'f'}; !bytes.Equal(got, want) {
		t.Errorf("RedisHashField = %x, want %x", got, want)
	}
	if got, want := RedisSetMember([]byte("a"), []byte("m")), []byte{0x43, 0, 1, 'a', 'm'}; !bytes.Equal(got, want) {
		t.Errorf("RedisSetMember = %x, want %x", got, want)
	}
	if got, want := RedisListElem([]byte("a"), -1), []byte{0x44, 0, 1, 'a', 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}; !bytes.Equal(got, want) {
		t.Errorf("RedisListElem = %x, want %x", got, want)
	}
	if got, want := RedisScan(0x0102, []byte("k")), []byte{0x41, 0, 0, 0, 0, 0, 0, 1, 2, 'k'}; !bytes.Equal(got, want) {
		t.Errorf("RedisScan = %x, want %x", got, want)
	}
	// List positions sort numerically; the keys of "a" and "ab" never
	// interleave.
	if bytes.Compare(RedisListElem([]byte("a"), -5), RedisListElem([]byte("a"), 3)) >= 0 {
		t.Error("list positions do not sort numerically")
	}
	pa := RedisElemPrefix(TableRedisHash, []byte("a"))
	if bytes.HasPrefix(RedisHashField([]byte("ab"), nil), pa) {
		t.Error("hash keys of \"ab\" fall under the prefix of \"a\"")
	}
	for _, tb := range []byte{TableRedisKeys, TableRedisScan, TableRedisHash, TableRedisSet, TableRedisList} {
		if n := TableName(tb); n == "" || n[0] == 'u' {
			t.Errorf("TableName(0x%x) = %q", tb, n)
		}
	}
}

func TestRedisDecodersRejectMalformed(t *testing.T) {
	long := bytes.Repeat([]byte("k"), MaxRedisKeyLen+1)
	for name, err := range map[string]error{
		"key other table":  second(DecodeRedisKey([]byte{TableKV, 'a'})),
		"key too long":     second(DecodeRedisKey(append([]byte{TableRedisKeys}, long...))),
		"scan short":       third(DecodeRedisScan([]byte{TableRedisScan, 1, 2})),
		"hash short":       third(DecodeRedisHashField([]byte{TableRedisHash, 0})),
		"hash len overrun": third(DecodeRedisHashField([]byte{TableRedisHash, 0, 5, 'a'})),
		"list no pos":      third(DecodeRedisListElem([]byte{TableRedisList, 0, 1, 'a', 1})),
		"set empty":        third(DecodeRedisSetMember(nil)),
	} {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func second[A any](_ A, err error) error        { return err }
func third[A, B any](_ A, _ B, err error) error { return err }

func FuzzDecodeRedisKey(f *testing.F) {
	addSeeds(f, TableRedisKeys, RedisKey([]byte("asset:index")))
	f.Fuzz(func(t *testing.T, k []byte) {
		key, err := DecodeRedisKey(k)
		checkDecode(t, k, err, func() []byte { return RedisKey(key) })
	})
}

func FuzzDecodeRedisScan(f *testing.F) {
	addSeeds(f, TableRedisScan, RedisScan(42, []byte("asset:index")))
	f.Fuzz(func(t *testing.T, k []byte) {
		c, key, err := DecodeRedisScan(k)
		checkDecode(t, k, err, func() []byte { return RedisScan(c, key) })
	})
}

func FuzzDecodeRedisHashField(f *testing.F) {
	addSeeds(f, TableRedisHash, RedisHashField([]byte("asset:index"), []byte("google_search")))
	f.Fuzz(func(t *testing.T, k []byte) {
		key, field, err := DecodeRedisHashField(k)
		checkDecode(t, k, err, func() []byte { return RedisHashField(key, field) })
	})
}

func FuzzDecodeRedisSetMember(f *testing.F) {
	addSeeds(f, TableRedisSet, RedisSetMember([]byte("asset:category:tool"), []byte("google_search")))
	f.Fuzz(func(t *testing.T, k []byte) {
		key, m, err := DecodeRedisSetMember(k)
		checkDecode(t, k, err, func() []byte { return RedisSetMember(key, m) })
	})
}

func FuzzDecodeRedisListElem(f *testing.F) {
	addSeeds(f, TableRedisList, RedisListElem([]byte("asset:sync:changed"), -7))
	f.Fuzz(func(t *testing.T, k []byte) {
		key, pos, err := DecodeRedisListElem(k)
		checkDecode(t, k, err, func() []byte { return RedisListElem(key, pos) })
	})
}

// FuzzDecodeRedisMeta: whatever decodes re-encodes to the same bytes.
func FuzzDecodeRedisMeta(f *testing.F) {
	f.Add(AppendRedisMeta(nil, &RedisMeta{Type: RedisString, Version: 3, Created: 1, Value: []byte("v")}))
	f.Add(AppendRedisMeta(nil, &RedisMeta{Type: RedisHash, Version: 3, Created: 1, Count: 2}))
	f.Add(AppendRedisMeta(nil, &RedisMeta{Type: RedisList, Version: 3, Created: 1, Head: -1, Tail: 1}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := DecodeRedisMeta(v)
		if err != nil {
			if !errors.Is(err, ErrMalformedRecord) {
				t.Fatalf("error %v does not wrap ErrMalformedRecord", err)
			}
			return
		}
		if got := AppendRedisMeta(nil, &m); !bytes.Equal(got, v) {
			t.Fatalf("decode %x re-encodes to %x", v, got)
		}
	})
}

// FuzzRedisRoutingKey: the routing key is a part of the key; keys with the
// same non-empty hash tag share it.
func FuzzRedisRoutingKey(f *testing.F) {
	f.Add([]byte("asset:metadata:x"), []byte("u1"))
	f.Add([]byte("{"), []byte(""))
	f.Fuzz(func(t *testing.T, key, tag []byte) {
		rk := RedisRoutingKey(key)
		if !bytes.Contains(key, rk) {
			t.Fatalf("routing key %q not part of %q", rk, key)
		}
		if len(tag) == 0 || bytes.ContainsAny(tag, "{}") {
			return
		}
		tagged := append(append(append([]byte("pre{"), tag...), '}'), key...)
		if got := RedisRoutingKey(tagged); !bytes.Equal(got, tag) {
			t.Fatalf("RedisRoutingKey(%q) = %q, want %q", tagged, got, tag)
		}
	})
}
