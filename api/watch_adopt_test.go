package api

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// A replica of a split's target that has ingested the moved slots but
// not yet applied their adoption (a follower behind its leader) answers a
// watch following the move "not adopted yet" (Unavailable: the client
// tries again), not "compacted", which ended the watch for good (the
// jepsen watch checker caught it: the move record exists from the ingest
// on). After the adoption it names the adoption's revision.
func TestAdoptedAtBeforeAdoption(t *testing.T) {
	f, err := fsm.Open(fsm.Config{Shard: 2, Dir: t.TempDir(), InitialSlots: &shard.SlotSet{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	slots := shard.SlotSetOf(9)
	index := uint64(0)
	apply := func(c *fsm.Command) uint64 {
		t.Helper()
		data, err := fsm.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result); res.Err != nil {
			t.Fatalf("%s: %v", c.Op, res.Err)
		}
		return index
	}
	apply(&fsm.Command{Op: fsm.OpIngestSlots, Move: &fsm.SlotMove{ID: 7, Slots: &slots, Peer: 1, MapVersion: 3}})
	if _, err := adoptedAt(f, 7, 9); !errors.Is(err, errNotAdopted) {
		t.Fatalf("ingested, not adopted: %v, want errNotAdopted", err)
	}
	at := apply(&fsm.Command{Op: fsm.OpAdoptSlots, Move: &fsm.SlotMove{ID: 7, Slots: &slots}})
	if rev, err := adoptedAt(f, 7, 9); err != nil || rev != at {
		t.Fatalf("adopted at %d: %d %v", at, rev, err)
	}
}
