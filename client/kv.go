package client

import (
	"context"
	"errors"
	"iter"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/rpc"
)

// ReadOption changes how a read is served.
type ReadOption func(*readOptions)

type readOptions struct{ stale bool }

// Stale lets any replica answer from its own state, which may lag the
// leader. Reads are linearizable without it.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

func consistency(opts []ReadOption) (rpc.Consistency, CallOptions) {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	if o.stale {
		return rpc.Consistency_CONSISTENCY_STALE, CallOptions{Idempotent: true, AnyReplica: true}
	}
	return rpc.Consistency_CONSISTENCY_LINEARIZABLE, CallOptions{Idempotent: true}
}

func (c *Client) routed(ctx context.Context, rk []byte, opts CallOptions, call func(ctx context.Context, kv rpc.KVClient) error) error {
	return c.CallRouted(ctx, rk, opts, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		return call(ctx, rpc.NewKVClient(cc))
	})
}

// Get returns the value of key under routingKey, or ErrNotFound.
func (c *Client) Get(ctx context.Context, routingKey, key []byte, opts ...ReadOption) ([]byte, error) {
	cons, co := consistency(opts)
	var resp *rpc.GetResponse
	err := c.routed(ctx, routingKey, co, func(ctx context.Context, kv rpc.KVClient) (err error) {
		resp, err = kv.Get(ctx, &rpc.GetRequest{RoutingKey: routingKey, Key: key, Consistency: cons})
		return err
	})
	if err != nil {
		return nil, err
	}
	if !resp.GetFound() {
		return nil, ErrNotFound
	}
	return resp.GetValue(), nil
}

// WriteOption changes a write (Put, Pools.Heartbeat).
type WriteOption func(*writeOptions)

type writeOptions struct{ lease LeaseID }

// WithLease attaches the written key (or runner) to lease id, granted for
// the same routing key (for a runner: "pools"): it ends with the lease. A
// write without it detaches the key from any lease.
func WithLease(id LeaseID) WriteOption { return func(o *writeOptions) { o.lease = id } }

