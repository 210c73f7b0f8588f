package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// Group is one Raft group's log and stable store inside a Store.
type Group struct {
	s  *Store
	id uint32

	// mu guards the cached index bounds; it is held across a write and
	// the update of the bounds, so readers never see bounds ahead of (or
	// behind) the committed log. Reads of entries take no lock.
	mu struct {
		sync.Mutex
		first, last uint64 // 0, 0 when the log is empty
	}
}

var (
	_ raft.LogStore    = (*Group)(nil)
	_ raft.StableStore = (*Group)(nil)
)

// ID returns the group id.
func (g *Group) ID() uint32 { return g.id }

// FirstIndex returns the lowest stored index, 0 if the log is empty.
func (g *Group) FirstIndex() (uint64, error) {
	if g.s.closed.Load() {
		return 0, ErrClosed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.first, nil
}

// LastIndex returns the highest stored index, 0 if the log is empty.
func (g *Group) LastIndex() (uint64, error) {
	if g.s.closed.Load() {
		return 0, ErrClosed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.last, nil
}

// GetLog reads the entry at index into log; raft.ErrLogNotFound if absent.
func (g *Group) GetLog(index uint64, log *raft.Log) error {
	if g.s.closed.Load() {
		return ErrClosed
	}
	var kb [logKeyLen]byte
	v, closer, err := g.s.db.Get(logKey(kb[:0], g.id, index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftlog: group %d: get %d: %w", g.id, index, err)
	}
	err = decodeEntry(index, v, log)
	closer.Close()
	if err != nil {
		return fmt.Errorf("group %d: %w", g.id, err)
	}
	return nil
}

// StoreLog stores one entry (see StoreLogs).
func (g *Group) StoreLog(log *raft.Log) error {
	return g.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores entries in one Pebble batch committed with pebble.Sync:
// when it returns nil, every entry is on stable storage. Concurrent calls
// of different groups share WAL syncs.
func (g *Group) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if g.s.closed.Load() {
		return ErrClosed
	}
	b := g.s.db.NewBatch()
	defer b.Close()
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, l := range logs {
		op := b.SetDeferred(logKeyLen, entryLen(l))
		logKey(op.Key[:0], g.id, l.Index)
		encodeEntry(op.Value, l)
		if err := op.Finish(); err != nil {
			return err
		}
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftlog: group %d: store logs: %w", g.id, err)
	}
	if g.mu.first == 0 || lo < g.mu.first {
		g.mu.first = lo
	}
	g.mu.last = max(g.mu.last, hi)
	return nil
}

// DeleteRange deletes the entries in [min, max] (inclusive) with one synced
// range deletion.
func (g *Group) DeleteRange(min, max uint64) error {
	if g.s.closed.Load() {
		return ErrClosed
	}
	if min > max {
		return nil
	}
	lo := logKey(nil, g.id, min)
	var hi []byte
	if max == math.MaxUint64 {
		_, hi = groupBounds(g.id, tagLog)
	} else {
		hi = logKey(nil, g.id, max+1)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.s.db.DeleteRange(lo, hi, pebble.Sync); err != nil {
		return fmt.Errorf("raftlog: group %d: delete range [%d, %d]: %w", g.id, min, max, err)
	}
	first, last := g.mu.first, g.mu.last
	if first == 0 || max < first || min > last {
		return nil // nothing stored in the range
	}
	if min <= first && max >= last {
		g.mu.first, g.mu.last = 0, 0
		return nil
	}
	// The log may have gaps: look up the new bounds.
	if min <= first {
		f, _, err := g.s.bounds(g.id, max+1, last)
		if err != nil {
			return err
		}
		g.mu.first = f
	}
	if max >= last {
		_, l, err := g.s.bounds(g.id, first, min-1)
		if err != nil {
			return err
		}
		g.mu.last = l
	}
	return nil
}

// Set stores a stable key, synced.
func (g *Group) Set(key, val []byte) error {
	if g.s.closed.Load() {
		return ErrClosed
	}
	if err := g.s.db.Set(stableKey(g.id, key), val, pebble.Sync); err != nil {
		return fmt.Errorf("raftlog: group %d: set %q: %w", g.id, key, err)
	}
	return nil
}

// Get returns a copy of a stable key's value; ErrKeyNotFound if absent.
func (g *Group) Get(key []byte) ([]byte, error) {
	if g.s.closed.Load() {
		return nil, ErrClosed
	}
	v, closer, err := g.s.db.Get(stableKey(g.id, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftlog: group %d: get %q: %w", g.id, key, err)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// SetUint64 stores val as 8 bytes big-endian, synced.
func (g *Group) SetUint64(key []byte, val uint64) error {
	return g.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns a value stored by SetUint64; ErrKeyNotFound if absent.
func (g *Group) GetUint64(key []byte) (uint64, error) {
	v, err := g.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftlog: group %d: key %q: %d-byte value, want 8", g.id, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
