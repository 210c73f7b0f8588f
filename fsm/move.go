package fsm

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// Slot move operations (elastic shards). A move takes slots from a source
// shard to a target shard; each step is one command, idempotent by the
// move id, recorded in a MoveRecord of each side (see MoveState):
//
//	source: OpFreezeSlots -> (OpUnfreezeSlots: abort) | OpDropSlots ... until Remaining == 0
//	target: OpIngestSlots or OpSyncSlots ... -> OpAdoptSlots | (abort) OpDropSlots ... until Remaining == 0
//
// From protocol version 3 the cluster layer copies the slots before the
// freeze (ExportLive, shipped as OpSyncSlots) and after it ships only the
// difference (SyncPass: OpSyncSlots writes and deletes). Before, it
// exports the frozen slots from the source with ExportSlots and ships
// them to the target as OpIngestSlots commands, in export order (a sessions_by_agent entry is routed through its session
// record, which sorts before it). The first ingest registers the move on
// the target (its Slots must be owned by no one here: not owned, and in no
// frozen or incoming move, nor in a move whose drop is unfinished); an
// empty move needs no ingest: OpAdoptSlots registers and adopts at once.
// Every key an ingest carries must be in the move's slots; a key that
// exists on the target with another value refuses the whole command
// (ErrInvalidCommand naming the key: ids keyed without their user, such as
// event, session, agent and transaction ids, may collide in a merge), so
// the cluster layer can abort the move.
const (
	// OpFreezeSlots (Move: ID, Slots, Peer = target shard, MapVersion)
	// freezes slots the shard owns: from this entry on every command and
	// read of them gets *MovedError and their data never changes.
	// Result.MoveIndex is the freeze's log index (the recorded one when
	// re-applied).
	OpFreezeSlots Op = 50
	// OpUnfreezeSlots (Move: ID) aborts a frozen move: the shard owns the
	// slots again and the record is deleted. Unknown id: a no-op;
	// ErrMoveConflict once a drop began.
	OpUnfreezeSlots Op = 51
	// OpIngestSlots (Move: ID, Slots, Pairs; optional Peer = source shard,
	// MapVersion) writes pairs of an incoming move, registering it first
	// if this is its first ingest. Pairs are in strictly ascending key
	// order, at most Limits.MaxBatchOps of them and MaxMultiBytes in all.
	OpIngestSlots Op = 52
	// OpAdoptSlots (Move: ID, Slots; optional Peer, MapVersion) makes the
	// shard own the slots of an incoming (or not yet registered) move.
	OpAdoptSlots Op = 53
	// OpDropSlots (Move: ID, Max) deletes, in key order from where the last
	// drop stopped, up to Max keys of the move's slots: on the source (the
	// map is published; the move becomes final, MoveMoved) or on an
	// aborted or incoming target (the move becomes MoveAborted).
	// Result.Remaining is the number of the move's keys left, counted up to
	// Max (Max means at least Max); repeat until it is 0.
	OpDropSlots Op = 54
	// OpRestrictSlots (Move: Slots only, no ID) narrows a shard that owns
	// every slot, and has no move record, to Slots: a group made at
	// bootstrap owns all 256 slots in its state machine (InitialSlots
	// nil) while the map gives it only some, and the first move that
	// involves it must first make its state machine own exactly its map's
	// slots. Idempotent: already owning exactly Slots succeeds; any other
	// state is ErrMoveConflict.
	OpRestrictSlots Op = 55
	// OpSyncSlots (Move: ID, Slots, Pairs, Deletes; optional Peer,
	// MapVersion) brings an incoming move's data here up to the source's
	// frozen data, after a pre-copy ingested the slots while the source
	// still served them (cluster/shardmove: the sync pass). It registers
	// the move as OpIngestSlots does, deletes the keys of Deletes and
	// writes Pairs. Unlike OpIngestSlots, a pair may replace a stored
	// value when that value is of the move's slots: only this move wrote
	// those here (the shard owns none of them and no other move may hold
	// them, register). A stored value of another slot refuses the command
	// like an ingest's collision. A delete of a key not stored here, or
	// stored with a value of another slot, is skipped. Pairs and Deletes
	// are each in strictly ascending key order and disjoint, at most
	// Limits.MaxBatchOps keys in all and MaxMultiBytes of keys and values;
	// MoveRecord.Pulled is left alone. It came with protocol version 3
	// (VersionPrecopy).
	OpSyncSlots Op = 56
)

