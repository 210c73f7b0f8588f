package fsm

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// OpBatch: a guarded write of opaque keys (in practice the kv table).
func init() {
	commands.register(OpBatch, &commandSpec{
		name:    "batch",
		fields:  fBatch,
		sinceOf: batchSince,
		validate: func(c *Command, l Limits) error {
			if err := c.Batch.validate(l.WithDefaults()); err != nil {
				return err
			}
			return c.Batch.validateSlots()
		},
		// no routingKey: every key carries its own
		apply: applyBatch,
	})
}

// batchSince: a mutation that attaches a lease needs VersionLeases.
func batchSince(c *Command) int {
	if c.Batch != nil {
		for i := range c.Batch.Mutations {
			if c.Batch.Mutations[i].Lease != 0 {
				return VersionLeases
			}
		}
	}
	return 1
}

// applyBatch checks every key's slot (unless the shard owns every slot),
// then applies the guarded batch.
func applyBatch(a *applier, c *Command, _ uint64, res *Result) error {
	if !a.st.owned.IsFull() {
		rej, err := a.st.checkBatch(a.b, c.Batch)
		if err != nil || rej != nil {
			res.Err = rej
			return err
		}
	}
	for i := range c.Batch.Mutations { // a raw write of a ledger key
		m := &c.Batch.Mutations[i]
		a.f.accounts.forget(m.Key)
		if m.Kind == MutPut {
			a.f.ids.add(m.Key)
		}
	}
	return applyGuarded(a.b, c.Batch, batchLeases{a}, res)
}

func (b *Batch) validate(l Limits) error {
	if n := len(b.Guards) + len(b.Mutations); n > l.MaxBatchOps {
		return fmt.Errorf("%w: batch has %d guards+mutations, limit %d", ErrInvalidCommand, n, l.MaxBatchOps)
	}
	for i := range b.Guards {
		g := &b.Guards[i]
		if err := validateKey(g.Key, l); err != nil {
			return fmt.Errorf("%w: guard %d: %s", ErrInvalidCommand, i, err)
		}
		switch g.Kind {
		case GuardExists, GuardAbsent:
			if len(g.Value) > 0 {
				return fmt.Errorf("%w: guard %d: value given for an exists/absent guard", ErrInvalidCommand, i)
			}
		case GuardEquals:
			if len(g.Value) > l.MaxValueSize {
				return fmt.Errorf("%w: guard %d: value is %d bytes, limit %d", ErrInvalidCommand, i, len(g.Value), l.MaxValueSize)
			}
		default:
			return fmt.Errorf("%w: guard %d: unknown guard kind %d", ErrInvalidCommand, i, g.Kind)
		}
	}
	for i := range b.Mutations {
		m := &b.Mutations[i]
		if err := validateKey(m.Key, l); err != nil {
			return fmt.Errorf("%w: mutation %d: %s", ErrInvalidCommand, i, err)
		}
		if isLeaseTable(m.Key[0]) {
			return fmt.Errorf("%w: mutation %d: key is in table %s, which only the lease ops write", ErrInvalidCommand, i, keys.TableName(m.Key[0]))
		}
		if isEtcdTable(m.Key[0]) { // its records and revisions are the etcd ops' alone
			return fmt.Errorf("%w: mutation %d: key is in table %s, which only the etcd ops write", ErrInvalidCommand, i, keys.TableName(m.Key[0]))
		}
		if m.Lease != 0 {
			if m.Kind != MutPut {
				return fmt.Errorf("%w: mutation %d: a lease is given for a delete", ErrInvalidCommand, i)
			}
			if m.Key[0] != keys.TableKV {
				return fmt.Errorf("%w: mutation %d: only kv keys are attached to a lease by a batch", ErrInvalidCommand, i)
			}
			if err := validateAttach(m.Lease, m.Key); err != nil {
				return fmt.Errorf("%w: mutation %d: %s", ErrInvalidCommand, i, err)
			}
		}
		switch m.Kind {
		case MutPut:
			if len(m.Value) > l.MaxValueSize {
				return fmt.Errorf("%w: mutation %d: value is %d bytes, limit %d", ErrInvalidCommand, i, len(m.Value), l.MaxValueSize)
			}
		case MutDelete:
			if len(m.Value) > 0 {
				return fmt.Errorf("%w: mutation %d: value given for a delete", ErrInvalidCommand, i)
			}
		default:
			return fmt.Errorf("%w: mutation %d: unknown mutation kind %d", ErrInvalidCommand, i, m.Kind)
		}
	}
	return nil
}

// validateBatchSlots is Validate's rule for OpBatch: the keys whose layout
// carries their routing key must all be in one slot.
func (b *Batch) validateSlots() error {
	var prev []byte
	var slot shard.Slot
	have := false
	check := func(what string, i int, key []byte) error {
		rk, route, err := keys.RoutingKeyOf(key)
		if err != nil || route != keys.RouteKey {
			return nil
		}
		if have && bytes.Equal(rk, prev) {
			return nil
		}
		s := shard.SlotOf(rk)
		if have && s != slot {
			return fmt.Errorf("%w: %s %d: key in slot %d, the batch's other keys in slot %d", ErrInvalidCommand, what, i, s, slot)
		}
		prev, slot, have = rk, s, true
		return nil
	}
	for i := range b.Guards {
		if err := check("guard", i, b.Guards[i].Key); err != nil {
			return err
		}
	}
	for i := range b.Mutations {
		if err := check("mutation", i, b.Mutations[i].Key); err != nil {
			return err
		}
	}
	return nil
}

// checkBatch checks every key of an OpBatch against s.
func (s *slotState) checkBatch(b *pebble.Batch, bt *Batch) (rej, storage error) {
	get := batchGetter(b)
	for i := range bt.Guards {
		g := &bt.Guards[i]
		if rej, err := s.checkWrite(get, g.Key, nil, true); rej != nil || err != nil {
			return rej, err
		}
	}
	for i := range bt.Mutations {
		m := &bt.Mutations[i]
		if rej, err := s.checkWrite(get, m.Key, m.Value, m.Kind == MutDelete); rej != nil || err != nil {
			return rej, err
		}
	}
	return nil, nil
}

// applyGuarded checks every guard against b (which reads through to the
// DB), then, if all hold, and every lease the mutations attach exists
// (else ErrLeaseNotFound, nothing written), applies the mutations in
// order, each with its attachment (bl).
func applyGuarded(b *pebble.Batch, bt *Batch, bl batchLeases, res *Result) error {
	for i := range bt.Guards {
		g := &bt.Guards[i]
		v, found, err := getView(b, g.Key, g.Kind == GuardEquals)
		if err != nil {
			return err
		}
		var ok bool
		switch g.Kind {
		case GuardExists:
			ok = found
		case GuardAbsent:
			ok = !found
		case GuardEquals:
			ok = found && bytes.Equal(v, g.Value)
		}
		if !ok {
			res.FailedGuard = i
			return nil
		}
	}
	if rej, err := bl.check(bt); err != nil || rej != nil {
		res.Err = rej
		return err
	}
	for i := range bt.Mutations {
		m := &bt.Mutations[i]
		switch m.Kind {
		case MutPut:
			if err := b.Set(m.Key, m.Value, nil); err != nil {
				return err
			}
		case MutDelete:
			_, found, err := getView(b, m.Key, false)
			if err != nil {
				return err
			}
			if found {
				res.Deleted++
				if err := b.Delete(m.Key, nil); err != nil {
					return err
				}
			}
		}
		if err := bl.after(m); err != nil {
			return err
		}
	}
	res.Succeeded = true
	return nil
}
