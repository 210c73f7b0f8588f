package fsm

import (
	"fmt"
)

// OpMulti: several commands proposed as one log entry (the replica's
// proposal coalescing), each applied as if it were an entry of its own.
func init() {
	commands.register(OpMulti, &commandSpec{
		name:     "multi",
		fields:   fMulti,
		sinceOf:  multiSince,
		solo:     true,
		validate: func(c *Command, _ Limits) error { return validateMulti(c.Multi) },
		entry:    applyMulti,
	})
}

// multiSince is the highest version of the commands an OpMulti carries
// (those that do not decode count as 1).
func multiSince(c *Command) int {
	v := 1
	for _, sub := range c.Multi {
		if s, err := DecodeCommand(sub); err == nil {
			v = max(v, s.Since())
		}
	}
	return v
}

// validateMulti checks an OpMulti's bounds. Each command is decoded and
// validated on its own when applied, as a separate entry would be.
func validateMulti(cmds [][]byte) error {
	if len(cmds) == 0 || len(cmds) > MaxMultiCmds {
		return fmt.Errorf("%w: multi has %d commands, want 1 to %d", ErrInvalidCommand, len(cmds), MaxMultiCmds)
	}
	total := 0
	for _, sub := range cmds {
		total += len(sub)
	}
	if total > MaxMultiBytes {
		return fmt.Errorf("%w: multi commands total %d bytes, limit %d", ErrInvalidCommand, total, MaxMultiBytes)
	}
	return nil
}

// applyMulti applies an OpMulti entry at index: each of its commands
// (subs, from Own, or decoded from cmd.Multi when nil) validated and
// applied on its own, with its own Result.
func applyMulti(a *applier, index uint64, cmd *Command, subs []*Command) (interface{}, error) {
	out := make([]*Result, len(cmd.Multi))
	for i, data := range cmd.Multi {
		res := &Result{Index: index, FailedGuard: -1}
		out[i] = res
		var sub *Command
		var err error
		if subs != nil {
			sub, err = subs[i], subs[i].Validate(a.f.limits)
		} else {
			sub, err = a.f.decode(data)
		}
		if err == nil && !sub.Op.Coalescable() {
			err = fmt.Errorf("%w: op %s cannot be part of a multi", ErrInvalidCommand, sub.Op)
		}
		if err != nil {
			res.Err = err
			continue
		}
		if err := a.execRecorded(sub, i, index, res); err != nil {
			return nil, err
		}
	}
	return out, a.writeHistory(index)
}
