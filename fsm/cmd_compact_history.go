package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// OpCompactHistory drops the history records older than its retention,
// deterministically (the leader proposes it with its clock); it records no
// events of its own.
func init() {
	commands.register(OpCompactHistory, &commandSpec{
		name:   "compact_history",
		fields: fHistory | fTime,
		// The watch history came with the leases: a binary of version 1
		// keeps none and would not know the op.
		since:    VersionLeases,
		validate: validateCompactHistory,
		apply: func(a *applier, c *Command, index uint64, res *Result) error {
			return a.compactHistory(c.History, c.Time, index, res)
		},
		history: noHistory,
	})
}

func validateCompactHistory(c *Command, _ Limits) error {
	if h := c.History; h.MaxAgeMs < 0 || (h.MaxAgeMs == 0 && h.MaxRevisions == 0) {
		return fmt.Errorf("%w: op %s: retention needs a revision count or a positive age", ErrInvalidCommand, c.Op)
	}
	return nil
}

// compactHistory applies an OpCompactHistory at index with the proposer's
// time now.
func (a *applier) compactHistory(r *HistoryRetention, now int64, index uint64, res *Result) error {
	b := a.b
	floor, err := a.f.histFloor(b)
	if err != nil {
		return err
	}
	newFloor := floor
	if r.MaxRevisions > 0 && index > r.MaxRevisions && index-r.MaxRevisions > newFloor {
		newFloor = index - r.MaxRevisions
	}
	if r.MaxAgeMs > 0 && now-r.MaxAgeMs > 0 {
		// The newest mark at or before now - MaxAgeMs: every revision at
		// or below its index was committed before that time.
		cutoff := now - r.MaxAgeMs
		it, err := b.NewIter(&pebble.IterOptions{LowerBound: metaHistMark, UpperBound: markKey(index)})
		if err != nil {
			return err
		}
		for ok := it.Last(); ok; ok = it.Prev() {
			v := it.Value()
			if len(v) == 8 && int64(binary.BigEndian.Uint64(v)) <= cutoff {
				if m := binary.BigEndian.Uint64(it.Key()[len(metaHistMark):]); m > newFloor {
					newFloor = m
				}
				break
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(now))
	if err := b.Set(markKey(index), t[:], nil); err != nil {
		return err
	}
	if newFloor > floor {
		if err := b.DeleteRange(metaHistPrefix, histKey(newFloor+1), nil); err != nil {
			return err
		}
		// Marks at or below the floor are of no further use.
		if err := b.DeleteRange(metaHistMark, markKey(newFloor), nil); err != nil {
			return err
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], newFloor)
		if err := b.Set(metaHistFloor, v[:], nil); err != nil {
			return err
		}
	}
	res.Succeeded = true
	return nil
}
