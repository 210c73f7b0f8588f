package raftlog

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

func openTest(t testing.TB, dir string, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func group(t testing.TB, s *Store, id uint32) *Group {
	t.Helper()
	g, err := s.Group(id)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func entry(index uint64) *raft.Log {
	return &raft.Log{Index: index, Term: index/10 + 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry-%d", index), AppendedAt: time.Unix(0, int64(index)*1000)}
}

func entries(from, to uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, entry(i))
	}
	return ls
}

func assertBounds(t *testing.T, g *Group, first, last uint64) {
	t.Helper()
	f, err := g.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := g.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("group %d: bounds [%d, %d], want [%d, %d]", g.id, f, l, first, last)
	}
}

// TestEmpty: what hashicorp/raft expects of a fresh store (HasExistingState
// and NewRaft compare the stable store's error with "not found").
func TestEmpty(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	g := group(t, s, 3)
	assertBounds(t, g, 0, 0)
	var l raft.Log
	if err := g.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of missing index: %v, want raft.ErrLogNotFound", err)
	}
	if _, err := g.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of missing key: %v, want \"not found\"", err)
	}
	if _, err := g.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of missing key: %v, want \"not found\"", err)
	}
	has, err := raft.HasExistingState(g, g, raft.NewInmemSnapshotStore())
	if err != nil || has {
		t.Fatalf("HasExistingState = %v, %v; want false", has, err)
	}
}

func TestLogAndStable(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	g := group(t, s, 1)
	if err := g.StoreLog(entry(1)); err != nil {
		t.Fatal(err)
	}
	if err := g.StoreLogs(entries(2, 30)); err != nil {
		t.Fatal(err)
	}
	assertBounds(t, g, 1, 30)
	for i := uint64(1); i <= 30; i++ {
		var l raft.Log
		if err := g.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		assertLogEqual(t, entry(i), &l)
	}
	if err := g.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := g.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	// Another group shares nothing.
	other := group(t, s, 2)
	assertBounds(t, other, 0, 0)
	if _, err := other.Get([]byte("k")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("other group sees key: %v", err)
	}
	if g2 := group(t, s, 1); g2 != g {
		t.Fatal("Group returned a second handle")
	}
	s.Close()

	s = openTest(t, dir, nil)
	g = group(t, s, 1)
	assertBounds(t, g, 1, 30)
	if v, err := g.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if v, err := g.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("GetUint64 = %d, %v", v, err)
	}
	has, err := raft.HasExistingState(g, g, raft.NewInmemSnapshotStore())
	if err != nil || !has {
		t.Fatalf("HasExistingState = %v, %v; want true", has, err)
	}
}

func TestDeleteRange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		min, max    uint64
		first, last uint64
	}{
		{"prefix", 1, 10, 11, 30},
		{"before first", 0, 10, 11, 30},
		{"suffix (conflict truncation)", 20, 30, 1, 19},
		{"suffix to max", 20, 1<<64 - 1, 1, 19},
		{"middle (gap)", 5, 25, 1, 30},
		{"all", 1, 30, 0, 0},
		{"more than all", 0, 100, 0, 0},
		{"outside", 40, 50, 1, 30},
		{"empty range", 10, 5, 1, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, nil)
			g := group(t, s, 9)
			if err := g.StoreLogs(entries(1, 30)); err != nil {
				t.Fatal(err)
			}
			if err := g.DeleteRange(tc.min, tc.max); err != nil {
				t.Fatal(err)
			}
			assertBounds(t, g, tc.first, tc.last)
			for i := uint64(1); i <= 30; i++ {
				var l raft.Log
				err := g.GetLog(i, &l)
				deleted := tc.min <= tc.max && i >= tc.min && i <= tc.max
				if deleted && !errors.Is(err, raft.ErrLogNotFound) {
					t.Fatalf("index %d: %v, want not found", i, err)
				}
				if !deleted && err != nil {
					t.Fatalf("index %d: %v", i, err)
				}
			}
			s.Close()
			s = openTest(t, dir, nil)
			assertBounds(t, group(t, s, 9), tc.first, tc.last)
		})
	}
}

func TestDropGroup(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	for id := uint32(0); id < 4; id++ {
		g := group(t, s, id)
		if err := g.StoreLogs(entries(1, 5)); err != nil {
			t.Fatal(err)
		}
		if err := g.SetUint64([]byte("CurrentTerm"), 2); err != nil {
			t.Fatal(err)
		}
	}
	g := group(t, s, 0xffffffff)
	if err := g.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.Groups(); err != nil || fmt.Sprint(ids) != "[0 1 2 3 4294967295]" {
		t.Fatalf("Groups = %v, %v", ids, err)
	}
	if err := s.DropGroup(2); err != nil {
		t.Fatal(err)
	}
	if err := s.DropGroup(0xffffffff); err != nil {
		t.Fatal(err)
	}
	assertBounds(t, group(t, s, 2), 0, 0)
	s.Close()
	s = openTest(t, dir, nil)
	if ids, err := s.Groups(); err != nil || fmt.Sprint(ids) != "[0 1 3]" {
		t.Fatalf("Groups after drop = %v, %v", ids, err)
	}
	g2 := group(t, s, 2)
	assertBounds(t, g2, 0, 0)
	if _, err := g2.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("dropped group's term: %v", err)
	}
	for _, id := range []uint32{1, 3} {
		assertBounds(t, group(t, s, id), 1, 5)
	}
}

