package shard

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"lukechampine.com/blake3"
)

// naiveShard is the seed's shard_for_user, transcribed:
//
//	let hash = blake3::hash(user_id.as_bytes());
//	let shard_idx = (hash.as_bytes()[0] as usize) % self.num_shards;
func naiveShard(routingKey []byte, numShards int) int {
	h := blake3.Sum256(routingKey)
	return int(h[0]) % numShards
}

func randKey(rng *rand.Rand) []byte {
	b := make([]byte, rng.IntN(80))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestDefaultMapMatchesSeedFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 5000)
	for i := range keys {
		keys[i] = randKey(rng)
	}
	keys = append(keys, nil, []byte{}, make([]byte, 32), []byte("user-1"))

	counts := []int{256}
	for n := 1; n <= 16; n++ {
		counts = append(counts, n)
	}
	for _, n := range counts {
		m, err := DefaultMap(n)
		if err != nil {
			t.Fatalf("DefaultMap(%d): %v", n, err)
		}
		for _, k := range keys {
			want := naiveShard(k, n)
			if got := m.ShardOf(k); int(got) != want {
				t.Fatalf("n=%d key %x: ShardOf = %d, seed formula = %d", n, k, got, want)
			}
			if got := m.ShardOfSlot(SlotOf(k)); int(got) != want {
				t.Fatalf("n=%d key %x: ShardOfSlot(SlotOf) = %d, want %d", n, k, got, want)
			}
		}
	}
}

func TestSlotOfKnownAnswers(t *testing.T) {
	tests := []struct {
		name   string
		key    []byte
		digest string // BLAKE3-256 of key
		slot   Slot
	}{
		// The empty-input digest is the official BLAKE3 test vector.
		{"empty", []byte{}, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262", 175},
		{"user-1", []byte("user-1"), "9d852405fd522658534f121d08b807a81edb8edb1ee6fd194b9d359c5e3c6f34", 157},
		{"user-2", []byte("user-2"), "3fabbaa4679c279cbe6ecbc5b4111d578a7557952cf7f1534f309c84b9a54efd", 63},
		{"a", []byte("a"), "17762fddd969a453925d65717ac3eea21320b66b54342fde15128d6caf21215f", 23},
		{"32 zero bytes", make([]byte, 32), "2ada83c1819a5372dae1238fc1ded123c8104fdaa15862aaee69428a1820fcda", 42},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// An independent computation through the streaming hasher.
			h := blake3.New(32, nil)
			h.Write(tc.key)
			digest := h.Sum(nil)
			if got := hex.EncodeToString(digest); got != tc.digest {
				t.Fatalf("blake3(%q) = %s, want %s", tc.key, got, tc.digest)
			}
			if Slot(digest[0]) != tc.slot {
				t.Fatalf("digest[0] = %d, want slot %d", digest[0], tc.slot)
			}
			if got := SlotOf(tc.key); got != tc.slot {
				t.Fatalf("SlotOf(%q) = %d, want %d", tc.key, got, tc.slot)
			}
		})
	}
	if SlotOf(nil) != SlotOf([]byte{}) {
		t.Error("nil and empty routing keys hash differently")
	}
}

func TestSlotOfDoesNotAllocate(t *testing.T) {
	k := []byte("0123456789abcdef0123456789abcdef")
	if n := testing.AllocsPerRun(100, func() { SlotOf(k) }); n != 0 {
		t.Errorf("SlotOf allocates %v times per call", n)
	}
}

func TestDefaultMap(t *testing.T) {
	for _, n := range []int{0, -1, MaxShards + 1, 1 << 40} {
		if m, err := DefaultMap(n); !errors.Is(err, ErrInvalidMap) || m != nil {
			t.Errorf("DefaultMap(%d) = %v, %v; want nil, ErrInvalidMap", n, m, err)
		}
	}
	for n := 1; n <= MaxShards; n++ {
		m, err := DefaultMap(n)
		if err != nil {
			t.Fatalf("DefaultMap(%d): %v", n, err)
		}
		if m.Version != 1 || m.NumShards != n {
			t.Fatalf("DefaultMap(%d): version %d, %d shards", n, m.Version, m.NumShards)
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("DefaultMap(%d) does not validate: %v", n, err)
		}
		checkPartition(t, m)
		// Slots are dealt round-robin, so shard sizes differ by at most one.
		lo, hi := NumSlots/n, (NumSlots+n-1)/n
		for id := range ID(n) {
			if c := len(m.SlotsOf(id)); c < lo || c > hi {
				t.Fatalf("DefaultMap(%d): shard %d owns %d slots, want %d..%d", n, id, c, lo, hi)
			}
		}
	}
}

// checkPartition checks that SlotsOf partitions the slots among the shards
// consistently with ShardOfSlot.
func checkPartition(t *testing.T, m *Map) {
	t.Helper()
	seen := 0
	ids := m.Shards()
	if !slices.IsSorted(ids) {
		t.Fatalf("Shards() not sorted: %v", ids)
	}
	for id := range ID(m.NumShards) {
		slots := m.SlotsOf(id)
		if (len(slots) > 0) != slices.Contains(ids, id) {
			t.Fatalf("shard %d owns %d slots, Shards() = %v", id, len(slots), ids)
		}
		if !slices.IsSorted(slots) {
			t.Fatalf("SlotsOf(%d) not sorted: %v", id, slots)
		}
		for _, s := range slots {
			if m.ShardOfSlot(s) != id {
				t.Fatalf("SlotsOf(%d) lists slot %d owned by %d", id, s, m.ShardOfSlot(s))
			}
		}
		seen += len(slots)
	}
	if seen != NumSlots {
		t.Fatalf("shards own %d slots in total, want %d", seen, NumSlots)
	}
}