// MaxDropKeys is the largest Max an OpDropSlots may carry.
const MaxDropKeys = 1 << 16

// SlotMove is the argument of the slot move ops; each op takes the fields
// its doc names.
type SlotMove struct {
	ID         uint64         `cbor:"id"`
	Slots      *shard.SlotSet `cbor:"slots,omitempty"`
	Peer       shard.ID       `cbor:"peer,omitempty"`
	MapVersion uint64         `cbor:"map_version,omitempty"`
	Pairs      []Pair         `cbor:"pairs,omitempty"`
	Max        uint32         `cbor:"max,omitempty"`
	Deletes    [][]byte       `cbor:"deletes,omitempty"`
}

// Pair is one key and value an OpIngestSlots writes.
type Pair struct {
	Key   []byte `cbor:"k"`
	Value []byte `cbor:"v,omitempty"`
}

// moveArgs is the shape of an op's SlotMove: the fields it takes besides
// the move id.
type moveArgs struct {
	slots      bool // Slots, required
	mapVersion bool // MapVersion, required
	noPeer     bool // neither Peer nor MapVersion
	pairs      bool // Pairs, the data it carries
	deletes    bool // Deletes
	max        bool // Max, 1..MaxDropKeys
}

// moveBad is the rejection of a SlotMove that breaks a rule of op.
func moveBad(op Op, format string, args ...any) error {
	return fmt.Errorf("%w: op %s: %s", ErrInvalidCommand, op, fmt.Sprintf(format, args...))
}

// validate checks m for op, whose SlotMove takes the fields want names
// (called by the op's spec's validate).
func (m *SlotMove) validate(op Op, want moveArgs, l Limits) error {
	bad := func(format string, args ...any) error { return moveBad(op, format, args...) }
	if m.ID == 0 {
		return bad("move id 0")
	}
	switch {
	case want.slots && (m.Slots == nil || m.Slots.IsEmpty()):
		return bad("no slots")
	case !want.slots && m.Slots != nil:
		return bad("carries slots")
	case want.mapVersion && m.MapVersion == 0:
		return bad("map version 0")
	case want.noPeer && (m.Peer != 0 || m.MapVersion != 0):
		return bad("carries peer or map version")
	case !want.pairs && m.Pairs != nil:
		return bad("carries pairs")
	case !want.deletes && m.Deletes != nil:
		return bad("carries deletes")
	case !want.max && m.Max != 0:
		return bad("carries max")
	case want.max && (m.Max == 0 || m.Max > MaxDropKeys):
		return bad("max %d, want 1..%d", m.Max, MaxDropKeys)
	}
	if !want.pairs {
		return nil
	}
	if n := len(m.Pairs) + len(m.Deletes); n > l.MaxBatchOps {
		return bad("%d pairs and deletes, limit %d", n, l.MaxBatchOps)
	}
	total := 0
	for i := range m.Pairs {
		p := &m.Pairs[i]
		if err := validateKey(p.Key, l); err != nil {
			return bad("pair %d: %s", i, err)
		}
		if len(p.Value) > l.MaxValueSize {
			return bad("pair %d: value is %d bytes, limit %d", i, len(p.Value), l.MaxValueSize)
		}
		if i > 0 && bytes.Compare(m.Pairs[i-1].Key, p.Key) >= 0 {
			return bad("pair %d: keys not in strictly ascending order", i)
		}
		total += len(p.Key) + len(p.Value)
	}
	for i, k := range m.Deletes {
		if err := validateKey(k, l); err != nil {
			return bad("delete %d: %s", i, err)
		}
		if i > 0 && bytes.Compare(m.Deletes[i-1], k) >= 0 {
			return bad("delete %d: keys not in strictly ascending order", i)
		}
		if _, found := slices.BinarySearchFunc(m.Pairs, k, func(p Pair, k []byte) int { return bytes.Compare(p.Key, k) }); found {
			return bad("delete %d: key %x is also a pair", i, k)
		}
		total += len(k)
	}
	if total > MaxMultiBytes {
		return bad("pairs total %d bytes, limit %d", total, MaxMultiBytes)
	}
	return nil
}

