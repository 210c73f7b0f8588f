package fsm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/internal/pebblelog"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// Config configures one shard replica's state machine.
type Config struct {
	// Shard is the shard id. It is recorded in the meta table on first
	// Open; a later Open of the same Dir with another Shard fails with
	// ErrWrongShard.
	Shard uint32
	// Dir is the Pebble directory, created if missing. Required.
	Dir string
	// Cache is a block cache shared by the replicas of a node. Nil means a
	// private cache of 1 MiB for blocks. Pebble charges the memtable
	// against the cache it is given: a shared cache must be sized for the
	// memtables of its stores besides the blocks (see cluster's
	// Config.cacheCapacity). The caller keeps its own reference (and Unrefs
	// it after closing every FSM).
	Cache *pebble.Cache
	// MemTableSize is the Pebble memtable size in bytes. 0 means 4 MiB:
	// small, because a node holds many replicas.
	MemTableSize uint64
	// Limits bound command sizes. Zero fields take their defaults.
	Limits Limits
	// Reply bounds what a Redis read may answer (KEYS, SCAN). Zero fields
	// take their defaults.
	Reply ReplyLimits
	// Logger receives the FSM's and Pebble's logs, with attribute
	// shard=<id>. Nil means slog.Default().
	Logger *slog.Logger
	// OnLeases, if set, is called after each commit of applied entries
	// that granted, ended or checkpointed leases, or that may have
	// changed the set of leases otherwise (a slot move op, a Restore), on
	// the goroutine that applies (raft's): it must return quickly (the
	// shard leader's lessor queues the news and reads the state itself).
	OnLeases func(LeaseChanges)
	// InitialSlots are the slots the shard owns when its DB has no
	// ownership record yet (a new data dir, or one written before
	// ownership was recorded); later the record, changed only by the slot
	// move commands, is the truth. Nil means every slot (the behaviour of
	// a shard before elastic shards); a new target of a split starts with
	// an empty set.
	InitialSlots *shard.SlotSet
}

// Limits bound what one command may carry. They are checked by
// Command.Validate during apply; a command over a limit is rejected
// deterministically (every replica must use the same Limits).
type Limits struct {
	MaxKeySize   int // bytes per key; default 4096, at most 1 MiB
	MaxValueSize int // bytes per value; default 1 MiB, at most 64 MiB
	MaxBatchOps  int // guards+mutations per batch; default 1024, at most 65536
}

const (
	defaultMaxKeySize   = 4096
	defaultMaxValueSize = 1 << 20
	defaultMaxBatchOps  = 1024

	maxKeySizeCap   = 1 << 20
	maxValueSizeCap = 64 << 20
	maxBatchOpsCap  = maxDecodeArray
	// A Pebble batch holds at most maxRunBytes plus one command, and a
	// command is no larger than its Raft entry (bounded by the request size
	// limits at the API edge), so it stays far below Pebble's 4 GiB batch
	// limit (over which Pebble panics).

	defaultMemTableSize = 4 << 20
	privateCacheSize    = 1 << 20
	// l0CompactionThreshold is the L0 read amplification (sublevels) at
	// which Pebble compacts L0 into the base level; Pebble's default is 4.
	// A shard's data is small (tens of MiB: its base level is L6) and
	// overwritten at a high rate, and each L0 flush of a 4 MiB memtable
	// overlaps every L6 table, so an L0 compaction rewrites the whole of
	// L6 to merge in a few MiB: at Pebble's default a put100 run wrote 12
	// bytes into L6 per byte flushed, and compactions took 40 % of the
	// nodes' CPU (docs/performance-log.md, round 14). Waiting for 32 sublevels
	// merges eight times as much per rewrite (16 and 32 were measured:
	// round 14). Point reads pay one bloom filter probe per sublevel
	// (filters are on every level), scans one more iterator per sublevel.
	// Larger memtables would do the same at a cost in memory per replica.
	l0CompactionThreshold = 32
	// l0StopWritesThreshold: the L0 read amplification at which Pebble
	// stops writes until compactions catch up (its default, 12, is below
	// the threshold above).
	l0StopWritesThreshold = 4 * l0CompactionThreshold
	// maxRunBytes: ApplyBatch commits and starts a new Pebble batch once
	// the current one holds this many bytes. A Pebble batch grows by
	// doubling, so it may reserve twice this. At 64 MiB, a replica
	// catching up on a large shard held up to 128 MiB in one batch (half
	// of its heap: docs/scale.md, "Large shards"); at 16 MiB it holds 32.
	// Any batch over half a memtable is already a flushable batch of its
	// own to Pebble, so a smaller run costs one more commit per 16 MiB
	// (BenchmarkApplyBatchLarge: no change beyond the host's noise).
	maxRunBytes = 16 << 20
)

