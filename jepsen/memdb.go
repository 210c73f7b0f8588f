package jepsen

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// MemBugs are deliberate bugs of a MemDB, each of which a checker must
// report.
type MemBugs struct {
	// NoEventDedup charges a usage event again when it comes with a new
	// transaction id (a double charge).
	NoEventDedup bool
	// StaleStatusIndex leaves an agent in its old status index entry when
	// its status changes (index and record disagree).
	StaleStatusIndex bool
	// OverwriteTxID lets a credit or charge under a transaction id already
	// recorded (of any account, for another operation) replace that
	// transaction: the money of both moves, the listing keeps the second
	// only (the state machine's bug of issue 22, item 10).
	OverwriteTxID bool
	// TxIDPerAccount checks a transaction id against its own account's
	// transactions only: another account's credit or charge under a
	// recorded id takes effect as a transaction of its own (transaction
	// ids unique per shard, as before the transaction-id directory of
	// issue 37, item 11).
	TxIDPerAccount bool
	// MoveLosesWrites and MoveDuplicatesWrites simulate slot moves (see
	// memMove) with a bug: a move copies its slot's data when it starts
	// and keeps serving writes to it (no freeze); at its publish the
	// target's copy wins. MoveLosesWrites: the writes acknowledged during
	// the move are lost. MoveDuplicatesWrites: the target ingests them
	// twice (a chunk applied again): each register written more than once
	// during the move goes back to its first value of the move, and each
	// transaction recorded during the move is listed twice.
	MoveLosesWrites      bool
	MoveDuplicatesWrites bool
	// WatchDropsEvents: a watch skips every memBugEvery-th message it
	// would deliver (an event lost, e.g. by a resume after the wrong
	// revision). WatchDuplicatesEvents: it delivers every memBugEvery-th
	// message twice (a resume from a stale revision).
	WatchDropsEvents      bool
	WatchDuplicatesEvents bool
	// LeaseEarlyExpiry: a grant or keep-alive keeps the lease for a
	// quarter of its TTL only (it answers the full TTL).
	// LeaseNeverExpires: leases never expire.
	LeaseEarlyExpiry  bool
	LeaseNeverExpires bool
}

// Simulated moves (MemBugs.MoveLosesWrites, MoveDuplicatesWrites): the
// data of the KV and billing tables is spread over memSlots slots by
// routing key (account id for billing); every memMoveEvery-th write starts
// a move of its slot, published memMoveWindow writes later.
const (
	memSlots      = 16
	memMoveEvery  = 40
	memMoveWindow = 15
)

// memMove is a simulated move in progress.
type memMove struct {
	slot int
	left int // writes until the publish
	kv   map[string][]byte
	acct map[keys.AccountID]records.Account
	txs  map[keys.AccountID][]*records.CreditTransaction
	evs  map[keys.AccountID]map[string]keys.TransactionID
	puts []memPut // KV writes to the slot during the move, in order
}

type memPut struct {
	key   string
	value []byte
}

func memSlot(rk []byte) int {
	h := fnv.New32a()
	h.Write(rk)
	return int(h.Sum32() % memSlots)
}

// kvSlot is the slot of a kv map key (routing key, NUL, key).
func kvSlot(k string) int {
	rk, _, _ := strings.Cut(k, "\x00")
	return memSlot([]byte(rk))
}

func acctSlot(id keys.AccountID) int { return memSlot(id[:]) }

// writeLocked counts a write to slot (after it is applied; put is the
// KV write, if it is one) and starts or publishes a simulated move.
func (m *MemDB) writeLocked(slot int, put *memPut) {
	if !m.bugs.MoveLosesWrites && !m.bugs.MoveDuplicatesWrites {
		return
	}
	m.writes++
	if mv := m.move; mv != nil {
		if put != nil && slot == mv.slot {
			mv.puts = append(mv.puts, memPut{put.key, bytes.Clone(put.value)})
		}
		if mv.left--; mv.left <= 0 {
			m.publishLocked()
		}
		return
	}
	if m.writes%memMoveEvery == 0 {
		m.startMoveLocked(slot)
	}
}

// startMoveLocked copies slot's data: what the buggy move will publish.
func (m *MemDB) startMoveLocked(slot int) {
	mv := &memMove{slot: slot, left: memMoveWindow, kv: map[string][]byte{}, acct: map[keys.AccountID]records.Account{},
		txs: map[keys.AccountID][]*records.CreditTransaction{}, evs: map[keys.AccountID]map[string]keys.TransactionID{}}
	for k, v := range m.kv {
		if kvSlot(k) == slot {
			mv.kv[k] = bytes.Clone(v)
		}
	}
	for id, a := range m.acct {
		if acctSlot(id) == slot {
			mv.acct[id] = *a
			mv.txs[id] = slices.Clone(m.txs[id])
			mv.evs[id] = maps.Clone(m.evs[id])
		}
	}
	m.move = mv
}

