package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// MovedError is the Result.Err of a command, and the error of CheckSlot,
// for a slot this replica's shard does not own: the answer is elsewhere.
// It is retryable: the client refreshes its shard map (to at least
// MapVersion) and retries at the owner. While a move is frozen (its map not
// yet published) the map may still name this shard: retry after a pause.
type MovedError struct {
	Slot shard.Slot
	// Target is the shard the slot moved (or is moving) to, when
	// MapVersion > 0.
	Target shard.ID
	// MapVersion is the shard map version that gives the slot to Target;
	// 0 when this replica knows no move of the slot (it never owned it, or
	// it is still ingesting it).
	MapVersion uint64
}

func (e *MovedError) Error() string {
	if e.MapVersion == 0 {
		return fmt.Sprintf("fsm: slot %d is not owned by this shard", e.Slot)
	}
	return fmt.Sprintf("fsm: slot %d moved to shard %d (map version %d)", e.Slot, e.Target, e.MapVersion)
}

// ErrMoveConflict is wrapped by the Result.Err of a slot-move command that
// does not fit this replica's ownership or move records (freezing slots it
// does not own, reusing a move id for other slots, unfreezing a move whose
// drop began, ingesting into a move already adopted or aborted, ...), and
// by ExportSlots for a move that is not frozen here. Nothing was written.
var ErrMoveConflict = errors.New("fsm: slot move conflict")

// MoveState is the state of a slot move in one replica's records.
type MoveState uint8

const (
	// MoveFrozen (source): the slots are frozen, refused with MovedError,
	// their data unchanged; OpUnfreezeSlots gives them back.
	MoveFrozen MoveState = 1
	// MoveMoved (source): OpDropSlots began deleting the slots' data; the
	// move is final and the record stays, so stale clients get MovedError.
	MoveMoved MoveState = 2
	// MoveIncoming (target): the slots' data is being ingested; the slots
	// are not owned yet.
	MoveIncoming MoveState = 3
	// MoveAdopted (target): the shard owns the slots.
	MoveAdopted MoveState = 4
	// MoveAborted (target): the move was abandoned before adoption;
	// OpDropSlots deletes what was ingested.
	MoveAborted MoveState = 5
)

func (s MoveState) String() string {
	switch s {
	case MoveFrozen:
		return "frozen"
	case MoveMoved:
		return "moved"
	case MoveIncoming:
		return "incoming"
	case MoveAdopted:
		return "adopted"
	case MoveAborted:
		return "aborted"
	}
	return fmt.Sprintf("move_state(%d)", uint8(s))
}

// MoveRecord is one replica's record of a slot move, kept in the meta table
// (key "move/" + the id, 8 bytes big-endian), in snapshots, and forever
// (it is small): it makes every move command idempotent and answers
// MovedError for the slots.
type MoveRecord struct {
	ID    uint64        `cbor:"id"`
	State MoveState     `cbor:"state"`
	Slots shard.SlotSet `cbor:"slots"`
	// Peer is the target shard on the source side, the source shard (as
	// the first ingest or the adopt named it) on the target side.
	Peer shard.ID `cbor:"peer"`
	// MapVersion is the shard map version that publishes the move.
	MapVersion uint64 `cbor:"map_version"`
	// Index is the log index of the freeze (source), or of the command that
	// registered the move (target: the first ingest, or the adopt).
	Index uint64 `cbor:"index"`
	// Cursor is the last key a drop visited; the next drop resumes after
	// it. Dropped is set once a drop found no key left.
	Cursor  []byte `cbor:"cursor,omitempty"`
	Dropped bool   `cbor:"dropped,omitempty"`
	// Pulled is the last key an ingest wrote (target side, incoming):
	// ingests carry pairs in strictly ascending key order and a pull
	// sends the export's chunks in order, so every key of the move up to
	// Pulled is here and a pull cut off resumes after it
	// (ExportSlots' after). PulledPairs counts the pairs ingested.
	Pulled      []byte `cbor:"pulled,omitempty"`
	PulledPairs uint64 `cbor:"pulled_pairs,omitempty"`
}

