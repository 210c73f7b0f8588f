package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// History: the change feed of a shard replica, kept in its Pebble DB for
// watches.
//
// Every applied log entry that changed user data leaves one history
// record, keyed by its revision (the entry's log index), holding the
// entry's events in the order they were written. The events are derived
// from the Pebble batch the entry wrote, not from the commands: every Set
// is a put and every Delete a delete of that key, whatever op wrote it
// (a lease expiry added later is recorded with no code of its own). Meta
// keys (table 0x00) are never events, and the slot move ops leave no
// put or delete events (ingest, drop and freeze move data, they do not
// change it); a freeze and an adopt leave a marker event instead, which
// ends the watches of the frozen slots on the source and tells a watch
// on the target where the adopted slots' history begins.
//
// History is local to a replica: it is not in snapshots, and it never
// moves with slots. Retention (OpCompactHistory) is decided by the leader
// and applied deterministically; a replica restored from a snapshot
// holds history from the snapshot's index on.

// OpCompactHistory (History, Time) compacts the history: it deletes the
// records of revisions at or below the floor the command's retention
// gives, and records a time mark (Time, the proposer's clock, at the
// entry's index) that later compactions use to judge age. The floor is
// the highest of: index - MaxRevisions (when MaxRevisions > 0), and the
// index of the newest time mark at or before Time - MaxAgeMs (when
// MaxAgeMs > 0). The floor never goes down.
const OpCompactHistory Op = 70

// HistoryRetention is the argument of OpCompactHistory: how much history
// a shard keeps. The leader proposes it from its configuration, so every
// replica applies the same retention.
type HistoryRetention struct {
	MaxRevisions uint64 `cbor:"revs,omitempty"`
	MaxAgeMs     int64  `cbor:"age,omitempty"`
}

// EventKind is what an event records.
type EventKind uint8

const (
	// EventPut: Key was set to Value.
	EventPut EventKind = 1
	// EventDelete: Key was deleted (an op that deletes blindly may record
	// the delete of a key that was absent).
	EventDelete EventKind = 2
	// EventFrozen: the slots Slots were frozen for move MoveID; no event
	// of them follows on this shard.
	EventFrozen EventKind = 3
	// EventAdopted: the shard adopted Slots from move MoveID; their
	// events on this shard follow this revision.
	EventAdopted EventKind = 4
)

func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventFrozen:
		return "frozen"
	case EventAdopted:
		return "adopted"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one change a committed entry made.
type Event struct {
	Revision uint64 // the entry's log index
	Cmd      int    // the command's position in its entry (an OpMulti carries several)
	Kind     EventKind
	// RoutingKey is the routing key of Key: keys.RoutingKeyOf for the
	// tables whose keys carry it, else the routing key of the command that
	// wrote it (nil when neither is known).
	RoutingKey []byte
	Key, Value []byte // Value for EventPut
	MoveID     uint64 // EventFrozen, EventAdopted
	Slots      shard.SlotSet
}

// CompactedError is the answer to a history read from a revision whose
// later events are no longer all retained.
type CompactedError struct {
	// Oldest is the oldest revision a read may start from (every event
	// after it is retained).
	Oldest uint64
	// Current is the replica's applied index.
	Current uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("compacted: oldest retained revision %d, current revision %d", e.Oldest, e.Current)
}

var (
	metaHistPrefix = []byte("\x00hist/")     // + revision u64 BE: the entry's events
	metaHistFloor  = []byte("\x00histfloor") // u64 BE: every event after it is retained
	metaHistMark   = []byte("\x00histmark/") // + index u64 BE: value the proposer's time (ms, u64 BE)
)

const historyVersion = 1

func histKey(rev uint64) []byte {
	k := make([]byte, len(metaHistPrefix)+8)
	copy(k, metaHistPrefix)
	binary.BigEndian.PutUint64(k[len(metaHistPrefix):], rev)
	return k
}

func markKey(index uint64) []byte {
	k := make([]byte, len(metaHistMark)+8)
	copy(k, metaHistMark)
	binary.BigEndian.PutUint64(k[len(metaHistMark):], index)
	return k
}

// histRecorder accumulates the events of the entry being applied.
type histRecorder struct {
	buf    []byte // the record: version byte, then events
	events int
}

func (h *histRecorder) reset() {
	h.buf = append(h.buf[:0], historyVersion)
	h.events = 0
}