// settleMove ends a slot move op's apply: a rejection goes to res.Err.
func settleMove(res *Result, rej, err error) error {
	if err != nil {
		return err
	}
	res.Err, res.Succeeded = rej, rej == nil
	return nil
}

func conflict(op Op, id uint64, format string, args ...any) error {
	return fmt.Errorf("%w: op %s: move %d: %s", ErrMoveConflict, op, id, fmt.Sprintf(format, args...))
}

// setMove records r (and the owned slots) in the batch and the working
// state.
func (a *applier) setMove(r *MoveRecord, owned shard.SlotSet) error {
	st := a.st.clone()
	st.moves[r.ID] = r
	if err := a.b.Set(moveKey(r.ID), encodeMove(r), nil); err != nil {
		return err
	}
	if owned != st.owned {
		st.owned = owned
		v, _ := owned.MarshalBinary()
		if err := a.b.Set(metaSlots, v, nil); err != nil {
			return err
		}
	}
	a.st = st
	return nil
}

// register checks that an incoming move's slots are free here.
func (a *applier) register(op Op, m *SlotMove) error {
	if busy := m.Slots.Intersect(a.st.owned); !busy.IsEmpty() {
		return conflict(op, m.ID, "slots %s are owned here", busy.String())
	}
	for _, r := range a.st.moves {
		busy := r.State == MoveFrozen || r.State == MoveIncoming ||
			((r.State == MoveMoved || r.State == MoveAborted) && !r.Dropped)
		if busy && r.Slots.Overlaps(*m.Slots) {
			return conflict(op, m.ID, "slots %s are in move %d (%s)", r.Slots.Intersect(*m.Slots).String(), r.ID, r.State)
		}
	}
	return nil
}

// ingest is the apply of OpIngestSlots and of OpSyncSlots (sync): the
// pairs, and a sync's deletes, of an incoming move.
func (a *applier) ingest(op Op, sync bool, m *SlotMove, rec *MoveRecord, index uint64) (rej, err error) {
	switch {
	case rec == nil:
		if rej := a.register(op, m); rej != nil {
			return rej, nil
		}
	case rec.State != MoveIncoming:
		return conflict(op, m.ID, "is %s", rec.State), nil
	case rec.Slots != *m.Slots:
		return conflict(op, m.ID, "is of slots %s, not %s", rec.Slots.String(), m.Slots.String()), nil
	}
	// Check every pair and delete before writing any: its slot (through
	// the pairs before it for a sessions_by_agent entry), and no value of
	// another slot stored (an ingest: no other value at all).
	dels, rej, err := a.checkIngest(op, sync, m)
	if rej != nil || err != nil {
		return rej, err
	}
	r := &MoveRecord{ID: m.ID, State: MoveIncoming, Slots: *m.Slots, Peer: m.Peer, MapVersion: m.MapVersion, Index: index}
	if rec != nil {
		c := *rec
		r = &c
	}
	if n := len(m.Pairs); !sync && n > 0 && bytes.Compare(m.Pairs[n-1].Key, r.Pulled) > 0 {
		// The resume point of a pull cut off (MoveRecord.Pulled); a
		// repeated chunk (a pull that restarted before this field
		// existed, or an older binary's) moves it no further back.
		r.Pulled = bytes.Clone(m.Pairs[n-1].Key)
		r.PulledPairs += uint64(n)
	}
	if rec == nil || !bytes.Equal(r.Pulled, rec.Pulled) {
		if err := a.setMove(r, a.st.owned); err != nil {
			return nil, err
		}
	}
	for _, k := range dels {
		if err := a.b.Delete(k, nil); err != nil {
			return nil, err
		}
		a.f.accounts.forget(k)
	}
	for i := range m.Pairs {
		if k := m.Pairs[i].Key; k[0] == keys.TableKeyLease {
			if attached, err := keys.DecodeKeyLease(k); err == nil {
				a.countAttached(attached, +1) // once more if it was there: harmless
			}
		}
		if err := a.b.Set(m.Pairs[i].Key, m.Pairs[i].Value, nil); err != nil {
			return nil, err
		}
		a.f.accounts.forget(m.Pairs[i].Key)
		a.f.ids.add(m.Pairs[i].Key)
	}
	return nil, nil
}

