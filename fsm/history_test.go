package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// allHistory returns every retained event of f, in order.
func allHistory(t testing.TB, f *FSM, after uint64) []Event {
	t.Helper()
	var out []Event
	err := f.ReadHistory(after, f.AppliedIndex(), func(rev uint64, evs []Event) error {
		out = append(out, evs...)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadHistory: %v", err)
	}
	return out
}

// replayEvents applies the put and delete events to an empty map and
// returns it as a sorted dump.
// watched keeps the pairs of the tables history records.
func watched(kvs []KV) []KV {
	var out []KV
	for _, kv := range kvs {
		if len(kv.Key) > 0 && WatchedTables[kv.Key[0]] {
			out = append(out, kv)
		}
	}
	return out
}

func replayEvents(evs []Event) []KV {
	m := newModel()
	for _, e := range evs {
		switch e.Kind {
		case EventPut:
			m.kv[string(e.Key)] = e.Value
		case EventDelete:
			delete(m.kv, string(e.Key))
		}
	}
	return m.dump()
}

func TestHistoryRecordsWrites(t *testing.T) {
	r := newReplica(t, 1, nil)
	rk := []byte("alice")
	k1, k2 := keys.KV(rk, []byte("a")), keys.KV(rk, []byte("b"))
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: k1, Value: []byte("1")}))                // 1
	r.apply(batchCmd([]Guard{{Kind: GuardExists, Key: k2}}, Mutation{Kind: MutPut, Key: k2})) // 2: guard fails
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: k2, Value: []byte("2")},
		Mutation{Kind: MutDelete, Key: k1}, Mutation{Kind: MutDelete, Key: keys.KV(rk, []byte("absent"))})) // 3
	sub1 := mustEncode(t, batchCmd(nil, Mutation{Kind: MutPut, Key: k1, Value: []byte("x")}))
	sub2 := mustEncode(t, batchCmd(nil, Mutation{Kind: MutDelete, Key: k2}))
	r.logs = append(r.logs, cmdLog(4, mustEncode(t, &Command{Op: OpMulti, Multi: [][]byte{sub1, sub2}})))
	r.f.Apply(r.logs[3]) // 4
	uid := mUID(1)
	r.must(&Command{Op: OpPutUser, User: &records.UserRecord{UserID: uid, Email: "x@y"}}) // 5: users, no watch table
	ag := agentRec(1, 1, records.AgentRunning)
	r.must(putAgentCmd(ag)) // 6: agents (and their index tables: not recorded)

	got := allHistory(t, r.f, 0)
	want := []struct {
		rev  uint64
		cmd  int
		kind EventKind
		key  []byte
		val  string
	}{
		{1, 0, EventPut, k1, "1"},
		{3, 0, EventPut, k2, "2"},
		{3, 0, EventDelete, k1, ""},
		{4, 0, EventPut, k1, "x"},
		{4, 1, EventDelete, k2, ""},
		{6, 0, EventPut, keys.Agent(ag.UserID, ag.AgentID), ""},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Revision != w.rev || g.Cmd != w.cmd || g.Kind != w.kind || !bytes.Equal(g.Key, w.key) {
			t.Errorf("event %d: got rev %d cmd %d %s %q, want rev %d cmd %d %s %q", i, g.Revision, g.Cmd, g.Kind, g.Key, w.rev, w.cmd, w.kind, w.key)
		}
		if w.kind == EventPut && w.val != "" && string(g.Value) != w.val {
			t.Errorf("event %d: value %q, want %q", i, g.Value, w.val)
		}
	}
	if !bytes.Equal(got[0].RoutingKey, rk) || !bytes.Equal(got[5].RoutingKey, ag.UserID[:]) {
		t.Errorf("routing keys %q, %x", got[0].RoutingKey, got[5].RoutingKey)
	}
	// A read from a later revision starts after it.
	if evs := allHistory(t, r.f, 3); len(evs) != 3 || evs[0].Revision != 4 {
		t.Errorf("from 3: %+v", evs)
	}
}

