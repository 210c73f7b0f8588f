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

// txIDSince is the sinceOf of an op that records a transaction: carrying
// TxID, it reserves the id in the directory in the same change, which
// came with VersionHardening.
func txIDSince(c *Command) int {
	if c.TxID != nil {
		return VersionHardening
	}
	return 1
}
