package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Leases (rpc/lease.proto; docs/architecture.md, "Leases"). A lease is
// granted for a routing key with a TTL and lives in that key's slot; keys
// attached to it (Put with WithLease, a Batch Op's Lease, a runner or
// agent heartbeat with a lease) end with it. A lease kept alive within its
// TTL never expires; one no longer kept alive expires within its TTL plus
// the shard leader's bound.
//
//	ls := c.Leases()
//	id, err := ls.Grant(ctx, []byte("alice"), 10*time.Second)
//	err = c.Put(ctx, []byte("alice"), []byte("presence"), []byte("online"), client.WithLease(id))
//	ka, err := ls.KeepAlive(ctx, id) // renews in the background until ka.Stop
//	...
//	err = ka.Close(ctx)              // stop, and revoke: "presence" is deleted now

// Bounds of a lease's TTL (the server checks them too).
const (
	MinLeaseTTL = 2 * time.Second
	MaxLeaseTTL = 24 * time.Hour
)

var (
	// ErrLeaseNotFound: the lease does not exist (never granted, revoked,
	// or expired). It is returned wrapped together with ErrNotFound.
	ErrLeaseNotFound = errors.New("swarmkv: lease not found")
	// ErrLeaseLost: a KeepAlive could not renew its lease within the
	// lease's TTL (no leader answered in time): it may have expired.
	ErrLeaseLost = errors.New("swarmkv: lease lost")
	// ErrLeaseFull: a write that attaches a key to a lease was refused
	// because the lease holds the most keys it may (the node's
	// --max-keys-per-lease when the lease was granted); nothing was
	// written.
	ErrLeaseFull = errors.New("swarmkv: lease full")
)

// leaseFullText is what a node's refusal of an attachment over a lease's
// bound says (fsm.ErrLeaseFull, a FailedPrecondition).
const leaseFullText = "lease holds the most keys it may"

// LeaseID identifies a lease: its slot (the top 8 bits) and 56 random
// bits (the slot's sequence number for a lease granted before protocol
// version 4). Its text form is 16 hex digits.
type LeaseID uint64

func (id LeaseID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// ParseLeaseID parses the text form of a lease id (16 hex digits; a
// shorter hex number is accepted too).
func ParseLeaseID(s string) (LeaseID, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || !keys.ValidLeaseID(v) {
		return 0, invalidf("lease id %q: want the hex id a grant printed", s)
	}
	return LeaseID(v), nil
}

func (id LeaseID) slot() shard.Slot { return shard.Slot(keys.LeaseSlot(uint64(id))) }

// AttachedKey is a key attached to a lease: Kind "kv" (RoutingKey, Key),
// "runner" (Key: the runner id) or "agent" (RoutingKey: the user id, Key:
// the agent id).
type AttachedKey struct {
	Kind       string
	RoutingKey []byte
	Key        []byte
}

// LeaseInfo describes a lease.
type LeaseInfo struct {
	ID         LeaseID
	RoutingKey []byte
	TTL        time.Duration
	// Remaining is the time left before it expires unless kept alive, as
	// its shard leader counts it.
	Remaining time.Duration
	GrantedAt time.Time
	// KeyCount is the number of keys attached (TimeToLive), Keys the first
	// of them when asked for.
	KeyCount int
	Keys     []AttachedKey
}

func leaseInfoFrom(p *rpc.LeaseInfo) LeaseInfo {
	return LeaseInfo{ID: LeaseID(p.GetId()), RoutingKey: p.GetRoutingKey(), TTL: time.Duration(p.GetTtlMs()) * time.Millisecond,
		Remaining: time.Duration(p.GetRemainingMs()) * time.Millisecond, GrantedAt: time.UnixMilli(p.GetGrantedAt())}
}

// Leases is the lease API of a client.
type Leases struct{ c *Client }

// Leases returns c's lease API.
func (c *Client) Leases() *Leases { return &Leases{c: c} }

// leaseErr adds ErrLeaseNotFound to a not-found answer about lease id.
func leaseErr(id LeaseID, err error) error {
	if errors.Is(err, ErrNotFound) && !errors.Is(err, ErrLeaseNotFound) {
		return &leaseNotFound{id: id, err: err}
	}
	return err
}

// leaseNotFound is ErrLeaseNotFound and ErrNotFound (err) about one lease.
type leaseNotFound struct {
	id  LeaseID
	err error
}

func (e *leaseNotFound) Error() string {
	return fmt.Sprintf("swarmkv: lease %s not found (expired, revoked, or never granted)", e.id)
}

func (e *leaseNotFound) Unwrap() []error { return []error{ErrLeaseNotFound, e.err} }

func checkTTL(ttl time.Duration) error {
	if ttl < MinLeaseTTL || ttl > MaxLeaseTTL || ttl%time.Millisecond != 0 {
		return invalidf("ttl %v: want %v..%v in whole milliseconds", ttl, MinLeaseTTL, MaxLeaseTTL)
	}
	return nil
}

// onLease runs call against the leader of lease id's shard.
func (l *Leases) onLease(ctx context.Context, id LeaseID, opts CallOptions, call func(ctx context.Context, lc rpc.LeaseClient) error) error {
	if !keys.ValidLeaseID(uint64(id)) {
		return invalidf("lease id %s: not one a grant returns", id)
	}
	return l.c.CallSlot(ctx, id.slot(), opts, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		return call(ctx, rpc.NewLeaseClient(cc))
	})
}