// checkIngest checks an ingest's or a sync's pairs before any is written:
// each is in the move's slots (a sessions_by_agent entry through the pairs
// before it, found by binary search: the pairs are in strictly ascending
// key order, Validate), and no key is stored here with another value (a
// sync: with a value of a slot outside the move). The stored values are
// read with one iterator over the pairs' key range, sought forward
// (cheaper than a point read per pair: round 17 of docs/performance-log.md
// found that check a sixth of a move's CPU). It returns the deletes of a
// sync that are stored here with a value of the move's slots: the ones to
// delete.
func (a *applier) checkIngest(op Op, sync bool, m *SlotMove) (dels [][]byte, rej, err error) {
	stored := readerGetter(a.b)
	for _, k := range m.Deletes {
		v, found, err := stored(k)
		if err != nil {
			return nil, nil, err
		}
		if !found {
			continue
		}
		if slot, ok, err := slotOfKey(stored, k, v); err != nil {
			return nil, nil, err
		} else if ok && m.Slots.Has(slot) {
			dels = append(dels, k)
		}
	}
	if len(m.Pairs) == 0 {
		return dels, nil, nil
	}
	var i int
	get := func(key []byte) ([]byte, bool, error) {
		before := m.Pairs[:i]
		if j, ok := slices.BinarySearchFunc(before, key, func(p Pair, k []byte) int { return bytes.Compare(p.Key, k) }); ok {
			return before[j].Value, true, nil
		}
		return getView(a.b, key, true)
	}
	last := m.Pairs[len(m.Pairs)-1].Key
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: m.Pairs[0].Key, UpperBound: append(bytes.Clone(last), 0)})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	for i = range m.Pairs {
		p := &m.Pairs[i]
		slot, ok, err := slotOfKey(get, p.Key, p.Value)
		if err != nil {
			return nil, nil, err
		}
		if !ok || !m.Slots.Has(slot) {
			return nil, fmt.Errorf("%w: op %s: move %d: pair %d: key %x is not in the move's slots",
				ErrInvalidCommand, op, m.ID, i, p.Key), nil
		}
		if !it.SeekGE(p.Key) || !bytes.Equal(it.Key(), p.Key) {
			continue
		}
		old, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, err
		}
		if bytes.Equal(old, p.Value) {
			continue
		}
		if sync {
			// The stored value's own slot (a sessions_by_agent entry's
			// through the stored session record).
			slot, ok, err := slotOfKey(stored, p.Key, old)
			if err != nil {
				return nil, nil, err
			}
			if ok && m.Slots.Has(slot) {
				continue
			}
		}
		return nil, fmt.Errorf("%w: op %s: move %d: key %x (table %s) exists here with another value",
			ErrInvalidCommand, op, m.ID, p.Key, keys.TableName(p.Key[0])), nil
	}
	return dels, nil, it.Error()
}

// collectSlotKeys returns up to max keys of slots in r after the key after
// (nil: from the start of the data), in key order, and the last key it
// visited (nil if none). A session record brings its sessions_by_agent
// entry along (a drop deletes it with the record, since the entry is
// routed through the record); so up to 2*max keys may come back.
func collectSlotKeys(r pebble.Reader, slots shard.SlotSet, after []byte, max int) (out [][]byte, last []byte, err error) {
	lower := dataStart
	if after != nil {
		lower = append(bytes.Clone(after), 0)
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower})
	if err != nil {
		return nil, nil, err
	}
	get := readerGetter(r)
	seen := make(map[string]bool)
	n := 0
	for ok := it.First(); ok && n < max; ok = it.Next() {
		k := it.Key()
		last = append(last[:0], k...)
		if seen[string(k)] {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, nil, err
		}
		slot, ok, err := slotOfKey(get, k, v)
		if err != nil {
			_ = it.Close()
			return nil, nil, err
		}
		if !ok || !slots.Has(slot) {
			continue
		}
		out = append(out, bytes.Clone(k))
		n++
		if k[0] == keys.TableSessions {
			sid, _ := keys.DecodeSession(k)
			if agent, ok := sessionAgent(v); ok {
				ik := keys.SessionByAgent(agent, sid)
				if _, found, err := get(ik); err != nil {
					_ = it.Close()
					return nil, nil, err
				} else if found {
					out = append(out, ik)
					seen[string(ik)] = true
				}
			}
		}
	}
	if err := it.Close(); err != nil {
		return nil, nil, err
	}
	return out, last, nil
}

