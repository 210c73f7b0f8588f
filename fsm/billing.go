package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// InsufficientCreditsError is the Result.Err of a charge (OpProcessUsage,
// or OpUpdateBalance with a negative delta) larger than the balance. Nothing
// was written.
type InsufficientCreditsError struct {
	Balance  int64 // the balance when the command ran, cents
	Required int64 // the amount the command needed, cents
}

func (e *InsufficientCreditsError) Error() string {
	return fmt.Sprintf("fsm: insufficient credits: balance %d, required %d", e.Balance, e.Required)
}

// DuplicateEventError is the Result.Err of an OpProcessUsage whose usage
// event was already processed: the event is charged once, and the retry
// writes nothing.
type DuplicateEventError struct {
	EventID string
}

func (e *DuplicateEventError) Error() string {
	return fmt.Sprintf("fsm: duplicate usage event %q", e.EventID)
}

// addInt64 returns a+b and whether it did not overflow.
func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (b >= 0) == (s >= a)
}

// getAccount reads an account; absent is a rejection with ErrNotFound.
func (ch *change) getAccount(id keys.AccountID) (*records.Account, error) {
	key := keys.Account(id)
	if a, ok := ch.acct.record(key); ok {
		return a, nil
	}
	var a records.Account
	if err := getFound(ch, key, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// putAccount queues accounts[id] = a, with a copy of a for the account
// cache.
func (ch *change) putAccount(id keys.AccountID, a *records.Account) error {
	if err := putRecord(ch, keys.Account(id), a); err != nil {
		return err
	}
	rec := *a
	ch.writes[len(ch.writes)-1].acct = &rec
	return nil
}

// errTxExists is the rejection of a command whose transaction id is
// already recorded, by another operation or for another account. A
// transaction id names one ledger entry forever: storing a second one under
// it would drop the first from the listing while the balance keeps it.
func errTxExists(op Op, id keys.TransactionID) error {
	return fmt.Errorf("%w: op %s: transaction id %x is already recorded by another operation", ErrAlreadyExists, op, id[:])
}

// errTxReserved is the rejection of a reservation (OpReserveTx, or an op
// that reserves in the same change) of a transaction id the directory
// assigns to another account.
func errTxReserved(op Op, id keys.TransactionID) error {
	return fmt.Errorf("%w: op %s: transaction id %x is reserved by another account", ErrAlreadyExists, op, id[:])
}

// reserveTx reserves transaction id id for owner in the cluster-wide
// directory (OpReserveTx, and the ops that carry TxID): an absent entry
// is written, one of owner is left alone (a retry: idempotent), one of
// another account is refused (errTxReserved). The id's slot, which need
// not be the account's, must be owned here (*MovedError otherwise, even
// when nothing is written).
func (ch *change) reserveTx(op Op, owner keys.AccountID, id keys.TransactionID) error {
	if ch.st != nil {
		if rej := ch.st.check(shard.SlotOf(id[:])); rej != nil {
			return reject(rej)
		}
	}
	key := keys.TxDirectory(id)
	v, found, err := ch.get(key)
	if err != nil {
		return err
	}
	if !found {
		ch.set(key, owner[:])
		return nil
	}
	held, err := keys.TxOwnerValue(v)
	if err != nil {
		return reject(corruptErr(key, err))
	}
	if held != owner {
		return reject(errTxReserved(op, id))
	}
	return nil
}

// sameOperation reports whether prev, a stored transaction, was recorded by
// the operation tx describes, so that tx is its retry: the same account,
// type, amount, description and event. BalanceAfterCents (the state
// machine sets it) and CreatedAt (the proposer's clock stamps it for
// UpdateBalance, so a retry may carry another) are not compared.
func sameOperation(prev, tx *records.CreditTransaction, eventID string) bool {
	return prev.UserID == tx.UserID && prev.TransactionType == tx.TransactionType &&
		prev.AmountCents == tx.AmountCents && prev.Description == tx.Description && prev.EventID == eventID
}

// getTx reads transactions[id].
func (ch *change) getTx(id keys.TransactionID) (*records.CreditTransaction, bool, error) {
	var tx records.CreditTransaction
	found, err := getRecord(ch, keys.Transaction(id), &tx)
	if err != nil || !found {
		return nil, false, err
	}
	return &tx, true, nil
}

// putTx queues transactions[id] = tx and its transactions_by_user entry.
// It never replaces a transaction of another account (errTxExists), so the
// index never loses an entry. PutTransaction may replace one of the same
// account; the balance ops, which have already read the id as absent,
// call writeTx instead.
func (ch *change) putTx(op Op, tx *records.CreditTransaction) error {
	old, exists, err := ch.getTx(tx.TransactionID)
	if err != nil {
		return err
	}
	if exists && old.UserID != tx.UserID {
		return reject(errTxExists(op, tx.TransactionID))
	}
	return ch.writeTx(tx)
}

// writeTx queues transactions[id] = tx and its transactions_by_user entry
// without reading the id: for the balance ops, which have read it as
// absent in this change (balanceRetry, processUsage). A change reads the
// batch, which its own queued writes reach only at flush, so a second read
// would answer the same (docs/performance-log.md, round 11: it was a quarter
// of a charge's point reads).
func (ch *change) writeTx(tx *records.CreditTransaction) error {
	if err := putRecord(ch, keys.Transaction(tx.TransactionID), tx); err != nil {
		return err
	}
	ch.set(keys.TransactionByUser(tx.UserID, tx.TransactionID), nil)
	return nil
}

// balanceRetry is the common start of the ops that move money: if tx's id
// is recorded, the command is either the exact retry of the operation that
// recorded it (done: it answers the balance recorded then and changes
// nothing) or a conflict (errTxExists).
func (ch *change) balanceRetry(op Op, tx *records.CreditTransaction) (balance int64, done bool, err error) {
	prev, found, err := ch.getTx(tx.TransactionID)
	if err != nil || !found {
		return 0, false, err
	}
	if !sameOperation(prev, tx, tx.EventID) {
		return 0, true, reject(errTxExists(op, tx.TransactionID))
	}
	return prev.BalanceAfterCents, true, nil
}

func (ch *change) deleteAccount(id keys.AccountID) error {
	key := keys.Account(id)
	found, err := ch.has(key)
	if err != nil {
		return err
	}
	if !found {
		return reject(ErrNotFound)
	}
	ch.del(key)
	return nil
}

// putTransaction is the seed's put_transaction: it creates a transaction,
// or replaces one of the same account (an administrative correction; no
// balance moves), never one of another account.
func (ch *change) putTransaction(tx *records.CreditTransaction) error {
	return ch.putTx(OpPutTransaction, tx)
}

func (ch *change) putUsageEvent(e *records.UsageEvent) error {
	key, err := keys.UsageEvent(e.EventID)
	if err != nil { // Validate bounds the id: unreachable
		return reject(fmt.Errorf("%w: op %s: %w", ErrInvalidCommand, OpPutUsageEvent, err))
	}
	return putRecord(ch, key, e)
}

// updateBalance adds the signed delta to the balance (seed update_balance)
// and records tx with the new balance. Like addCredits it is idempotent in
// the transaction id: an exact retry answers the recorded balance.
func (ch *change) updateBalance(id keys.AccountID, delta int64, tx *records.CreditTransaction, now int64) (int64, error) {
	if bal, done, err := ch.balanceRetry(OpUpdateBalance, tx); done || err != nil {
		return bal, err
	}
	a, err := ch.getAccount(id)
	if err != nil {
		return 0, err
	}
	if delta < 0 && a.BalanceCents < -delta { // delta > MinInt64 (Validate)
		return 0, reject(&InsufficientCreditsError{Balance: a.BalanceCents, Required: -delta})
	}
	balance, ok := addInt64(a.BalanceCents, delta)
	if !ok {
		return 0, reject(errOverflow(OpUpdateBalance, "balance"))
	}
	if delta > 0 {
		if a.LifetimeCreditsCents, ok = addInt64(a.LifetimeCreditsCents, delta); !ok {
			return 0, reject(errOverflow(OpUpdateBalance, "lifetime credits"))
		}
	} else if a.LifetimeUsageCents, ok = addInt64(a.LifetimeUsageCents, -delta); !ok {
		return 0, reject(errOverflow(OpUpdateBalance, "lifetime usage"))
	}
	a.BalanceCents, a.UpdatedAt = balance, now
	return balance, ch.putAccountAndTx(id, a, tx, "")
}

// processUsage is the seed's process_usage: charge tx.AmountCents for event
// e, once.
func (ch *change) processUsage(e *records.UsageEvent, tx *records.CreditTransaction, now int64) (int64, error) {
	evKey, err := keys.UsageEvent(e.EventID)
	if err != nil { // Validate bounds the id: unreachable
		return 0, reject(fmt.Errorf("%w: op %s: %w", ErrInvalidCommand, OpProcessUsage, err))
	}
	dup, err := ch.has(evKey)
	if err != nil {
		return 0, err
	}
	if dup {
		// A retry of this very charge (its transaction recorded for this
		// event, same amount) answers the balance it recorded and changes
		// nothing, so a client may retry a ProcessUsage whose outcome it
		// did not learn. Any other attempt to process the event is the
		// seed's DuplicateEvent.
		prev, found, err := ch.getTx(tx.TransactionID)
		if err != nil {
			return 0, err
		}
		if found && prev.TransactionType == records.TxUsage && sameOperation(prev, tx, e.EventID) {
			return prev.BalanceAfterCents, nil
		}
		return 0, reject(&DuplicateEventError{EventID: e.EventID})
	}
	// A new event under a recorded transaction id is not a retry: charging
	// it would replace that transaction.
	if _, found, err := ch.getTx(tx.TransactionID); err != nil {
		return 0, err
	} else if found {
		return 0, reject(errTxExists(OpProcessUsage, tx.TransactionID))
	}
	a, err := ch.getAccount(e.UserID)
	if err != nil {
		return 0, err
	}
	amount := tx.AmountCents // > 0 (Validate)
	if a.BalanceCents < amount {
		return 0, reject(&InsufficientCreditsError{Balance: a.BalanceCents, Required: amount})
	}
	var ok bool
	if a.LifetimeUsageCents, ok = addInt64(a.LifetimeUsageCents, amount); !ok {
		return 0, reject(errOverflow(OpProcessUsage, "lifetime usage"))
	}
	a.BalanceCents -= amount
	a.UpdatedAt = now
	if err := ch.putAccountAndTx(e.UserID, a, tx, e.EventID); err != nil {
		return 0, err
	}
	return a.BalanceCents, putRecord(ch, evKey, e)
}

// addCredits is the seed's add_credits, made idempotent in the transaction
// id: an exact retry of an applied AddCredits succeeds, changes nothing and
// answers the balance it recorded; any other command with that id is
// refused (errTxExists).
func (ch *change) addCredits(id keys.AccountID, amount int64, tx *records.CreditTransaction, now int64) (int64, error) {
	if bal, done, err := ch.balanceRetry(OpAddCredits, tx); done || err != nil {
		return bal, err
	}
	a, err := ch.getAccount(id)
	if err != nil {
		return 0, err
	}
	balance, ok := addInt64(a.BalanceCents, amount)
	if !ok {
		return 0, reject(errOverflow(OpAddCredits, "balance"))
	}
	if a.LifetimeCreditsCents, ok = addInt64(a.LifetimeCreditsCents, amount); !ok {
		return 0, reject(errOverflow(OpAddCredits, "lifetime credits"))
	}
	a.BalanceCents, a.UpdatedAt = balance, now
	return balance, ch.putAccountAndTx(id, a, tx, "")
}

// putAccountAndTx queues the updated account (back under the key it was
// read from) and a copy of tx carrying the new balance (and eventID, if not
// empty). The caller has read tx's id as absent in this change.
func (ch *change) putAccountAndTx(id keys.AccountID, a *records.Account, tx *records.CreditTransaction, eventID string) error {
	if err := ch.putAccount(id, a); err != nil {
		return err
	}
	stored := *tx
	stored.BalanceAfterCents = a.BalanceCents
	if eventID != "" {
		stored.EventID = eventID
	}
	return ch.writeTx(&stored)
}
