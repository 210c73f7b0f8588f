package fsm

import (
	"errors"
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpAddCredits credits an amount, idempotent in its transaction id (see its
// doc in command.go).
func init() {
	commands.register(OpAddCredits, &commandSpec{
		name:       "add_credits",
		fields:     fAccountID | fAmount | fTx | fTime,
		optional:   fTxID,
		sinceOf:    txIDSince,
		routingKey: routingKeyAddCredits,
		run:        runAddCredits,
		rule:       ruleAddCredits,
	})
}

func routingKeyAddCredits(c *Command) []byte {
	return c.AccountID[:]
}

func runAddCredits(ch *change, c *Command) (int64, int, error) {
	balance, err := ch.addCredits(*c.AccountID, *c.Amount, c.Tx, c.Time)
	return balance, 0, err
}

func ruleAddCredits(c *Command) error {
	switch amt := *c.Amount; {
	case amt <= 0:
		return fmt.Errorf("amount %d: want a positive amount", amt)
	case !c.Tx.TransactionType.Credit():
		return fmt.Errorf("tx: type %s is not a credit", c.Tx.TransactionType)
	case c.Tx.AmountCents != amt:
		return fmt.Errorf("tx: amount_cents %d differs from amount %d", c.Tx.AmountCents, amt)
	case c.Tx.UserID != *c.AccountID:
		return errors.New("tx: user_id differs from account_id")
	}
	return nil
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
