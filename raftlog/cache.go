package raftlog

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// Cache keeps the most recent entries of one Raft group in memory in front
// of its LogStore, as hashicorp/raft's LogCache does, but bounded in bytes
// as well as in entries. Raft reads recent entries back to replicate them;
// with proposal coalescing one entry carries up to 256 commands, so an
// entry count alone bounds nothing (1024 entries of a busy group held
// about 12 MiB, and up to 256 MiB of large batches). Entries are cached
// only once the store has taken them.
type Cache struct {
	store    raft.LogStore
	maxBytes int

	mu    sync.RWMutex
	ring  []*raft.Log // entry i at ring[i % len(ring)]
	bytes int         // data bytes of the cached entries
	first uint64      // lowest index that may be cached; 0: empty
	last  uint64      // highest cached index
}

// NewCache caches up to entries entries and maxBytes bytes of entry data
// (at least the latest entry, whatever its size) in front of store.
func NewCache(store raft.LogStore, entries, maxBytes int) (*Cache, error) {
	if entries < 1 || maxBytes < 1 {
		return nil, fmt.Errorf("raftlog: cache of %d entries and %d bytes: want both positive", entries, maxBytes)
	}
	return &Cache{store: store, maxBytes: maxBytes, ring: make([]*raft.Log, entries)}, nil
}

func (c *Cache) slot(index uint64) int { return int(index % uint64(len(c.ring))) }

// GetLog serves index from memory when cached, else from the store.
func (c *Cache) GetLog(index uint64, log *raft.Log) error {
	c.mu.RLock()
	cached := c.ring[c.slot(index)]
	c.mu.RUnlock()
	if cached != nil && cached.Index == index {
		*log = *cached
		return nil
	}
	return c.store.GetLog(index, log)
}

// StoreLog stores one entry.
func (c *Cache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs stores logs, then caches them, evicting the oldest entries
// past the byte bound.
func (c *Cache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if c.first != 0 && (l.Index <= c.last || l.Index > c.last+1) {
			// Not the next index (raft deletes a conflicting suffix before
			// it rewrites it): start over from this entry.
			c.clear()
		}
		s := c.slot(l.Index)
		if old := c.ring[s]; old != nil {
			c.bytes -= len(old.Data)
			if old.Index == c.first { // the ring wrapped: the oldest goes
				c.first++
			}
		}
		c.ring[s] = l
		c.bytes += len(l.Data)
		if c.first == 0 {
			c.first = l.Index
		}
		c.last = l.Index
	}
	for c.bytes > c.maxBytes && c.first < c.last {
		s := c.slot(c.first)
		if old := c.ring[s]; old != nil && old.Index == c.first {
			c.bytes -= len(old.Data)
			c.ring[s] = nil
		}
		c.first++
	}
	return nil
}

func (c *Cache) clear() {
	clear(c.ring)
	c.bytes, c.first, c.last = 0, 0, 0
}

// IsMonotonic passes the store's answer through (raft.MonotonicLogStore).
func (c *Cache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// DeleteRange empties the cache and deletes the range from the store.
func (c *Cache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.clear()
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// FirstIndex is the store's.
func (c *Cache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex is the store's.
func (c *Cache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// Stats reports the cached entries and their data bytes.
func (c *Cache) Stats() (entries int, bytes int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.first == 0 {
		return 0, c.bytes
	}
	return int(c.last - c.first + 1), c.bytes
}
