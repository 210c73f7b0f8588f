package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Billing is the billing ledger of seed 001: accounts, credit transactions
// and usage events, all in the shard of their account (the 16-byte
// AccountID). ProcessUsage, AddCredits and UpdateBalance run atomically
// inside the state machine. Safe for concurrent use.
//
// Retries when an attempt's outcome is unknown (leader lost, connection
// broken): upserts, reads, deletes and AddCredits (deduplicated by
// transaction id) are retried; ProcessUsage is retried too: the state
// machine recognizes a retry of an applied charge by its transaction id and
// answers the balance that charge recorded, so the event is charged exactly
// once and the caller sees one success; a different transaction for an
// already processed event answers *DuplicateEventError (the seed's
// semantics). UpdateBalance is not retried and answers ErrOutcomeUnknown.
type Billing struct{ c *Client }

// Billing returns the billing ledger store of the cluster.
func (c *Client) Billing() *Billing { return &Billing{c: c} }

// routed is the ledger on user's shard, onShard on shard id.
func (b *Billing) routed(user keys.AccountID) stub[rpc.BillingClient] {
	return stub[rpc.BillingClient]{c: b.c, rk: bytes.Clone(user[:]), newSC: rpc.NewBillingClient}
}

func (b *Billing) onShard(id shard.ID) stub[rpc.BillingClient] {
	return stub[rpc.BillingClient]{c: b.c, id: id, newSC: rpc.NewBillingClient}
}

func accountTarget(user keys.AccountID) *rpc.Target { return &rpc.Target{UserId: user[:]} }

func transactionFrom(p *rpc.CreditTransaction) (*records.CreditTransaction, error) {
	t, err := rpc.TransactionFromProto(p)
	if err != nil {
		return nil, badResponse("transaction", err)
	}
	return t, nil
}

func usageEventFrom(p *rpc.UsageEvent) (*records.UsageEvent, error) {
	e, err := rpc.UsageEventFromProto(p)
	if err != nil {
		return nil, badResponse("usage event", err)
	}
	return e, nil
}

func checkEventID(eventID string) error {
	if _, err := keys.UsageEvent(eventID); err != nil {
		return invalidArg(err)
	}
	return nil
}

// txIDs makes NewTransactionID's ids: one monotonic entropy source and the
// last id, under one lock.
var txIDs struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
	last    ulid.ULID
}

// NewTransactionID returns a new ULID transaction id with now's
// millisecond timestamp. Ids from one process strictly increase: within a
// millisecond (or if now goes backwards) the id continues from the last
// one, so a user's transactions made by this process list in the order
// they were made.
func NewTransactionID(now time.Time) keys.TransactionID {
	txIDs.Lock()
	defer txIDs.Unlock()
	if txIDs.entropy == nil {
		txIDs.entropy = ulid.Monotonic(rand.Reader, 0)
	}
	ms := uint64(0)
	if now.UnixMilli() > 0 {
		ms = min(ulid.Timestamp(now), ulid.MaxTime())
	}
	ms = max(ms, txIDs.last.Time())
	for {
		id, err := ulid.New(ms, txIDs.entropy)
		if err == nil {
			txIDs.last = id
			return keys.TransactionID(id)
		}
		// The random part overflowed within this millisecond (after
		// about 2^32 ids): continue in the next millisecond.
		if ms >= ulid.MaxTime() {
			return keys.TransactionID(ulid.MustNew(ulid.MaxTime(), rand.Reader))
		}
		ms++
	}
}

// NewTransactionIDFor is NewTransactionID for a transaction of account
// user whose id is in the account's slot: it draws ids (strictly
// increasing, as NewTransactionID's) until one's slot is the account's,
// about 256 draws, a few microseconds. The id's entry in the cluster's
// transaction-id directory then lives in the account's shard, before and
// after any split or merge, so a credit or charge under it is one log
// entry instead of a reservation on another shard followed by the charge
// (docs/architecture.md, "The transaction-id directory"). Any id is
// accepted; this one only costs less.
func NewTransactionIDFor(now time.Time, user keys.AccountID) keys.TransactionID {
	want := shard.SlotOf(user[:])
	var id keys.TransactionID
	for range 1 << 14 { // a miss after 2^14 draws: probability e^-64
		if id = NewTransactionID(now); shard.SlotOf(id[:]) == want {
			break
		}
	}
	return id
}

