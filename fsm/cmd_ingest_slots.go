package fsm

// OpIngestSlots writes a chunk of a move's data on the target side (see its
// doc in move.go). A slot move op is an entry of its own (solo), its log
// index the step's.
func init() {
	commands.register(OpIngestSlots, &commandSpec{
		name:   "ingest_slots",
		fields: fMove,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Move.validate(OpIngestSlots, moveArgs{slots: true, pairs: true}, l.WithDefaults())
		},
		apply:   applyIngestSlots,
		history: noHistory,
	})
}

func applyIngestSlots(a *applier, c *Command, index uint64, res *Result) error {
	a.resync = true
	rej, err := a.ingest(OpIngestSlots, false, c.Move, a.st.moves[c.Move.ID], index)
	return settleMove(res, rej, err)
}
