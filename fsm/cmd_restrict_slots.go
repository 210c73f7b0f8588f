package fsm

import (
	"fmt"
)

// OpRestrictSlots narrows a shard that owns every slot to its map's slots,
// once (see its doc in move.go). A slot move op is an entry of its own
// (solo), its log index the step's.
func init() {
	commands.register(OpRestrictSlots, &commandSpec{
		name:     "restrict_slots",
		fields:   fMove,
		solo:     true,
		validate: validateRestrictSlots,
		apply:    applyRestrictSlots,
		history:  noHistory,
	})
}

func applyRestrictSlots(a *applier, c *Command, _ uint64, res *Result) error {
	a.resync = true
	rej, err := a.restrict(c.Move)
	return settleMove(res, rej, err)
}

// validateRestrictSlots: a restrict carries slots and nothing else (no
// move id: it is no move).
func validateRestrictSlots(c *Command, _ Limits) error {
	switch m := c.Move; {
	case m.ID != 0 || m.Peer != 0 || m.MapVersion != 0 || m.Pairs != nil || m.Max != 0 || m.Deletes != nil:
		return moveBad(OpRestrictSlots, "carries more than slots")
	case m.Slots == nil || m.Slots.IsEmpty():
		return moveBad(OpRestrictSlots, "no slots")
	}
	return nil
}

func (a *applier) restrict(m *SlotMove) (rej, err error) {
	switch {
	case a.st.owned == *m.Slots:
		return nil, nil
	case !a.st.owned.IsFull() || len(a.st.moves) > 0:
		return fmt.Errorf("%w: op %s: the shard owns slots %s and has %d move records; only a shard that owns every slot and never moved one may be restricted",
			ErrMoveConflict, OpRestrictSlots, a.st.owned.String(), len(a.st.moves)), nil
	}
	st := a.st.clone()
	st.owned = *m.Slots
	v, _ := st.owned.MarshalBinary()
	if err := a.b.Set(metaSlots, v, nil); err != nil {
		return nil, err
	}
	a.st = st
	return nil, nil
}