// ReplyLimits bound the reply of a Redis read that lists keys: KEYS is
// refused (an error reply naming the bound and SCAN) when its reply would
// pass either bound, and a SCAN page ends at MaxBytes. They apply to reads,
// never to the applied state, so replicas need not agree on them.
type ReplyLimits struct {
	MaxKeys  int // keys of a KEYS reply; default 100000
	MaxBytes int // RESP-encoded bytes of a KEYS reply or SCAN page; default 4 MiB
}

// WithDefaults returns l with every zero or negative field set to its
// default.
func (l ReplyLimits) WithDefaults() ReplyLimits {
	if l.MaxKeys <= 0 {
		l.MaxKeys = 100000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 4 << 20
	}
	return l
}

// WithDefaults returns l with every zero or negative field set to its
// default.
func (l Limits) WithDefaults() Limits {
	if l.MaxKeySize <= 0 {
		l.MaxKeySize = defaultMaxKeySize
	}
	if l.MaxValueSize <= 0 {
		l.MaxValueSize = defaultMaxValueSize
	}
	if l.MaxBatchOps <= 0 {
		l.MaxBatchOps = defaultMaxBatchOps
	}
	return l
}

// Validate reports a configuration Open would refuse. Zero fields are
// valid (they take their defaults).
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("fsm: config: Dir is required")
	}
	l := c.Limits.WithDefaults()
	switch {
	case l.MaxKeySize > maxKeySizeCap:
		return fmt.Errorf("fsm: config: MaxKeySize %d over the cap %d", l.MaxKeySize, maxKeySizeCap)
	case l.MaxValueSize > maxValueSizeCap:
		return fmt.Errorf("fsm: config: MaxValueSize %d over the cap %d", l.MaxValueSize, maxValueSizeCap)
	case l.MaxBatchOps > maxBatchOpsCap:
		return fmt.Errorf("fsm: config: MaxBatchOps %d over the cap %d", l.MaxBatchOps, maxBatchOpsCap)
	}
	return nil
}

// Meta table keys (table prefix 0x00), the replica's own state.
const metaPrefix = 0x00

var (
	metaApplied   = []byte("\x00applied")   // 8-byte big-endian applied index
	metaShard     = []byte("\x00shard")     // 4-byte big-endian shard id
	metaRestoring = []byte("\x00restoring") // present while a Restore runs
	dataStart     = []byte{0x01}            // first key after the meta table
	lastTableKey  = []byte{0xff}            // DeleteRange end; keys >= it are deleted one by one
)