func (h *histRecorder) appendBytes(b []byte) {
	h.buf = binary.AppendUvarint(h.buf, uint64(len(b)))
	h.buf = append(h.buf, b...)
}

// WatchedTables are the tables a watch can select (rpc.WatchTable: kv,
// pools, bots, runners, a user's agents): history records the writes of
// these only. No watch can ask for the others (the ledger's tables,
// sessions, the indexes, the Redis keyspace), and recording them cost a
// ledger charge a third of its throughput (docs/performance-log.md, round 13).
// A table a new watch serves joins this list (a change of what replicas
// record: a protocol version, the ops' specs' since).
var WatchedTables = [256]bool{keys.TableKV: true, keys.TablePools: true, keys.TableBots: true,
	keys.TableRunners: true, keys.TableAgents: true}

// addWrites records the user-data writes of batch records repr (the
// records command cmd of the entry wrote), with rk the command's routing
// key.
func (h *histRecorder) addWrites(repr []byte, cmd int, rk []byte) error {
	r := batchrepr.Reader(repr)
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if len(k) == 0 || k[0] == metaPrefix || !WatchedTables[k[0]] {
			continue
		}
		var ek EventKind
		switch kind {
		case pebble.InternalKeyKindSet:
			ek = EventPut
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
			ek = EventDelete
		default:
			return fmt.Errorf("fsm: history: batch record kind %v not recordable", kind)
		}
		h.buf = binary.AppendUvarint(h.buf, uint64(cmd))
		h.buf = append(h.buf, byte(ek))
		if _, route, _ := keys.RoutingKeyOf(k); route == keys.RouteKey {
			h.buf = append(h.buf, 0) // derived from the key
		} else {
			h.appendBytes(rk)
		}
		h.appendBytes(k)
		if ek == EventPut {
			h.appendBytes(v)
		}
		h.events++
	}
}

// addMarker records a freeze or adopt.
func (h *histRecorder) addMarker(cmd int, kind EventKind, id uint64, slots shard.SlotSet) {
	h.buf = binary.AppendUvarint(h.buf, uint64(cmd))
	h.buf = append(h.buf, byte(kind))
	h.buf = binary.AppendUvarint(h.buf, id)
	s, _ := slots.MarshalBinary()
	h.buf = append(h.buf, s...)
	h.events++
}

var errBadHistory = errors.New("fsm: corrupt history record")

// DecodeHistory decodes the history record of revision rev. The events
// share data's memory.
func DecodeHistory(rev uint64, data []byte) ([]Event, error) {
	return decodeHistory(rev, data, nil)
}

// HistoryFloor returns the oldest revision a history read may start from
// (every event after it is retained), and the applied index.
func (f *FSM) HistoryFloor() (floor, current uint64, err error) {
	if err := f.rlock(); err != nil {
		return 0, 0, err
	}
	defer f.mu.RUnlock()
	floor, err = f.histFloor(f.db)
	return floor, f.applied.Load(), err
}

func (f *FSM) histFloor(r pebble.Reader) (uint64, error) {
	v, c, err := r.Get(metaHistFloor)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: floor is %d bytes", errBadHistory, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// ReadHistory calls fn with the events of every revision in (after,
// upTo], in order, one revision at a time (events of one revision share
// their backing memory with nothing fn may not keep). upTo is capped at
// the applied index. It fails with *CompactedError when after is below
// the history floor, and stops at fn's first error, which it returns.
func (f *FSM) ReadHistory(after, upTo uint64, fn func(rev uint64, evs []Event) error) error {
	return f.readHistory(after, upTo, func(rev uint64, v []byte) error {
		evs, err := DecodeHistory(rev, append([]byte(nil), v...))
		if err != nil {
			return err
		}
		return fn(rev, evs)
	})
}

// clearHistory adds to b the deletion of the whole history and a floor
// at index (a Restore: history restarts at the snapshot).
func clearHistory(b *pebble.Batch, index uint64) error {
	if err := b.DeleteRange(metaHistPrefix, keys.PrefixEnd(metaHistPrefix), nil); err != nil {
		return err
	}
	if err := b.DeleteRange(metaHistMark, keys.PrefixEnd(metaHistMark), nil); err != nil {
		return err
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], index)
	return b.Set(metaHistFloor, v[:], nil)
}
