package fsm

// OpDropSlots deletes a moved or aborted move's keys, Max at a time (see its
// doc in move.go). A slot move op is an entry of its own (solo), its log
// index the step's.
func init() {
	commands.register(OpDropSlots, &commandSpec{
		name:   "drop_slots",
		fields: fMove,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Move.validate(OpDropSlots, moveArgs{noPeer: true, max: true}, l.WithDefaults())
		},
		apply:   applyDropSlots,
		history: noHistory,
	})
}

func applyDropSlots(a *applier, c *Command, _ uint64, res *Result) error {
	a.resync = true
	rej, err := a.drop(c.Move, a.st.moves[c.Move.ID], res)
	return settleMove(res, rej, err)
}

func (a *applier) drop(m *SlotMove, rec *MoveRecord, res *Result) (rej, err error) {
	if rec == nil {
		return conflict(OpDropSlots, m.ID, "unknown"), nil
	}
	c := *rec
	switch rec.State {
	case MoveFrozen:
		c.State = MoveMoved
	case MoveIncoming:
		c.State = MoveAborted
	case MoveMoved, MoveAborted:
	default:
		return conflict(OpDropSlots, m.ID, "is %s", rec.State), nil
	}
	if c.Dropped {
		return nil, nil // res.Remaining 0
	}
	del, cursor, err := collectSlotKeys(a.b, rec.Slots, rec.Cursor, int(m.Max))
	if err != nil {
		return nil, err
	}
	for _, k := range del {
		if err := a.b.Delete(k, nil); err != nil {
			return nil, err
		}
		a.f.accounts.forget(k)
	}
	if cursor != nil {
		c.Cursor = cursor
	}
	left, _, err := collectSlotKeys(a.b, rec.Slots, c.Cursor, int(m.Max))
	if err != nil {
		return nil, err
	}
	res.Remaining, res.Deleted = len(left), len(del)
	c.Dropped = len(left) == 0
	return nil, a.setMove(&c, a.st.owned)
}
