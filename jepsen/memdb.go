package jepsen

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
}

var _ DB = (*MemDB)(nil)

// NewMemDB returns an empty MemDB with the given bugs.
func NewMemDB(bugs MemBugs) *MemDB {
	return &MemDB{bugs: bugs, kv: map[string][]byte{}, acct: map[keys.AccountID]*records.Account{},
		txs: map[keys.AccountID][]*records.CreditTransaction{}, evs: map[keys.AccountID]map[string]keys.TransactionID{},
		ags: map[keys.AgentID]*records.AgentRecord{}, idx: map[records.AgentState]map[keys.AgentID]bool{}}
}

// Connect returns a Connect handing out m itself.
func (m *MemDB) Connect() Connect {
	return func(context.Context) (DB, error) { return m, nil }
}

func kvKey(rk, key []byte) string { return string(rk) + "\x00" + string(key) }

func (m *MemDB) Get(_ context.Context, rk, key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.kv[kvKey(rk, key)]
	if !ok {
		return nil, client.ErrNotFound
	}
	return bytes.Clone(v), nil
}

func (m *MemDB) Put(_ context.Context, rk, key, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv[kvKey(rk, key)] = bytes.Clone(value)
	return nil
}

func (m *MemDB) CAS(_ context.Context, rk, key, old, new []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.kv[kvKey(rk, key)]
	if (old == nil && ok) || (old != nil && (!ok || !bytes.Equal(v, old))) {
		return false, nil
	}
	m.kv[kvKey(rk, key)] = bytes.Clone(new)
	return true, nil
}

func (m *MemDB) PutAccount(_ context.Context, a *records.Account) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *a
	m.acct[a.UserID] = &c
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

// txLocked returns acct's transaction with id, or nil.
func (m *MemDB) txLocked(acct keys.AccountID, id keys.TransactionID) *records.CreditTransaction {
	for _, t := range m.txs[acct] {
		if t.TransactionID == id {
			return t
		}
	}
	return nil
}

func (m *MemDB) AddCredits(_ context.Context, id keys.AccountID, amount int64, t *records.CreditTransaction) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.acct[id]
	if !ok {
		return 0, client.ErrNotFound
	}
	if old := m.txLocked(id, t.TransactionID); old != nil {
		return old.BalanceAfterCents, nil
	}
	a.BalanceCents += amount
	a.LifetimeCreditsCents += amount
	c := *t
	c.BalanceAfterCents = a.BalanceCents
	m.txs[id] = append(m.txs[id], &c)
	return a.BalanceCents, nil
}

func (m *MemDB) ProcessUsage(_ context.Context, e *records.UsageEvent, t *records.CreditTransaction) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.acct[e.UserID]
	if !ok {
		return 0, client.ErrNotFound
	}
	if old := m.txLocked(e.UserID, t.TransactionID); old != nil {
		return old.BalanceAfterCents, nil
	}
	if _, dup := m.evs[e.UserID][e.EventID]; dup && !m.bugs.NoEventDedup {
		return 0, &client.DuplicateEventError{EventID: e.EventID}
	}
	if a.BalanceCents < t.AmountCents {
		return 0, &client.InsufficientCreditsError{Balance: a.BalanceCents, Required: t.AmountCents}
	}
	a.BalanceCents -= t.AmountCents
	a.LifetimeUsageCents += t.AmountCents
	c := *t
	c.BalanceAfterCents = a.BalanceCents
	m.txs[e.UserID] = append(m.txs[e.UserID], &c)
	if m.evs[e.UserID] == nil {
		m.evs[e.UserID] = map[string]keys.TransactionID{}
	}
	m.evs[e.UserID][e.EventID] = t.TransactionID
	return a.BalanceCents, nil
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
