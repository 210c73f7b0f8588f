package shardmove_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/shardmove"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// FuzzDecodeSlotCommand: an Admin.SlotCommand's bytes either decode into a
// valid slot move command (ops 50-55) that encodes back to the same bytes,
// or are refused with ErrInvalidArgument (under the node's apply-time
// limits, cluster.ApplyLimits).
func FuzzDecodeSlotCommand(f *testing.F) {
	s := shard.SlotSetOf(1, 2, 200)
	for _, c := range []*fsm.Command{
		{Op: fsm.OpFreezeSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s, Peer: 2, MapVersion: 3}},
		{Op: fsm.OpUnfreezeSlots, Move: &fsm.SlotMove{ID: 1}},
		{Op: fsm.OpIngestSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s, Pairs: []fsm.Pair{{Key: []byte("\x20a"), Value: []byte("v")}}}},
		{Op: fsm.OpAdoptSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s}},
		{Op: fsm.OpDropSlots, Move: &fsm.SlotMove{ID: 1, Max: 10}},
		{Op: fsm.OpRestrictSlots, Move: &fsm.SlotMove{Slots: &s}},
		{Op: fsm.OpSyncSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s, Pairs: []fsm.Pair{{Key: []byte("\x20a"), Value: []byte("v")}}, Deletes: [][]byte{[]byte("\x20b")}}},
		{Op: fsm.OpNoop},
	} {
		b, err := fsm.EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0xa0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := shardmove.DecodeSlotCommand(b, cluster.ApplyLimits())
		if err != nil {
			if !errors.Is(err, cluster.ErrInvalidArgument) {
				t.Fatalf("refusal %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		if c.Op < fsm.OpFreezeSlots || c.Op > fsm.OpSyncSlots || c.Move == nil {
			t.Fatalf("accepted op %s", c.Op)
		}
		if err := c.Validate(cluster.ApplyLimits()); err != nil {
			t.Fatalf("accepted an invalid command: %v", err)
		}
		again, err := fsm.EncodeCommand(c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted bytes do not round-trip: %v", err)
		}
	})
}
