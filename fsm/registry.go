package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
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
// an error so that it unwinds like one; applyRecordOp unwraps it.
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

// applyRecordOp applies a registry, billing or pool command (validated)
// into b.
// A rejection goes to res.Err; the returned error is a storage error.
func applyRecordOp(a *applier, c *Command, st *slotState, res *Result) error {
	ch := &change{b: a.b, st: st, leases: a, acct: &a.f.accounts, ids: &a.f.ids}
	var balance int64
	var removed int
	var err error
	if c.TxID != nil && c.Op != OpReserveTx {
		// An op that records a transaction reserves its id in the
		// directory first, in the same change (the front's same-shard
		// case): refused there, the op does not run.
		err = ch.reserveTx(c.Op, c.Tx.UserID, *c.TxID)
	}
	if err == nil {
		balance, removed, err = ch.recordOp(c)
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
	if key := recordKey(c); key != nil {
		res.Record = ch.written(key)
	}
	return nil
}

// recordOp runs the registry, billing or pool op c in ch (not yet
// flushed): the new balance of a billing op that moves money, the bots an
// OpDeletePool removed.
func (ch *change) recordOp(c *Command) (balance int64, removed int, err error) {
	switch c.Op {
	case OpPutAgent:
		err = ch.putAgent(c.Agent)
	case OpDeleteAgent:
		err = ch.deleteAgent(*c.UserID, *c.AgentID)
	case OpUpdateAgentStatus:
		err = ch.updateAgentStatus(*c.UserID, *c.AgentID, records.AgentState(*c.Status), c.Time)
	case OpPutSession:
		err = ch.putSession(c.Session)
	case OpUpdateSessionStatus:
		err = ch.updateSessionStatus(*c.SessionID, c.UserID, records.SessionStatus(*c.Status), c.Time)
	case OpPutUser:
		err = putRecord(ch, keys.User(c.User.UserID), c.User)
	case OpAgentHeartbeat:
		err = ch.agentHeartbeat(*c.UserID, *c.AgentID, c.Time, c.LeaseID)
	case OpPutAccount:
		err = ch.putAccount(c.Account.UserID, c.Account)
	case OpDeleteAccount:
		err = ch.deleteAccount(*c.AccountID)
	case OpUpdateBalance:
		balance, err = ch.updateBalance(*c.AccountID, *c.Amount, c.Tx, c.Time)
	case OpPutTransaction:
		err = ch.putTransaction(c.Tx)
	case OpPutUsageEvent:
		err = ch.putUsageEvent(c.Event)
	case OpProcessUsage:
		balance, err = ch.processUsage(c.Event, c.Tx, c.Time)
	case OpAddCredits:
		balance, err = ch.addCredits(*c.AccountID, *c.Amount, c.Tx, c.Time)
	case OpReserveTx:
		err = ch.reserveTx(c.Op, *c.AccountID, *c.TxID)
	default:
		if isPoolOp(c.Op) {
			removed, err = ch.poolOp(c)
			break
		}
		// unreachable: Validate knows every op
		err = reject(fmt.Errorf("%w: unknown op %d", ErrInvalidCommand, c.Op))
	}
	return balance, removed, err
}

// recordKey is the key of the record op c updates and reports in
// Result.Record, nil for an op that reports none.
func recordKey(c *Command) []byte {
	switch c.Op {
	case OpUpdateAgentStatus, OpAgentHeartbeat:
		return keys.Agent(*c.UserID, *c.AgentID)
	case OpUpdateSessionStatus:
		return keys.Session(*c.SessionID)
	case OpUpdatePool:
		return keys.Pool(c.Pool.PoolID)
	case OpRegisterBot, OpUpdateBot:
		return keys.Bot(c.Bot.AgentID)
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

func (ch *change) putAgent(a *records.AgentRecord) error {
	ownerKey := keys.AgentOwner(a.AgentID)
	owner, found, err := ch.get(ownerKey)
	if err != nil {
		return err
	}
	if found && !bytes.Equal(owner, a.UserID[:]) {
		return reject(errAgentOwned())
	}
	key := keys.Agent(a.UserID, a.AgentID)
	var old records.AgentRecord
	exists, err := getRecord(ch, key, &old)
	if err != nil {
		return err
	}
	if exists && old.Status != a.Status {
		ch.del(keys.AgentByStatus(byte(old.Status), a.UserID, a.AgentID))
	}
	if err := putRecord(ch, key, a); err != nil {
		return err
	}
	ch.set(keys.AgentByStatus(byte(a.Status), a.UserID, a.AgentID), nil)
	ch.set(ownerKey, a.UserID[:])
	return nil
}

func (ch *change) deleteAgent(u keys.UserID, a keys.AgentID) error {
	key := keys.Agent(u, a)
	var old records.AgentRecord
	if err := getFound(ch, key, &old); err != nil {
		return err
	}
	ownerKey := keys.AgentOwner(a)
	owner, found, err := ch.get(ownerKey)
	if err != nil {
		return err
	}
	ch.del(key)
	ch.del(keys.AgentByStatus(byte(old.Status), u, a))
	if found && bytes.Equal(owner, u[:]) {
		ch.del(ownerKey)
	}
	return ch.setLease(key, 0)
}

// agentHeartbeat sets the agent's last_heartbeat_at and, with a lease,
// attaches the agent to it.
func (ch *change) agentHeartbeat(u keys.UserID, a keys.AgentID, now int64, lease uint64) error {
	key := keys.Agent(u, a)
	var rec records.AgentRecord
	if err := getFound(ch, key, &rec); err != nil {
		return err
	}
	rec.LastHeartbeatAt = &now
	if err := putRecord(ch, key, &rec); err != nil {
		return err
	}
	if lease == 0 {
		return nil
	}
	return ch.setLease(key, lease)
}

func (ch *change) updateAgentStatus(u keys.UserID, a keys.AgentID, st records.AgentState, now int64) error {
	key := keys.Agent(u, a)
	var rec records.AgentRecord
	if err := getFound(ch, key, &rec); err != nil {
		return err
	}
	if rec.Status != st {
		ch.del(keys.AgentByStatus(byte(rec.Status), u, a))
	}
	rec.Status, rec.UpdatedAt = st, now
	if err := putRecord(ch, key, &rec); err != nil {
		return err
	}
	ch.set(keys.AgentByStatus(byte(st), u, a), nil)
	return nil
}

func (ch *change) putSession(s *records.SessionRecord) error {
	key := keys.Session(s.SessionID)
	var old records.SessionRecord
	exists, err := getRecord(ch, key, &old)
	if err != nil {
		return err
	}
	if exists && old.AgentID != s.AgentID {
		ch.del(keys.SessionByAgent(old.AgentID, s.SessionID))
	}
	if err := putRecord(ch, key, s); err != nil {
		return err
	}
	ch.set(keys.SessionByAgent(s.AgentID, s.SessionID), nil)
	return nil
}

func (ch *change) updateSessionStatus(id keys.SessionID, owner *keys.UserID, st records.SessionStatus, now int64) error {
	key := keys.Session(id)
	var rec records.SessionRecord
	exists, err := getRecord(ch, key, &rec)
	if err != nil {
		return err
	}
	if !exists || (owner != nil && rec.UserID != *owner) {
		return reject(ErrNotFound)
	}
	rec.Status = st
	if st != records.SessionActive && rec.ClosedAt == nil {
		rec.ClosedAt = &now
	}
	return putRecord(ch, key, &rec)
}
