package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

type kv struct{ k, v []byte }

// testKeys sign the test files; testRead checks them.
var (
	testKeys = mustKeys("0123456789abcdef0123456789abcdef-test")
	testRead = ReadOptions{Keys: testKeys}
)

func mustKeys(lines ...string) *Keys {
	k, err := ParseKeys([]byte(strings.Join(lines, "\n")))
	if err != nil {
		panic(err)
	}
	return k
}

// testState is a cluster state of shards 0, 1 and 3 (2 was merged away).
func testState() *placement.State {
	m, _ := shard.DefaultMap(2)
	for s := range m.Slots {
		if s%4 == 3 {
			m.Slots[s] = 3
		}
	}
	m.Version, m.NumShards = 7, 4
	pol := placement.ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 1 << 30}
	return &placement.State{
		FormatVersion: placement.StateFormat, ClusterID: "c0ffee", Epoch: 42, ReplicationFactor: 3,
		MapVersion: m.Version, NumShards: m.NumShards, Slots: m.Slots[:],
		Shards: []placement.Placement{
			{Shard: 3, Voters: []string{"n1"}, Incarnation: 5, StartsEmpty: true},
			{Shard: 0, Voters: []string{"n1"}}, {Shard: 1, Voters: []string{"n2"}},
		},
		Tokens:     []placement.Token{{ID: "0123456789abcdef", Name: "ci", Roles: []string{"admin"}, Hash: strings.Repeat("ab", 32), Created: time.Unix(1, 0).UTC()}},
		NextMoveID: 6, Policy: &pol,
	}
}

