package fsm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/shard"
)

// Snapshot stream format; the layout is drawn in the package doc.
const (
	snapshotMagic = "SWKVSNP1"
	tagRecord     = 0x00 // a key/value record follows
	tagEnd        = 0x01 // uvarint record count and the CRC follow

	// restoreChunkBytes: Restore commits every this many bytes.
	restoreChunkBytes = 4 << 20
	snapshotBufSize   = 64 << 10 // Persist's write buffer
	readBufSize       = 16 << 10 // Restore's read buffer
	// readChunk: a record is read in chunks of at most this size, so a
	// corrupt length allocates no more than the bytes actually present.
	readChunk = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot captures the replica's state at the current applied index. It
// first syncs Pebble's WAL, so the captured state is durable (a crash after
// raft compacts its log never needs more than this state), then takes a
// Pebble snapshot; the copying happens in Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.rlock(); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return nil, ErrRestoring
	}
	if err := f.db.LogData(nil, pebble.Sync); err != nil {
		return nil, fmt.Errorf("fsm: snapshot: sync: %w", err)
	}
	snap := f.db.NewSnapshot()
	index, err := appliedIn(snap)
	if err != nil {
		_ = snap.Close()
		return nil, fmt.Errorf("fsm: snapshot: %w", err)
	}
	s := &fsmSnapshot{f: f, snap: snap, shard: f.shard, index: index}
	f.snaps.Lock()
	f.snaps.open[s] = struct{}{}
	f.snaps.Unlock()
	return s, nil
}

// fsmSnapshot is a raft.FSMSnapshot over a Pebble snapshot.
type fsmSnapshot struct {
	f     *FSM
	shard uint32
	index uint64
	mu    sync.Mutex       // held by Persist and Release
	snap  *pebble.Snapshot // guarded by f.snaps; nil once released or closed
}

// Persist writes the snapshot stream to sink, then closes it; on error it
// cancels sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.persist(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) persist(dst io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.f
	if err := f.rlock(); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	f.snaps.Lock()
	snap := s.snap
	f.snaps.Unlock()
	if snap == nil {
		return errors.New("snapshot already released")
	}
	w := newSnapshotWriter(dst, s.shard, s.index)
	if err := f.eachRecord(context.Background(), snap, w.record); err != nil {
		return err
	}
	return w.finish()
}

// appliedIn returns the applied index recorded in r (0 when none).
func appliedIn(r pebble.Reader) (uint64, error) {
	v, c, err := r.Get(metaApplied)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read applied index: %w", err)
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, nil
	}
	return binary.BigEndian.Uint64(v), nil
}

