package raftlog

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmkv/swarmkv/internal/pebblelog"
)

var (
	// ErrKeyNotFound is returned by Get and GetUint64 for a missing key. Its
	// message is exactly "not found": hashicorp/raft tells a missing key
	// from a failure by comparing err.Error() with that string (as
	// raft-boltdb's ErrKeyNotFound).
	ErrKeyNotFound = errors.New("not found")
	// ErrClosed is returned by every operation after Store.Close.
	ErrClosed = errors.New("raftlog: closed")
)

// Options configures a Store.
type Options struct {
	// Dir is the Pebble directory; created if missing. Required.
	Dir string
	// Cache is the block cache; nil gives the store a private cache of
	// 8 MiB for blocks (plus the memtable, which Pebble charges against
	// the cache it is given). Log reads are rare (hashicorp/raft's LogCache
	// serves recent entries), so a node passes its shared cache, sized to
	// hold this store's memtable besides its blocks.
	Cache *pebble.Cache
	// MemTableSize is Pebble's memtable size in bytes. Default 4 MiB.
	// Pebble reuses the WAL of a flushed memtable for the next one, so a
	// small memtable soon has the store appending over written blocks of a
	// recycled WAL rather than growing a new file, and such an fsync costs
	// a third less here (docs/performance-log.md, round 6). The price is that
	// entries reach sstables before a snapshot deletes them.
	MemTableSize uint64
	// MinSyncInterval is the least time between two WAL fsyncs: a synced
	// commit that comes sooner after the previous fsync waits for the rest
	// of the interval, so that the appends of other groups arriving
	// meanwhile share its fsync (Pebble's WALMinSyncInterval). 0 (the
	// default) syncs at once; at most 10ms. Under load it trades append
	// latency for fewer fsyncs; an append that comes more than the
	// interval after the last fsync is synced at once.
	MinSyncInterval time.Duration
	// FS is the file system; nil means the OS's. Tests inject crashable
	// in-memory file systems.
	FS vfs.FS
	// Logger receives Pebble's logs (at debug level) and errors; default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultMemTableSize is the memtable size of a Store opened without
// Options.MemTableSize.
const DefaultMemTableSize = 4 << 20

const privateCacheSize = 8 << 20

// MaxMinSyncInterval bounds Options.MinSyncInterval.
const MaxMinSyncInterval = 10 * time.Millisecond

// Store holds the Raft logs and stable stores of many groups in one Pebble
// database. It is safe for concurrent use.
type Store struct {
	db     *pebble.DB
	log    *slog.Logger
	closed atomic.Bool
	// fsyncLatency is Pebble's WAL fsync histogram (nanoseconds), one
	// object for the life of the DB: taken once at Open, so that a scrape
	// does not compute all of Pebble's metrics to reach it. nil if Pebble
	// keeps none.
	fsyncLatency prometheus.Metric
	// batchBytes and entryBytes are the StoreLogs bounds, MaxBatchBytes
	// and MaxEntryBytes (tests lower them); batches counts the batches
	// StoreLogs committed.
	batchBytes, entryBytes int
	batches                atomic.Uint64
	// testCommitHook, if set, runs before each StoreLogs batch commit; an
	// error it returns fails the commit (tests inject failures).
	testCommitHook func(lo, hi uint64) error

	mu struct {
		sync.Mutex
		groups map[uint32]*Group
	}
}

// Open opens (or creates) the store in opts.Dir.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("raftlog: Options.Dir is empty")
	}
	if opts.MemTableSize == 0 {
		opts.MemTableSize = DefaultMemTableSize
	}
	if opts.MinSyncInterval < 0 || opts.MinSyncInterval > MaxMinSyncInterval {
		return nil, fmt.Errorf("raftlog: MinSyncInterval %v: want 0..%v", opts.MinSyncInterval, MaxMinSyncInterval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "raftlog")
	po := &pebble.Options{
		Cache:              opts.Cache,
		MemTableSize:       opts.MemTableSize,
		FS:                 opts.FS,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebblelog.New(log),
	}
	if d := opts.MinSyncInterval; d > 0 {
		po.WALMinSyncInterval = func() time.Duration { return d }
	}
	if opts.Cache == nil {
		po.CacheSize = privateCacheSize + int64(opts.MemTableSize)
	}
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", opts.Dir, err)
	}
	s := &Store{db: db, log: log, batchBytes: MaxBatchBytes, entryBytes: MaxEntryBytes}
	if h := db.Metrics().LogWriter.FsyncLatency; h != nil {
		s.fsyncLatency = h
	}
	s.mu.groups = make(map[uint32]*Group)
	return s, nil
}

// Close closes the database. Every group's Raft instance must be shut down
// first. Idempotent.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.db.Close()
}