// ExportSlots calls fn with every key and value of the slots of move
// moveID, frozen in this replica, in key order, from one Pebble snapshot
// (a consistent state: the slots' data no longer changes anyway). key and
// value are valid only during the call. It refuses (ErrMoveConflict) a
// move that is not frozen here, and stops at ctx's end, fn's first error,
// or Close (ErrClosed). Ship the pairs in order as OpIngestSlots commands
// (ExportChunks groups them). A non-nil after starts the export past that
// key: a pull cut off resumes after the target's MoveRecord.Pulled.
func (f *FSM) ExportSlots(ctx context.Context, moveID uint64, after []byte, fn func(key, value []byte) error) error {
	return f.export(ctx, after, nil, func(st *slotState) (shard.SlotSet, error) {
		rec := st.moves[moveID]
		if rec == nil || rec.State != MoveFrozen {
			return shard.SlotSet{}, fmt.Errorf("%w: export of move %d: %s here, not frozen", ErrMoveConflict, moveID, recState(rec))
		}
		return rec.Slots, nil
	}, fn)
}

// ExportLive is ExportSlots for slots the replica still serves: the data
// of slots, each owned here or frozen by a move, as one Pebble snapshot
// holds it. Its data goes on changing: a move's pre-copy ships it as
// OpSyncSlots commands before the freeze, and the sync pass after the
// freeze (OpSyncSlots again, SyncPass) brings the target up to the frozen
// data. A slot
// neither owned nor frozen here is refused (ErrMoveConflict).
func (f *FSM) ExportLive(ctx context.Context, slots shard.SlotSet, after []byte, fn func(key, value []byte) error) error {
	return f.export(ctx, after, nil, func(st *slotState) (shard.SlotSet, error) {
		held := st.owned
		for _, r := range st.moves {
			if r.State == MoveFrozen {
				held = held.Union(r.Slots)
			}
		}
		if missing := slots.Minus(held); !missing.IsEmpty() {
			return shard.SlotSet{}, fmt.Errorf("%w: live export: slots %s are neither owned nor frozen here", ErrMoveConflict, missing.String())
		}
		return slots, nil
	}, fn)
}

// ScanIncoming calls fn with every key and value this replica holds of the
// slots of move moveID, incoming here, with a key after after (nil: from
// the first) and up to upTo included (nil: to the last), in key order,
// from one Pebble snapshot: what earlier ingests and syncs wrote. The sync
// pass compares it with the source's data. An unknown move has nothing
// here; a move neither unknown nor incoming is refused (ErrMoveConflict).
func (f *FSM) ScanIncoming(ctx context.Context, moveID uint64, after, upTo []byte, fn func(key, value []byte) error) error {
	return f.export(ctx, after, upTo, func(st *slotState) (shard.SlotSet, error) {
		switch rec := st.moves[moveID]; {
		case rec == nil:
			return shard.SlotSet{}, nil // nothing of it here yet
		case rec.State != MoveIncoming:
			return shard.SlotSet{}, fmt.Errorf("%w: scan of move %d: %s here, not incoming", ErrMoveConflict, moveID, recState(rec))
		default:
			return rec.Slots, nil
		}
	}, fn)
}

func recState(r *MoveRecord) string {
	if r == nil {
		return "unknown"
	}
	return r.State.String()
}