// PutAccount creates or replaces an account. Not retried when the outcome
// is unknown (ErrOutcomeUnknown: replaying a replace could undo another
// client's later write); the caller decides.
func (b *Billing) PutAccount(ctx context.Context, a *records.Account) error {
	if err := checkRecord(a, "account"); err != nil {
		return err
	}
	_, err := unary(ctx, b.routed(a.UserID), writeOnce, rpc.BillingClient.PutAccount, &rpc.PutAccountRequest{Account: rpc.AccountToProto(a)})
	return err
}

// GetAccount returns user's account, or ErrNotFound.
func (b *Billing) GetAccount(ctx context.Context, user keys.AccountID, opts ...ReadOption) (*records.Account, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, b.routed(user), co, rpc.BillingClient.GetAccount, &rpc.AccountRef{UserId: user[:], Consistency: cons})
	if err != nil {
		return nil, err
	}
	a, err := rpc.AccountFromProto(resp.GetAccount())
	if err != nil {
		return nil, badResponse("account", err)
	}
	return a, nil
}

// DeleteAccount deletes user's account, or returns ErrNotFound. It is
// retried when the outcome is unknown: if the first attempt applied but its
// answer was lost, the retry answers ErrNotFound although this call deleted
// the account.
func (b *Billing) DeleteAccount(ctx context.Context, user keys.AccountID) error {
	_, err := unary(ctx, b.routed(user), writeOnce, rpc.BillingClient.DeleteAccount, &rpc.AccountRef{UserId: user[:]})
	return err
}

// UpdateBalance adds deltaCents (either sign, not zero) to user's balance,
// records it as an adjustment transaction with a new ULID id, and returns
// the new balance. ErrNotFound without an account; *InsufficientCreditsError
// if the balance would go negative. It is retried when the outcome of an
// attempt is unknown: every attempt carries the same transaction id, which
// the state machine applies once (a retry answers the balance the first
// application recorded).
func (b *Billing) UpdateBalance(ctx context.Context, user keys.AccountID, deltaCents int64) (int64, error) {
	if deltaCents == 0 || deltaCents == math.MinInt64 {
		return 0, invalidf("balance delta %d", deltaCents)
	}
	txID := NewTransactionID(time.Now())
	resp, err := unary(ctx, b.routed(user), idempotent, rpc.BillingClient.UpdateBalance, &rpc.UpdateBalanceRequest{UserId: user[:], DeltaCents: deltaCents, TransactionId: txID[:]})
	if err != nil {
		return 0, err
	}
	return resp.GetBalanceCents(), nil
}

// PutTransaction creates or replaces a transaction with its by-user index
// entry. It does not change any balance. ErrAlreadyExists if the id holds
// another account's transaction (never replaced). Retried when the outcome
// is unknown.
func (b *Billing) PutTransaction(ctx context.Context, t *records.CreditTransaction) error {
	if err := checkRecord(t, "transaction"); err != nil {
		return err
	}
	_, err := unary(ctx, b.routed(t.UserID), writeOnce, rpc.BillingClient.PutTransaction, &rpc.PutTransactionRequest{Transaction: rpc.TransactionToProto(t)})
	return err
}

// GetTransactionOf returns transaction id of user, or ErrNotFound.
func (b *Billing) GetTransactionOf(ctx context.Context, user keys.AccountID, id keys.TransactionID, opts ...ReadOption) (*records.CreditTransaction, error) {
	cons, co := consistency(opts)
	resp, err := unary(ctx, b.routed(user), co, rpc.BillingClient.GetTransaction, &rpc.TransactionRef{Target: accountTarget(user), TransactionId: id[:], Consistency: cons})
	if err != nil {
		return nil, err
	}
	return transactionFrom(resp.GetTransaction())
}