// Group returns the log and stable store of group id (the same handle on
// every call), loading its first and last index on the first call.
func (s *Store) Group(id uint32) (*Group, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.mu.groups[id]; ok {
		return g, nil
	}
	g := &Group{s: s, id: id}
	first, last, err := s.bounds(id, 0, math.MaxUint64)
	if err != nil {
		return nil, err
	}
	g.mu.first, g.mu.last = first, last
	s.mu.groups[id] = g
	return g, nil
}

// Groups returns the ids of every group with state in the store (log
// entries or stable keys), in increasing order.
func (s *Store) Groups() ([]uint32, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < 5 {
			valid = it.Next()
			continue
		}
		id := uint32(k[0])<<24 | uint32(k[1])<<16 | uint32(k[2])<<8 | uint32(k[3])
		ids = append(ids, id)
		if id == math.MaxUint32 {
			break
		}
		_, next := groupBounds(id, 0)
		valid = it.SeekGE(next)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return ids, nil
}

// DropGroup deletes every log entry and stable key of group id, durably
// (one synced range deletion). The group's Raft instance must be shut
// down; a handle from Group stays usable and sees an empty group.
func (s *Store) DropGroup(id uint32) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	g := s.mu.groups[id]
	s.mu.Unlock()
	if g != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
	}
	lo, hi := groupBounds(id, 0)
	if err := s.db.DeleteRange(lo, hi, pebble.Sync); err != nil {
		return fmt.Errorf("raftlog: drop group %d: %w", id, err)
	}
	if g != nil {
		g.mu.first, g.mu.last = 0, 0
	}
	return nil
}

// bounds returns the lowest and highest index of group id's entries within
// [min, max] (0, 0 if none).
func (s *Store) bounds(id uint32, min, max uint64) (first, last uint64, err error) {
	lo := logKey(nil, id, min)
	var hi []byte
	if max == math.MaxUint64 {
		_, hi = groupBounds(id, tagLog)
	} else {
		hi = logKey(nil, id, max+1)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, 0, err
	}
	if it.First() {
		first = indexOf(it.Key())
		if it.Last() {
			last = indexOf(it.Key())
		}
	}
	if err := it.Close(); err != nil {
		return 0, 0, fmt.Errorf("raftlog: group %d: %w", id, err)
	}
	return first, last, nil
}

func indexOf(key []byte) uint64 {
	k := key[5:13]
	return uint64(k[0])<<56 | uint64(k[1])<<48 | uint64(k[2])<<40 | uint64(k[3])<<32 |
		uint64(k[4])<<24 | uint64(k[5])<<16 | uint64(k[6])<<8 | uint64(k[7])
}

// Metrics returns Pebble's metrics of the store.
func (s *Store) Metrics() *pebble.Metrics { return s.db.Metrics() }

// FsyncStats is the latency histogram of the store's WAL fsyncs, each of
// which every StoreLogs (and every stable-store write) of the groups
// committing at that moment waits for: Pebble's own histogram, with a
// subset of its bucket bounds.
type FsyncStats struct {
	Count uint64        // fsyncs since Open
	Sum   time.Duration // their total duration
	// Buckets maps an upper bound in seconds to the number of fsyncs that
	// took at most that long (cumulative, as Prometheus histograms count).
	Buckets map[float64]uint64
}

// FsyncStats returns the WAL fsync latency histogram. Each bound it
// reports is one of Pebble's (FsyncLatencyBuckets: 100 us steps to 5 ms,
// then exponential to 10 s), so every count is exact: 0.1, 0.2, 0.3, 0.5,
// 1, 2 and 3 ms, and every fifth exponential bound from 5 ms.
func (s *Store) FsyncStats() (FsyncStats, error) {
	if s.closed.Load() {
		return FsyncStats{}, ErrClosed
	}
	if s.fsyncLatency == nil {
		return FsyncStats{}, errors.New("raftlog: Pebble keeps no fsync histogram")
	}
	var m dto.Metric
	if err := s.fsyncLatency.Write(&m); err != nil {
		return FsyncStats{}, fmt.Errorf("raftlog: fsync histogram: %w", err)
	}
	hist := m.GetHistogram()
	st := FsyncStats{
		Count:   hist.GetSampleCount(),
		Sum:     time.Duration(hist.GetSampleSum()), // Pebble records nanoseconds
		Buckets: make(map[float64]uint64),
	}
	const linear = 50 // Pebble's first 50 bounds: 0, 100 us, ..., 4.9 ms
	for i, b := range hist.GetBucket() {
		keep := false
		switch {
		case i < linear:
			keep = i == 1 || i == 2 || i == 3 || i == 5 || i == 10 || i == 20 || i == 30
		default:
			keep = (i-linear)%5 == 0 || i == len(hist.GetBucket())-1
		}
		if keep && b.GetUpperBound() > 0 {
			st.Buckets[b.GetUpperBound()/float64(time.Second)] = b.GetCumulativeCount()
		}
	}
	return st, nil
}