func writeOpts(opts []WriteOption) writeOptions {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Put sets key to value under routingKey. It returns once the write is
// committed by a majority of the shard's replicas. With WithLease, the key
// is attached to the lease (ErrLeaseNotFound, with ErrNotFound, if it is
// gone; nothing is written then).
func (c *Client) Put(ctx context.Context, routingKey, key, value []byte, opts ...WriteOption) error {
	o := writeOpts(opts)
	err := c.routed(ctx, routingKey, writeOnce, func(ctx context.Context, kv rpc.KVClient) error {
		_, err := kv.Put(ctx, &rpc.PutRequest{RoutingKey: routingKey, Key: key, Value: value, Lease: uint64(o.lease)})
		return err
	})
	if o.lease != 0 {
		return leaseErr(o.lease, err)
	}
	return err
}

// Delete removes key under routingKey and reports whether it existed.
func (c *Client) Delete(ctx context.Context, routingKey, key []byte) (bool, error) {
	var resp *rpc.DeleteResponse
	err := c.routed(ctx, routingKey, writeOnce, func(ctx context.Context, kv rpc.KVClient) (err error) {
		resp, err = kv.Delete(ctx, &rpc.DeleteRequest{RoutingKey: routingKey, Key: key})
		return err
	})
	return resp.GetDeleted(), err
}

// KeyValue is one item of a Scan.
type KeyValue struct {
	Key, Value []byte
}

// Scan returns up to limit keys under routingKey that start with prefix,
// in key order, beginning after startAfter (nil: from the first). more
// reports whether further keys follow; pass the last key as startAfter to
// continue. limit <= 0 asks for the server's page size. The server also
// ends a page before its size passes its byte bound (--max-page-bytes),
// so a page may hold fewer than limit keys while more is true; it holds at
// least one. ScanAll iterates over every page.
func (c *Client) Scan(ctx context.Context, routingKey, prefix, startAfter []byte, limit int, opts ...ReadOption) (items []KeyValue, more bool, err error) {
	cons, co := consistency(opts)
	var resp *rpc.ScanResponse
	err = c.routed(ctx, routingKey, co, func(ctx context.Context, kv rpc.KVClient) (err error) {
		resp, err = kv.Scan(ctx, &rpc.ScanRequest{RoutingKey: routingKey, Prefix: prefix, StartAfter: startAfter, Limit: uint32(max(limit, 0)), Consistency: cons})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	for _, it := range resp.GetItems() {
		items = append(items, KeyValue{Key: it.GetKey(), Value: it.GetValue()})
	}
	return items, resp.GetMore(), nil
}

// GuardKind is the condition a Guard checks.
type GuardKind int

const (
	// KeyExists holds when the key is present.
	KeyExists GuardKind = iota + 1
	// KeyAbsent holds when the key is absent.
	KeyAbsent
	// ValueEquals holds when the key is present with exactly Value.
	ValueEquals
)

// Guard is a condition of a Batch.
type Guard struct {
	Kind  GuardKind
	Key   []byte
	Value []byte // for ValueEquals
}

// Op is a write of a Batch: a put (Delete false) or a delete. A put with
// a Lease attaches the key to it (as WithLease).
type Op struct {
	Key    []byte
	Value  []byte
	Delete bool
	Lease  LeaseID
}

// BatchResult says whether a Batch applied.
type BatchResult struct {
	Succeeded   bool
	FailedGuard int // index of the first guard that failed, -1 on success
}

// Batch applies ops atomically under routingKey if every guard holds. It is
// not retried when its outcome is unknown (ErrOutcomeUnknown).
func (c *Client) Batch(ctx context.Context, routingKey []byte, guards []Guard, ops []Op) (BatchResult, error) {
	req := &rpc.BatchRequest{RoutingKey: routingKey}
	for _, g := range guards {
		req.Guards = append(req.Guards, &rpc.Guard{Kind: rpc.Guard_Kind(g.Kind), Key: g.Key, Value: g.Value})
	}
	for _, o := range ops {
		k := rpc.Op_KIND_PUT
		if o.Delete {
			k = rpc.Op_KIND_DELETE
		}
		req.Ops = append(req.Ops, &rpc.Op{Kind: k, Key: o.Key, Value: o.Value, Lease: uint64(o.Lease)})
	}
	var resp *rpc.BatchResponse
	err := c.routed(ctx, routingKey, CallOptions{}, func(ctx context.Context, kv rpc.KVClient) (err error) {
		resp, err = kv.Batch(ctx, req)
		return err
	})
	if err != nil {
		return BatchResult{}, err
	}
	return BatchResult{Succeeded: resp.GetSucceeded(), FailedGuard: int(resp.GetFailedGuard())}, nil
}

// ScanAll iterates over every key under routingKey that starts with
// prefix, in key order, reading one server page (of the server's page
// size and byte bound) at a time, so at most one page is held in memory.
// An error ends the iteration as its last element. Each page is a
// separate read: the iteration is not one snapshot.
//
//	for kv, err := range c.ScanAll(ctx, rk, []byte("asset:")) {
//		if err != nil { return err }
//		use(kv)
//	}
func (c *Client) ScanAll(ctx context.Context, routingKey, prefix []byte, opts ...ReadOption) iter.Seq2[KeyValue, error] {
	return func(yield func(KeyValue, error) bool) {
		var after []byte
		for {
			items, more, err := c.Scan(ctx, routingKey, prefix, after, 0, opts...)
			if err != nil {
				yield(KeyValue{}, err)
				return
			}
			for _, kv := range items {
				if !yield(kv, nil) {
					return
				}
			}
			if !more {
				return
			}
			if len(items) == 0 {
				yield(KeyValue{}, errors.New("swarmkv: scan: the server answered an empty page with more"))
				return
			}
			after = items[len(items)-1].Key
		}
	}
}