// GetTransaction returns transaction id whoever owns it (seed
// get_transaction), asking every shard. ErrNotFound if no shard holds it.
// Should several shards hold the id, the transaction of the smallest user
// id is returned.
func (b *Billing) GetTransaction(ctx context.Context, id keys.TransactionID, opts ...ReadOption) (*records.CreditTransaction, error) {
	cons, co := consistency(opts)
	found, err := fanLookup(ctx, b.c, fmt.Sprintf("transaction %x", id[:]), func(ctx context.Context, sid shard.ID) (*records.CreditTransaction, error) {
		resp, err := unary(ctx, b.onShard(sid), co, rpc.BillingClient.GetTransaction, &rpc.TransactionRef{Target: b.c.shardTarget(ctx, sid), TransactionId: id[:], Consistency: cons})
		if err != nil {
			return nil, err
		}
		return transactionFrom(resp.GetTransaction())
	})
	if err != nil {
		return nil, err
	}
	return slices.MinFunc(found, func(x, y *records.CreditTransaction) int {
		return slices.Compare(x.UserID[:], y.UserID[:])
	}), nil
}

// ListTransactionsByUser returns up to limit of user's transactions, newest
// first, skipping the offset newest (seed list_transactions_by_user). The
// server skips offset entries in its index, so deep offsets cost more than
// ListTransactionsPage. limit 0 returns nothing; negative limit or offset
// is ErrInvalidArgument. If the server caps its pages below limit, the
// rest is fetched with further pages (separate reads).
func (b *Billing) ListTransactionsByUser(ctx context.Context, user keys.AccountID, limit, offset int, opts ...ReadOption) ([]*records.CreditTransaction, error) {
	switch {
	case limit < 0 || offset < 0:
		return nil, invalidf("limit %d, offset %d: negative", limit, offset)
	case uint64(offset) > math.MaxUint32:
		return nil, invalidf("offset %d is over %d", offset, uint32(math.MaxUint32))
	case limit == 0:
		return nil, nil
	}
	req := &rpc.ListTransactionsRequest{UserId: user[:], Offset: uint32(offset)}
	var out []*records.CreditTransaction
	for {
		req.Limit = clampU32(limit - len(out))
		page, next, err := b.listTransactions(ctx, req, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(out) >= limit || next == nil || len(page) == 0 {
			return out, nil
		}
		req = &rpc.ListTransactionsRequest{UserId: user[:], Before: next[:]}
	}
}

// ListTransactionsPage returns one page of user's transactions, newest
// first, starting after (older than) transaction before, or from the
// newest when before is nil. next is the id to pass as before for the
// following page, nil after the last page. limit <= 0 asks for the
// server's page size, and the server may return fewer than limit even
// when more follow. Cursor pages cost the same at any depth; read in
// sequence they equal the offset pages of ListTransactionsByUser.
func (b *Billing) ListTransactionsPage(ctx context.Context, user keys.AccountID, before *keys.TransactionID, limit int, opts ...ReadOption) (txs []*records.CreditTransaction, next *keys.TransactionID, err error) {
	req := &rpc.ListTransactionsRequest{UserId: user[:], Limit: clampU32(limit)}
	if before != nil {
		req.Before = before[:]
	}
	return b.listTransactions(ctx, req, opts)
}

// clampU32 clamps n to [0, MaxUint32].
func clampU32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

func (b *Billing) listTransactions(ctx context.Context, req *rpc.ListTransactionsRequest, opts []ReadOption) ([]*records.CreditTransaction, *keys.TransactionID, error) {
	cons, co := consistency(opts)
	req.Consistency = cons
	user, err := rpc.AccountIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, nil, invalidArg(err)
	}
	resp, err := unary(ctx, b.routed(user), co, rpc.BillingClient.ListTransactionsByUser, req)
	if err != nil {
		return nil, nil, err
	}
	txs := make([]*records.CreditTransaction, 0, len(resp.GetTransactions()))
	for _, p := range resp.GetTransactions() {
		t, err := transactionFrom(p)
		if err != nil {
			return nil, nil, err
		}
		txs = append(txs, t)
	}
	if len(resp.GetNextBefore()) == 0 {
		return txs, nil, nil
	}
	next, err := rpc.TransactionIDFromBytes(resp.GetNextBefore())
	if err != nil {
		return nil, nil, badResponse("next_before", err)
	}
	return txs, &next, nil
}