func TestValidate(t *testing.T) {
	valid := func(n int) *Map {
		m, err := DefaultMap(n)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name string
		m    *Map
		ok   bool
	}{
		{"default 1", valid(1), true},
		{"default 7", valid(7), true},
		{"default 256", valid(256), true},
		{"all slots on shard 0 of 1", &Map{Version: 9, NumShards: 1}, true},
		{"moved slot", func() *Map { m := valid(3); m.Slots[0] = 2; m.Version = 2; return m }(), true},
		{"nil", nil, false},
		{"zero map", &Map{}, false},
		{"version 0", func() *Map { m := valid(4); m.Version = 0; return m }(), false},
		{"zero shards", &Map{Version: 1}, false},
		{"negative shards", &Map{Version: 1, NumShards: -3}, false},
		{"too many shards", &Map{Version: 1, NumShards: MaxShards + 1}, false},
		{"slot beyond shards", func() *Map { m := valid(4); m.Slots[200] = 4; return m }(), false},
		{"slot far beyond shards", func() *Map { m := valid(4); m.Slots[5] = 1 << 31; return m }(), false},
		// Ids may have holes (a shard merged away, a split's target not
		// yet published): NumShards is only the id bound.
		{"shard owns nothing", func() *Map {
			m := valid(4)
			for s, id := range m.Slots {
				if id == 3 {
					m.Slots[s] = 0
				}
			}
			return m
		}(), true},
		{"num shards grown without slots", func() *Map { m := valid(4); m.NumShards = 5; return m }(), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("Validate = %v, want ErrInvalidMap", err)
			}
			if err != nil {
				t.Logf("%v", err)
			}
		})
	}
}

func TestClone(t *testing.T) {
	m, err := DefaultMap(5)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Clone()
	if *c != *m {
		t.Fatal("clone differs from original")
	}
	c.Slots[0] = 4
	c.Version++
	if m.Slots[0] != 0 || m.Version != 1 {
		t.Fatal("changing the clone changed the original")
	}
	if (*Map)(nil).Clone() != nil {
		t.Fatal("nil.Clone() != nil")
	}
}

func TestShards(t *testing.T) {
	m, err := DefaultMap(4)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Shards(); !slices.Equal(got, []ID{0, 1, 2, 3}) {
		t.Fatalf("Shards() of a 4-shard map = %v", got)
	}
	// Shard 1 merged into 3, shard 5 split off 0 (NumShards is the bound).
	for s, id := range m.Slots {
		switch {
		case id == 1:
			m.Slots[s] = 3
		case id == 0 && s >= 128:
			m.Slots[s] = 5
		}
	}
	m.NumShards, m.Version = 6, 3
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := m.Shards(); !slices.Equal(got, []ID{0, 2, 3, 5}) {
		t.Fatalf("Shards() = %v, want [0 2 3 5]", got)
	}
	checkPartition(t, m)
}

func TestSlotsOfUnknownShard(t *testing.T) {
	m, err := DefaultMap(3)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.SlotsOf(3); got != nil {
		t.Fatalf("SlotsOf(3) of a 3-shard map = %v, want nil", got)
	}
}

// FuzzValidate builds a map from arbitrary bytes: version, shard count and
// one byte per slot (values beyond the shard count included).
func FuzzValidate(f *testing.F) {
	slots := func(fn func(s int) byte) []byte {
		b := make([]byte, NumSlots)
		for s := range b {
			b[s] = fn(s)
		}
		return b
	}
	f.Add(uint64(1), 4, slots(func(s int) byte { return byte(s % 4) }))
	f.Add(uint64(1), 256, slots(func(s int) byte { return byte(s) }))
	f.Add(uint64(0), 1, slots(func(int) byte { return 0 }))
	f.Add(uint64(7), 3, slots(func(int) byte { return 1 }))
	f.Add(uint64(2), 2, []byte{0, 1})
	f.Add(uint64(1), -1, []byte{})
	f.Fuzz(func(t *testing.T, version uint64, numShards int, table []byte) {
		m := &Map{Version: version, NumShards: numShards}
		for s := range m.Slots {
			if s < len(table) {
				m.Slots[s] = ID(table[s])
			}
		}
		if err := m.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("Validate error %v does not wrap ErrInvalidMap", err)
			}
			return
		}
		checkPartition(t, m)
		for _, k := range [][]byte{nil, table, []byte("user-1"), bytes.Repeat([]byte{0xff}, 32)} {
			if id := m.ShardOf(k); int(id) >= m.NumShards {
				t.Fatalf("ShardOf(%x) = %d, NumShards %d", k, id, m.NumShards)
			}
		}
		c := m.Clone()
		if err := c.Validate(); err != nil || *c != *m {
			t.Fatalf("clone of a valid map: %v", err)
		}
	})
}

func BenchmarkSlotOf(b *testing.B) {
	for _, size := range []int{16, 32, 256} {
		k := bytes.Repeat([]byte{0x5a}, size)
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				SlotOf(k)
			}
		})
	}
}

func BenchmarkShardOf(b *testing.B) {
	m, err := DefaultMap(16)
	if err != nil {
		b.Fatal(err)
	}
	k := bytes.Repeat([]byte{0x5a}, 32)
	b.ReportAllocs()
	for b.Loop() {
		m.ShardOf(k)
	}
}