// testRecords returns n sorted records of a shard, the owned slots first
// (a replicated meta record), values of 0..300 bytes.
func testRecords(seed uint64, n int) []kv {
	rng := rand.New(rand.NewPCG(seed, 9))
	seen := map[string]bool{}
	out := []kv{{append([]byte{0}, "slots"...), bytes.Repeat([]byte{0x5a}, 32)}}
	for len(out) < n+1 {
		k := fmt.Appendf([]byte{0x01}, "user-%d/key-%d", rng.IntN(50), rng.IntN(1000))
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		v := make([]byte, rng.IntN(300))
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out[1:], func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	return out
}

// testData is each shard's records and index.
type testData map[shard.ID][]kv

func newTestData(n int) testData {
	return testData{0: testRecords(1, n), 1: testRecords(2, n/2), 3: testRecords(3, 1)}
}

func index(id shard.ID) uint64 { return 100 + uint64(id) }

// section returns shard id's section as a node serves it.
func (d testData) section(t testing.TB, id shard.ID) []byte {
	var b bytes.Buffer
	sw := NewSectionWriter(&b, id, index(id))
	for _, r := range d[id] {
		if err := sw.Record(r.k, r.v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sw.Finish(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// file returns a whole backup file of d.
func (d testData) file(t testing.TB) []byte {
	var b bytes.Buffer
	w, err := NewWriter(&b, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []shard.ID{0, 1, 3} {
		if _, err := w.CopySection(bytes.NewReader(d.section(t, id))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(ManifestOf(testState(), time.Unix(1000, 0))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readAll reads a file into records per shard.
func readAll(r io.Reader) (testData, *Manifest, error) {
	br, err := NewReader(r, testRead)
	if err != nil {
		return nil, nil, err
	}
	out := testData{}
	for {
		s, err := br.Next()
		if err == io.EOF {
			return out, br.Manifest(), nil
		}
		if err != nil {
			return nil, nil, err
		}
		out[s.Shard] = []kv{}
		for {
			k, v, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, nil, err
			}
			out[s.Shard] = append(out[s.Shard], kv{bytes.Clone(k), bytes.Clone(v)})
		}
	}
}

func sameData(a, b testData) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ra := range a {
		rb := b[id]
		if len(ra) != len(rb) {
			return false
		}
		for i := range ra {
			if !bytes.Equal(ra[i].k, rb[i].k) || !bytes.Equal(ra[i].v, rb[i].v) {
				return false
			}
		}
	}
	return true
}

// TestRoundTrip: a file written from sections reads back to the same
// records and a manifest with each section's figures; written record by
// record it is the same bytes.
func TestRoundTrip(t *testing.T) {
	d := newTestData(200)
	b := d.file(t)
	got, m, err := readAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !sameData(got, d) {
		t.Fatal("records differ")
	}
	if m.ClusterID != "c0ffee" || m.MapVersion != 7 || m.NextMoveID != 6 || len(m.Tokens) != 1 || m.Tokens[0].Hash == "" || m.Policy == nil {
		t.Fatalf("manifest %+v", m)
	}
	if len(m.Shards) != 3 || m.Shards[2].Shard != 3 || m.Shards[2].Incarnation != 5 || !m.Shards[2].StartsEmpty ||
		m.Shards[0].Records != 201 || m.Shards[1].Index != 101 || m.Records() != 201+101+2 {
		t.Fatalf("shards %+v", m.Shards)
	}
	var b2 bytes.Buffer
	w, _ := NewWriter(&b2, testKeys)
	for _, id := range []shard.ID{0, 1, 3} {
		s := w.Section(id, index(id))
		for _, r := range d[id] {
			if err := s.Record(r.k, r.v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(ManifestOf(testState(), time.Unix(1000, 0))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2.Bytes()) {
		t.Fatal("the two writers' files differ")
	}
	if vm, err := Verify(bytes.NewReader(b), testRead); err != nil || !reflect.DeepEqual(vm, m) {
		t.Fatalf("Verify: %v", err)
	}
}

// TestEveryTruncationRefused: every proper prefix of a file is refused
// as truncated.
func TestEveryTruncationRefused(t *testing.T) {
	b := newTestData(20).file(t)
	for n := range len(b) {
		if _, err := Verify(bytes.NewReader(b[:n]), testRead); !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix of %d of %d bytes: %v", n, len(b), err)
		}
	}
	if _, err := Verify(bytes.NewReader(append(slices.Clone(b), 0)), testRead); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated) {
		t.Fatalf("a byte after the end: %v", err)
	}
}

// TestEveryCorruptionRefused: a file with any one byte changed is refused.
func TestEveryCorruptionRefused(t *testing.T) {
	b := newTestData(20).file(t)
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 0x41
		_, err := Verify(bytes.NewReader(c), testRead)
		ok := errors.Is(err, ErrCorrupt) || errors.Is(err, ErrSignature) && i >= len(b)-sigLen+1 ||
			i >= 8 && i < 12 && (errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrUnsigned))
		if !ok {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

// TestNewerFormat: a newer format version is refused, by name.
func TestNewerFormat(t *testing.T) {
	b := newTestData(5).file(t)
	b[11] = FormatVersion + 1
	_, err := Verify(bytes.NewReader(b), testRead)
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "format version 3") {
		t.Fatalf("%v", err)
	}
	if _, err := Verify(strings.NewReader("PK\x03\x04 not a backup at all"), testRead); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a swarmkv backup") {
		t.Fatalf("other file: %v", err)
	}
}

// TestWriterRefuses: records out of order or out of bounds, sections out
// of order, a manifest that does not list the sections.
func TestWriterRefuses(t *testing.T) {
	sw := NewSectionWriter(io.Discard, 0, 1)
	if err := sw.Record([]byte{1, 2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := sw.Record([]byte{1, 1}, nil); err == nil {
		t.Fatal("key out of order taken")
	}
	if err := NewSectionWriter(io.Discard, 0, 1).Record(append([]byte{0}, "applied"...), make([]byte, 8)); err == nil {
		t.Fatal("a replica-local meta record taken")
	}
	d := newTestData(3)
	w, _ := NewWriter(io.Discard, testKeys)
	if _, err := w.CopySection(bytes.NewReader(d.section(t, 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CopySection(bytes.NewReader(d.section(t, 0))); err == nil {
		t.Fatal("section out of order taken")
	}
	w, _ = NewWriter(io.Discard, testKeys)
	if _, err := w.CopySection(bytes.NewReader(d.section(t, 0))); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(ManifestOf(testState(), time.Now())); err == nil {
		t.Fatal("a manifest of 3 shards over 1 section taken")
	}
	sec := d.section(t, 0)
	w, _ = NewWriter(io.Discard, testKeys)
	if _, err := w.CopySection(bytes.NewReader(sec[:len(sec)-1])); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated section: %v", err)
	}
}

// fakeSource serves testData; fail, if set, makes shard reads fail.
type fakeSource struct {
	t      testing.TB
	d      testData
	states []*placement.State // returned in turn, the last one repeated
	calls  int
	// cut, if > 0, ends shard 1's stream with an error after cut bytes.
	cut int
}

func (s *fakeSource) State(context.Context) (*placement.State, error) {
	st := s.states[min(s.calls, len(s.states)-1)]
	s.calls++
	return st.Clone(), nil
}

type cutReader struct {
	r io.Reader
	n int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errors.New("connection reset by peer")
	}
	if len(p) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= n
	return n, err
}

func (s *fakeSource) Shard(_ context.Context, id shard.ID) (io.ReadCloser, error) {
	var r io.Reader = bytes.NewReader(s.d.section(s.t, id))
	if id == 1 && s.cut > 0 {
		r = &cutReader{r: r, n: s.cut}
	}
	return io.NopCloser(r), nil
}

func dirNames(t testing.TB, dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestSave: a backup from a source verifies, with its progress reported;
// a stream cut mid-shard, a move in progress and a map changed during
// the backup each fail and leave no file (an older file at the path
// stays as it was).
func TestSave(t *testing.T) {
	d := newTestData(300)
	dir := t.TempDir()
	path := filepath.Join(dir, "b.swkvbak")
	var last Progress
	m, err := Save(context.Background(), &fakeSource{t: t, d: d, states: []*placement.State{testState()}}, path,
		Options{Keys: testKeys, Progress: func(p Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if !last.ShardDone || last.Done != 2 || last.Shards != 3 || m.Records() != 301+151+2 {
		t.Fatalf("progress %+v, %d records", last, m.Records())
	}
	f, _ := os.Open(path)
	got, _, err := readAll(f)
	f.Close()
	if err != nil || !sameData(got, d) {
		t.Fatalf("saved file: %v", err)
	}
	before, _ := os.ReadFile(path)

	moving := testState()
	moving.Moves = []placement.Move{{ID: 6, Kind: "split", Source: 0, Target: 2, Phase: "frozen"}}
	changed := testState()
	changed.MapVersion++
	planned := testState()
	planned.NextMoveID++
	for name, src := range map[string]*fakeSource{
		"cut":              {t: t, d: d, states: []*placement.State{testState()}, cut: 100},
		"move at start":    {t: t, d: d, states: []*placement.State{moving}},
		"move at the end":  {t: t, d: d, states: []*placement.State{testState(), moving}},
		"map changed":      {t: t, d: d, states: []*placement.State{testState(), changed}},
		"move ran between": {t: t, d: d, states: []*placement.State{testState(), planned}},
	} {
		_, err := Save(context.Background(), src, path, Options{Keys: testKeys})
		if err == nil {
			t.Fatalf("%s: saved", name)
		}
		t.Logf("%s: %v", name, err)
		if names := dirNames(t, dir); !slices.Equal(names, []string{"b.swkvbak"}) {
			t.Fatalf("%s: dir holds %v", name, names)
		}
		if now, _ := os.ReadFile(path); !bytes.Equal(now, before) {
			t.Fatalf("%s: the older backup changed", name)
		}
		switch name {
		case "move at start", "move at the end":
			if !errors.Is(err, ErrMoveInProgress) {
				t.Fatalf("%s: %v", name, err)
			}
		case "map changed", "move ran between":
			if !errors.Is(err, ErrMapChanged) {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	// A temporary file left by a killed backup is not overwritten.
	os.WriteFile(path+".tmp", []byte("x"), 0o600)
	if _, err := Save(context.Background(), &fakeSource{t: t, d: d, states: []*placement.State{testState()}}, path, Options{Keys: testKeys}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("over a temporary file: %v", err)
	}
}

// TestSaveMaxRate: the rate bound paces the reads.
func TestSaveMaxRate(t *testing.T) {
	d := newTestData(300)
	size := len(d.file(t))
	start := time.Now()
	if _, err := Save(context.Background(), &fakeSource{t: t, d: d, states: []*placement.State{testState()}},
		filepath.Join(t.TempDir(), "b"), Options{Keys: testKeys, MaxRate: int64(size) * 4}); err != nil {
		t.Fatal(err)
	}
	// At 4 files a second the copy takes about 250 ms: at least the
	// bound's due time, whatever the machine's speed.
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("done in %v at %d B/s for %d B", el, size*4, size)
	}
}

// TestSeed: the seed is the file, byte for byte, in a new or empty dir.
func TestSeed(t *testing.T) {
	b := newTestData(50).file(t)
	src := filepath.Join(t.TempDir(), "b")
	os.WriteFile(src, b, 0o600)
	for _, dir := range []string{filepath.Join(t.TempDir(), "new"), t.TempDir()} {
		m, err := Seed(src, dir, testRead)
		if err != nil {
			t.Fatal(err)
		}
		if m.ClusterID != "c0ffee" {
			t.Fatalf("manifest %+v", m)
		}
		got, _ := os.ReadFile(filepath.Join(dir, SeedFile))
		if !bytes.Equal(got, b) || !slices.Equal(dirNames(t, dir), []string{SeedFile}) {
			t.Fatalf("seed of %d bytes, dir %v", len(got), dirNames(t, dir))
		}
	}
}

// TestSeedRefusals: a non-empty dir, a corrupt, truncated or newer file,
// a missing file or parent are refused with a clear error and change
// nothing.
func TestSeedRefusals(t *testing.T) {
	b := newTestData(50).file(t)
	files := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(files, name)
		os.WriteFile(p, data, 0o600)
		return p
	}
	good := write("good", b)
	corrupt := slices.Clone(b)
	corrupt[len(corrupt)/2] ^= 1
	newer := slices.Clone(b)
	newer[11] = FormatVersion + 1
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "cluster.json"), []byte("{}"), 0o600)
	for _, c := range []struct {
		name, from, dir string
		want            error
		msg             string
	}{
		{"non-empty dir", good, full, ErrNotEmpty, "cluster.json"},
		{"corrupt", write("corrupt", corrupt), filepath.Join(t.TempDir(), "d"), ErrCorrupt, "mismatch"},
		{"truncated", write("truncated", b[:len(b)-40]), filepath.Join(t.TempDir(), "d"), ErrTruncated, "ends at byte"},
		{"newer", write("newer", newer), filepath.Join(t.TempDir(), "d"), ErrNewerFormat, "use a newer swarmnode"},
		{"missing", filepath.Join(files, "nope"), filepath.Join(t.TempDir(), "d"), os.ErrNotExist, ""},
		{"empty dir, corrupt", write("corrupt2", corrupt), t.TempDir(), ErrCorrupt, ""},
		{"no parent", good, filepath.Join(t.TempDir(), "a", "b"), os.ErrNotExist, ""},
	} {
		var before []string
		_, statErr := os.Stat(c.dir)
		if statErr == nil {
			before = dirNames(t, c.dir)
		}
		_, err := Seed(c.from, c.dir, testRead)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: %v", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
		if _, err := os.Stat(c.dir); (err == nil) != (statErr == nil) {
			t.Fatalf("%s: dir existence changed", c.name)
		}
		if statErr == nil && !slices.Equal(dirNames(t, c.dir), before) {
			t.Fatalf("%s: dir now holds %v", c.name, dirNames(t, c.dir))
		}
	}
}

// FuzzRead: the reader never panics, and a file it accepts, written
// again from what it read, reads back the same.
func FuzzRead(f *testing.F) {
	d := testData{0: testRecords(1, 3), 3: testRecords(2, 1)}
	var b bytes.Buffer
	w, _ := NewWriter(&b, testKeys)
	for _, id := range []shard.ID{0, 3} {
		w.CopySection(bytes.NewReader(d.section(f, id)))
	}
	st := testState()
	st.Shards = st.Shards[:2]
	m, _ := shard.DefaultMap(1)
	st.Slots, st.NumShards = m.Slots[:], 4
	w.Finish(ManifestOf(st, time.Unix(5, 0)))
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:40])
	f.Add([]byte(magic + "\x00\x00\x00\x02M\x00\x00\x00\x02{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, m, err := readAll(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerFormat) && !errors.Is(err, ErrSignature) && !errors.Is(err, ErrUnsigned) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		var out bytes.Buffer
		w, _ := NewWriter(&out, testKeys)
		for _, s := range m.Shards {
			fs := w.Section(s.Shard, s.Index)
			for _, r := range got[s.Shard] {
				if err := fs.Record(r.k, r.v); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := fs.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		m2 := *m
		m2.Shards = slices.Clone(m.Shards)
		if err := w.Finish(&m2); err != nil {
			t.Fatal(err)
		}
		again, m3, err := readAll(&out)
		if err != nil || !sameData(again, got) || !reflect.DeepEqual(m3, m) {
			t.Fatalf("rewritten file: %v", err)
		}
	})
}
