package fsm

// OpReserveTx reserves a transaction id in the cluster-wide directory (see
// its doc in command.go).
func init() {
	commands.register(OpReserveTx, &commandSpec{
		name:       "reserve_tx",
		fields:     fAccountID | fTxID,
		since:      VersionHardening,
		routingKey: routingKeyReserveTx,
		run:        runReserveTx,
	})
}

func routingKeyReserveTx(c *Command) []byte {
	return c.TxID[:] // the directory routes by the id itself
}

func runReserveTx(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.reserveTx(c.Op, *c.AccountID, *c.TxID)
}
