package raftlog

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store behind the cache.
type countingStore struct {
	*raft.InmemStore
	gets int
	fail error
}

func (s *countingStore) GetLog(i uint64, l *raft.Log) error {
	s.gets++
	return s.InmemStore.GetLog(i, l)
}
func (s *countingStore) StoreLogs(logs []*raft.Log) error {
	if s.fail != nil {
		return s.fail
	}
	return s.InmemStore.StoreLogs(logs)
}

func cacheEntries(from, to uint64, size int) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, size)})
	}
	return out
}

// cached reports whether index is served without reading the store (and
// that the entry read is the right one).
func cached(t *testing.T, c *Cache, s *countingStore, index uint64) bool {
	t.Helper()
	before := s.gets
	var l raft.Log
	if err := c.GetLog(index, &l); err != nil {
		t.Fatalf("GetLog(%d): %v", index, err)
	}
	if l.Index != index {
		t.Fatalf("GetLog(%d) returned index %d", index, l.Index)
	}
	return s.gets == before
}

func newCountingCache(t *testing.T, n, maxBytes int) (*Cache, *countingStore) {
	t.Helper()
	s := &countingStore{InmemStore: raft.NewInmemStore()}
	c, err := NewCache(s, n, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestCacheBoundedByBytes(t *testing.T) {
	c, s := newCountingCache(t, 16, 3500)
	if err := c.StoreLogs(cacheEntries(1, 10, 1000)); err != nil {
		t.Fatal(err)
	}
	if n, b := c.Stats(); n != 3 || b != 3000 {
		t.Fatalf("cache holds %d entries, %d bytes; want 3 entries, 3000 bytes", n, b)
	}
	for i := uint64(1); i <= 10; i++ {
		if got, want := cached(t, c, s, i), i >= 8; got != want {
			t.Errorf("index %d served from memory: %v, want %v", i, got, want)
		}
	}
	// One entry larger than the bound is still cached, alone.
	if err := c.StoreLog(&raft.Log{Index: 11, Term: 1, Data: make([]byte, 10000)}); err != nil {
		t.Fatal(err)
	}
	if n, b := c.Stats(); n != 1 || b != 10000 || !cached(t, c, s, 11) || cached(t, c, s, 10) {
		t.Fatalf("after a 10000-byte entry: %d entries, %d bytes", n, b)
	}
}

func TestCacheBoundedByEntries(t *testing.T) {
	c, s := newCountingCache(t, 4, 1<<20)
	for i := uint64(1); i <= 10; i++ { // one at a time: the ring wraps
		if err := c.StoreLog(cacheEntries(i, i, 10)[0]); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := c.Stats(); n != 4 || b != 40 {
		t.Fatalf("cache holds %d entries, %d bytes; want 4, 40", n, b)
	}
	for i := uint64(1); i <= 10; i++ {
		if got, want := cached(t, c, s, i), i >= 7; got != want {
			t.Errorf("index %d served from memory: %v, want %v", i, got, want)
		}
	}
}

func TestCacheDeleteAndRewrite(t *testing.T) {
	c, s := newCountingCache(t, 8, 1<<20)
	if err := c.StoreLogs(cacheEntries(1, 6, 10)); err != nil {
		t.Fatal(err)
	}
	// A follower's conflicting suffix: raft deletes it, then writes the
	// leader's entries at the same indexes.
	if err := c.DeleteRange(4, 6); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Stats(); n != 0 {
		t.Fatalf("after DeleteRange the cache holds %d entries", n)
	}
	fresh := cacheEntries(4, 5, 10)
	for _, l := range fresh {
		l.Term = 2
	}
	if err := c.StoreLogs(fresh); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := c.GetLog(5, &l); err != nil || l.Term != 2 || !cached(t, c, s, 5) {
		t.Fatalf("index 5 after rewrite: term %d, err %v", l.Term, err)
	}
	if err := c.GetLog(6, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted index 6: %v, want ErrLogNotFound", err)
	}
	// Storing an index that is not the next restarts the cache there.
	if err := c.StoreLogs(cacheEntries(20, 21, 10)); err != nil {
		t.Fatal(err)
	}
	if n, b := c.Stats(); n != 2 || b != 20 || cached(t, c, s, 4) {
		t.Fatalf("after a gap: %d entries, %d bytes", n, b)
	}
}

func TestCacheKeepsNothingTheStoreRefused(t *testing.T) {
	c, s := newCountingCache(t, 8, 1<<20)
	s.fail = errors.New("disk full")
	if err := c.StoreLogs(cacheEntries(1, 2, 10)); err == nil {
		t.Fatal("StoreLogs succeeded over a failing store")
	}
	if n, _ := c.Stats(); n != 0 {
		t.Fatalf("cache holds %d entries the store refused", n)
	}
	if _, err := NewCache(s, 0, 1); err == nil {
		t.Fatal("NewCache accepted 0 entries")
	}
}
