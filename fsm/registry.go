package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// change is one registry, billing or pool command being applied: it reads
// through the run's indexed batch (so it sees the writes of earlier entries
// of the run) and queues its own writes, which flush adds to the batch only
// once every check has passed. A rejection therefore writes nothing.
type change struct {
	b      *pebble.Batch
	st     *slotState // nil: every slot owned; else flush checks each write
	writes []write
	reads  int // point reads of the op (get, has), which the tests bound
	// leases is the applier, for the lease tables' state (nil in tests
	// of ops that attach nothing); attach the key_lease entries the change
	// adds and deletes (commitAttach).
	leases *applier
	attach []attachDelta
	// acct is the replica's account cache and ids its filter of ledger
	// ids (nil: none, in tests): get and has answer from them, flush keeps
	// them.
	acct *accountCache
	ids  *idFilter
	// byKey indexes writes by key (the positions of each key's writes, in
	// order) once a change holds more than indexAfter of them, so that
	// reading a key as the change leaves it is not a scan of every write:
	// ending a lease with 10,000 keys queues about 30,000 writes and reads
	// each key through them (before, 3.1 s of apply; TestEndLeaseLinear).
	byKey map[string][]int
	// compared counts the key comparisons of reads through the writes,
	// which TestPendingReadsLinear bounds.
	compared int
}

// indexAfter is how many writes a change scans before it indexes them.
const indexAfter = 64

type write struct {
	key, value []byte
	del        bool
	acct       *records.Account // value decoded, for an account an op wrote
}

// rejection is a deterministic Result.Err, returned by the op functions as
// an error so that it unwinds like one; applyRecord unwraps it.
type rejection struct{ err error }

func (r *rejection) Error() string { return r.err.Error() }

func reject(err error) error { return &rejection{err} }

// errAgentOwned, errOverflow, corruptErr build the rejection messages, so
// that the reference model in the tests builds the same ones.
func errAgentOwned() error {
	return fmt.Errorf("%w: op %s: agent id belongs to another user", ErrInvalidCommand, OpPutAgent)
}

func errOverflow(op Op, what string) error {
	return fmt.Errorf("%w: op %s: %s overflow", ErrInvalidCommand, op, what)
}

func corruptErr(key []byte, err error) error {
	return fmt.Errorf("%w: %s key %x: %w", ErrCorruptRecord, keys.TableName(key[0]), key, err)
}

// applyRecord is the apply of a registry, billing or pool op (a spec with
// run): unless the shard owns every slot, it checks the slot of the
// command's routing key, then runs the op in a change and flushes it.
// An op that records a transaction and carries TxID (optional field)
// reserves the id in the directory first, in the same change. A
// rejection goes to res.Err; the returned error is a storage error.
func applyRecord(a *applier, c *Command, _ uint64, res *Result) error {
	sp := c.Op.spec()
	var st *slotState // nil: every slot owned, nothing to check
	if !a.st.owned.IsFull() {
		st = a.st
		if sp.routingKey != nil {
			if rk := sp.routingKey(c); rk != nil {
				if rej := st.check(shard.SlotOf(rk)); rej != nil {
					res.Err = rej
					return nil
				}
			}
		}
	}
	ch := a.newChange(st, true)
	var balance int64
	var removed int
	var err error
	if c.TxID != nil && sp.optional&fTxID != 0 {
		// An op that records a transaction reserves its id in the
		// directory first, in the same change (the front's same-shard
		// case): refused there, the op does not run.
		err = ch.reserveTx(c.Op, c.Tx.UserID, *c.TxID)
	}
	if err == nil {
		balance, removed, err = sp.run(ch, c)
	}
	if err == nil {
		err = ch.flush()
	}
	var rej *rejection
	if errors.As(err, &rej) {
		res.Err = rej.err
		return nil
	}
	if err != nil {
		return err
	}
	ch.commitAttach()
	res.Succeeded, res.Balance, res.Removed = true, balance, removed
	if sp.recordKey != nil {
		res.Record = ch.written(sp.recordKey(c))
	}
	return nil
}

// written returns a copy of the value the change's last write of key
// stores (nil when it wrote none, or deleted it).
func (ch *change) written(key []byte) []byte {
	if i := ch.lastWrite(key, len(ch.writes)); i >= 0 && !ch.writes[i].del {
		return bytes.Clone(ch.writes[i].value)
	}
	return nil
}

// getPending reads key as the change's first n writes leave it.
func (ch *change) getPending(key []byte, n int) ([]byte, bool, error) {
	if i := ch.lastWrite(key, n); i >= 0 {
		w := ch.writes[i]
		return w.value, !w.del, nil
	}
	return getView(ch.b, key, true)
}

