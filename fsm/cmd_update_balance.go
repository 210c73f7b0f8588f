package fsm

import (
	"errors"
	"fmt"
	"math"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpUpdateBalance adds a signed delta to a balance (see its doc in
// command.go).
func init() {
	commands.register(OpUpdateBalance, &commandSpec{
		name:       "update_balance",
		fields:     fAccountID | fAmount | fTime | fTx,
		optional:   fTxID,
		sinceOf:    txIDSince,
		routingKey: routingKeyUpdateBalance,
		run:        runUpdateBalance,
		rule:       ruleUpdateBalance,
	})
}

func routingKeyUpdateBalance(c *Command) []byte {
	return c.AccountID[:]
}

func runUpdateBalance(ch *change, c *Command) (int64, int, error) {
	balance, err := ch.updateBalance(*c.AccountID, *c.Amount, c.Tx, c.Time)
	return balance, 0, err
}

func ruleUpdateBalance(c *Command) error {
	switch amt := *c.Amount; {
	case amt == 0 || amt == math.MinInt64:
		return fmt.Errorf("amount %d: want a non-zero delta above math.MinInt64", amt)
	case c.Tx.TransactionType != records.TxAdjustment:
		return fmt.Errorf("tx: type %s, want adjustment", c.Tx.TransactionType)
	case c.Tx.AmountCents != amt:
		return fmt.Errorf("tx: amount_cents %d differs from amount %d", c.Tx.AmountCents, amt)
	case c.Tx.UserID != *c.AccountID:
		return errors.New("tx: user_id differs from account_id")
	}
	return nil
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
