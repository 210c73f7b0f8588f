package fsm

import (
	"github.com/swarmkv/swarmkv/records"
)

// OpPutTransaction upserts a transaction (see its doc in command.go).
func init() {
	commands.register(OpPutTransaction, &commandSpec{
		name:       "put_transaction",
		fields:     fTx,
		optional:   fTxID,
		sinceOf:    txIDSince,
		routingKey: routingKeyPutTransaction,
		run:        runPutTransaction,
	})
}

func routingKeyPutTransaction(c *Command) []byte {
	return c.Tx.UserID[:]
}

func runPutTransaction(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.putTransaction(c.Tx)
}

// putTransaction is the seed's put_transaction: it creates a transaction,
// or replaces one of the same account (an administrative correction; no
// balance moves), never one of another account.
func (ch *change) putTransaction(tx *records.CreditTransaction) error {
	return ch.putTx(OpPutTransaction, tx)
}