// TestModel runs random operations against the store and a naive model
// with raft-boltdb's semantics (bounds are the lowest and highest stored
// index; gaps allowed), reopening now and then.
func TestModel(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	s := openTest(t, dir, nil)
	model := map[uint32]map[uint64]bool{}
	next := map[uint32]uint64{}
	steps := 400
	if raceEnabled || testing.Short() {
		steps = 100 // Pebble is ~20x slower under the race detector
	}
	for step := 0; step < steps; step++ {
		id := uint32(rng.IntN(3))
		g := group(t, s, id)
		if model[id] == nil {
			model[id] = map[uint64]bool{}
			next[id] = 1
		}
		switch op := rng.IntN(10); {
		case op < 6: // append a run
			n := uint64(1 + rng.IntN(20))
			if err := g.StoreLogs(entries(next[id], next[id]+n-1)); err != nil {
				t.Fatal(err)
			}
			for i := next[id]; i < next[id]+n; i++ {
				model[id][i] = true
			}
			next[id] += n
		case op < 9: // delete a range around the stored ones
			lo := uint64(rng.IntN(int(next[id]) + 2))
			hi := lo + uint64(rng.IntN(30))
			if err := g.DeleteRange(lo, hi); err != nil {
				t.Fatal(err)
			}
			for i := lo; i <= hi; i++ {
				delete(model[id], i)
			}
			if rng.IntN(2) == 0 && hi >= next[id]-1 { // truncate, then rewrite from lo
				next[id] = max(lo, 1)
			}
		default:
			s.Close()
			s = openTest(t, dir, nil)
			id = math.MaxUint32 // check every group's entries
		}
		for gid, m := range model {
			first, last := uint64(0), uint64(0)
			for i := range m {
				if first == 0 || i < first {
					first = i
				}
				last = max(last, i)
			}
			gg := group(t, s, gid)
			assertBounds(t, gg, first, last)
			if id != math.MaxUint32 && gid != id {
				continue
			}
			for i := first; i <= last && first > 0; i++ {
				if id != math.MaxUint32 && rng.IntN(20) != 0 {
					continue // after a reopen every index, else a sample
				}
				var l raft.Log
				err := gg.GetLog(i, &l)
				if m[i] != (err == nil) {
					t.Fatalf("step %d group %d index %d: stored=%v, GetLog err %v", step, gid, i, m[i], err)
				}
			}
		}
	}
}

// TestPowerLoss: entries acknowledged by StoreLogs survive a crash that
// loses every unsynced write (Pebble's crashable in-memory file system),
// while several groups append concurrently.
func TestPowerLoss(t *testing.T) {
	for round := range 5 {
		fs := vfs.NewCrashableMem()
		s := openTest(t, "/db", fs)
		const groups = 6
		var acked [groups]atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for id := range uint32(groups) {
			g := group(t, s, id)
			wg.Go(func() {
				for i := uint64(1); ; i += 3 {
					select {
					case <-stop:
						return
					default:
					}
					if err := g.StoreLogs(entries(i, i+2)); err != nil {
						t.Error(err)
						return
					}
					acked[id].Store(i + 2)
				}
			})
		}
		for acked[groups-1].Load() < uint64(30*(round+1)) {
			time.Sleep(time.Millisecond)
		}
		var want [groups]uint64
		for i := range want {
			want[i] = acked[i].Load()
		}
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(round), 0))})
		close(stop)
		wg.Wait()
		s.Close()

		s2 := openTest(t, "/db", crashed)
		for id := range uint32(groups) {
			g := group(t, s2, id)
			last, _ := g.LastIndex()
			if last < want[id] {
				t.Fatalf("round %d group %d: last index %d after crash, %d acknowledged", round, id, last, want[id])
			}
			for i := uint64(1); i <= want[id]; i++ {
				var l raft.Log
				if err := g.GetLog(i, &l); err != nil {
					t.Fatalf("round %d group %d: acknowledged index %d: %v", round, id, i, err)
				}
				assertLogEqual(t, entry(i), &l)
			}
		}
		s2.Close()
	}
}

