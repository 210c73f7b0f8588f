package fsm

// OpAdoptSlots makes the target own a move's slots (see its doc in move.go).
// A slot move op is an entry of its own (solo), its log index the step's.
func init() {
	commands.register(OpAdoptSlots, &commandSpec{
		name:   "adopt_slots",
		fields: fMove,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Move.validate(OpAdoptSlots, moveArgs{slots: true}, l.WithDefaults())
		},
		apply:   applyAdoptSlots,
		history: historyAdoptSlots,
	})
}

func applyAdoptSlots(a *applier, c *Command, index uint64, res *Result) error {
	a.resync = true
	rej, err := a.adopt(c.Move, a.st.moves[c.Move.ID], index)
	return settleMove(res, rej, err)
}

// historyAdoptSlots records the adoption.
func historyAdoptSlots(a *applier, c *Command, i int, _ uint64, res *Result, _ int) error {
	if res.Err == nil {
		a.hist.addMarker(i, EventAdopted, c.Move.ID, *c.Move.Slots)
	}
	return nil
}

func (a *applier) adopt(m *SlotMove, rec *MoveRecord, index uint64) (rej, err error) {
	r := &MoveRecord{ID: m.ID, State: MoveAdopted, Slots: *m.Slots, Peer: m.Peer, MapVersion: m.MapVersion, Index: index}
	switch {
	case rec == nil:
		if rej := a.register(OpAdoptSlots, m); rej != nil {
			return rej, nil
		}
	case rec.Slots != *m.Slots:
		return conflict(OpAdoptSlots, m.ID, "is of slots %s, not %s", rec.Slots.String(), m.Slots.String()), nil
	case rec.State == MoveAdopted:
		return nil, nil
	case rec.State != MoveIncoming:
		return conflict(OpAdoptSlots, m.ID, "is %s", rec.State), nil
	default:
		c := *rec
		c.State = MoveAdopted
		if m.Peer != 0 || m.MapVersion != 0 {
			c.Peer, c.MapVersion = m.Peer, m.MapVersion
		}
		r = &c
	}
	return nil, a.setMove(r, a.st.owned.Union(*m.Slots))
}