// publishLocked ends the move with its bug.
func (m *MemDB) publishLocked() {
	mv := m.move
	m.move = nil
	m.moves++
	if m.bugs.MoveLosesWrites {
		// The copy made at the start replaces the slot's data.
		for k := range m.kv {
			if kvSlot(k) == mv.slot {
				delete(m.kv, k)
			}
		}
		maps.Copy(m.kv, mv.kv)
		for id := range m.acct {
			if acctSlot(id) != mv.slot {
				continue
			}
			if a, ok := mv.acct[id]; ok {
				*m.acct[id] = a
			}
			m.txs[id], m.evs[id] = mv.txs[id], mv.evs[id]
		}
		return
	}
	// MoveDuplicatesWrites: the writes of the move are applied again.
	seen := map[string]bool{}
	for _, p := range mv.puts {
		if !seen[p.key] {
			seen[p.key] = true
			m.kv[p.key] = p.value // the first write of the move, again
		}
	}
	for id, old := range mv.txs {
		for _, t := range m.txs[id][len(old):] {
			c := *t
			m.txs[id] = append(m.txs[id], &c)
		}
	}
}

// Moves returns the number of simulated moves published so far.
func (m *MemDB) Moves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.moves
}

// MemDB is a naive, obviously correct in-memory DB (one mutex, maps): the
// reference the checkers must accept, and with MemBugs a store they must
// reject.
type MemDB struct {
	bugs MemBugs
	mu   sync.Mutex
	kv   map[string][]byte
	acct map[keys.AccountID]*records.Account
	txs  map[keys.AccountID][]*records.CreditTransaction
	evs  map[keys.AccountID]map[string]keys.TransactionID
	ags  map[keys.AgentID]*records.AgentRecord
	idx  map[records.AgentState]map[keys.AgentID]bool

	// Simulated moves (MemBugs.MoveLosesWrites, MoveDuplicatesWrites).
	writes int
	moves  int
	move   *memMove

	// chg is the change log watches follow, and the leases
	// (memdb_watch.go).
	chg memChanges
}

var _ DB = (*MemDB)(nil)

// NewMemDB returns an empty MemDB with the given bugs.
func NewMemDB(bugs MemBugs) *MemDB {
	return &MemDB{bugs: bugs, kv: map[string][]byte{}, acct: map[keys.AccountID]*records.Account{},
		txs: map[keys.AccountID][]*records.CreditTransaction{}, evs: map[keys.AccountID]map[string]keys.TransactionID{},
		ags: map[keys.AgentID]*records.AgentRecord{}, idx: map[records.AgentState]map[keys.AgentID]bool{},
		chg: newMemChanges()}
}

// Connect returns a Connect handing out m itself.
func (m *MemDB) Connect() Connect {
	return func(context.Context) (DB, error) { return m, nil }
}

func kvKey(rk, key []byte) string { return string(rk) + "\x00" + string(key) }

func (m *MemDB) Get(_ context.Context, rk, key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	v, ok := m.kv[kvKey(rk, key)]
	if !ok {
		return nil, client.ErrNotFound
	}
	return bytes.Clone(v), nil
}

func (m *MemDB) Put(_ context.Context, rk, key, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	m.kv[kvKey(rk, key)] = bytes.Clone(value)
	m.changedLocked(rk, key, value, 0)
	m.writeLocked(memSlot(rk), &memPut{kvKey(rk, key), value})
	return nil
}

func (m *MemDB) CAS(_ context.Context, rk, key, old, new []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	v, ok := m.kv[kvKey(rk, key)]
	if (old == nil && ok) || (old != nil && (!ok || !bytes.Equal(v, old))) {
		return false, nil
	}
	m.kv[kvKey(rk, key)] = bytes.Clone(new)
	m.changedLocked(rk, key, new, 0)
	m.writeLocked(memSlot(rk), &memPut{kvKey(rk, key), new})
	return true, nil
}

func (m *MemDB) PutAccount(_ context.Context, a *records.Account) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *a
	m.acct[a.UserID] = &c
	m.writeLocked(acctSlot(a.UserID), nil)
	return nil
}

func (m *MemDB) GetAccount(_ context.Context, id keys.AccountID) (*records.Account, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.acct[id]
	if !ok {
		return nil, client.ErrNotFound
	}
	c := *a
	return &c, nil
}