// FSM is the state machine of one shard replica: a raft.BatchingFSM over a
// Pebble DB.
//
// Threading: Apply, ApplyBatch, Snapshot and Restore are called by raft from
// one goroutine. FSMSnapshot.Persist runs concurrently with them. Get, Scan,
// Dump, AppliedIndex and WaitApplied may be called from any goroutine. Close
// waits for every running call; a Persist or Restore in progress stops early
// with ErrClosed.
type FSM struct {
	shard  uint32
	limits Limits
	reply  ReplyLimits
	log    *slog.Logger
	db     *pebble.DB // valid while !mu.closed, used under mu.RLock

	initial  shard.SlotSet             // Config.InitialSlots
	onLeases func(LeaseChanges)        // Config.OnLeases
	slots    atomic.Pointer[slotState] // ownership as of the applied index
	// attached counts each slot's key_lease entries (or more: an ingest
	// may count one twice), read from the DB at open and restore and kept
	// by the applies: a write of an attachable key looks its attachment
	// up only when its slot has one. Used by the goroutine that applies
	// (Open and Restore included) only.
	attached struct {
		slots [shard.NumSlots]int32
		total int64
	}
	// accounts caches account records for the applies (accountCache);
	// ids knows the ledger's ids that are certainly absent (idFilter).
	// Used by the goroutine that applies only.
	accounts  accountCache
	ids       idFilter
	applied   atomic.Uint64         // last applied log index; 0 while restoring
	restoring atomic.Bool           // a Restore is running or failed: data incomplete
	failed    atomic.Pointer[error] // a storage error stopped applies
	closing   atomic.Bool           // Close started: long calls give up
	done      chan struct{}         // closed by Close
	mu        struct {
		sync.RWMutex // read-held by every use of db; write-held by Close
		closed       bool
	}
	notify struct {
		sync.Mutex
		ch chan struct{} // closed and replaced when applied advances
	}
	snaps struct {
		sync.Mutex
		open map[*fsmSnapshot]struct{} // not yet released
	}
	hist sync.Pool // of *histRecorder, reused across runs
	own  Own       // the node's own proposals, applied without decoding
	// etcdWake wakes the etcd front's watchers (EtcdChanged).
	etcdWake etcdWake
}

// Own is where the node's replica records the commands it proposes, so
// that this state machine applies them without decoding them (see Own).
func (f *FSM) Own() *Own { return &f.own }

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// Open opens (creating if needed) the replica's Pebble DB in cfg.Dir.
func Open(cfg Config) (*FSM, error) { return open(cfg, nil) }

// open is Open on a given file system (nil: the OS), for crash tests.
func open(cfg Config, fs vfs.FS) (*FSM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MemTableSize == 0 {
		cfg.MemTableSize = defaultMemTableSize
	}
	log := cfg.Logger.With("shard", cfg.Shard)
	opts := &pebble.Options{
		Cache:                 cfg.Cache,
		MemTableSize:          cfg.MemTableSize,
		L0CompactionThreshold: l0CompactionThreshold,
		L0StopWritesThreshold: l0StopWritesThreshold,
		Logger:                pebblelog.New(log.With("component", "pebble")),
		FS:                    fs,
	}
	// Bloom filters on every level, L0 included (Pebble's default is none):
	// the stores' commands read keys that are mostly absent (the
	// idempotency checks of the ledger, agent_owners, pool membership), and
	// without a filter such a read searches the index and a data block of
	// every table whose range holds the key; with 4 MiB memtables the young
	// tables are many and not yet in the block cache.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	if cfg.Cache == nil {
		opts.CacheSize = privateCacheSize + int64(cfg.MemTableSize)
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("fsm: open pebble %s: %w", cfg.Dir, err)
	}
	initial := shard.AllSlots()
	if cfg.InitialSlots != nil {
		initial = *cfg.InitialSlots
	}
	f := &FSM{
		initial:  initial,
		onLeases: cfg.OnLeases,
		shard:    cfg.Shard,
		limits:   cfg.Limits.WithDefaults(),
		reply:    cfg.Reply.WithDefaults(),
		log:      log,
		db:       db,
		done:     make(chan struct{}),
	}
	f.notify.ch = make(chan struct{})
	f.hist.New = func() any { return new(histRecorder) }
	f.snaps.open = make(map[*fsmSnapshot]struct{})
	if err := f.loadMeta(cfg.Dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := f.initAttached(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("fsm: read key_lease: %w", err)
	}
	if err := f.ids.build(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("fsm: read the ledger's ids: %w", err)
	}
	return f, nil
}

