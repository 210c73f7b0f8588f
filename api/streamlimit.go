package api

import (
	"context"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Long-lived streams are bounded per identity, not per connection
// (docs/security.md, "Watch and keep-alive streams per identity"): one
// token's watchers (cluster.Config.MaxWatchersPerIdentity) and lease
// keep-alive streams (MaxKeepAliveStreamsPerIdentity) on this node,
// whatever the number of connections they are spread over. Without
// authentication the identity is the client's IP address.

// identityLimit counts the streams of one kind each identity holds.
type identityLimit struct {
	what, flag string // "watchers", "max-watchers-per-identity"
	max        int
	mu         sync.Mutex
	n          map[string]int // streams per identity
}

func newIdentityLimit(what, flag string, max int) *identityLimit {
	return &identityLimit{what: what, flag: flag, max: max, n: make(map[string]int)}
}

// admit counts a stream of who, or refuses it with ResourceExhausted
// naming the limit when who holds max already. release uncounts it.
func (l *identityLimit) admit(who string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[who] >= l.max {
		return nil, status.Errorf(codes.ResourceExhausted, "swarmkv: too many %s of %s on this node (limit %d, --%s)", l.what, who, l.max, l.flag)
	}
	l.n[who]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.n[who]--; l.n[who] <= 0 {
				delete(l.n, who)
			}
		})
	}, nil
}

// streamIdentity names the caller of a stream for the per-identity
// limits: its credential's identity when authentication is on (the
// stream's interceptor has checked it), else "ip <address>".
func (s *server) streamIdentity(ctx context.Context, method string) string {
	if a := s.node.Authn(); a.On() {
		if id, _ := a.IdentifyGRPC(ctx, method); id != nil {
			return id.Name()
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			return "ip " + host
		}
		return fmt.Sprintf("ip %s", p.Addr)
	}
	return "unknown"
}

// watchMemory bounds the bytes of watch messages held at once: over the
// node (cluster.Config.MaxWatchMemory) and per identity (a quarter of
// it). A watch reserves the bytes of a list or catch-up page before it
// reads it and of an event message before gRPC sends it, and releases
// them once the message is sent, so what a client that stops reading
// makes the node hold is within its identity's share however many
// watches it opens (a stream whose send is blocked keeps its
// reservation; the others of its identity wait for theirs, in order,
// with their context).
type watchMemory struct {
	node     *semaphore.Weighted
	perIdent int64
	mu       sync.Mutex
	idents   map[string]*identBudget
}

type identBudget struct {
	sem  *semaphore.Weighted
	refs int
}

func newWatchMemory(total int64) *watchMemory {
	return &watchMemory{node: semaphore.NewWeighted(total), perIdent: max(total/4, 1), idents: make(map[string]*identBudget)}
}

// reserve waits until who may hold n more bytes (at most its share: a
// larger message goes alone) and the node too, and returns the release.
func (m *watchMemory) reserve(ctx context.Context, who string, n int64) (release func(), err error) {
	n = min(max(n, 1), m.perIdent)
	m.mu.Lock()
	b := m.idents[who]
	if b == nil {
		b = &identBudget{sem: semaphore.NewWeighted(m.perIdent)}
		m.idents[who] = b
	}
	b.refs++
	m.mu.Unlock()
	drop := func() {
		m.mu.Lock()
		if b.refs--; b.refs == 0 {
			delete(m.idents, who)
		}
		m.mu.Unlock()
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		drop()
		return nil, err
	}
	if err := m.node.Acquire(ctx, n); err != nil {
		b.sem.Release(n)
		drop()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			m.node.Release(n)
			b.sem.Release(n)
			drop()
		})
	}, nil
}
