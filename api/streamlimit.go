package api

import (
	"context"
	"fmt"
	"net"
	"sync"

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