// loadMeta checks the shard id, recovers from an interrupted Restore and
// loads the applied index.
func (f *FSM) loadMeta(dir string) error {
	v, found, err := getCopy(f.db, metaShard)
	switch {
	case err != nil:
		return fmt.Errorf("fsm: read shard id: %w", err)
	case !found:
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], f.shard)
		if err := f.db.Set(metaShard, b[:], pebble.Sync); err != nil {
			return fmt.Errorf("fsm: write shard id: %w", err)
		}
	case len(v) != 4:
		return fmt.Errorf("fsm: corrupt shard id in %s: %d bytes", dir, len(v))
	case binary.BigEndian.Uint32(v) != f.shard:
		return fmt.Errorf("%w: %s holds shard %d, not %d", ErrWrongShard, dir, binary.BigEndian.Uint32(v), f.shard)
	}

	if _, found, err := getCopy(f.db, metaRestoring); err != nil {
		return fmt.Errorf("fsm: read restore marker: %w", err)
	} else if found {
		// A Restore was interrupted: the data is a partial snapshot. Make
		// the state truthful (empty at index 0) so that the next Restore is
		// never skipped and a log replay from index 1 is also correct.
		f.log.Warn("fsm: interrupted restore found; discarding partial data, applied index reset to 0")
		b := f.db.NewBatch()
		defer b.Close()
		if err := f.clearData(b); err != nil {
			return err
		}
		var zero [8]byte
		_ = b.Set(metaApplied, zero[:], nil)
		if err := clearHistory(b, 0); err != nil {
			return err
		}
		_ = b.Delete(metaRestoring, nil)
		if err := b.Commit(pebble.Sync); err != nil {
			return fmt.Errorf("fsm: discard partial restore: %w", err)
		}
	}

	v, found, err = getCopy(f.db, metaApplied)
	switch {
	case err != nil:
		return fmt.Errorf("fsm: read applied index: %w", err)
	case found && len(v) != 8:
		return fmt.Errorf("fsm: corrupt applied index in %s: %d bytes", dir, len(v))
	case found:
		f.applied.Store(binary.BigEndian.Uint64(v))
	}
	if _, found, err := getCopy(f.db, metaHistFloor); err != nil {
		return fmt.Errorf("fsm: read history floor: %w", err)
	} else if !found {
		// A DB written before history was kept: it starts now.
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], f.applied.Load())
		if err := f.db.Set(metaHistFloor, v[:], pebble.Sync); err != nil {
			return fmt.Errorf("fsm: write history floor: %w", err)
		}
	}
	return f.loadSlots()
}

// loadSlots loads the ownership state, recording the initial slots first
// when the DB has no record.
func (f *FSM) loadSlots() error {
	st, found, err := loadSlots(f.db, f.initial)
	if err != nil {
		return err
	}
	if !found {
		v, _ := st.owned.MarshalBinary()
		if err := f.db.Set(metaSlots, v, pebble.Sync); err != nil {
			return fmt.Errorf("fsm: write owned slots: %w", err)
		}
	}
	f.slots.Store(st)
	return nil
}

// clearData adds to b the deletion of every key outside the meta table and
// of the replicated meta keys (owned slots, move records).
func (f *FSM) clearData(b *pebble.Batch) error {
	if err := b.DeleteRange(dataStart, lastTableKey, nil); err != nil {
		return err
	}
	if err := b.DeleteRange(metaMovePrefix, keys.PrefixEnd(metaMovePrefix), nil); err != nil {
		return err
	}
	if err := b.Delete(metaSlots, nil); err != nil {
		return err
	}
	// Keys starting with 0xff lie past any finite DeleteRange end.
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: lastTableKey})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := b.Delete(it.Key(), nil); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// Close closes the DB after every running call has returned. It is
// idempotent; WaitApplied callers get ErrClosed.
func (f *FSM) Close() error {
	f.closing.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return nil
	}
	f.mu.closed = true
	f.wakeAllEtcd(true)
	f.snaps.Lock()
	for s := range f.snaps.open {
		_ = s.snap.Close()
		s.snap = nil
	}
	f.snaps.open = nil
	f.snaps.Unlock()
	err := f.db.Close()
	close(f.done)
	if err != nil {
		return fmt.Errorf("fsm: close: %w", err)
	}
	return nil
}

