package fsm

// OpPutAccount upserts an account (see its doc in command.go).
func init() {
	commands.register(OpPutAccount, &commandSpec{
		name:       "put_account",
		fields:     fAccount,
		routingKey: routingKeyPutAccount,
		run:        runPutAccount,
	})
}

func routingKeyPutAccount(c *Command) []byte {
	return c.Account.UserID[:]
}

func runPutAccount(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.putAccount(c.Account.UserID, c.Account)
}