// eachRecord calls fn with every record of snap a snapshot holds (the
// replicated meta records and the data, in key order; not the
// replica-local meta records: applied index, shard id), key and value
// valid only during the call. It stops at fn's first error, ctx's end or
// Close (ErrClosed).
func (f *FSM) eachRecord(ctx context.Context, snap *pebble.Snapshot, fn func(k, v []byte) error) error {
	it, err := snap.NewIter(nil)
	if err != nil {
		return err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n%1024 == 0 {
			if f.closing.Load() {
				_ = it.Close()
				return ErrClosed
			}
			if err := ctx.Err(); err != nil {
				_ = it.Close()
				return err
			}
		}
		n++
		if k := it.Key(); k[0] == metaPrefix && !isReplicatedMeta(k) {
			continue // replica-local: applied index, shard id
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// Release closes the Pebble snapshot. Safe to call more than once.
func (s *fsmSnapshot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.snaps.Lock()
	defer s.f.snaps.Unlock()
	if s.snap != nil {
		_ = s.snap.Close()
		s.snap = nil
		delete(s.f.snaps.open, s)
	}
}

// Restore replaces the replica's state with the snapshot in rc, and closes
// rc.
//
// If the snapshot's applied index is at or below the FSM's and no restore
// is pending, the FSM already holds that state (raft restores its latest
// snapshot on every start): Restore makes the current state durable and
// returns nil without changing it. Otherwise it writes the restore marker
// (synced), deletes all data, streams the records in 4 MiB batches, checks
// the CRC, and in one synced batch sets the applied index and removes the
// marker. Until then AppliedIndex is 0, reads return ErrRestoring and
// applies are refused; on failure that state stays (and the marker, so a
// reopened FSM discards the partial data) until a Restore succeeds.
//
// A corrupt, truncated or other-shard snapshot gives an error wrapping
// ErrBadSnapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.rlock(); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	sr, err := newSnapshotReader(rc)
	if err != nil {
		return err
	}
	if sr.hdr.shard != f.shard {
		return fmt.Errorf("%w: snapshot of shard %d, replica of shard %d", ErrBadSnapshot, sr.hdr.shard, f.shard)
	}
	if !f.restoring.Load() && sr.hdr.index <= f.applied.Load() {
		if err := f.db.LogData(nil, pebble.Sync); err != nil {
			return fmt.Errorf("fsm: restore: sync: %w", err)
		}
		f.log.Info("fsm: restore skipped: state already at or past the snapshot",
			"snapshot_index", sr.hdr.index, "applied_index", f.applied.Load())
		return nil
	}
	if err := f.restore(sr); err != nil {
		f.log.Error("fsm: restore failed; data incomplete until a restore succeeds",
			"snapshot_index", sr.hdr.index, "err", err)
		return err
	}
	f.log.Info("fsm: restored snapshot", "snapshot_index", sr.hdr.index)
	return nil
}

func (f *FSM) restore(sr *snapshotReader) error {
	f.accounts.reset() // the DB's data is replaced
	f.ids.reset()      // refilled with the snapshot's keys as they load
	f.restoring.Store(true)
	f.applied.Store(0)
	var index [8]byte
	binary.BigEndian.PutUint64(index[:], sr.hdr.index)

	b := f.db.NewBatch()
	if err := b.Set(metaRestoring, index[:], nil); err != nil {
		_ = b.Close()
		return err
	}
	if err := f.clearData(b); err != nil {
		_ = b.Close()
		return fmt.Errorf("fsm: restore: clear: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		_ = b.Close()
		return fmt.Errorf("fsm: restore: write marker: %w", err)
	}
	_ = b.Close()

	b = f.db.NewBatch()
	defer func() { _ = b.Close() }()
	sawSlots := false
	for {
		k, v, err := sr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		sawSlots = sawSlots || bytes.Equal(k, metaSlots)
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		f.ids.add(k)
		if b.Len() >= restoreChunkBytes {
			if f.closing.Load() {
				return ErrClosed
			}
			if err := b.Commit(pebble.NoSync); err != nil {
				return fmt.Errorf("fsm: restore: %w", err)
			}
			_ = b.Close()
			b = f.db.NewBatch()
		}
	}
	if !sawSlots {
		// A snapshot written before ownership was recorded: its shard
		// owned every slot.
		all, _ := shard.AllSlots().MarshalBinary()
		if err := b.Set(metaSlots, all, nil); err != nil {
			return err
		}
	}
	if err := b.Set(metaApplied, index[:], nil); err != nil {
		return err
	}
	if err := clearHistory(b, sr.hdr.index); err != nil {
		return err
	}
	if err := b.Delete(metaRestoring, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	st, _, err := loadSlots(f.db, shard.AllSlots())
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.slots.Store(st)
	if err := f.initAttached(f.db); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.failed.Store(nil)
	f.restoring.Store(false)
	f.setApplied(sr.hdr.index)
	f.wakeAllEtcd(false)
	if f.onLeases != nil {
		f.onLeases(LeaseChanges{Resync: true})
	}
	return nil
}

// snapshotWriter writes the snapshot stream, computing its CRC.
type snapshotWriter struct {
	w       *bufio.Writer
	crc     uint32
	n       uint64 // records written
	err     error
	scratch [1 + binary.MaxVarintLen64]byte
}

func newSnapshotWriter(dst io.Writer, shard uint32, index uint64) *snapshotWriter {
	w := &snapshotWriter{w: bufio.NewWriterSize(dst, snapshotBufSize)}
	w.write([]byte(snapshotMagic))
	w.write(binary.AppendUvarint(w.scratch[:0], uint64(shard)))
	w.write(binary.AppendUvarint(w.scratch[:0], index))
	w.writeCRC()
	return w
}

func (w *snapshotWriter) write(p []byte) {
	if w.err != nil {
		return
	}
	w.crc = crc32.Update(w.crc, castagnoli, p)
	_, w.err = w.w.Write(p)
}

func (w *snapshotWriter) record(key, value []byte) error {
	w.write(binary.AppendUvarint(append(w.scratch[:0], tagRecord), uint64(len(key))))
	w.write(key)
	w.write(binary.AppendUvarint(w.scratch[:0], uint64(len(value))))
	w.write(value)
	w.n++
	return w.err
}

// writeCRC writes the CRC of everything written so far (and adds those 4
// bytes to the running CRC).
func (w *snapshotWriter) writeCRC() {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], w.crc)
	w.write(sum[:])
}

func (w *snapshotWriter) finish() error {
	w.write(binary.AppendUvarint(append(w.scratch[:0], tagEnd), w.n))
	w.writeCRC()
	if w.err != nil {
		return w.err
	}
	return w.w.Flush()
}

type snapshotHeader struct {
	shard uint32
	index uint64
}

// snapshotReader decodes and verifies a snapshot stream. Every error wraps
// ErrBadSnapshot. It allocates no more than the bytes it actually reads.
type snapshotReader struct {
	r    *bufio.Reader
	crc  uint32 // over every byte consumed so far
	one  [1]byte
	hdr  snapshotHeader
	rec  []byte // current record: key then value
	prev []byte // previous key, to check the order
	n    uint64 // records read
	done bool
}

// newSnapshotReader reads and checks the header.
func newSnapshotReader(r io.Reader) (*snapshotReader, error) {
	sr := &snapshotReader{r: bufio.NewReaderSize(r, readBufSize)}
	var magic [len(snapshotMagic)]byte
	if _, err := io.ReadFull(sr, magic[:]); err != nil {
		return nil, badSnapshot("header", err)
	}
	if string(magic[:]) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrBadSnapshot, magic[:])
	}
	shard, err := binary.ReadUvarint(sr)
	if err != nil {
		return nil, badSnapshot("shard id", err)
	}
	if shard > math.MaxUint32 {
		return nil, fmt.Errorf("%w: shard id %d out of range", ErrBadSnapshot, shard)
	}
	index, err := binary.ReadUvarint(sr)
	if err != nil {
		return nil, badSnapshot("applied index", err)
	}
	if err := sr.checkCRC("header"); err != nil {
		return nil, err
	}
	sr.hdr = snapshotHeader{shard: uint32(shard), index: index}
	return sr, nil
}