// Grant creates a lease of ttl (MinLeaseTTL..MaxLeaseTTL) in the slot of
// routingKey. It is not retried once its outcome is unknown (a second
// grant would make a second lease; the first expires by itself).
func (l *Leases) Grant(ctx context.Context, routingKey []byte, ttl time.Duration) (LeaseID, error) {
	if err := checkTTL(ttl); err != nil {
		return 0, err
	}
	var resp *rpc.LeaseGrantResponse
	err := l.c.CallRouted(ctx, routingKey, writeOnce, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		resp, err = rpc.NewLeaseClient(cc).Grant(ctx, &rpc.LeaseGrantRequest{RoutingKey: routingKey, TtlMs: ttl.Milliseconds()})
		return err
	})
	if err != nil {
		return 0, err
	}
	return LeaseID(resp.GetId()), nil
}

// Revoke ends lease id now: its kv keys and runners are deleted, its
// running agents become failed, in one command. It returns the number of
// keys (and runners) deleted. It is not retried once its outcome is
// unknown. With authentication, ErrPermissionDenied (nothing changed)
// when the lease belongs to another identity, or when the caller lacks
// the write role of a keyspace its keys live in (docs/security.md, "Lease
// owners"); KeepAliveOnce and TimeToLive refuse another identity's lease
// alike, and List returns only the caller's leases and those without an
// owner.
func (l *Leases) Revoke(ctx context.Context, id LeaseID) (int, error) {
	var resp *rpc.LeaseRevokeResponse
	err := l.onLease(ctx, id, writeOnce, func(ctx context.Context, lc rpc.LeaseClient) (err error) {
		resp, err = lc.Revoke(ctx, &rpc.LeaseRevokeRequest{Id: uint64(id)})
		return err
	})
	return int(resp.GetDeleted()), leaseErr(id, err)
}

// KeepAliveOnce renews lease id once: it will not expire before the
// returned TTL from now. ErrLeaseNotFound (with ErrNotFound) when it no
// longer exists.
func (l *Leases) KeepAliveOnce(ctx context.Context, id LeaseID) (time.Duration, error) {
	var resp *rpc.LeaseKeepAliveResponse
	err := l.onLease(ctx, id, idempotent, func(ctx context.Context, lc rpc.LeaseClient) (err error) {
		resp, err = lc.KeepAlive(ctx, &rpc.LeaseKeepAliveRequest{Id: uint64(id)})
		return err
	})
	if err != nil {
		return 0, leaseErr(id, err)
	}
	return time.Duration(resp.GetTtlMs()) * time.Millisecond, nil
}