// TestRaft runs a single-voter hashicorp/raft instance on a group: bootstrap,
// applies, a snapshot with log compaction, restart from the store.
func TestRaft(t *testing.T) {
	dir := t.TempDir()
	snaps := raft.NewInmemSnapshotStore()
	run := func(bootstrap bool, applies int) uint64 {
		s := openTest(t, filepath.Join(dir, "log"), nil)
		g := group(t, s, 5)
		conf := raft.DefaultConfig()
		conf.LocalID = "a"
		conf.HeartbeatTimeout = 50 * time.Millisecond
		conf.ElectionTimeout = 50 * time.Millisecond
		conf.LeaderLeaseTimeout = 50 * time.Millisecond
		conf.TrailingLogs = 5
		conf.Logger = nil
		conf.LogOutput = io.Discard
		addr, trans := raft.NewInmemTransport("a")
		if bootstrap {
			if err := raft.BootstrapCluster(conf, g, g, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "a", Address: addr}}}); err != nil {
				t.Fatal(err)
			}
		}
		fsm := &countFSM{}
		r, err := raft.NewRaft(conf, fsm, g, g, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := r.Shutdown().Error(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}()
		deadline := time.Now().Add(10 * time.Second)
		for r.State() != raft.Leader {
			if time.Now().After(deadline) {
				t.Fatal("no leader")
			}
			time.Sleep(5 * time.Millisecond)
		}
		for i := 0; i < applies; i++ {
			if err := r.Apply([]byte{byte(i)}, time.Second).Error(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Barrier(time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		if applies > 0 {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
		return fsm.n.Load()
	}
	if n := run(true, 50); n != 50 {
		t.Fatalf("applied %d", n)
	}
	// Restart: the snapshot restores the count (countFSM) and the log after
	// it is replayed.
	if n := run(false, 0); n != 50 {
		t.Fatalf("after restart: %d", n)
	}
}

type countFSM struct{ n atomic.Uint64 }

func (f *countFSM) Apply(*raft.Log) any { f.n.Add(1); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return countSnap(f.n.Load()), nil
}
func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	f.n.Store(n)
	return nil
}

type countSnap uint64

func (s countSnap) Persist(sink raft.SnapshotSink) error {
	var b [8]byte
	for i := range b {
		b[i] = byte(uint64(s) >> (56 - 8*i))
	}
	if _, err := sink.Write(b[:]); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}
func (countSnap) Release() {}

// TestFsyncStats: the WAL fsync histogram counts the synced appends (at
// most one fsync each: Pebble may share one among concurrent commits, never
// more), its buckets are cumulative, and a closed store refuses.
func TestFsyncStats(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.FsyncStats()
	if err != nil {
		t.Fatal(err)
	}
	g := group(t, s, 1)
	const appends = 50
	for i := uint64(1); i <= appends; i++ {
		if err := g.StoreLogs([]*raft.Log{entry(i)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.FsyncStats()
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Count - before.Count; n < 1 || n > appends {
		t.Fatalf("%d fsyncs for %d sequential synced appends, want 1..%d", n, appends, appends)
	}
	if st.Sum <= before.Sum {
		t.Fatalf("fsync time did not grow: %v then %v", before.Sum, st.Sum)
	}
	bounds := make([]float64, 0, len(st.Buckets))
	for b := range st.Buckets {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) < 10 || bounds[0] != 0.0001 {
		t.Fatalf("bounds %v: want 100 us first and at least 10", bounds)
	}
	prev := uint64(0)
	for _, b := range bounds {
		c := st.Buckets[b]
		if c < prev || c > st.Count {
			t.Fatalf("bucket le=%g holds %d after %d (count %d): not cumulative", b, c, prev, st.Count)
		}
		prev = c
	}
	if last := st.Buckets[bounds[len(bounds)-1]]; last != st.Count {
		t.Fatalf("largest bound (%gs) holds %d of %d fsyncs", bounds[len(bounds)-1], last, st.Count)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FsyncStats(); !errors.Is(err, ErrClosed) {
		t.Fatalf("FsyncStats after Close: %v, want ErrClosed", err)
	}
}

// TestMinSyncInterval: Open refuses an interval out of range, and with one
// set, WAL fsyncs are at least that far apart, so concurrent appends of
// many groups share them: over a run of elapsed time there are at most
// elapsed/interval + 1 fsyncs (unset, a fast disk gives one per few
// appends, many more). Every append is still durable when StoreLogs
// returns (the crash tests cover that for the store in general).
func TestMinSyncInterval(t *testing.T) {
	for _, d := range []time.Duration{-time.Microsecond, MaxMinSyncInterval + 1} {
		if s, err := Open(Options{Dir: t.TempDir(), MinSyncInterval: d}); err == nil {
			s.Close()
			t.Fatalf("Open with MinSyncInterval %v: no error", d)
		}
	}
	const interval = 5 * time.Millisecond
	s, err := Open(Options{Dir: t.TempDir(), MinSyncInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before, err := s.FsyncStats()
	if err != nil {
		t.Fatal(err)
	}
	const groups, appends = 8, 20
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for id := uint32(1); id <= groups; id++ {
		g := group(t, s, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= appends; i++ {
				if err := g.StoreLogs([]*raft.Log{entry(i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := s.FsyncStats()
	if err != nil {
		t.Fatal(err)
	}
	n := st.Count - before.Count
	if limit := uint64(elapsed/interval) + 1; n > limit {
		t.Fatalf("%d fsyncs in %v with a %v interval, want at most %d", n, elapsed, interval, limit)
	}
	for id := uint32(1); id <= groups; id++ {
		if last, _ := group(t, s, id).LastIndex(); last != appends {
			t.Fatalf("group %d: last index %d, want %d", id, last, appends)
		}
	}
	t.Logf("%d appends, %d fsyncs in %v", groups*appends, n, elapsed)
}
