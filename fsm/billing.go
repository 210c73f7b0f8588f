package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
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
	var a records.Account
	exists, err := getRecord(ch, keys.Account(id), &a)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, reject(ErrNotFound)
	}
	return &a, nil
}

// putTx queues transactions[id] = tx and its transactions_by_user entry,
// and deletes the entry of the user a transaction with this id had before,
// so the index never points at another user's transaction.
func (ch *change) putTx(tx *records.CreditTransaction) error {
	key := keys.Transaction(tx.TransactionID)
	var old records.CreditTransaction
	exists, err := getRecord(ch, key, &old)
	if err != nil {
		return err
	}
	if exists && old.UserID != tx.UserID {
		ch.del(keys.TransactionByUser(old.UserID, tx.TransactionID))
	}
	if err := putRecord(ch, key, tx); err != nil {
		return err
	}
	ch.set(keys.TransactionByUser(tx.UserID, tx.TransactionID), nil)
	return nil
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

func (ch *change) putTransaction(tx *records.CreditTransaction) error { return ch.putTx(tx) }

func (ch *change) putUsageEvent(e *records.UsageEvent) error {
	key, err := keys.UsageEvent(e.EventID)
	if err != nil { // Validate bounds the id: unreachable
		return reject(fmt.Errorf("%w: op %s: %w", ErrInvalidCommand, OpPutUsageEvent, err))
	}
	return putRecord(ch, key, e)
}

// updateBalance adds the signed delta to the balance (seed update_balance)
// and records tx with the new balance.
func (ch *change) updateBalance(id keys.AccountID, delta int64, tx *records.CreditTransaction, now int64) (int64, error) {
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
		// event) answers the balance it recorded and changes nothing, so a
		// client may retry a ProcessUsage whose outcome it did not learn.
		// Any other attempt to process the event is the seed's
		// DuplicateEvent.
		var prev records.CreditTransaction
		found, err := getRecord(ch, keys.Transaction(tx.TransactionID), &prev)
		if err != nil {
			return 0, err
		}
		if found && prev.EventID == e.EventID && prev.UserID == e.UserID && prev.TransactionType == records.TxUsage {
			return prev.BalanceAfterCents, nil
		}
		return 0, reject(&DuplicateEventError{EventID: e.EventID})
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
// id: a retry of an applied AddCredits succeeds and changes nothing.
func (ch *change) addCredits(id keys.AccountID, amount int64, tx *records.CreditTransaction, now int64) (int64, error) {
	var prev records.CreditTransaction
	applied, err := getRecord(ch, keys.Transaction(tx.TransactionID), &prev)
	if err != nil {
		return 0, err
	}
	if applied {
		if prev.UserID != id {
			return 0, reject(fmt.Errorf("%w: op %s: transaction id belongs to another account", ErrInvalidCommand, OpAddCredits))
		}
		return prev.BalanceAfterCents, nil
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
// empty).
func (ch *change) putAccountAndTx(id keys.AccountID, a *records.Account, tx *records.CreditTransaction, eventID string) error {
	if err := putRecord(ch, keys.Account(id), a); err != nil {
		return err
	}
	stored := *tx
	stored.BalanceAfterCents = a.BalanceCents
	if eventID != "" {
		stored.EventID = eventID
	}
	return ch.putTx(&stored)
}
