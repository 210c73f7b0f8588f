// Package events keeps a node's recent cluster events for the console
// (package console, GET /v1/console): a bounded ring in memory of what
// the node saw happen, fed where it sees it (package cluster): the
// committed cluster state changing (members admitted, leaving, removed;
// replicas added, promoted, removed; shards created and removed; slot
// moves planned, advancing, done or aborted: Diff), gossip liveness
// (a member alive or dead) and the leaders its replicas learn of. The
// ring is lost when the node stops; it is a view, not a log.
//
// Diff is pure (states in, events out); Ring is safe for concurrent use.
//
// Usage:
//
//	r := events.NewRing(256)
//	r.Add(events.Event{Kind: events.Gossip, Node: "n2", Text: "n2 dead"})
//	for _, e := range events.Diff(oldState, newState) {
//		r.Add(e)
//	}
//	recent := r.Recent() // oldest first
package events

import (
	"sync"
	"time"
)

// Kind is what an event is about.
type Kind string

// Event kinds.
const (
	Member  Kind = "member"  // a member admitted, leaving, removed
	Gossip  Kind = "gossip"  // a member's gossip liveness changed (alive, dead)
	Leader  Kind = "leader"  // a group has a new leader
	Replica Kind = "replica" // a replica added, promoted or removed; a group created or removed
	Move    Kind = "move"    // a split or merge planned, advancing, done or aborted
)

// Event is one thing the node saw happen.
type Event struct {
	// Seq numbers the ring's events from 1 (Add sets it): a poller keeps
	// the last it saw.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"` // when the node saw it (Add sets it when zero)
	Kind Kind      `json:"kind"`
	// Shard is the group the event is about ("meta", a shard number;
	// "" for none); Node the member, if any.
	Shard string `json:"shard,omitempty"`
	Node  string `json:"node,omitempty"`
	Text  string `json:"text"` // for an operator: "n2 dead", "shard 0: leader n3 (term 7)"
}

// Ring holds the last events added, up to its capacity.
type Ring struct {
	mu   sync.Mutex
	buf  []Event // circular once full: the oldest at next%len
	seq  uint64  // Seq of the last event added
	size int
	now  func() time.Time
}

// DefaultCapacity is the ring size a node keeps (events are ~100 bytes).
const DefaultCapacity = 256

// NewRing returns an empty ring keeping the last capacity events (at
// least 1).
func NewRing(capacity int) *Ring {
	return &Ring{size: max(capacity, 1), now: time.Now}
}

// Add appends e, numbered (Seq) and timed (Time, when zero), dropping the
// oldest event when the ring is full. Add on a nil Ring does nothing.
func (r *Ring) Add(e Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	e.Seq = r.seq
	if e.Time.IsZero() {
		e.Time = r.now()
	}
	if len(r.buf) < r.size {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[(r.seq-1)%uint64(r.size)] = e
}

// Recent returns a copy of the events held, oldest first (nil Ring: none).
func (r *Ring) Recent() []Event {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, 0, len(r.buf))
	if len(r.buf) < r.size {
		return append(out, r.buf...)
	}
	start := int(r.seq % uint64(r.size)) // the oldest
	out = append(out, r.buf[start:]...)
	return append(out, r.buf[:start]...)
}
