package fsm

import (
	"bytes"
	"errors"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/resp"
	"github.com/swarmkv/swarmkv/shard"
)

// The read seam. A front reads a shard replica's state only through Read
// (or ReadKey for one key, ReadRedis for one Redis command): the slot
// fencing is done inside, so no handler can forget it, and every read of
// one call sees one state.
//
//	err := f.Read(userID, func(v fsm.View) error {
//		idx, _, err := v.ScanPage(prefix, keys.PrefixEnd(prefix), 100, 1<<20)
//		... v.Get(recordKeyOf(idx[i])) ...   // the record the index named
//		return err
//	})
//
// Fencing (the slot of routing key rk; a nil rk is a shard-addressed read,
// not fenced):
//  1. before the view is taken, the shard must own the slot as of the
//     applied index: every write of the slot up to its ownership is then in
//     the view (a slot adopted later has its data ingested before);
//  2. the view is one point-in-time state of the whole replica (one Pebble
//     iterator, whose bounds each read of the view sets: an iterator sees
//     the DB as of its creation, and costs less than a snapshot, whose
//     close reschedules compactions);
//  3. after fn returns, the shard must still own the slot: a freeze (and
//     drop) of the slot applied meanwhile turns the answer into a
//     *MovedError, whatever fn returned, and the client retries at the new
//     owner.
//
// The linearizable read barrier (or lease) is the caller's, before Read:
// the state machine does not know about leadership.

// View is a read-only view of one shard replica's state at one point: a
// Pebble iterator opened by Read and repositioned by each of its reads. A
// View is valid only during the fn it is passed to, and is used by that
// goroutine alone. Keys of the meta table read as absent. Values returned
// are copies the caller owns.
type View struct {
	f  *FSM
	it *pebble.Iterator // the state viewed
	st *slotState       // ownership when the view was taken
}

// Read calls fn with a View of the replica's state, fenced on the slot of
// rk (see "The read seam" above; nil rk: not fenced). It returns fn's error,
// or a *MovedError when the shard does not own rk's slot before the view is
// taken or has lost it when fn returns, ErrRestoring while a Restore runs,
// ErrClosed after Close. fn must not call the FSM's other read methods
// (the FSM is read-locked during fn, and Close waits for it).
func (f *FSM) Read(rk []byte, fn func(View) error) error {
	if err := f.rlock(); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	st, err := f.fenceBefore(rk)
	if err != nil {
		return err
	}
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: dataStart})
	if err != nil {
		return wrapRead("read", err)
	}
	if f.restoring.Load() {
		// A Restore began: the view may hold part of its clear. (One that
		// began before NewIter and ended between NewIter and this check
		// would go unseen, the window FSM.Get has too; raft restores only
		// a replica far behind.)
		_ = it.Close()
		return ErrRestoring
	}
	err = fn(View{f: f, it: it, st: st})
	if cerr := it.Close(); err == nil && cerr != nil {
		err = wrapRead("read", cerr)
	}
	if ferr := f.fenceAfter(rk); ferr != nil {
		return ferr
	}
	return err
}

// ReadKey returns a copy of key's value (ErrNotFound when absent), read
// under the fencing of Read on rk. One Get is atomic by itself, so it reads
// the DB without the cost of a snapshot.
func (f *FSM) ReadKey(rk, key []byte) ([]byte, error) {
	if err := f.rlock(); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	if _, err := f.fenceBefore(rk); err != nil {
		return nil, err
	}
	if len(key) == 0 || key[0] == metaPrefix {
		return nil, ErrNotFound
	}
	v, found, err := getCopy(f.db, key)
	if ferr := f.fenceAfter(rk); ferr != nil {
		return nil, ferr
	}
	switch {
	case err != nil:
		return nil, wrapRead("get", err)
	case !found:
		return nil, ErrNotFound
	}
	return v, nil
}

