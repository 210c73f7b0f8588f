package fsm

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Listing reads a key range page by page from one Pebble snapshot, so
// that a list-then-watch streams any number of keys at one revision with
// one page in memory at a time (api/watch.go; docs/security.md, "Watch
// listings"). The snapshot is registered like a Raft snapshot's: Close of
// the state machine closes it, and a page after that is ErrClosed. A
// Listing is used by one goroutine; Close it when done.
//
//	l, err := f.OpenListing(prefix, keys.PrefixEnd(prefix))
//	defer l.Close()
//	for { kvs, done, err := l.Next(1000, 4<<20); ...; if done { break } }
type Listing struct {
	s     *fsmSnapshot
	start []byte // the next page starts here (inclusive)
	end   []byte
	done  bool
}

// OpenListing starts a listing of [start, end) (end empty: no bound) at
// the current applied index (Revision).
func (f *FSM) OpenListing(start, end []byte) (*Listing, error) {
	if len(start) == 0 || start[0] == metaPrefix {
		return nil, fmt.Errorf("fsm: list: start in the meta table")
	}
	if err := f.rlock(); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return nil, ErrRestoring
	}
	snap := f.db.NewSnapshot()
	index, err := appliedIn(snap)
	if err != nil {
		_ = snap.Close()
		return nil, fmt.Errorf("fsm: list: %w", err)
	}
	s := &fsmSnapshot{f: f, snap: snap, shard: f.shard, index: index}
	f.snaps.Lock()
	f.snaps.open[s] = struct{}{}
	f.snaps.Unlock()
	return &Listing{s: s, start: append([]byte(nil), start...), end: append([]byte(nil), end...)}, nil
}

// Revision is the applied index the listing reads at: the state after
// that revision.
func (l *Listing) Revision() uint64 { return l.s.index }

// listItemOverhead is what Next counts for an item besides its key and
// value bytes (the framing of a message's repeated field, roughly).
const listItemOverhead = 16

// Next returns the next page: copies of at most maxItems keys and their
// values whose sizes (key + value + a few bytes each) stay within
// maxBytes; a page holds at least one item whatever its size, so the
// listing progresses. done: no key follows this page.
func (l *Listing) Next(maxItems, maxBytes int) (kvs []KV, done bool, err error) {
	if l.done {
		return nil, true, nil
	}
	f := l.s.f
	if err := f.rlock(); err != nil {
		return nil, false, err
	}
	defer f.mu.RUnlock()
	f.snaps.Lock()
	snap := l.s.snap
	f.snaps.Unlock()
	if snap == nil || f.closing.Load() {
		return nil, false, ErrClosed
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: l.start, UpperBound: nilIfEmpty(l.end)})
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	size := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, false, err
		}
		n := len(it.Key()) + len(v) + listItemOverhead
		if len(kvs) > 0 && (len(kvs) == maxItems || size+n > maxBytes) {
			l.start = append(append(l.start[:0], kvs[len(kvs)-1].Key...), 0)
			return kvs, false, nil
		}
		size += n
		kvs = append(kvs, KV{Key: append([]byte(nil), it.Key()...), Value: append(make([]byte, 0, len(v)), v...)})
	}
	if err := it.Error(); err != nil {
		return nil, false, err
	}
	l.done = true
	return kvs, true, nil
}

// Close releases the listing's snapshot. Safe to call more than once.
func (l *Listing) Close() { l.s.Release() }