// rlock read-locks mu for a use of db, or fails when closed.
func (f *FSM) rlock() error {
	f.mu.RLock()
	if f.mu.closed {
		f.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// AppliedIndex is the index of the last log entry applied (0 while a
// Restore is running or after one failed).
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// WaitApplied returns nil once AppliedIndex() >= index, ctx's error if ctx
// ends first, or ErrClosed if the FSM is closed first.
//
// Raft never hands LogNoop or LogBarrier entries to the FSM, so an index
// that is one of those is reached only when a later command or
// configuration entry is applied.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		if f.applied.Load() >= index {
			return nil
		}
		f.notify.Lock()
		ch := f.notify.ch
		f.notify.Unlock()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-f.done:
			return ErrClosed
		}
	}
}

// setApplied publishes a new applied index and wakes WaitApplied callers.
func (f *FSM) setApplied(index uint64) {
	f.applied.Store(index)
	f.notify.Lock()
	close(f.notify.ch)
	f.notify.ch = make(chan struct{})
	f.notify.Unlock()
}

// Apply applies one log entry. See ApplyBatch.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies a run of committed log entries in one Pebble batch
// (split only past 64 MiB) together with the new applied index, committed
// without sync: the Raft log is the durable record, and on restart raft
// replays it from the last snapshot while entries at or below the durable
// applied index are skipped.
//
// It returns one value per entry: a *Result for a LogCommand entry ([]*Result
// for an OpMulti, one per command it carries), nil for other entry types
// and for entries already applied. A malformed or invalid
// command, and a registry, billing or pool command rejected by the state (not
// found, insufficient credits, duplicate event, ...), gets a Result with
// Err and writes nothing; the rest of the run continues. Every command
// reads through the run's batch, so it sees the writes of earlier entries
// of the run. A storage error is
// fatal: every not-yet-committed command of the run gets it as Err, it is
// logged, the applied index does not advance, and later applies are refused
// until a Restore succeeds (restart the replica).
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	if err := f.rlock(); err != nil {
		return failRun(logs, out, 0, err)
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return failRun(logs, out, 0, ErrRestoring)
	}
	if p := f.failed.Load(); p != nil {
		return failRun(logs, out, 0, fmt.Errorf("fsm: applies stopped after a storage error: %w", *p))
	}

	last := f.applied.Load() // highest index put in the batch
	a := &applier{f: f, st: f.slots.Load(), hist: f.hist.Get().(*histRecorder)}
	defer f.hist.Put(a.hist)
	pending := 0 // out[pending:] is not committed yet
	fatal := func(i int, err error) []interface{} {
		if a.b != nil {
			_ = a.b.Close()
		}
		f.accounts.reset() // it may hold writes of the dropped batch
		f.failed.Store(&err)
		f.log.Error("fsm: STORAGE ERROR while applying; replica stops applying, restart it",
			"index", logIndex(logs[i]), "err", err)
		return failRun(logs, out, pending, err)
	}
	for i, l := range logs {
		if l == nil || l.Index <= last {
			continue // already applied (replay after restart)
		}
		if a.b == nil {
			a.b = f.db.NewIndexedBatch()
		}
		if l.Type == raft.LogCommand {
			res, err := a.applyEntry(l)
			if err != nil {
				return fatal(i, err)
			}
			out[i] = res
		}
		last = l.Index
		if a.b.Len() >= maxRunBytes {
			if err := f.commit(a.b, last, a.st); err != nil {
				a.b = nil
				return fatal(i, err)
			}
			a.b, pending = nil, i+1
			a.notify()
		}
	}
	if a.b != nil {
		if err := f.commit(a.b, last, a.st); err != nil {
			a.b = nil
			return fatal(len(logs)-1, err)
		}
		a.notify()
	}
	return out
}