// fenceBefore returns the ownership state as of the applied index, or the
// refusal of rk's slot in it (with f read-locked).
func (f *FSM) fenceBefore(rk []byte) (*slotState, error) {
	st := f.slots.Load()
	if f.restoring.Load() {
		return nil, ErrRestoring
	}
	if rk != nil && !st.owned.IsFull() {
		if err := st.check(shard.SlotOf(rk)); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// fenceAfter is the check after a read: rk's slot is still owned and no
// Restore began.
func (f *FSM) fenceAfter(rk []byte) error {
	if rk == nil {
		if f.restoring.Load() {
			return ErrRestoring
		}
		return nil
	}
	return f.CheckRoutingKey(rk)
}

// Shard is the shard id of the replica viewed.
func (v View) Shard() shard.ID { return shard.ID(v.f.shard) }

// Get returns a copy of key's value, ErrNotFound when absent.
func (v View) Get(key []byte) ([]byte, error) {
	if len(key) == 0 || key[0] == metaPrefix {
		return nil, ErrNotFound
	}
	v.it.SetBounds(dataStart, nil) // a no-op unless a scan bounded it
	// The default comparer's prefix is the whole key: an exact lookup,
	// which consults the bloom filters as Get does.
	if !v.it.SeekPrefixGE(key) || !bytes.Equal(v.it.Key(), key) {
		if err := v.it.Error(); err != nil {
			return nil, wrapRead("get", err)
		}
		return nil, ErrNotFound
	}
	val, err := v.it.ValueAndErr()
	if err != nil {
		return nil, wrapRead("get", err)
	}
	return append(make([]byte, 0, len(val)), val...), nil
}

// bound sets the view's bounds to [start, end) minus the meta table (an
// empty end: no upper bound); false for an empty range.
func (v View) bound(start, end []byte) bool {
	lower, upper, ok := dataBounds(start, end)
	if ok {
		v.it.SetBounds(lower, upper)
	}
	return ok
}

// Scan is FSM.Scan on the view.
func (v View) Scan(start, end []byte, limit int) ([]KV, error) {
	if !v.bound(start, end) {
		return nil, nil
	}
	kvs, _, err := scanPageIter(v.it, limit, 0)
	return kvs, err
}

// ScanPage is FSM.ScanPage on the view.
func (v View) ScanPage(start, end []byte, limit, maxBytes int) (page []KV, more bool, err error) {
	if !v.bound(start, end) {
		return nil, false, nil
	}
	return scanPageIter(v.it, limit, maxBytes)
}

// ScanReverse is FSM.ScanReverse on the view.
func (v View) ScanReverse(start, end []byte, limit, skip int) ([]KV, error) {
	if !v.bound(start, end) {
		return nil, nil
	}
	return scanReverseIter(v.it, limit, skip)
}

// Count is FSM.Count on the view.
func (v View) Count(start, end []byte) (int, error) {
	if !v.bound(start, end) {
		return 0, nil
	}
	return countIter(v.it)
}

// get is Get as a getter.
func (v View) get(key []byte) ([]byte, bool, error) {
	val, err := v.Get(key)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	return val, err == nil, err
}

// CheckRoutingKey returns nil if the shard owned rk's slot when the view
// was taken and still owns it, else a *MovedError: for a read whose
// routing key is known only from what it read (a shard-addressed lookup
// that found the record's user in an index).
func (v View) CheckRoutingKey(rk []byte) error {
	if v.st.owned.IsFull() {
		return v.f.CheckRoutingKey(rk)
	}
	if err := v.st.check(shard.SlotOf(rk)); err != nil {
		return err
	}
	return v.f.CheckRoutingKey(rk)
}

// OwnsKey reports whether the shard owned, when the view was taken and
// still, the slot of the stored key key whose value is value (FSM.OwnsKey,
// its lookups read from the view): a listing of the whole shard leaves out
// the keys it does not own.
func (v View) OwnsKey(key, value []byte) (bool, error) {
	cur := v.f.slots.Load()
	if v.st.owned.IsFull() && cur.owned.IsFull() {
		return true, nil
	}
	slot, ok, err := slotOfKey(v.get, key, value)
	if err != nil || !ok {
		return false, err
	}
	return v.st.owned.Has(slot) && cur.owned.Has(slot), nil
}

// ReadRedis is RedisRead fenced as Read is, on the slot of every key argv
// names: a key of a slot the shard does not own is refused before the
// read (RedisRead), and a freeze of one applied during the read turns the
// answer into its *MovedError. Commands that name several keys read one
// snapshot; listings (KEYS, SCAN) leave out the keys of slots the shard
// does not own and are not fenced.
func (f *FSM) ReadRedis(argv [][]byte) (resp.Value, error) {
	v, err := f.RedisRead(argv)
	if err != nil {
		return resp.Value{}, err
	}
	for _, k := range RedisKeys(argv) {
		if err := f.CheckRoutingKey(keys.RedisRoutingKey(k)); err != nil {
			return resp.Value{}, err
		}
	}
	return v, nil
}
