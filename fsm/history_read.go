package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
)

// HistorySelector chooses the put and delete events a history read
// materializes: rk is the event's routing key (nil when unknown), key its
// stored key, both valid only during the call. Freeze and adopt markers
// are always returned. A selector sees every event of a revision in order
// and must not keep rk or key.
type HistorySelector func(rk, key []byte) bool

// SelectNone selects no put or delete: only the markers are returned (a
// scan for a move's adoption).
func SelectNone(rk, key []byte) bool { return false }

// decodeHistory parses the record data of revision rev. With sel nil
// every event is returned and shares data's memory; else only the puts
// and deletes sel selects (and the markers) are returned, each copied into
// memory of its own, so that nothing of data is kept and an unselected
// value is never copied. The whole record is checked either way: a
// corrupt record is an error whatever sel selects.
func decodeHistory(rev uint64, data []byte, sel HistorySelector) ([]Event, error) {
	if len(data) == 0 || data[0] != historyVersion {
		return nil, fmt.Errorf("%w: revision %d: bad version", errBadHistory, rev)
	}
	d := data[1:]
	bad := func(what string) error {
		return fmt.Errorf("%w: revision %d: %s", errBadHistory, rev, what)
	}
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(d)
		if n <= 0 {
			return 0, false
		}
		d = d[n:]
		return v, true
	}
	bytesField := func() ([]byte, bool) {
		n, ok := uvarint()
		if !ok || n > uint64(len(d)) {
			return nil, false
		}
		b := d[:n:n]
		d = d[n:]
		return b, true
	}
	var out []Event
	for len(d) > 0 {
		cmd, ok := uvarint()
		if !ok || cmd > MaxMultiCmds || len(d) == 0 {
			return nil, bad("command index")
		}
		e := Event{Revision: rev, Cmd: int(cmd), Kind: EventKind(d[0])}
		d = d[1:]
		switch e.Kind {
		case EventPut, EventDelete:
			rk, ok := bytesField()
			if !ok {
				return nil, bad("routing key")
			}
			if e.Key, ok = bytesField(); !ok || len(e.Key) == 0 || e.Key[0] == metaPrefix {
				return nil, bad("key")
			}
			fromKey := len(rk) == 0
			if fromKey {
				rk = nil
				if k, route, err := keys.RoutingKeyOf(e.Key); err == nil && route == keys.RouteKey {
					rk = k
				}
			}
			if e.Kind == EventPut {
				if e.Value, ok = bytesField(); !ok {
					return nil, bad("value")
				}
			}
			e.RoutingKey = rk
			if sel != nil {
				if !sel(rk, e.Key) {
					continue
				}
				// One allocation holds the event's bytes: key, value,
				// and the routing key when the record carries it.
				n := len(e.Key) + len(e.Value)
				if !fromKey {
					n += len(rk)
				}
				buf := make([]byte, 0, n)
				buf = append(buf, e.Key...)
				key := buf[:len(e.Key):len(e.Key)]
				if e.Kind == EventPut {
					buf = append(buf, e.Value...)
					e.Value = buf[len(key):len(buf):len(buf)]
				}
				if fromKey {
					if rk != nil {
						e.RoutingKey, _, _ = keys.RoutingKeyOf(key)
					}
				} else {
					at := len(buf)
					buf = append(buf, rk...)
					e.RoutingKey = buf[at:len(buf):len(buf)]
				}
				e.Key = key
			}
		case EventFrozen, EventAdopted:
			if e.MoveID, ok = uvarint(); !ok || len(d) < 32 {
				return nil, bad("move")
			}
			if err := e.Slots.UnmarshalBinary(d[:32]); err != nil {
				return nil, bad("slots")
			}
			d = d[32:]
		default:
			return nil, bad(fmt.Sprintf("event kind %d", e.Kind))
		}
		out = append(out, e)
	}
	return out, nil
}

// ReadHistorySelected is ReadHistory that materializes only the puts and
// deletes sel selects (and every marker): an event sel refuses is parsed
// in place and never copied, nor is the record, so a read of a history
// full of other keys' large values allocates only what it returns
// (docs/security.md, "Watch catch-ups"). fn is called for every revision
// in (after, upTo] that holds a selected event or a marker, with events
// it may keep; revisions with none are skipped. fn's error stops the read
// and is returned. fn runs under the state machine's read lock: it must
// not block (collect, then send after the read returns).
func (f *FSM) ReadHistorySelected(after, upTo uint64, sel HistorySelector, fn func(rev uint64, evs []Event) error) error {
	if sel == nil {
		sel = func(rk, key []byte) bool { return true }
	}
	return f.readHistory(after, upTo, func(rev uint64, v []byte) error {
		evs, err := decodeHistory(rev, v, sel)
		if err != nil || len(evs) == 0 {
			return err
		}
		return fn(rev, evs)
	})
}

// readHistory calls fn with the raw record of every retained revision in
// (after, upTo] (upTo capped at the applied index), valid only during the
// call; *CompactedError when after is below the floor.
func (f *FSM) readHistory(after, upTo uint64, fn func(rev uint64, v []byte) error) error {
	if err := f.rlock(); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return ErrRestoring
	}
	applied := f.applied.Load()
	if upTo > applied {
		upTo = applied
	}
	// The snapshot pins the floor and the records together.
	snap := f.db.NewSnapshot()
	defer snap.Close()
	floor, err := f.histFloor(snap)
	if err != nil {
		return err
	}
	if after < floor {
		return &CompactedError{Oldest: floor, Current: applied}
	}
	if after >= upTo {
		return nil
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: histKey(after + 1), UpperBound: histKey(upTo + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		rev := binary.BigEndian.Uint64(k[len(metaHistPrefix):])
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(rev, v); err != nil {
			return err
		}
	}
	return it.Error()
}
