package backup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/seed"
	"github.com/swarmkv/swarmkv/shard"
)

// TestSeeds: Seeds.Open of a dir without a seed is nil, nil; of a seed,
// the restore of its manifest, whose Read yields every shard's records
// with its index and incarnation; a seed replaced after Open is refused
// by Read (ErrCorrupt), a corrupt one by Open, naming the file; Remove
// deletes the seed and is quiet without one.
func TestSeeds(t *testing.T) {
	dir := t.TempDir()
	if r, err := (Seeds{}).Open(dir); r != nil || err != nil {
		t.Fatalf("no seed: %v, %v", r, err)
	}
	d := newTestData(50)
	path := filepath.Join(dir, SeedFile)
	os.WriteFile(path, d.file(t), 0o600)
	r, err := Seeds{}.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := testState()
	if r.Source != path || r.ClusterID != st.ClusterID || !r.Created.Equal(time.Unix(1000, 0)) || r.Map.Version != st.MapVersion ||
		r.NextMoveID != st.NextMoveID || r.ReplicationFactor != 3 || *r.Policy != *st.Policy || len(r.Tokens) != 1 ||
		len(r.Shards) != 3 || r.Shards[2] != (seed.Shard{ID: 3, Incarnation: 5, StartsEmpty: true, Index: index(3), Records: 2}) ||
		r.Records() != uint64(len(d[0])+len(d[1])+len(d[3])) {
		t.Fatalf("restore %+v", r)
	}
	got := testData{}
	err = r.Read(func(s seed.Shard, next func() ([]byte, []byte, error)) error {
		if s.Index != index(s.ID) {
			t.Errorf("shard %d at index %d", s.ID, s.Index)
		}
		got[s.ID] = []kv{}
		for {
			k, v, err := next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			got[s.ID] = append(got[s.ID], kv{bytes.Clone(k), bytes.Clone(v)})
		}
	})
	if err != nil || !sameData(got, d) {
		t.Fatalf("read: %v (same records: %v)", err, sameData(got, d))
	}
	// Another backup (another creation time) in its place.
	other := newTestData(10)
	var b bytes.Buffer
	w, _ := NewWriter(&b, testKeys)
	for _, id := range []shard.ID{0, 1, 3} {
		w.CopySection(bytes.NewReader(other.section(t, id)))
	}
	w.Finish(ManifestOf(testState(), time.Unix(2000, 0)))
	os.WriteFile(path, b.Bytes(), 0o600)
	err = r.Read(func(seed.Shard, func() ([]byte, []byte, error)) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "changed since it was checked") {
		t.Fatalf("a replaced seed: %v", err)
	}
	os.WriteFile(path, b.Bytes()[:len(b.Bytes())-1], 0o600)
	if _, err := (Seeds{}).Open(dir); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a truncated seed: %v", err)
	}
	if err := (Seeds{}).Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := (Seeds{}).Remove(dir); err != nil || len(dirNames(t, dir)) != 0 {
		t.Fatalf("remove again: %v, %v", err, dirNames(t, dir))
	}
}
