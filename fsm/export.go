package fsm

import (
	"bytes"
	"context"
	"fmt"
)

// ExportState streams the replica's whole replicated state, the records a
// snapshot holds (the replicated meta records and every table, in key
// order), from one Pebble snapshot: it calls begin with the applied index
// that state is exact at, then fn with chunks of about maxBytes of keys
// and values (0: 1 MiB), copies fn may keep. Memory stays bounded by one
// chunk. It stops at ctx's end, the first error of begin or fn, or Close
// (ErrClosed); during a restore it refuses (ErrRestoring). Package cluster
// serves backups with it (Admin.BackupShard), after a read barrier on the
// shard's leader, so the index is committed.
func (f *FSM) ExportState(ctx context.Context, maxBytes int, begin func(index uint64) error, fn func([]Pair) error) error {
	if err := f.rlock(); err != nil {
		return err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return ErrRestoring
	}
	snap := f.db.NewSnapshot()
	defer snap.Close()
	index, err := appliedIn(snap)
	if err != nil {
		return fmt.Errorf("fsm: export: %w", err)
	}
	if err := begin(index); err != nil {
		return err
	}
	c := chunker{maxBytes: maxBytes, fn: fn}
	if err := f.eachRecord(ctx, snap, c.add); err != nil {
		return err
	}
	return c.flush()
}

// chunker groups pairs into chunks of at most maxOps pairs (0: no bound)
// and about maxBytes of keys and values (0: 1 MiB), copying them, and
// hands each full chunk to fn.
type chunker struct {
	maxOps, maxBytes int
	fn               func([]Pair) error
	chunk            []Pair
	size             int
}

func (c *chunker) add(k, v []byte) error {
	if c.maxBytes <= 0 {
		c.maxBytes = 1 << 20
	}
	if len(c.chunk) > 0 && ((c.maxOps > 0 && len(c.chunk) >= c.maxOps) || c.size+len(k)+len(v) > c.maxBytes) {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.chunk = append(c.chunk, Pair{Key: bytes.Clone(k), Value: nilIfEmpty(bytes.Clone(v))})
	c.size += len(k) + len(v)
	return nil
}

// flush hands the chunk in progress, if any, to fn.
func (c *chunker) flush() error {
	if len(c.chunk) == 0 {
		return nil
	}
	err := c.fn(c.chunk)
	c.chunk, c.size = nil, 0
	return err
}