// export calls fn with the keys and values of the slots check returns
// (from the ownership state of the same snapshot) after after, up to upTo
// included (nil: no bound).
func (f *FSM) export(ctx context.Context, after, upTo []byte, check func(*slotState) (shard.SlotSet, error), fn func(key, value []byte) error) error {
	if err := f.rlock(); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return ErrRestoring
	}
	snap := f.db.NewSnapshot()
	defer snap.Close()
	// The ownership as of the snapshot: an unfreeze applied since the
	// caller looked is seen here.
	st, _, err := loadSlots(snap, shard.AllSlots())
	if err != nil {
		return err
	}
	slots, err := check(st)
	if err != nil || slots.IsEmpty() {
		return err
	}
	opts := &pebble.IterOptions{LowerBound: dataStart}
	if bytes.Compare(after, dataStart) >= 0 {
		opts.LowerBound = append(bytes.Clone(after), 0) // the first key after it
	}
	if upTo != nil {
		opts.UpperBound = append(bytes.Clone(upTo), 0)
	}
	it, err := snap.NewIter(opts)
	if err != nil {
		return err
	}
	defer it.Close()
	get := readerGetter(snap)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%1024 == 0 {
			if f.closing.Load() {
				return ErrClosed
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("fsm: export: %w", err)
		}
		slot, ok, err := slotOfKey(get, it.Key(), v)
		if err != nil {
			return fmt.Errorf("fsm: export: %w", err)
		}
		if ok && slots.Has(slot) {
			if err := fn(it.Key(), v); err != nil {
				return err
			}
		}
	}
	return it.Error()
}

// ExportChunks is ExportSlots in chunks that fit one OpIngestSlots each
// under limits l: at most l.MaxBatchOps pairs and about maxBytes of keys
// and values (0: MaxMultiBytes / 2). The chunk's pairs are copies fn may
// keep.
func (f *FSM) ExportChunks(ctx context.Context, moveID uint64, after []byte, l Limits, maxBytes int, fn func([]Pair) error) error {
	return chunked(l, maxBytes, fn, func(add func(k, v []byte) error) error { return f.ExportSlots(ctx, moveID, after, add) })
}

// ExportLiveChunks is ExportLive in chunks, as ExportChunks.
func (f *FSM) ExportLiveChunks(ctx context.Context, slots shard.SlotSet, after []byte, l Limits, maxBytes int, fn func([]Pair) error) error {
	return chunked(l, maxBytes, fn, func(add func(k, v []byte) error) error { return f.ExportLive(ctx, slots, after, add) })
}

func chunked(l Limits, maxBytes int, fn func([]Pair) error, export func(add func(k, v []byte) error) error) error {
	l = l.WithDefaults()
	if maxBytes <= 0 || maxBytes > MaxMultiBytes {
		maxBytes = MaxMultiBytes / 2
	}
	c := chunker{maxOps: l.MaxBatchOps, maxBytes: maxBytes, fn: fn}
	if err := export(c.add); err != nil {
		return err
	}
	return c.flush()
}

// SyncPart is the pairs and deletes of one OpSyncSlots.
type SyncPart struct {
	Pairs   []Pair
	Deletes [][]byte
}

// DiffSlots returns what makes local (a target's data of a key range of
// an incoming move, ScanIncoming) equal to remote (the source's data of
// the same range): the remote pairs that local lacks or holds with another
// value, and the local keys remote lacks, each in key order. Both inputs
// are in strictly ascending key order.
func DiffSlots(local, remote []Pair) (pairs []Pair, deletes [][]byte) {
	i, j := 0, 0
	for i < len(local) || j < len(remote) {
		switch c := cmpNext(local, remote, i, j); {
		case c < 0: // only here
			deletes = append(deletes, local[i].Key)
			i++
		case c > 0: // only there
			pairs = append(pairs, remote[j])
			j++
		default:
			if !bytes.Equal(local[i].Value, remote[j].Value) {
				pairs = append(pairs, remote[j])
			}
			i++
			j++
		}
	}
	return pairs, deletes
}

// SyncParts cuts pairs and deletes (each in strictly ascending key order,
// disjoint) into the parts of OpSyncSlots commands, in key order: at most
// l.MaxBatchOps keys and about maxBytes of keys and values each (0:
// MaxMultiBytes / 2).
func SyncParts(pairs []Pair, deletes [][]byte, l Limits, maxBytes int) []SyncPart {
	l = l.WithDefaults()
	if maxBytes <= 0 || maxBytes > MaxMultiBytes {
		maxBytes = MaxMultiBytes / 2
	}
	var parts []SyncPart
	var cur SyncPart
	size := 0
	for i, j := 0, 0; i < len(pairs) || j < len(deletes); {
		pair := j >= len(deletes) || (i < len(pairs) && bytes.Compare(pairs[i].Key, deletes[j]) < 0)
		n := 0
		if pair {
			n = len(pairs[i].Key) + len(pairs[i].Value)
		} else {
			n = len(deletes[j])
		}
		if k := len(cur.Pairs) + len(cur.Deletes); k > 0 && (k >= l.MaxBatchOps || size+n > maxBytes) {
			parts = append(parts, cur)
			cur, size = SyncPart{}, 0
		}
		if pair {
			cur.Pairs = append(cur.Pairs, pairs[i])
			i++
		} else {
			cur.Deletes = append(cur.Deletes, deletes[j])
			j++
		}
		size += n
	}
	if len(cur.Pairs)+len(cur.Deletes) > 0 {
		parts = append(parts, cur)
	}
	return parts
}