// checkCRC reads a stored CRC and compares it with the CRC of every byte
// before it.
func (sr *snapshotReader) checkCRC(what string) error {
	want := sr.crc
	var sum [4]byte
	if _, err := io.ReadFull(sr, sum[:]); err != nil {
		return badSnapshot(what+" checksum", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return fmt.Errorf("%w: %s checksum mismatch: stored %08x, computed %08x", ErrBadSnapshot, what, got, want)
	}
	return nil
}

func badSnapshot(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %s: %w", ErrBadSnapshot, what, err)
}

// Read reads from the stream, adding the bytes to the CRC.
func (sr *snapshotReader) Read(p []byte) (int, error) {
	n, err := sr.r.Read(p)
	sr.crc = crc32.Update(sr.crc, castagnoli, p[:n])
	return n, err
}

// ReadByte reads one byte, adding it to the CRC.
func (sr *snapshotReader) ReadByte() (byte, error) {
	c, err := sr.r.ReadByte()
	if err == nil {
		sr.one[0] = c
		sr.crc = crc32.Update(sr.crc, castagnoli, sr.one[:])
	}
	return c, err
}

// next returns the next record, valid until the following call, or io.EOF
// once the end marker, the record count and the CRC have been verified and
// the stream has ended.
func (sr *snapshotReader) next() (key, value []byte, err error) {
	if sr.done {
		return nil, nil, io.EOF
	}
	tag, err := sr.ReadByte()
	if err != nil {
		return nil, nil, badSnapshot("record tag", err)
	}
	switch tag {
	case tagRecord:
	case tagEnd:
		return nil, nil, sr.end()
	default:
		return nil, nil, fmt.Errorf("%w: bad record tag 0x%02x after %d records", ErrBadSnapshot, tag, sr.n)
	}
	klen, err := binary.ReadUvarint(sr)
	if err != nil {
		return nil, nil, badSnapshot("key length", err)
	}
	if klen == 0 || klen > maxKeySizeCap {
		return nil, nil, fmt.Errorf("%w: record %d: key length %d", ErrBadSnapshot, sr.n, klen)
	}
	sr.rec = sr.rec[:0]
	if err := sr.appendN(klen); err != nil {
		return nil, nil, badSnapshot("key", err)
	}
	vlen, err := binary.ReadUvarint(sr)
	if err != nil {
		return nil, nil, badSnapshot("value length", err)
	}
	if vlen > maxValueSizeCap {
		return nil, nil, fmt.Errorf("%w: record %d: value length %d", ErrBadSnapshot, sr.n, vlen)
	}
	if err := sr.appendN(vlen); err != nil {
		return nil, nil, badSnapshot("value", err)
	}
	key, value = sr.rec[:klen:klen], sr.rec[klen:]
	if err := CheckSnapshotRecord(key, value); err != nil {
		return nil, nil, fmt.Errorf("record %d: %w", sr.n, err)
	}
	if sr.n > 0 && bytes.Compare(key, sr.prev) <= 0 {
		return nil, nil, fmt.Errorf("%w: record %d: keys not in ascending order", ErrBadSnapshot, sr.n)
	}
	sr.prev = append(sr.prev[:0], key...)
	sr.n++
	return key, value, nil
}

// appendN appends the next n bytes of the stream to sr.rec, growing it
// only as the data arrives.
func (sr *snapshotReader) appendN(n uint64) error {
	for n > 0 {
		chunk := int(min(n, readChunk))
		cur := len(sr.rec)
		sr.rec = slices.Grow(sr.rec, chunk)[:cur+chunk]
		if _, err := io.ReadFull(sr, sr.rec[cur:]); err != nil {
			sr.rec = sr.rec[:cur]
			return err
		}
		n -= uint64(chunk)
	}
	return nil
}

// end checks the record count, the CRC and that nothing follows.
func (sr *snapshotReader) end() error {
	count, err := binary.ReadUvarint(sr)
	if err != nil {
		return badSnapshot("record count", err)
	}
	if count != sr.n {
		return fmt.Errorf("%w: record count %d, read %d", ErrBadSnapshot, count, sr.n)
	}
	if err := sr.checkCRC("stream"); err != nil {
		return err
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		if err == nil {
			return fmt.Errorf("%w: trailing bytes after the checksum", ErrBadSnapshot)
		}
		return badSnapshot("after checksum", err)
	}
	sr.done = true
	return io.EOF
}

// Bounds of one record of a snapshot stream (and of a backup's, package
// backup): a key of 1..MaxRecordKey bytes, a value of at most
// MaxRecordValue bytes.
const (
	MaxRecordKey   = maxKeySizeCap
	MaxRecordValue = maxValueSizeCap
)

// CheckSnapshotRecord checks one record of a replica's state as a
// snapshot stream (or a backup, package backup) carries it: a key of
// 1..MaxRecordKey bytes, a value of at most MaxRecordValue bytes and, in
// the meta table, only a replicated record, well formed (the owned slots,
// 32 bytes; a move record that decodes under its own id). Its errors wrap
// ErrBadSnapshot.
func CheckSnapshotRecord(key, value []byte) error {
	switch {
	case len(key) == 0 || len(key) > MaxRecordKey:
		return fmt.Errorf("%w: key length %d", ErrBadSnapshot, len(key))
	case len(value) > MaxRecordValue:
		return fmt.Errorf("%w: value length %d", ErrBadSnapshot, len(value))
	case key[0] != metaPrefix:
		return nil
	case !isReplicatedMeta(key):
		return fmt.Errorf("%w: key %x in the meta table", ErrBadSnapshot, key)
	}
	return checkReplicatedMeta(key, value)
}

// checkReplicatedMeta checks a meta record of a snapshot: owned slots of
// 32 bytes, a move record that decodes under its own id.
func checkReplicatedMeta(k, v []byte) error {
	if bytes.Equal(k, metaSlots) {
		var s shard.SlotSet
		if err := s.UnmarshalBinary(v); err != nil {
			return fmt.Errorf("%w: owned slots: %v", ErrBadSnapshot, err)
		}
		return nil
	}
	r, err := decodeMove(v)
	if err != nil || r.ID != binary.BigEndian.Uint64(k[len(metaMovePrefix):]) {
		return fmt.Errorf("%w: move record %x: %v", ErrBadSnapshot, k, err)
	}
	return nil
}

// SnapshotWriter writes a snapshot stream (the layout is drawn in the
// package doc), as Persist does, of records its caller gives in key order
// (Restore refuses any other order): package cluster writes the shards of
// a restored backup with it.
type SnapshotWriter struct{ w *snapshotWriter }

// NewSnapshotWriter starts the stream of shard's state at applied index
// index on dst (buffered: Finish flushes it).
func NewSnapshotWriter(dst io.Writer, shard uint32, index uint64) *SnapshotWriter {
	return &SnapshotWriter{w: newSnapshotWriter(dst, shard, index)}
}

// Record writes one record.
func (w *SnapshotWriter) Record(key, value []byte) error { return w.w.record(key, value) }

// Finish writes the end of the stream (the record count and the CRC) and
// flushes it.
func (w *SnapshotWriter) Finish() error { return w.w.finish() }