// TestHistoryReplaysState: on random logs of every op (records, pools,
// batches, malformed and invalid commands, multis), the history's events
// replayed from empty give exactly the state, whatever the runs' sizes;
// two replicas applying the log in different runs keep identical
// histories; and a restart that replays the log changes nothing.
func TestHistoryReplaysState(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			logs := genLog(rand.New(rand.NewPCG(seed, 7)), 1500)
			dirA := t.TempDir()
			a := mustOpen(t, testConfig(1, dirA), nil)
			b := mustOpen(t, testConfig(1, t.TempDir()), nil)
			applyRuns(t, a, logs, rand.New(rand.NewPCG(seed, 1)))
			applyRuns(t, b, logs, rand.New(rand.NewPCG(seed, 2)))
			ha, hb := allHistory(t, a, 0), allHistory(t, b, 0)
			if d := diffKVs(replayEvents(ha), watched(mustDump(t, a))); d != "" {
				t.Fatalf("history replayed != state: %s", d)
			}
			if fmt.Sprint(ha) != fmt.Sprint(hb) {
				t.Fatal("two replicas' histories differ")
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			a = mustOpen(t, testConfig(1, dirA), nil)
			applyRuns(t, a, logs, rand.New(rand.NewPCG(seed, 3)))
			if fmt.Sprint(allHistory(t, a, 0)) != fmt.Sprint(ha) {
				t.Fatal("history changed by a replay after restart")
			}
		})
	}
}

func TestHistoryCompaction(t *testing.T) {
	r := newReplica(t, 1, nil)
	putN := func(n int) {
		for i := range n {
			r.must(batchCmd(nil, put(fmt.Sprintf("\x20k%d", i), "v")))
		}
	}
	compact := func(revs uint64, age, now int64) {
		r.must(&Command{Op: OpCompactHistory, Time: now, History: &HistoryRetention{MaxRevisions: revs, MaxAgeMs: age}})
	}
	putN(10)            // 1..10
	compact(4, 0, 1000) // 11: floor 7
	floor, cur, err := r.f.HistoryFloor()
	if err != nil || floor != 7 || cur != 11 {
		t.Fatalf("floor %d current %d err %v, want 7 11", floor, cur, err)
	}
	var ce *CompactedError
	if err := r.f.ReadHistory(6, cur, func(uint64, []Event) error { return nil }); !errors.As(err, &ce) || ce.Oldest != 7 || ce.Current != 11 {
		t.Fatalf("read from 6: %v", err)
	}
	if ce.Error() != "compacted: oldest retained revision 7, current revision 11" {
		t.Errorf("message %q", ce.Error())
	}
	if evs := allHistory(t, r.f, 7); len(evs) != 3 || evs[0].Revision != 8 {
		t.Fatalf("from 7: %+v", evs)
	}
	// Age: marks at 11 (t=1000) and 12 (t=5000); at t=7000 with age 3000
	// the newest mark at or before 4000 is 11.
	compact(1000, 0, 5000) // 12: a mark, floor unchanged
	putN(2)                // 13, 14
	compact(0, 3000, 7000) // 15: floor 11
	if floor, _, _ := r.f.HistoryFloor(); floor != 11 {
		t.Fatalf("floor after age compaction %d, want 11", floor)
	}
	// The floor never goes down.
	compact(1000, 0, 8000)
	if floor, _, _ := r.f.HistoryFloor(); floor != 11 {
		t.Fatalf("floor went to %d", floor)
	}
	if evs := allHistory(t, r.f, 11); len(evs) != 2 || evs[0].Revision != 13 {
		t.Fatalf("from 11: %+v", evs)
	}
	// Bad retention: refused.
	if res := r.apply(&Command{Op: OpCompactHistory, Time: 1, History: &HistoryRetention{}}); !errors.Is(res.Err, ErrInvalidCommand) {
		t.Fatalf("empty retention: %+v", res)
	}
}