// TimeToLive describes lease id; with keys, it lists (up to 1000 of) its
// attached keys.
func (l *Leases) TimeToLive(ctx context.Context, id LeaseID, withKeys bool) (*LeaseInfo, error) {
	var resp *rpc.LeaseTimeToLiveResponse
	err := l.onLease(ctx, id, idempotent, func(ctx context.Context, lc rpc.LeaseClient) (err error) {
		resp, err = lc.TimeToLive(ctx, &rpc.LeaseTimeToLiveRequest{Id: uint64(id), Keys: withKeys})
		return err
	})
	if err != nil {
		return nil, leaseErr(id, err)
	}
	info := leaseInfoFrom(resp.GetLease())
	info.KeyCount = int(resp.GetKeyCount())
	for _, k := range resp.GetKeys() {
		info.Keys = append(info.Keys, AttachedKey{Kind: k.GetKind(), RoutingKey: k.GetRoutingKey(), Key: k.GetKey()})
	}
	return &info, nil
}

// List returns every lease of the cluster, each shard's read page by page
// from its leader (in parallel over the shards), sorted by id.
func (l *Leases) List(ctx context.Context) ([]LeaseInfo, error) {
	all, err := fanCollect(ctx, l.c, func(ctx context.Context, sid shard.ID) ([]LeaseInfo, error) {
		var out []LeaseInfo
		var after uint64
		version := l.c.mapVersionFor(ctx)
		for {
			var resp *rpc.LeaseListResponse
			err := l.c.CallShard(ctx, sid, idempotent, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
				resp, err = rpc.NewLeaseClient(cc).List(ctx, &rpc.LeaseListRequest{Shard: uint32(sid), MapVersion: version, After: after})
				return err
			})
			if err != nil {
				return nil, err
			}
			for _, p := range resp.GetLeases() {
				out = append(out, leaseInfoFrom(p))
			}
			if !resp.GetMore() || len(resp.GetLeases()) == 0 {
				return out, nil
			}
			after = resp.GetLeases()[len(resp.GetLeases())-1].GetId()
		}
	})
	if err != nil {
		return nil, err
	}
	sortLeases(all)
	return all, nil
}

func sortLeases(ls []LeaseInfo) {
	slices.SortFunc(ls, func(a, b LeaseInfo) int { return cmp.Compare(a.ID, b.ID) })
}

// KeepAlive keeps lease id alive in the background, renewing it every
// third of its TTL until Stop or Close, or until ctx ends. It renews once
// before it returns (an error then: nothing runs). If the lease ends
// (revoked, or expired) or cannot be renewed within its TTL, the KeepAlive
// stops: Done is closed and Err says why. The renewals travel on the
// client's keep-alive stream to the lease's shard leader (followed across
// elections and slot moves), which every lease the client keeps alive on
// that shard shares (leasemux.go): one client keeps any number of leases
// alive over a stream per shard.
func (l *Leases) KeepAlive(ctx context.Context, id LeaseID) (*KeepAlive, error) {
	if !keys.ValidLeaseID(uint64(id)) {
		return nil, invalidf("lease id %s: not one a grant returns", id)
	}
	h := &kaHolder{m: l.c.kas, id: id}
	return startKeepAlive(ctx, id, h.renew, h.release, func(ctx context.Context) error {
		_, err := l.Revoke(ctx, id)
		return err
	})
}

// KeepAliveOnceStream is KeepAliveOnce sent on the client's keep-alive
// stream to the lease's shard leader (the one KeepAlive uses) instead of
// as a call: concurrent renewals of many leases share the stream and the
// leader answers them together. It retries, following the leader, until
// answered or ctx ends (a keep-alive is idempotent).
func (l *Leases) KeepAliveOnceStream(ctx context.Context, id LeaseID) (time.Duration, error) {
	if !keys.ValidLeaseID(uint64(id)) {
		return 0, invalidf("lease id %s: not one a grant returns", id)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.c.cfg.DefaultTimeout)
		defer cancel()
	}
	h := &kaHolder{m: l.c.kas, id: id}
	defer h.release()
	ttl, _, err := h.renew(ctx)
	return ttl, err
}