// HasUsageEventOf reports whether user's shard has processed (or stored)
// usage event eventID. Event ids are deduplicated per shard, so this is
// exactly what ProcessUsage for user would check.
func (b *Billing) HasUsageEventOf(ctx context.Context, user keys.AccountID, eventID string, opts ...ReadOption) (bool, error) {
	if err := checkEventID(eventID); err != nil {
		return false, err
	}
	cons, co := consistency(opts)
	resp, err := unary(ctx, b.routed(user), co, rpc.BillingClient.HasUsageEvent, &rpc.UsageEventRef{Target: accountTarget(user), EventId: eventID, Consistency: cons})
	if err != nil {
		return false, err
	}
	return resp.GetExists(), nil
}

// HasUsageEvent reports whether any shard holds usage event eventID (seed
// has_usage_event), asking every shard. It answers true as soon as one
// shard does, whatever the others answered; false only when every shard
// answered no.
func (b *Billing) HasUsageEvent(ctx context.Context, eventID string, opts ...ReadOption) (bool, error) {
	if err := checkEventID(eventID); err != nil {
		return false, err
	}
	cons, co := consistency(opts)
	_, err := fanLookup(ctx, b.c, fmt.Sprintf("usage event %q", eventID), func(ctx context.Context, sid shard.ID) (bool, error) {
		resp, err := unary(ctx, b.onShard(sid), co, rpc.BillingClient.HasUsageEvent, &rpc.UsageEventRef{Target: b.c.shardTarget(ctx, sid), EventId: eventID, Consistency: cons})
		if err == nil && !resp.GetExists() {
			err = ErrNotFound
		}
		return err == nil, err
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// PutUsageEvent creates or replaces a usage event without charging it;
// once stored, ProcessUsage of the same event id answers
// *DuplicateEventError. Retried when the outcome is unknown.
func (b *Billing) PutUsageEvent(ctx context.Context, e *records.UsageEvent) error {
	if err := checkRecord(e, "usage event"); err != nil {
		return err
	}
	_, err := unary(ctx, b.routed(e.UserID), writeOnce, rpc.BillingClient.PutUsageEvent, &rpc.PutUsageEventRequest{Event: rpc.UsageEventToProto(e)})
	return err
}

// GetUsageEventOf returns usage event eventID of user, or ErrNotFound (also
// when user's shard holds an event with that id of another user).
func (b *Billing) GetUsageEventOf(ctx context.Context, user keys.AccountID, eventID string, opts ...ReadOption) (*records.UsageEvent, error) {
	if err := checkEventID(eventID); err != nil {
		return nil, err
	}
	cons, co := consistency(opts)
	resp, err := unary(ctx, b.routed(user), co, rpc.BillingClient.GetUsageEvent, &rpc.UsageEventRef{Target: accountTarget(user), EventId: eventID, Consistency: cons})
	if err != nil {
		return nil, err
	}
	e, err := usageEventFrom(resp.GetEvent())
	if err != nil {
		return nil, err
	}
	if e.UserID != user {
		return nil, fmt.Errorf("%w: usage event %q belongs to another user", ErrNotFound, eventID)
	}
	return e, nil
}

// GetUsageEvent returns usage event eventID whoever owns it (seed
// get_usage_event), asking every shard. ErrNotFound if no shard holds it.
// Should several shards hold the id, the event of the smallest user id is
// returned.
func (b *Billing) GetUsageEvent(ctx context.Context, eventID string, opts ...ReadOption) (*records.UsageEvent, error) {
	if err := checkEventID(eventID); err != nil {
		return nil, err
	}
	cons, co := consistency(opts)
	found, err := fanLookup(ctx, b.c, fmt.Sprintf("usage event %q", eventID), func(ctx context.Context, sid shard.ID) (*records.UsageEvent, error) {
		resp, err := unary(ctx, b.onShard(sid), co, rpc.BillingClient.GetUsageEvent, &rpc.UsageEventRef{Target: b.c.shardTarget(ctx, sid), EventId: eventID, Consistency: cons})
		if err != nil {
			return nil, err
		}
		return usageEventFrom(resp.GetEvent())
	})
	if err != nil {
		return nil, err
	}
	return slices.MinFunc(found, func(x, y *records.UsageEvent) int {
		return slices.Compare(x.UserID[:], y.UserID[:])
	}), nil
}

// ProcessUsage charges usage event e to its account as transaction t, in
// one state machine command (seed process_usage): it stores the event,
// stores t (with its balance after), deducts t's amount, and returns the
// new balance. *DuplicateEventError if the event id was already processed,
// ErrNotFound without an account, *InsufficientCreditsError if the balance
// cannot cover it; in those cases nothing changed. t must belong to e's
// user.
//
// ProcessUsage is retried when the outcome of an attempt is unknown: a
// retry carries the same transaction, which the state machine recognizes,
// so if the first attempt applied the retry answers the balance it
// recorded. The event is charged exactly once. Calling ProcessUsage again
// yourself with the same t behaves the same way; with a new transaction it
// answers *DuplicateEventError. A transaction id already recorded for
// anything else (another event, account or operation) is refused with
// ErrAlreadyExists: a transaction id names one ledger entry.
func (b *Billing) ProcessUsage(ctx context.Context, e *records.UsageEvent, t *records.CreditTransaction) (int64, error) {
	switch {
	case e == nil || t == nil:
		return 0, invalidf("usage event or transaction is nil")
	case t.UserID != e.UserID:
		return 0, invalidf("transaction user %x is not the event's user %x", t.UserID[:], e.UserID[:])
	}
	if err := e.Validate(); err != nil {
		return 0, invalidArg(err)
	}
	if err := t.Validate(); err != nil {
		return 0, invalidArg(err)
	}
	resp, err := unary(ctx, b.routed(e.UserID), idempotent, rpc.BillingClient.ProcessUsage, &rpc.ProcessUsageRequest{Event: rpc.UsageEventToProto(e), Transaction: rpc.TransactionToProto(t)})
	if err != nil {
		return 0, err
	}
	return resp.GetBalanceCents(), nil
}

// AddCredits adds amountCents to user's account as transaction t in one
// state machine command (seed add_credits) and returns the new balance.
// ErrNotFound without an account. t must belong to user, be a credit type
// (purchase, refund, grant) and carry amountCents. Retried when the outcome
// is unknown: the server applies a transaction id once, so a retry (or a
// second call with the same t) adds nothing and answers the balance right
// after the original application, as the first call did. The same id with
// anything else (another account, amount or operation) answers
// ErrAlreadyExists.
func (b *Billing) AddCredits(ctx context.Context, user keys.AccountID, amountCents int64, t *records.CreditTransaction) (int64, error) {
	switch {
	case t == nil:
		return 0, invalidf("transaction is nil")
	case amountCents <= 0:
		return 0, invalidf("amount_cents %d must be positive", amountCents)
	case t.UserID != user:
		return 0, invalidf("transaction user %x is not %x", t.UserID[:], user[:])
	}
	if err := t.Validate(); err != nil {
		return 0, invalidArg(err)
	}
	resp, err := unary(ctx, b.routed(user), idempotent, rpc.BillingClient.AddCredits, &rpc.AddCreditsRequest{UserId: user[:], AmountCents: amountCents, Transaction: rpc.TransactionToProto(t)})
	if err != nil {
		return 0, err
	}
	return resp.GetBalanceCents(), nil
}