// TestHistoryRestore: a replica restored from a snapshot holds history
// from the snapshot's index on; older reads are compacted.
func TestHistoryRestore(t *testing.T) {
	a := newReplica(t, 1, nil)
	for i := range 5 {
		a.must(batchCmd(nil, put(fmt.Sprintf("\x20k%d", i), "v")))
	}
	snap := snapshotBytes(t, a.f)
	b := newReplica(t, 1, nil)
	b.must(batchCmd(nil, put("\x20old", "v")))
	if err := b.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	var ce *CompactedError
	if err := b.f.ReadHistory(0, 5, func(uint64, []Event) error { return nil }); !errors.As(err, &ce) || ce.Oldest != 5 {
		t.Fatalf("read from 0 after restore: %v", err)
	}
	b.f.Apply(cmdLog(6, mustEncode(t, batchCmd(nil, put("\x20new", "v")))))
	if evs := allHistory(t, b.f, 5); len(evs) != 1 || string(evs[0].Key) != "\x20new" {
		t.Fatalf("after restore: %+v", evs)
	}
}

// TestHistoryMoves: the slot move ops leave no put or delete events; a
// freeze and an adopt leave their markers.
func TestHistoryMoves(t *testing.T) {
	var s shard.SlotSet
	k := keys.KV([]byte("bob"), []byte("x"))
	s.Add(shard.SlotOf([]byte("bob")))
	src := newReplica(t, 1, nil)
	src.must(batchCmd(nil, Mutation{Kind: MutPut, Key: k, Value: []byte("1")}))
	src.must(&Command{Op: OpRestrictSlots, Move: &SlotMove{Slots: ptr(shard.AllSlots())}})
	src.must(freezeCmd(9, s, 2, 1))
	rest := shard.SlotSet{}
	dst := newReplica(t, 2, &rest)
	dst.must(ingestCmd(9, s, Pair{Key: k, Value: []byte("1")}))
	dst.must(adoptCmd(9, s))
	dst.must(batchCmd(nil, Mutation{Kind: MutPut, Key: k, Value: []byte("2")}))
	for src.apply(dropCmd(9, 10)).Remaining > 0 {
	}
	hs, hd := allHistory(t, src.f, 0), allHistory(t, dst.f, 0)
	if len(hs) != 2 || hs[0].Kind != EventPut || hs[1].Kind != EventFrozen || hs[1].MoveID != 9 || hs[1].Slots != s || hs[1].Revision != 3 {
		t.Fatalf("source history %+v", hs)
	}
	if len(hd) != 2 || hd[0].Kind != EventAdopted || hd[0].MoveID != 9 || hd[0].Revision != 2 || hd[1].Kind != EventPut {
		t.Fatalf("target history %+v", hd)
	}
}

func FuzzDecodeHistory(f *testing.F) {
	var h histRecorder
	h.reset()
	k := keys.KV([]byte("u"), []byte("k"))
	var repr []byte
	{
		b := mustOpen(f, testConfig(1, f.TempDir()), nil).db.NewBatch()
		_ = b.Set(k, []byte("v"), nil)
		_ = b.Delete([]byte("\x03sess"), nil)
		repr = append([]byte(nil), b.Repr()[12:]...)
		_ = b.Close()
	}
	if err := h.addWrites(repr, 1, []byte("rk")); err != nil {
		f.Fatal(err)
	}
	h.addMarker(0, EventFrozen, 7, shard.AllSlots())
	f.Add(h.buf)
	f.Add([]byte{historyVersion})
	f.Add([]byte{historyVersion, 0, 1, 0, 1, 0x20})
	f.Add([]byte{historyVersion, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := DecodeHistory(1, data)
		if err != nil {
			return
		}
		for _, e := range evs {
			if e.Kind < EventPut || e.Kind > EventAdopted || e.Revision != 1 {
				t.Fatalf("decoded %+v", e)
			}
			if (e.Kind == EventPut || e.Kind == EventDelete) && (len(e.Key) == 0 || e.Key[0] == metaPrefix) {
				t.Fatalf("decoded a meta or empty key %+v", e)
			}
		}
	})
}