// lastWrite returns the position of the last of the first n writes that
// writes key, or -1: a scan of a small change, a look-up in byKey
// (built here when the change grows past indexAfter) of a large one.
func (ch *change) lastWrite(key []byte, n int) int {
	if ch.byKey == nil && len(ch.writes) <= indexAfter {
		for i := n - 1; i >= 0; i-- {
			ch.compared++
			if bytes.Equal(ch.writes[i].key, key) {
				return i
			}
		}
		return -1
	}
	if ch.byKey == nil {
		ch.byKey = make(map[string][]int, 2*len(ch.writes))
		for i, w := range ch.writes {
			ch.byKey[string(w.key)] = append(ch.byKey[string(w.key)], i)
		}
	}
	pos := ch.byKey[string(key)]
	ch.compared++
	// The last position below n (positions ascend).
	j := sort.SearchInts(pos, n) - 1
	if j < 0 {
		return -1
	}
	return pos[j]
}

// queue appends a write, indexing it once the change is indexed.
func (ch *change) queue(w write) {
	if ch.byKey != nil {
		ch.byKey[string(w.key)] = append(ch.byKey[string(w.key)], len(ch.writes))
	}
	ch.writes = append(ch.writes, w)
}

// get returns key's value, which the caller does not modify. reads counts
// the Pebble point reads; an account the cache holds, and an id the filter
// knows is absent, cost none.
func (ch *change) get(key []byte) ([]byte, bool, error) {
	if v, found, known := ch.fromMemory(key); known {
		return v, found, nil
	}
	ch.reads++
	v, found, err := getView(ch.b, key, true)
	if found && err == nil {
		ch.acct.put(key, v, nil)
	}
	return v, found, err
}

// fromMemory answers a point read from the account cache or the id filter
// when they know the answer (known false: read Pebble).
func (ch *change) fromMemory(key []byte) (v []byte, found, known bool) {
	if v, ok := ch.acct.get(key); ok {
		return v, true, true
	}
	if !ch.ids.mayHave(key) {
		return nil, false, true
	}
	return nil, false, false
}

func (ch *change) has(key []byte) (bool, error) {
	if _, found, known := ch.fromMemory(key); known {
		return found, nil
	}
	ch.reads++
	_, found, err := getView(ch.b, key, false)
	return found, err
}

func (ch *change) set(key, value []byte) { ch.queue(write{key: key, value: value}) }
func (ch *change) del(key []byte)        { ch.queue(write{key: key, del: true}) }

// flush adds the queued writes to the batch, in order. When the shard owns
// only some slots it first checks that every write touches owned slots
// only (as written and as stored), so that the data of a slot not owned,
// frozen ones included, never changes; a write that does not is a
// rejection (*MovedError) and nothing is written.
func (ch *change) flush() error {
	if ch.st != nil {
		for i, w := range ch.writes {
			get := func(key []byte) ([]byte, bool, error) { return ch.getPending(key, i) }
			rej, err := ch.st.checkWrite(get, w.key, w.value, w.del)
			if err != nil {
				return err
			}
			if rej != nil {
				return reject(rej)
			}
		}
	}
	for _, w := range ch.writes {
		var err error
		if w.del {
			err = ch.b.Delete(w.key, nil)
		} else {
			err = ch.b.Set(w.key, w.value, nil)
		}
		if err != nil {
			ch.acct.reset() // the batch may hold some of the writes
			return err
		}
		if w.del {
			ch.acct.forget(w.key)
		} else {
			ch.acct.put(w.key, w.value, w.acct)
			ch.ids.add(w.key)
		}
	}
	return nil
}

// getRecord decodes key's stored record into r. A record that does not
// decode or validate is rejected with ErrCorruptRecord: every op stores
// valid records, so only a raw OpBatch write can produce one.
func getRecord[R interface {
	records.Record
	Validate() error
}](ch *change, key []byte, r R) (bool, error) {
	v, found, err := ch.get(key)
	if err != nil || !found {
		return false, err
	}
	if err := decodeStored(key, v, r); err != nil {
		return false, reject(err)
	}
	return true, nil
}

// getFound is getRecord for a record that must exist: absent is a
// rejection with ErrNotFound.
func getFound[R interface {
	records.Record
	Validate() error
}](ch *change, key []byte, r R) error {
	found, err := getRecord(ch, key, r)
	if err == nil && !found {
		err = reject(ErrNotFound)
	}
	return err
}

// decodeStored decodes and validates a stored record.
func decodeStored[R interface {
	records.Record
	Validate() error
}](key, v []byte, r R) error {
	err := records.Decode(v, r)
	if err == nil {
		err = r.Validate()
	}
	if err != nil {
		return corruptErr(key, err)
	}
	return nil
}

// putRecord queues key = encoding of r.
func putRecord[R records.Record](ch *change, key []byte, r R) error {
	v, err := records.Encode(r)
	if err != nil { // plain structs of ints, strings and arrays: never
		return fmt.Errorf("fsm: encode record: %w", err)
	}
	ch.set(key, v)
	return nil
}