// applier applies one run of entries: b is the run's Pebble batch, st the
// ownership state as the run has left it so far (published with the
// batch's commit, so a reader never sees ownership ahead of the data).
type applier struct {
	f    *FSM
	b    *pebble.Batch
	st   *slotState
	hist *histRecorder // the current entry's events
	term uint64        // the term of the entry being applied
	// leaseIDs and resync are the lease news of the batch (OnLeases).
	leaseIDs []uint64
	resync   bool
	// etcdNS are the etcd namespaces the batch gave a new revision
	// (woken after it commits: EtcdChanged).
	etcdNS []string
	// ch is the change a registry, billing, pool or lease op runs in
	// (newChange), one at a time: a change handed to an op's body through
	// the dispatch table (an indirect call) would escape, one heap
	// allocation per command, where a field of the applier costs none.
	ch change
}

// newChange returns the applier's change, reset for a new op; st nil:
// every slot owned. A ledger change reads through the account cache and
// the id filter.
func (a *applier) newChange(st *slotState, ledger bool) *change {
	a.ch = change{b: a.b, st: st, leases: a}
	if ledger {
		a.ch.acct, a.ch.ids = &a.f.accounts, &a.f.ids
	}
	return &a.ch
}

// notify hands the committed batch's lease news to Config.OnLeases and
// wakes the watchers of the etcd namespaces it wrote.
func (a *applier) notify() {
	a.f.wakeEtcd(a.etcdNS)
	a.etcdNS = a.etcdNS[:0]
	if a.f.onLeases != nil && (len(a.leaseIDs) > 0 || a.resync) {
		a.f.onLeases(LeaseChanges{IDs: a.leaseIDs, Resync: a.resync})
	}
	a.leaseIDs, a.resync = nil, false
}

func logIndex(l *raft.Log) uint64 {
	if l == nil {
		return 0
	}
	return l.Index
}

// failRun sets err as the result of every command entry in logs[from:].
func failRun(logs []*raft.Log, out []interface{}, from int, err error) []interface{} {
	for i := from; i < len(logs); i++ {
		if l := logs[i]; l != nil && l.Type == raft.LogCommand {
			out[i] = &Result{Index: l.Index, FailedGuard: -1, Err: err}
		}
	}
	return out
}

// commit writes the applied index into b, commits it without sync, closes
// it and publishes the ownership state st and the index.
func (f *FSM) commit(b *pebble.Batch, index uint64, st *slotState) error {
	defer b.Close()
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], index)
	if err := b.Set(metaApplied, v[:], nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	moved := f.slots.Swap(st) != st
	f.setApplied(index)
	if moved { // ownership changed: an etcd namespace may have moved
		f.wakeAllEtcd(false)
	}
	return nil
}

// applyEntry applies one command entry into b and returns its response:
// a *Result, or for an OpMulti a []*Result. The error is a storage error
// (fatal); a rejected command is a Result with Err.
func (a *applier) applyEntry(l *raft.Log) (interface{}, error) {
	f := a.f
	a.term = l.Term
	// The node's own proposal comes with its commands (Own): validated
	// like decoded ones, but not decoded.
	own, isOwn := f.own.take(l.Data)
	var cmd *Command
	var err error
	if isOwn {
		cmd, err = own.cmd, own.cmd.Validate(f.limits)
	} else {
		cmd, err = f.decode(l.Data)
	}
	if err != nil {
		return &Result{Index: l.Index, FailedGuard: -1, Err: err}, nil
	}
	a.hist.reset()
	sp := cmd.Op.spec()
	if sp.entry != nil { // OpMulti
		return sp.entry(a, l.Index, cmd, own.subs)
	}
	res := &Result{Index: l.Index, FailedGuard: -1}
	if err := a.execRecorded(cmd, 0, l.Index, res); err != nil {
		return nil, err
	}
	return res, a.writeHistory(l.Index)
}