// txLocked returns the transaction with id, of any account, or nil.
func (m *MemDB) txLocked(id keys.TransactionID) *records.CreditTransaction {
	for _, txs := range m.txs {
		for _, t := range txs {
			if t.TransactionID == id {
				return t
			}
		}
	}
	return nil
}

// sameOp reports whether old, a recorded transaction, was recorded by the
// operation t (with event eventID) describes: the exact retry, which
// answers the recorded balance.
func sameOp(old, t *records.CreditTransaction, eventID string) bool {
	return old.UserID == t.UserID && old.TransactionType == t.TransactionType && old.AmountCents == t.AmountCents &&
		old.Description == t.Description && old.EventID == eventID
}

// recordedLocked decides a credit or charge under t's id, which a new
// operation may not reuse: done with the recorded balance if it is the
// exact retry of the operation that recorded the id, ErrAlreadyExists if
// another one recorded it. With the OverwriteTxID bug the old transaction
// is dropped from the listing and the operation goes on.
func (m *MemDB) recordedLocked(t *records.CreditTransaction, eventID string) (int64, bool, error) {
	old := m.txLocked(t.TransactionID)
	if m.bugs.TxIDPerAccount && old != nil && old.UserID != t.UserID {
		old = nil
	}
	switch {
	case old == nil:
		return 0, false, nil
	case sameOp(old, t, eventID):
		return old.BalanceAfterCents, true, nil
	case m.bugs.OverwriteTxID:
		m.txs[old.UserID] = slices.DeleteFunc(m.txs[old.UserID], func(x *records.CreditTransaction) bool { return x == old })
		return 0, false, nil
	}
	return 0, true, fmt.Errorf("%w: transaction id %x is already recorded", client.ErrAlreadyExists, t.TransactionID[:])
}

func (m *MemDB) AddCredits(_ context.Context, id keys.AccountID, amount int64, t *records.CreditTransaction) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bal, done, err := m.recordedLocked(t, t.EventID); done {
		return bal, err
	}
	a, ok := m.acct[id]
	if !ok {
		return 0, client.ErrNotFound
	}
	a.BalanceCents += amount
	a.LifetimeCreditsCents += amount
	c := *t
	c.BalanceAfterCents = a.BalanceCents
	m.txs[id] = append(m.txs[id], &c)
	bal := a.BalanceCents
	m.writeLocked(acctSlot(id), nil)
	return bal, nil
}

func (m *MemDB) ProcessUsage(_ context.Context, e *records.UsageEvent, t *records.CreditTransaction) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.acct[e.UserID]
	if !ok {
		return 0, client.ErrNotFound
	}
	// The exact retry of the charge answers its balance, whatever the bugs.
	if old := m.txLocked(t.TransactionID); old != nil && old.TransactionType == records.TxUsage && sameOp(old, t, e.EventID) {
		return old.BalanceAfterCents, nil
	}
	if _, dup := m.evs[e.UserID][e.EventID]; dup && !m.bugs.NoEventDedup {
		return 0, &client.DuplicateEventError{EventID: e.EventID}
	}
	if bal, done, err := m.recordedLocked(t, e.EventID); done {
		return bal, err
	}
	if a.BalanceCents < t.AmountCents {
		return 0, &client.InsufficientCreditsError{Balance: a.BalanceCents, Required: t.AmountCents}
	}
	a.BalanceCents -= t.AmountCents
	a.LifetimeUsageCents += t.AmountCents
	c := *t
	c.BalanceAfterCents = a.BalanceCents
	c.EventID = e.EventID
	m.txs[e.UserID] = append(m.txs[e.UserID], &c)
	if m.evs[e.UserID] == nil {
		m.evs[e.UserID] = map[string]keys.TransactionID{}
	}
	m.evs[e.UserID][e.EventID] = t.TransactionID
	bal := a.BalanceCents
	m.writeLocked(acctSlot(e.UserID), nil)
	return bal, nil
}

func (m *MemDB) ListTransactions(_ context.Context, id keys.AccountID) ([]*records.CreditTransaction, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*records.CreditTransaction, 0, len(m.txs[id]))
	for _, t := range m.txs[id] {
		c := *t
		out = append(out, &c)
	}
	slices.SortFunc(out, func(x, y *records.CreditTransaction) int {
		return -bytes.Compare(x.TransactionID[:], y.TransactionID[:])
	})
	return out, nil
}

func (m *MemDB) HasUsageEvent(_ context.Context, id keys.AccountID, eventID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.evs[id][eventID]
	return ok, nil
}

