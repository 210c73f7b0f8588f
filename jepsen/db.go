package jepsen

import (
	"context"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// DB is what the workloads call: the parts of swarmkv's client they test.
// ClientDB adapts a *client.Client; MemDB is a naive in-memory reference;
// Broken wraps either with a deliberate bug to show that the checkers catch
// it.
type DB interface {
	// KV (register workload).
	Get(ctx context.Context, rk, key []byte) ([]byte, error)
	Put(ctx context.Context, rk, key, value []byte) error
	// CAS sets key to new if its value is old (a guarded Batch); it reports
	// whether it applied.
	CAS(ctx context.Context, rk, key, old, new []byte) (bool, error)
	// Delete removes key (watch workload).
	Delete(ctx context.Context, rk, key []byte) error

	// Watch follows the changes of rk's kv keys under prefix after
	// revision after, as client.Watch (reconnecting, resuming, following
	// moves); anyReplica lets followers serve it. The channel is closed
	// when ctx ends or after a message with Err (watch workload).
	Watch(ctx context.Context, rk, prefix []byte, after uint64, anyReplica bool) <-chan client.WatchResponse

	// Leases (lease workload): Grant makes a lease of ttl for rk;
	// KeepAliveOnce renews it and returns its TTL (an error with
	// client.ErrLeaseNotFound once it is gone); PutLeased is Put attaching
	// key to lease id.
	Grant(ctx context.Context, rk []byte, ttl time.Duration) (client.LeaseID, error)
	KeepAliveOnce(ctx context.Context, id client.LeaseID) (time.Duration, error)
	PutLeased(ctx context.Context, rk, key, value []byte, id client.LeaseID) error

	// Billing (ledger workload).
	PutAccount(ctx context.Context, a *records.Account) error
	GetAccount(ctx context.Context, acct keys.AccountID) (*records.Account, error)
	AddCredits(ctx context.Context, acct keys.AccountID, amount int64, t *records.CreditTransaction) (int64, error)
	ProcessUsage(ctx context.Context, e *records.UsageEvent, t *records.CreditTransaction) (int64, error)
	// ListTransactions returns every transaction of acct, newest first.
	ListTransactions(ctx context.Context, acct keys.AccountID) ([]*records.CreditTransaction, error)
	HasUsageEvent(ctx context.Context, acct keys.AccountID, eventID string) (bool, error)

	// Registry (registry workload).
	PutAgent(ctx context.Context, a *records.AgentRecord) error
	GetAgent(ctx context.Context, user keys.UserID, agent keys.AgentID) (*records.AgentRecord, error)
	UpdateAgentStatus(ctx context.Context, user keys.UserID, agent keys.AgentID, s records.AgentState) error
	ListAgentsByStatus(ctx context.Context, s records.AgentState) ([]*records.AgentRecord, error)
	ListAgentsByUser(ctx context.Context, user keys.UserID) ([]*records.AgentRecord, error)
	CountAgentsByUser(ctx context.Context, user keys.UserID) (int, error)

	Close() error
}

// Connect opens a DB session for one worker.
type Connect func(ctx context.Context) (DB, error)

// connectPatience bounds ClientConnect's retries: a client asks each
// endpoint once for the cluster map, each attempt bounded by the attempt
// timeout, which a loaded machine (the race detector, other tests) can
// miss.
const connectPatience = 30 * time.Second

// ClientConnect returns a Connect that opens a swarmkv client on endpoints,
// trying again for up to connectPatience (within ctx).
func ClientConnect(endpoints []string, attemptTimeout time.Duration) Connect {
	return func(ctx context.Context) (DB, error) {
		deadline := time.Now().Add(connectPatience)
		for {
			c, err := client.New(ctx, client.Config{Endpoints: endpoints, AttemptTimeout: attemptTimeout, Logger: discardLogger()})
			if err == nil {
				return &ClientDB{C: c}, nil
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return nil, err
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
}

// DriverConnect is ClientConnect over d's endpoints as they are at each
// connect: membership nemeses change them. A client learns later changes
// from the cluster map.
func DriverConnect(d Driver, attemptTimeout time.Duration) Connect {
	return func(ctx context.Context) (DB, error) {
		return ClientConnect(d.Endpoints(), attemptTimeout)(ctx)
	}
}

// ClientDB is a DB over a swarmkv client (linearizable reads).
type ClientDB struct{ C *client.Client }

var _ DB = (*ClientDB)(nil)

func (d *ClientDB) Get(ctx context.Context, rk, key []byte) ([]byte, error) {
	return d.C.Get(ctx, rk, key)
}

func (d *ClientDB) Put(ctx context.Context, rk, key, value []byte) error {
	return d.C.Put(ctx, rk, key, value)
}

func (d *ClientDB) CAS(ctx context.Context, rk, key, old, new []byte) (bool, error) {
	g := client.Guard{Kind: client.ValueEquals, Key: key, Value: old}
	if old == nil {
		g = client.Guard{Kind: client.KeyAbsent, Key: key}
	}
	res, err := d.C.Batch(ctx, rk, []client.Guard{g}, []client.Op{{Key: key, Value: new}})
	return res.Succeeded, err
}

func (d *ClientDB) Delete(ctx context.Context, rk, key []byte) error {
	_, err := d.C.Delete(ctx, rk, key)
	return err
}

// watchProgress is the interval of the progress notifications a watch
// asks for (its first message comes at the latest after it).
const watchProgress = 500 * time.Millisecond

func (d *ClientDB) Watch(ctx context.Context, rk, prefix []byte, after uint64, anyReplica bool) <-chan client.WatchResponse {
	opts := []client.WatchOption{client.WithPrefix(prefix), client.WithAfter(after), client.WithProgress(watchProgress)}
	if anyReplica {
		opts = append(opts, client.WithAnyReplica())
	}
	return d.C.Watch(ctx, rk, opts...)
}

func (d *ClientDB) Grant(ctx context.Context, rk []byte, ttl time.Duration) (client.LeaseID, error) {
	return d.C.Leases().Grant(ctx, rk, ttl)
}

func (d *ClientDB) KeepAliveOnce(ctx context.Context, id client.LeaseID) (time.Duration, error) {
	return d.C.Leases().KeepAliveOnce(ctx, id)
}

func (d *ClientDB) PutLeased(ctx context.Context, rk, key, value []byte, id client.LeaseID) error {
	return d.C.Put(ctx, rk, key, value, client.WithLease(id))
}

func (d *ClientDB) PutAccount(ctx context.Context, a *records.Account) error {
	return d.C.Billing().PutAccount(ctx, a)
}

func (d *ClientDB) GetAccount(ctx context.Context, acct keys.AccountID) (*records.Account, error) {
	return d.C.Billing().GetAccount(ctx, acct)
}

func (d *ClientDB) AddCredits(ctx context.Context, acct keys.AccountID, amount int64, t *records.CreditTransaction) (int64, error) {
	return d.C.Billing().AddCredits(ctx, acct, amount, t)
}

func (d *ClientDB) ProcessUsage(ctx context.Context, e *records.UsageEvent, t *records.CreditTransaction) (int64, error) {
	return d.C.Billing().ProcessUsage(ctx, e, t)
}

func (d *ClientDB) ListTransactions(ctx context.Context, acct keys.AccountID) ([]*records.CreditTransaction, error) {
	var all []*records.CreditTransaction
	var before *keys.TransactionID
	for {
		page, next, err := d.C.Billing().ListTransactionsPage(ctx, acct, before, 1000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == nil {
			return all, nil
		}
		before = next
	}
}

func (d *ClientDB) HasUsageEvent(ctx context.Context, acct keys.AccountID, eventID string) (bool, error) {
	return d.C.Billing().HasUsageEventOf(ctx, acct, eventID)
}

func (d *ClientDB) PutAgent(ctx context.Context, a *records.AgentRecord) error {
	return d.C.Registry().PutAgent(ctx, a)
}

func (d *ClientDB) GetAgent(ctx context.Context, user keys.UserID, agent keys.AgentID) (*records.AgentRecord, error) {
	return d.C.Registry().GetAgentOf(ctx, user, agent)
}

func (d *ClientDB) UpdateAgentStatus(ctx context.Context, user keys.UserID, agent keys.AgentID, s records.AgentState) error {
	_, err := d.C.Registry().UpdateAgentStatusOf(ctx, user, agent, s)
	return err
}

func (d *ClientDB) ListAgentsByStatus(ctx context.Context, s records.AgentState) ([]*records.AgentRecord, error) {
	return d.C.Registry().ListAgentsByStatus(ctx, s)
}

func (d *ClientDB) ListAgentsByUser(ctx context.Context, user keys.UserID) ([]*records.AgentRecord, error) {
	return d.C.Registry().ListAgentsByUser(ctx, user)
}

func (d *ClientDB) CountAgentsByUser(ctx context.Context, user keys.UserID) (int, error) {
	n, err := d.C.Registry().CountAgentsByUser(ctx, user)
	return int(n), err
}

func (d *ClientDB) Close() error { return d.C.Close() }
