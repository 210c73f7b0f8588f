package fsm

// OpSyncSlots writes the difference a pre-copy left (pairs and deletes) (see
// its doc in move.go). A slot move op is an entry of its own (solo), its log
// index the step's.
func init() {
	commands.register(OpSyncSlots, &commandSpec{
		name:   "sync_slots",
		fields: fMove,
		since:  VersionPrecopy,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Move.validate(OpSyncSlots, moveArgs{slots: true, pairs: true, deletes: true}, l.WithDefaults())
		},
		apply:   applySyncSlots,
		history: noHistory,
	})
}

func applySyncSlots(a *applier, c *Command, index uint64, res *Result) error {
	a.resync = true
	rej, err := a.ingest(OpSyncSlots, true, c.Move, a.st.moves[c.Move.ID], index)
	return settleMove(res, rej, err)
}
