package fsm

import (
	"errors"
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpProcessUsage charges a usage event, once (see its doc in command.go).
func init() {
	commands.register(OpProcessUsage, &commandSpec{
		name:       "process_usage",
		fields:     fEvent | fTx | fTime,
		optional:   fTxID,
		sinceOf:    txIDSince,
		routingKey: routingKeyProcessUsage,
		run:        runProcessUsage,
		rule:       ruleProcessUsage,
	})
}

func routingKeyProcessUsage(c *Command) []byte {
	return c.Event.UserID[:]
}

func runProcessUsage(ch *change, c *Command) (int64, int, error) {
	balance, err := ch.processUsage(c.Event, c.Tx, c.Time)
	return balance, 0, err
}

func ruleProcessUsage(c *Command) error {
	switch {
	case c.Tx.TransactionType != records.TxUsage:
		return fmt.Errorf("tx: type %s, want usage", c.Tx.TransactionType)
	case c.Tx.UserID != c.Event.UserID:
		return errors.New("tx: user_id differs from the event's user_id")
	case c.Tx.EventID != "" && c.Tx.EventID != c.Event.EventID:
		return errors.New("tx: event_id differs from the event's event_id")
	}
	// Tx.Validate already requires AmountCents > 0 for a usage charge.
	return nil
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
