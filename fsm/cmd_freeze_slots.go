package fsm

// OpFreezeSlots freezes slots the shard owns, the source side of a move (see
// its doc in move.go). A slot move op is an entry of its own (solo), its log
// index the step's.
func init() {
	commands.register(OpFreezeSlots, &commandSpec{
		name:   "freeze_slots",
		fields: fMove,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Move.validate(OpFreezeSlots, moveArgs{slots: true, mapVersion: true}, l.WithDefaults())
		},
		apply:   applyFreezeSlots,
		history: historyFreezeSlots,
	})
}

func applyFreezeSlots(a *applier, c *Command, index uint64, res *Result) error {
	a.resync = true
	rej, err := a.freeze(c.Move, a.st.moves[c.Move.ID], index, res)
	return settleMove(res, rej, err)
}

// historyFreezeSlots records the freeze, once: not when re-applied (the
// recorded index is an earlier one).
func historyFreezeSlots(a *applier, c *Command, i int, index uint64, res *Result, _ int) error {
	if res.Err == nil && res.MoveIndex == index {
		a.hist.addMarker(i, EventFrozen, c.Move.ID, *c.Move.Slots)
	}
	return nil
}

func (a *applier) freeze(m *SlotMove, rec *MoveRecord, index uint64, res *Result) (rej, err error) {
	if rec != nil {
		if !rec.source() || rec.Slots != *m.Slots || rec.Peer != m.Peer || rec.MapVersion != m.MapVersion {
			return conflict(OpFreezeSlots, m.ID, "recorded as %s of slots %s (peer %d, map version %d)",
				rec.State, rec.Slots.String(), rec.Peer, rec.MapVersion), nil
		}
		res.MoveIndex = rec.Index
		return nil, nil
	}
	if missing := m.Slots.Minus(a.st.owned); !missing.IsEmpty() {
		return conflict(OpFreezeSlots, m.ID, "slots %s are not owned", missing.String()), nil
	}
	res.MoveIndex = index
	r := &MoveRecord{ID: m.ID, State: MoveFrozen, Slots: *m.Slots, Peer: m.Peer, MapVersion: m.MapVersion, Index: index}
	return nil, a.setMove(r, a.st.owned.Minus(*m.Slots))
}