// execRecorded applies a validated command other than OpMulti into the
// run's batch at log index (its spec's apply: a table look-up, no switch)
// and records its events (the i-th of its entry) in a.hist (its spec's
// history). The error is a storage error (fatal); a rejection is res.Err.
//
// Unless the shard owns every slot, each apply first checks the command
// against the ownership state, within the same apply (so atomically with
// its writes): the slot its fields name (the spec's routingKey: the user
// or account id, the pools routing key; the Redis keys' routing keys, the
// slot of every OpBatch key), and, for the registry, billing and pool ops,
// the slot of every key it writes, as written and as stored
// (applyRecord). A command of a slot not owned is refused with
// *MovedError and writes nothing.
func (a *applier) execRecorded(cmd *Command, i int, index uint64, res *Result) error {
	off := a.b.Len()
	sp := cmd.Op.spec()
	if err := sp.apply(a, cmd, index, res); err != nil {
		return err
	}
	if sp.history != nil {
		return sp.history(a, cmd, i, index, res, off)
	}
	return recordWrites(a, cmd, i, off)
}

// writeHistory writes the entry's history record, if it has events.
func (a *applier) writeHistory(index uint64) error {
	if a.hist.events == 0 {
		return nil
	}
	return a.b.Set(histKey(index), a.hist.buf, nil)
}

// decode decodes and validates a command.
func (f *FSM) decode(data []byte) (*Command, error) {
	cmd, err := DecodeCommand(data)
	if err != nil {
		return nil, err
	}
	if err := cmd.Validate(f.limits); err != nil {
		return nil, err
	}
	return cmd, nil
}

// getView looks key up in b; with wantValue it returns a copy of the value.
func getView(b *pebble.Batch, key []byte, wantValue bool) ([]byte, bool, error) {
	v, c, err := b.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var out []byte
	if wantValue {
		out = append([]byte(nil), v...)
	}
	return out, true, c.Close()
}

// getCopy returns a copy of key's value in the DB (never nil when found).
func getCopy(db *pebble.DB, key []byte) ([]byte, bool, error) {
	v, c, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append(make([]byte, 0, len(v)), v...)
	return out, true, c.Close()
}

// Get returns a copy of key's value, ErrNotFound when absent. Keys of the
// meta table read as absent.
func (f *FSM) Get(key []byte) ([]byte, error) {
	if err := f.rlock(); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return nil, ErrRestoring
	}
	if len(key) == 0 || key[0] == metaPrefix {
		return nil, ErrNotFound
	}
	v, found, err := getCopy(f.db, key)
	if err != nil {
		return nil, fmt.Errorf("fsm: get: %w", err)
	}
	if !found {
		return nil, ErrNotFound
	}
	return v, nil
}

// KV is one key and its value.
type KV struct{ Key, Value []byte }

// Scan returns copies of the keys in [start, end) and their values in
// ascending order, at most limit of them (limit <= 0: no limit). An empty
// end means no upper bound. The meta table is never returned.
func (f *FSM) Scan(start, end []byte, limit int) ([]KV, error) {
	if err := f.rlock(); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	it, err := f.iter(start, end)
	if errors.Is(err, ErrRestoring) || it == nil {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("fsm: scan: %w", err)
	}
	var out []KV
	for ok := it.First(); ok && (limit <= 0 || len(out) < limit); ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("fsm: scan: %w", err)
		}
		out = append(out, KV{
			Key:   append([]byte(nil), it.Key()...),
			Value: append(make([]byte, 0, len(v)), v...),
		})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("fsm: scan: %w", err)
	}
	return out, nil
}

// Dump returns every key and value of the replica except the meta table, in
// key order. For tests and debugging.
func (f *FSM) Dump() ([]KV, error) { return f.Scan(nil, nil, 0) }