// source reports whether r is a source-side record (frozen or moved).
func (r *MoveRecord) source() bool { return r.State == MoveFrozen || r.State == MoveMoved }

// slotState is the ownership a replica has reached: the slots it owns and
// its move records. A published slotState is never changed; the applier
// works on a copy and publishes it with the commit of its batch.
type slotState struct {
	owned shard.SlotSet
	moves map[uint64]*MoveRecord // records are replaced, never changed
}

func (s *slotState) clone() *slotState {
	c := &slotState{owned: s.owned, moves: make(map[uint64]*MoveRecord, len(s.moves)+1)}
	for id, r := range s.moves {
		c.moves[id] = r
	}
	return c
}

// movedError answers for a slot s does not own: the latest source-side move
// of the slot names its target.
func (s *slotState) movedError(slot shard.Slot) *MovedError {
	e := &MovedError{Slot: slot}
	var best *MoveRecord
	for _, r := range s.moves {
		if r.source() && r.Slots.Has(slot) && (best == nil || r.Index > best.Index) {
			best = r
		}
	}
	if best != nil {
		e.Target, e.MapVersion = best.Peer, best.MapVersion
	}
	return e
}

// check returns nil if s owns slot, else a *MovedError.
func (s *slotState) check(slot shard.Slot) error {
	if s.owned.Has(slot) {
		return nil
	}
	return s.movedError(slot)
}

// Meta table keys of the replicated ownership state; unlike the applied
// index and the shard id they travel in snapshots.
var (
	metaSlots      = []byte("\x00slots") // the owned SlotSet, 32 bytes
	metaMovePrefix = []byte("\x00move/") // + move id u64 BE: a MoveRecord (CBOR)
)

// isReplicatedMeta reports whether meta key k is part of the replicated
// state (and so of snapshots).
func isReplicatedMeta(k []byte) bool {
	return bytes.Equal(k, metaSlots) ||
		(len(k) == len(metaMovePrefix)+8 && bytes.HasPrefix(k, metaMovePrefix))
}

func moveKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(slices.Clip(metaMovePrefix), id)
}

func encodeMove(r *MoveRecord) []byte {
	b, err := encMode.Marshal(r)
	if err != nil { // a plain struct: never
		panic(fmt.Sprintf("fsm: encode move record: %v", err))
	}
	return b
}

func decodeMove(v []byte) (*MoveRecord, error) {
	r := new(MoveRecord)
	if err := decMode.Unmarshal(v, r); err != nil {
		return nil, err
	}
	return r, nil
}

// loadSlots reads the ownership state from r; a missing slots record is
// initial (not written).
func loadSlots(r pebble.Reader, initial shard.SlotSet) (*slotState, bool, error) {
	st := &slotState{owned: initial, moves: map[uint64]*MoveRecord{}}
	v, c, err := r.Get(metaSlots)
	found := false
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, false, fmt.Errorf("fsm: read owned slots: %w", err)
	default:
		err = st.owned.UnmarshalBinary(v)
		_ = c.Close()
		if err != nil {
			return nil, false, fmt.Errorf("fsm: corrupt owned slots: %w", err)
		}
		found = true
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: metaMovePrefix, UpperBound: keys.PrefixEnd(metaMovePrefix)})
	if err != nil {
		return nil, false, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, false, err
		}
		rec, err := decodeMove(v)
		if err != nil || !isReplicatedMeta(it.Key()) || rec.ID != binary.BigEndian.Uint64(it.Key()[len(metaMovePrefix):]) {
			_ = it.Close()
			return nil, false, fmt.Errorf("fsm: corrupt move record %x: %v", it.Key(), err)
		}
		st.moves[rec.ID] = rec
	}
	return st, found, it.Close()
}

// Owned returns the slots this replica's shard owns (as of the applied
// index).
func (f *FSM) Owned() shard.SlotSet { return f.slots.Load().owned }

