package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// FuzzDecodeState: a cluster state document from the meta group either
// decodes into a state with a valid shard map, or is rejected.
func FuzzDecodeState(f *testing.F) {
	st := &State{FormatVersion: stateFormat, ClusterID: "c", MapVersion: 1, NumShards: 2, ReplicationFactor: 3,
		Shards: placement.Place([]string{"a", "b", "c"}, 2, 3), MetaVoters: []string{"a", "b", "c"},
		Nodes: []NodeAddrs{{ID: "a", RaftAddr: "x", Status: StatusActive}}}
	st.Slots = make([]shard.ID, shard.NumSlots)
	good, _ := json.Marshal(st)
	f.Add(good)
	f.Add([]byte(`{"format_version":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		if _, err := s.Map(); err != nil || s.FormatVersion != stateFormat {
			t.Fatalf("accepted a state with a bad map: %v", err)
		}
		s.Clone() // must not panic
	})
}

// FuzzDecodeSlotCommand: an Admin.SlotCommand's bytes either decode into a
// valid slot move command (ops 50-55) that encodes back to the same bytes,
// or are refused with ErrInvalidArgument.
func FuzzDecodeSlotCommand(f *testing.F) {
	s := shard.SlotSetOf(1, 2, 200)
	for _, c := range []*fsm.Command{
		{Op: fsm.OpFreezeSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s, Peer: 2, MapVersion: 3}},
		{Op: fsm.OpUnfreezeSlots, Move: &fsm.SlotMove{ID: 1}},
		{Op: fsm.OpIngestSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s, Pairs: []fsm.Pair{{Key: []byte("\x20a"), Value: []byte("v")}}}},
		{Op: fsm.OpAdoptSlots, Move: &fsm.SlotMove{ID: 1, Slots: &s}},
		{Op: fsm.OpDropSlots, Move: &fsm.SlotMove{ID: 1, Max: 10}},
		{Op: fsm.OpRestrictSlots, Move: &fsm.SlotMove{Slots: &s}},
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
		c, err := decodeSlotCommand(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("refusal %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		if c.Op < fsm.OpFreezeSlots || c.Op > fsm.OpRestrictSlots || c.Move == nil {
			t.Fatalf("accepted op %s", c.Op)
		}
		if err := c.Validate(applyLimits); err != nil {
			t.Fatalf("accepted an invalid command: %v", err)
		}
		again, err := fsm.EncodeCommand(c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted bytes do not round-trip: %v", err)
		}
	})
}
