package jepsen

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// Unavailability on a synthetic history of two faults (a third never
// ended), the second cut short by the end of the workload phase at 38 s:
// shard 0 serves with one long wait inside the first; shard 1 serves
// nothing in either while its operations fail or hang (they count as
// waits, not as service); shard 2 has no operation in flight during a
// fault (no gap: nobody waited); shard 3's operation hangs from before the
// fault until after it (the gap starts at the fault). Operations of other
// workloads are ignored.
func TestUnavailability(t *testing.T) {
	s := func(sec float64) int64 { return int64(sec * 1e9) }
	op := func(key string, out Outcome, invoke, complete float64) Op {
		return Op{Workload: "register", F: "write", Input: RegIn{Key: key}, Outcome: out, Invoke: s(invoke), Complete: s(complete)}
	}
	h := History{
		op("a", OK, 8, 9), op("a", OK, 10.5, 11), op("a", OK, 11.5, 12), op("a", Info, 12, 17),
		op("a", OK, 13, 19.5), op("a", OK, 30.2, 31), op("a", OK, 32, 33), op("a", OK, 38, 39),
		op("b", OK, 4, 5), op("b", Fail, 11, 12), op("b", Info, 12, 18), op("b", OK, 24, 25),
		op("b", Fail, 31, 35), op("b", OK, 39, 41),
		op("c", Fail, 1, 2),
		op("d", Info, 5, 25),
		{Workload: "ledger", F: "credit", Outcome: OK, Invoke: s(10), Complete: s(20)},
	}
	faults := []Fault{
		{Nemesis: "kill-zone", Start: s(10), End: s(20)},
		{Nemesis: "bad", Start: s(21), Error: "docker: no such container"}, // never ended
		{Nemesis: "partition-zone", Start: s(30), End: s(40)},
	}
	shardOf := func(op Op) (shard.ID, bool) {
		in, ok := op.Input.(RegIn)
		if !ok {
			return 0, false
		}
		return shard.ID(in.Key[0] - 'a'), true
	}
	got := Unavailability(h, faults, s(38), shardOf)
	want := []ShardGap{
		{Shard: 0, Fault: 0, Nemesis: "kill-zone", From: s(12), To: s(19.5), Ops: 3},
		{Shard: 1, Fault: 0, Nemesis: "kill-zone", From: s(11), To: s(20), UntilHeal: true},
		{Shard: 2, Fault: 0, Nemesis: "kill-zone"},
		{Shard: 3, Fault: 0, Nemesis: "kill-zone", From: s(10), To: s(20), UntilHeal: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if g := got[0].Gap(); g != 7500*time.Millisecond {
		t.Errorf("gap %v", g)
	}
	if str := got[1].String(); !strings.Contains(str, "shard 1: 9s") || !strings.Contains(str, "until the heal") {
		t.Errorf("String %q", str)
	}
	if str := got[2].String(); !strings.Contains(str, "no operation on it waited") {
		t.Errorf("String %q", str)
	}
	// The end of the workload phase cuts the second fault: shard 1's
	// failing operations wait from 31 s to 38 s, not to the heal at 40 s.
	if got := Unavailability(h, faults[2:], s(38), shardOf); got[1].Gap() != 7*time.Second || !got[1].UntilHeal {
		t.Errorf("second fault, cut: %+v", got[1])
	}
	if got := Unavailability(h, faults[2:], 0, shardOf); got[1].Gap() != 9*time.Second {
		t.Errorf("second fault, uncut: %+v", got[1])
	}
	// Without faults there is nothing to measure.
	if got := Unavailability(h, nil, 0, shardOf); len(got) != 0 {
		t.Errorf("no faults: %+v", got)
	}
}

// RegisterShardOf finds a register key's shard in the slot map and
// ignores the other workloads.
func TestRegisterShardOf(t *testing.T) {
	slots := make([]shard.ID, shard.NumSlots)
	for i := range slots {
		slots[i] = 3
	}
	slots[shard.SlotOf([]byte("jr-x-1-0"))] = 5
	of := RegisterShardOf(slots)
	if id, ok := of(Op{Workload: "register", Input: RegIn{Key: "jr-x-1-0"}}); !ok || id != 5 {
		t.Errorf("moved key: %d %v", id, ok)
	}
	if id, ok := of(Op{Workload: "register", Input: RegIn{Key: "jr-x-2-0"}}); !ok || id != 3 && shard.SlotOf([]byte("jr-x-2-0")) != shard.SlotOf([]byte("jr-x-1-0")) {
		t.Errorf("other key: %d %v", id, ok)
	}
	if _, ok := of(Op{Workload: "watch", Input: WatchIn{Key: "k"}}); ok {
		t.Error("a watch op is not a probe")
	}
}