// Moves returns this replica's move records, by id.
func (f *FSM) Moves() []MoveRecord {
	st := f.slots.Load()
	out := make([]MoveRecord, 0, len(st.moves))
	for _, r := range st.moves {
		c := *r
		c.Cursor = bytes.Clone(r.Cursor)
		c.Pulled = bytes.Clone(r.Pulled)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b MoveRecord) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// CheckSlot returns nil if the shard owns slot as of the applied index,
// else a *MovedError. The read path calls it after its leadership check
// and WaitApplied, before it reads: a slot frozen at an index the read
// waited for is refused. (Its data never changes once frozen, so a read
// that passed the check before a freeze applied still answers a state the
// owner had; calling CheckSlot again after reading closes even the window
// of a freeze and drop completing during the read.)
func (f *FSM) CheckSlot(slot shard.Slot) error {
	if f.restoring.Load() {
		return ErrRestoring
	}
	return f.slots.Load().check(slot)
}

// CheckRoutingKey is CheckSlot(shard.SlotOf(routingKey)).
func (f *FSM) CheckRoutingKey(routingKey []byte) error {
	st := f.slots.Load()
	if f.restoring.Load() {
		return ErrRestoring
	}
	if st.owned.IsFull() {
		return nil
	}
	return st.check(shard.SlotOf(routingKey))
}

// OwnsKey reports whether the shard owns, as of the applied index, the
// slot of the stored key key whose value is value (SlotOfKey; the keys
// whose routing key is in another record are looked up in the replica's
// state). A listing of the whole shard leaves out the keys it does not
// own: between a freeze and its drop the source still holds them, and
// while a target ingests (and after it adopts) it holds them too, so a key
// must come from its owner alone. A key of no slot is owned only while the
// shard owns every slot. The error is a storage error (or ErrRestoring).
func (f *FSM) OwnsKey(key, value []byte) (bool, error) {
	st := f.slots.Load()
	if f.restoring.Load() {
		return false, ErrRestoring
	}
	if st.owned.IsFull() {
		return true, nil
	}
	slot, ok, err := slotOfKey(f.get, key, value)
	if err != nil || !ok {
		return false, err
	}
	return st.owned.Has(slot), nil
}

// get is a getter over f's state (Get without ErrNotFound).
func (f *FSM) get(key []byte) ([]byte, bool, error) {
	v, err := f.Get(key)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// getter reads one key: a copy of its value, or found false.
type getter func(key []byte) ([]byte, bool, error)

func readerGetter(r pebble.Reader) getter {
	return func(key []byte) ([]byte, bool, error) {
		v, c, err := r.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		out := bytes.Clone(v)
		return out, true, c.Close()
	}
}

// SlotOfKey returns the slot of the stored key key whose value is value,
// reading r for the keys whose routing key is in another record. ok is
// false for a key that belongs to no slot: a meta table key, a key malformed
// for its table or of an unknown table, a record that does not decode, a
// sessions_by_agent entry whose session and agent owner are both absent.
// The error is a storage error of r.
//
// Per table (see keys.RoutingKeyOf for the layouts): agents,
// agents_by_status, users, accounts, transactions_by_user, kv, the pool
// tables (keys.PoolsRoutingKey) and the Redis tables (keys.RedisRoutingKey
// of the Redis key) route by their key; sessions, transactions and
// usage_events by the user_id of their record; agent_owners by its value,
// the owner's user id; sessions_by_agent by the user of its session record
// (sessions[session_id]), or when that is absent by its agent's owner.
func SlotOfKey(r pebble.Reader, key, value []byte) (shard.Slot, bool, error) {
	return slotOfKey(readerGetter(r), key, value)
}

func slotOfKey(get getter, key, value []byte) (shard.Slot, bool, error) {
	rk, route, err := keys.RoutingKeyOf(key)
	if err != nil {
		return 0, false, nil
	}
	switch route {
	case keys.RouteKey:
		return shard.SlotOf(rk), true, nil
	case keys.RouteValue:
		return slotOfValue(key[0], value)
	case keys.RouteSlot: // the lease tables
		s, err := keys.LeaseSlotOf(key)
		return shard.Slot(s), err == nil, nil
	case keys.RouteLookup: // sessions_by_agent
		a, sid, _ := keys.DecodeSessionByAgent(key)
		v, found, err := get(keys.Session(sid))
		if err != nil {
			return 0, false, err
		}
		if found {
			if s, ok, _ := slotOfValue(keys.TableSessions, v); ok {
				return s, true, nil
			}
		}
		v, found, err = get(keys.AgentOwner(a))
		if err != nil || !found {
			return 0, false, err
		}
		return slotOfValue(keys.TableAgentOwners, v)
	}
	return 0, false, nil
}

// slotOfValue is the slot of a record of table t routed by its value.
func slotOfValue(t byte, v []byte) (shard.Slot, bool, error) {
	switch t {
	case keys.TableAgentOwners:
		u, err := keys.AgentOwnerValue(v)
		if err != nil {
			return 0, false, nil
		}
		return shard.SlotOf(u[:]), true, nil
	case keys.TableSessions:
		var r records.SessionRecord
		if records.Decode(v, &r) != nil {
			return 0, false, nil
		}
		return shard.SlotOf(r.UserID[:]), true, nil
	case keys.TableTransactions:
		var r records.CreditTransaction
		if records.Decode(v, &r) != nil {
			return 0, false, nil
		}
		return shard.SlotOf(r.UserID[:]), true, nil
	case keys.TableUsageEvents:
		var r records.UsageEvent
		if records.Decode(v, &r) != nil {
			return 0, false, nil
		}
		return shard.SlotOf(r.UserID[:]), true, nil
	}
	return 0, false, nil
}

// routedByValue reports whether the slot of a key of table t depends on a
// stored value (its own or, for sessions_by_agent, its session's).
func routedByValue(t byte) bool {
	switch t {
	case keys.TableSessions, keys.TableTransactions, keys.TableUsageEvents,
		keys.TableAgentOwners, keys.TableSessionsByAgent:
		return true
	}
	return false
}

// noSlot is the rejection of a key whose slot cannot be determined while
// the shard owns only some slots.
func noSlot(key []byte) error {
	return fmt.Errorf("%w: key %x (table %s) belongs to no slot", ErrInvalidCommand, key, keys.TableName(key[0]))
}

// checkWrite checks that a write of key (value for a put; del for a delete
// or a read) touches only owned slots: for a key routed by its key, the
// slot of the key; for one routed by a value, the slot of the value written
// and the slot of the value stored. get reads the state the write applies
// to, with the command's own earlier writes. rej is a *MovedError or an
// ErrInvalidCommand (a key of no slot); storage is a storage error.
func (s *slotState) checkWrite(get getter, key, value []byte, del bool) (rej, storage error) {
	if !routedByValue(key[0]) || key[0] == keys.TableSessionsByAgent {
		slot, ok, err := slotOfKey(get, key, nil)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return s.check(slot), nil
		case del && key[0] == keys.TableSessionsByAgent:
			return nil, nil // an orphan index entry: nothing routes it
		}
		return noSlot(key), nil
	}
	if !del {
		slot, ok, _ := slotOfValue(key[0], value)
		if !ok {
			return noSlot(key), nil
		}
		if err := s.check(slot); err != nil {
			return err, nil
		}
	}
	old, found, err := get(key)
	if err != nil || !found {
		return nil, err
	}
	slot, ok, _ := slotOfValue(key[0], old)
	if !ok {
		return noSlot(key), nil
	}
	return s.check(slot), nil
}

func batchGetter(b *pebble.Batch) getter {
	return func(key []byte) ([]byte, bool, error) { return getView(b, key, true) }
}

// checkRedis checks every key a Redis command or block names, watches
// included.
func (s *slotState) checkRedis(t *RedisTx) error {
	for _, w := range t.Watch {
		if err := s.check(shard.SlotOf(keys.RedisRoutingKey(w.Key))); err != nil {
			return err
		}
	}
	for _, argv := range t.Cmds {
		for _, k := range RedisKeys(argv) {
			if err := s.check(shard.SlotOf(keys.RedisRoutingKey(k))); err != nil {
				return err
			}
		}
	}
	return nil
}

// sessionAgent returns the agent id of a stored session record.
func sessionAgent(v []byte) (keys.AgentID, bool) {
	var r records.SessionRecord
	if records.Decode(v, &r) != nil {
		return keys.AgentID{}, false
	}
	return r.AgentID, true
}