func (m *MemDB) indexLocked(s records.AgentState) map[keys.AgentID]bool {
	if m.idx[s] == nil {
		m.idx[s] = map[keys.AgentID]bool{}
	}
	return m.idx[s]
}

func (m *MemDB) PutAgent(_ context.Context, a *records.AgentRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.ags[a.AgentID]; ok {
		delete(m.indexLocked(old.Status), a.AgentID)
	}
	c := *a
	m.ags[a.AgentID] = &c
	m.indexLocked(a.Status)[a.AgentID] = true
	return nil
}

func (m *MemDB) GetAgent(_ context.Context, user keys.UserID, id keys.AgentID) (*records.AgentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.ags[id]
	if !ok || a.UserID != user {
		return nil, client.ErrNotFound
	}
	c := *a
	return &c, nil
}

func (m *MemDB) UpdateAgentStatus(_ context.Context, user keys.UserID, id keys.AgentID, s records.AgentState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.ags[id]
	if !ok || a.UserID != user {
		return client.ErrNotFound
	}
	if !m.bugs.StaleStatusIndex {
		delete(m.indexLocked(a.Status), id)
	}
	a.Status = s
	m.indexLocked(s)[id] = true
	return nil
}

func (m *MemDB) ListAgentsByStatus(_ context.Context, s records.AgentState) ([]*records.AgentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*records.AgentRecord
	for id := range m.idx[s] {
		c := *m.ags[id]
		c.Status = s // what a listing built from the index alone would say
		out = append(out, &c)
	}
	return out, nil
}

func (m *MemDB) ListAgentsByUser(_ context.Context, user keys.UserID) ([]*records.AgentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*records.AgentRecord
	for _, a := range m.ags {
		if a.UserID == user {
			c := *a
			out = append(out, &c)
		}
	}
	return out, nil
}

func (m *MemDB) CountAgentsByUser(ctx context.Context, user keys.UserID) (int, error) {
	l, err := m.ListAgentsByUser(ctx, user)
	return len(l), err
}

// Close does nothing: workers share the MemDB.
func (m *MemDB) Close() error { return nil }

// Broken wraps a DB with client-side bugs, each drawn with probability P
// from a seeded RNG. The checkers must report each of them.
type Broken struct {
	DB
	// StaleReads: Get answers the value the key had before the last Put
	// through this wrapper (a read served by a lagging replica).
	StaleReads bool
	// LoseWrites: Put and UpdateAgentStatus acknowledge without writing.
	LoseWrites bool
	// P is the probability of each bug striking (default 0.2).
	P float64

	mu   sync.Mutex
	rng  *rand.Rand
	prev map[string][]byte // key -> value before the last Put
	last map[string][]byte // key -> value of the last Put
}

// NewBroken wraps db.
func NewBroken(db DB, seed uint64, stale, lose bool) *Broken {
	return &Broken{DB: db, StaleReads: stale, LoseWrites: lose, P: 0.2,
		rng: rand.New(rand.NewPCG(seed, 7)), prev: map[string][]byte{}, last: map[string][]byte{}}
}

func (b *Broken) strike() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rng.Float64() < b.P
}

func (b *Broken) Get(ctx context.Context, rk, key []byte) ([]byte, error) {
	if b.StaleReads && b.strike() {
		b.mu.Lock()
		v, ok := b.prev[kvKey(rk, key)]
		b.mu.Unlock()
		if ok {
			if v == nil {
				return nil, client.ErrNotFound
			}
			return v, nil
		}
	}
	return b.DB.Get(ctx, rk, key)
}

func (b *Broken) Put(ctx context.Context, rk, key, value []byte) error {
	if b.LoseWrites && b.strike() {
		return nil
	}
	err := b.DB.Put(ctx, rk, key, value)
	if err == nil {
		b.mu.Lock()
		k := kvKey(rk, key)
		b.prev[k] = b.last[k]
		b.last[k] = bytes.Clone(value)
		b.mu.Unlock()
	}
	return err
}

func (b *Broken) UpdateAgentStatus(ctx context.Context, user keys.UserID, id keys.AgentID, s records.AgentState) error {
	if b.LoseWrites && b.strike() {
		return nil
	}
	return b.DB.UpdateAgentStatus(ctx, user, id, s)
}

// Close closes the wrapped DB.
func (b *Broken) Close() error { return b.DB.Close() }

func (b *Broken) String() string {
	return fmt.Sprintf("broken(stale=%v lose=%v p=%.2f)", b.StaleReads, b.LoseWrites, b.P)
}
