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

// ClientConnect returns a Connect that opens a swarmkv client on endpoints.
func ClientConnect(endpoints []string, attemptTimeout time.Duration) Connect {
	return func(ctx context.Context) (DB, error) {
		c, err := client.New(ctx, client.Config{Endpoints: endpoints, AttemptTimeout: attemptTimeout, Logger: discardLogger()})
		if err != nil {
			return nil, err
		}
		return &ClientDB{C: c}, nil
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
