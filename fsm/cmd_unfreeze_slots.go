package fsm

// OpUnfreezeSlots gives a frozen move's slots back (see its doc in move.go).
// A slot move op is an entry of its own (solo), its log index the step's.
func init() {
	commands.register(OpUnfreezeSlots, &commandSpec{
		name:   "unfreeze_slots",
		fields: fMove,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Move.validate(OpUnfreezeSlots, moveArgs{noPeer: true}, l.WithDefaults())
		},
		apply:   applyUnfreezeSlots,
		history: noHistory,
	})
}

func applyUnfreezeSlots(a *applier, c *Command, _ uint64, res *Result) error {
	a.resync = true
	rej, err := a.unfreeze(c.Move, a.st.moves[c.Move.ID])
	return settleMove(res, rej, err)
}

func (a *applier) unfreeze(m *SlotMove, rec *MoveRecord) (rej, err error) {
	switch {
	case rec == nil:
		return nil, nil
	case rec.State != MoveFrozen:
		return conflict(OpUnfreezeSlots, m.ID, "is %s", rec.State), nil
	}
	st := a.st.clone()
	delete(st.moves, m.ID)
	st.owned = st.owned.Union(rec.Slots)
	v, _ := st.owned.MarshalBinary()
	if err := a.b.Set(metaSlots, v, nil); err != nil {
		return nil, err
	}
	if err := a.b.Delete(moveKey(m.ID), nil); err != nil {
		return nil, err
	}
	a.st = st
	return nil, nil
}
