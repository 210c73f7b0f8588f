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
		// partial is set when a StoreLogs failed after committing some of
		// its runs: the group refuses log writes until the store is
		// reopened (see StoreLogs).
		partial error
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

// Bounds of a StoreLogs batch. Pebble panics (ErrBatchTooLarge) when a
// batch grows to 4 GiB, and hashicorp/raft appends up to MaxAppendEntries
// entries at once: 256 entries carrying 64 MiB values are 16 GiB.
const (
	// MaxBatchBytes is the most bytes of records StoreLogs puts in one
	// Pebble batch; a longer append is committed in several, in index
	// order (see StoreLogs). An entry larger than this goes in a batch of
	// its own.
	MaxBatchBytes = 64 << 20
	// MaxEntryBytes is the largest encoded entry StoreLogs accepts (its
	// data and extensions): far above any command the cluster proposes (a
	// value is at most 64 MiB, a request a little more) and far below
	// Pebble's 4 GiB batch limit. A larger entry is an error, not a panic.
	MaxEntryBytes = 1 << 30
	// batchRecordOverhead bounds what a batch adds to a Set's key and
	// value: the kind byte and the two length varints.
	batchRecordOverhead = 1 + 2*binary.MaxVarintLen32
)

// ErrEntryTooLarge is returned by StoreLogs for an entry over MaxEntryBytes;
// nothing of the call is stored.
var ErrEntryTooLarge = errors.New("raftlog: log entry too large")

// splitLogs cuts logs, in order, into runs whose batch records add up to at
// most limit bytes; an entry over limit is a run of its own.
func splitLogs(logs []*raft.Log, limit int) [][]*raft.Log {
	var runs [][]*raft.Log
	start, size := 0, 0
	for i, l := range logs {
		n := logKeyLen + entryLen(l) + batchRecordOverhead
		if i > start && size+n > limit {
			runs = append(runs, logs[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(runs, logs[start:])
}

// StoreLogs stores entries with pebble.Sync: when it returns nil, every
// entry is on stable storage. Concurrent calls of different groups share
// WAL syncs.
//
// An append of at most MaxBatchBytes (every append of small entries) is
// one Pebble batch: all or nothing. A longer one is committed in runs of
// at most MaxBatchBytes, each synced, in the order raft gives the entries
// (ascending, contiguous indexes), so that no batch comes near Pebble's
// 4 GiB limit. If a run fails, or the process dies between runs, a prefix
// of the entries is stored and the call did not return nil. A stored
// prefix is what a crash during an append of fewer entries leaves, which
// raft handles: it acknowledges (AppendEntries success, commit counting)
// only the entries of a StoreLogs that returned nil, and the prefix keeps
// the log contiguous. What raft does not expect is to go on after such a
// failure: it keeps its in-memory last index below the stored prefix and
// may later overwrite the prefix's first entries with another term's,
// leaving stale entries after them that a restart would read as the log's
// tail. So after a failure that left a prefix, the group refuses every log
// write (StoreLogs, DeleteRange) until the store is reopened: the state on
// disk stays exactly what a crash in the middle of the append leaves. The
// cached bounds cover exactly the runs committed.
func (g *Group) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if g.s.closed.Load() {
		return ErrClosed
	}
	for _, l := range logs {
		if n := entryLen(l); n > g.s.entryBytes {
			return fmt.Errorf("%w: group %d: index %d is %d bytes, limit %d", ErrEntryTooLarge, g.id, l.Index, n, g.s.entryBytes)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.mu.partial; err != nil {
		return err
	}
	for i, run := range splitLogs(logs, g.s.batchBytes) {
		if err := g.storeRun(run); err != nil {
			if i > 0 {
				g.mu.partial = fmt.Errorf("raftlog: group %d: log writes refused until restart after an append stored only up to index %d: %w",
					g.id, g.mu.last, err)
				g.s.log.Error("raftlog: append failed part way; the group refuses log writes until restart", "group", g.id, "err", err)
			}
			return err
		}
	}
	return nil
}

// storeRun commits logs in one synced batch and extends the cached bounds.
// g.mu is held.
func (g *Group) storeRun(logs []*raft.Log) error {
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
	var err error
	if h := g.s.testCommitHook; h != nil {
		err = h(lo, hi)
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("raftlog: group %d: store logs [%d, %d]: %w", g.id, lo, hi, err)
	}
	g.s.batches.Add(1)
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
	if err := g.mu.partial; err != nil {
		return err
	}
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