// SyncPass compares a source's export of a move's slots, chunk by chunk
// in key order (Chunk), with what the target holds of them (Local, over
// the chunk's key range), and proposes the difference as OpSyncSlots parts
// (Propose, in order): the pairs at once; with Deletes (the sync pass
// after the freeze), the keys the source no longer has at Finish, last,
// sessions_by_agent entries first (an entry is routed through its session
// or agent owner record, which must still be there when its delete is
// checked). A pre-copy (Deletes false) leaves them to the sync pass. Run
// again from the first chunk, a pass proposes only what is still
// different: it is idempotent. A pass cut off in Chunk may instead be
// resumed: feed it the chunks after its Cursor.
type SyncPass struct {
	Local    func(after, upTo []byte) ([]Pair, error)
	Propose  func(SyncPart) error
	Limits   Limits
	MaxBytes int
	Deletes  bool
	// Compared and Written count the source's pairs seen and the pairs
	// and deletes proposed.
	Compared, Written uint64

	last              []byte
	entryDels, others [][]byte
}

// Chunk takes the source's next chunk (strictly ascending keys, after the
// previous chunk's).
func (s *SyncPass) Chunk(remote []Pair) error {
	if len(remote) == 0 {
		return nil
	}
	upTo := remote[len(remote)-1].Key
	local, err := s.Local(s.last, upTo)
	if err != nil {
		return err
	}
	pairs, dels := DiffSlots(local, remote)
	entries, others := len(s.entryDels), len(s.others)
	s.keep(dels)
	if err := s.propose(pairs, nil); err != nil {
		// The chunk is not done: forget its deletes, and keep the cursor
		// before it, so the pass resumed (Cursor) compares it again.
		s.entryDels, s.others = s.entryDels[:entries], s.others[:others]
		return err
	}
	s.last = upTo
	s.Compared += uint64(len(remote))
	return nil
}

// Cursor is the last key of the last chunk the pass took whole (every
// difference in it proposed): a pass cut off in Chunk resumes with the
// source's export after it, and nil before the first chunk. A pass cut
// off in Finish is not resumed (its deletes may be half proposed): run a
// new one.
func (s *SyncPass) Cursor() []byte { return s.last }

// Finish proposes the deletes (with Deletes), after the last chunk.
func (s *SyncPass) Finish() error {
	if !s.Deletes {
		return nil
	}
	local, err := s.Local(s.last, nil)
	if err != nil {
		return err
	}
	_, dels := DiffSlots(local, nil)
	s.keep(dels)
	if err := s.propose(nil, s.entryDels); err != nil {
		return err
	}
	return s.propose(nil, s.others)
}

func (s *SyncPass) keep(dels [][]byte) {
	if !s.Deletes {
		return
	}
	for _, k := range dels {
		if k[0] == keys.TableSessionsByAgent {
			s.entryDels = append(s.entryDels, k)
		} else {
			s.others = append(s.others, k)
		}
	}
}

func (s *SyncPass) propose(pairs []Pair, deletes [][]byte) error {
	for _, part := range SyncParts(pairs, deletes, s.Limits, s.MaxBytes) {
		if err := s.Propose(part); err != nil {
			return err
		}
		s.Written += uint64(len(part.Pairs) + len(part.Deletes))
	}
	return nil
}

// cmpNext compares local[i] and remote[j] by key, an exhausted side
// sorting last.
func cmpNext(local, remote []Pair, i, j int) int {
	switch {
	case i >= len(local):
		return 1
	case j >= len(remote):
		return -1
	}
	return bytes.Compare(local[i].Key, remote[j].Key)
}
