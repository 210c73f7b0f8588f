package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
)

// OpDeleteAccount deletes an account (see its doc in command.go).
func init() {
	commands.register(OpDeleteAccount, &commandSpec{
		name:       "delete_account",
		fields:     fAccountID,
		routingKey: routingKeyDeleteAccount,
		run:        runDeleteAccount,
	})
}

func routingKeyDeleteAccount(c *Command) []byte {
	return c.AccountID[:]
}

func runDeleteAccount(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.deleteAccount(*c.AccountID)
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
