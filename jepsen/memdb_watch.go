package jepsen

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

// memBugEvery is how often a watch bug of MemBugs strikes: every
// memBugEvery-th message of each watch.
const memBugEvery = 25

// memChanges is a MemDB's change log, which its watches follow, and its
// leases; guarded by the MemDB's mutex. Every kv write is one revision of
// the one simulated shard (1).
type memChanges struct {
	rev uint64
	log []memEvent
	// notify is closed (and replaced) when the log grows.
	notify chan struct{}

	leases    map[client.LeaseID]*memLease
	keyLease  map[string]client.LeaseID // kv map key -> lease
	nextLease client.LeaseID
}

type memEvent struct {
	rev uint64
	rk  string
	ev  client.WatchEvent
}

type memLease struct {
	ttl      time.Duration
	deadline time.Time
	keys     map[string][2][]byte // kv map key -> routing key, key
}

func newMemChanges() memChanges {
	return memChanges{notify: make(chan struct{}), leases: map[client.LeaseID]*memLease{}, keyLease: map[string]client.LeaseID{}}
}

// appendLocked records one change as the next revision.
func (m *MemDB) appendLocked(rk, key []byte, t client.EventType, value []byte) {
	m.chg.rev++
	m.chg.log = append(m.chg.log, memEvent{rev: m.chg.rev, rk: string(rk),
		ev: client.WatchEvent{Type: t, Key: bytes.Clone(key), Value: bytes.Clone(value)}})
	close(m.chg.notify)
	m.chg.notify = make(chan struct{})
}

// changedLocked records a put of key and attaches it to lease (0:
// detaches it from any).
func (m *MemDB) changedLocked(rk, key, value []byte, lease client.LeaseID) {
	k := kvKey(rk, key)
	if old, ok := m.chg.keyLease[k]; ok {
		if l := m.chg.leases[old]; l != nil {
			delete(l.keys, k)
		}
		delete(m.chg.keyLease, k)
	}
	if l := m.chg.leases[lease]; l != nil {
		l.keys[k] = [2][]byte{bytes.Clone(rk), bytes.Clone(key)}
		m.chg.keyLease[k] = lease
	}
	m.appendLocked(rk, key, client.EventPut, value)
}

// deleteLocked deletes key, if present, and records the change.
func (m *MemDB) deleteLocked(rk, key []byte) {
	k := kvKey(rk, key)
	if _, ok := m.kv[k]; !ok {
		return
	}
	delete(m.kv, k)
	if old, ok := m.chg.keyLease[k]; ok {
		if l := m.chg.leases[old]; l != nil {
			delete(l.keys, k)
		}
		delete(m.chg.keyLease, k)
	}
	m.appendLocked(rk, key, client.EventDelete, nil)
}

// expireLocked ends the leases whose time ran out, deleting their keys
// (unless MemBugs.LeaseNeverExpires). Every kv and lease call runs it
// first, so a lease is gone for any call after its deadline.
func (m *MemDB) expireLocked() {
	if m.bugs.LeaseNeverExpires {
		return
	}
	now := time.Now()
	var ended []client.LeaseID
	for id, l := range m.chg.leases {
		if now.After(l.deadline) {
			ended = append(ended, id)
		}
	}
	slices.Sort(ended)
	for _, id := range ended {
		l := m.chg.leases[id]
		for _, k := range slices.Sorted(maps.Keys(l.keys)) {
			rk := l.keys[k]
			m.deleteLocked(rk[0], rk[1])
		}
		delete(m.chg.leases, id)
	}
}

// life is how long a grant or keep-alive keeps a lease of ttl.
func (m *MemDB) life(ttl time.Duration) time.Duration {
	if m.bugs.LeaseEarlyExpiry {
		return ttl / 4
	}
	return ttl
}

func memLeaseNotFound(id client.LeaseID) error {
	return fmt.Errorf("%w: %w: lease %s", client.ErrLeaseNotFound, client.ErrNotFound, id)
}

func (m *MemDB) Delete(_ context.Context, rk, key []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	m.deleteLocked(rk, key)
	return nil
}

func (m *MemDB) Grant(_ context.Context, _ []byte, ttl time.Duration) (client.LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	m.chg.nextLease++
	id := m.chg.nextLease
	m.chg.leases[id] = &memLease{ttl: ttl, deadline: time.Now().Add(m.life(ttl)), keys: map[string][2][]byte{}}
	return id, nil
}

func (m *MemDB) KeepAliveOnce(_ context.Context, id client.LeaseID) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	l := m.chg.leases[id]
	if l == nil {
		return 0, memLeaseNotFound(id)
	}
	l.deadline = time.Now().Add(m.life(l.ttl))
	return l.ttl, nil
}

func (m *MemDB) PutLeased(_ context.Context, rk, key, value []byte, id client.LeaseID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	if m.chg.leases[id] == nil {
		return memLeaseNotFound(id)
	}
	m.kv[kvKey(rk, key)] = bytes.Clone(value)
	m.changedLocked(rk, key, value, id)
	return nil
}

// Watch follows the change log from after, filtered by rk and prefix, in
// messages of one revision each, after a first progress message at the
// revision it starts from. Every watch of a MemDB with a watch bug
// misbehaves the same way.
func (m *MemDB) Watch(ctx context.Context, rk, prefix []byte, after uint64, anyReplica bool) <-chan client.WatchResponse {
	ch := make(chan client.WatchResponse, 16)
	go func() {
		defer close(ch)
		send := func(r client.WatchResponse) bool {
			select {
			case ch <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		m.mu.Lock()
		start := m.chg.rev
		m.mu.Unlock()
		if !send(client.WatchResponse{Revision: max(start, after), Progress: true, Shard: 1, Follower: anyReplica}) {
			return
		}
		pos, delivered := 0, 0
		for {
			var batch []client.WatchResponse
			m.mu.Lock()
			for ; pos < len(m.chg.log); pos++ {
				e := m.chg.log[pos]
				if e.rev <= after || e.rk != string(rk) || !bytes.HasPrefix(e.ev.Key, prefix) {
					continue
				}
				if n := len(batch); n > 0 && batch[n-1].Revision == e.rev {
					batch[n-1].Events = append(batch[n-1].Events, e.ev)
					continue
				}
				batch = append(batch, client.WatchResponse{Revision: e.rev, Events: []client.WatchEvent{e.ev}, Shard: 1, Follower: anyReplica})
			}
			notify := m.chg.notify
			m.mu.Unlock()
			for _, r := range batch {
				delivered++
				strike := delivered%memBugEvery == 0
				if strike && m.bugs.WatchDropsEvents {
					continue
				}
				if !send(r) || (strike && m.bugs.WatchDuplicatesEvents && !send(r)) {
					return
				}
			}
			select {
			case <-notify:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
