package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// stState returns a valid state for numShards shards on three nodes.
func stState(t *testing.T, numShards int) *State {
	t.Helper()
	m, err := shard.DefaultMap(numShards)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"n1", "n2", "n3"}
	s := &State{
		FormatVersion: stateFormat,
		ClusterID:     "c-123",
		MapVersion:    m.Version,
		NumShards:     numShards,
		Slots:         m.Slots[:],
		Shards:        placement.Place(ids, numShards, 3),
	}
	for i, id := range ids {
		s.Nodes = append(s.Nodes, NodeAddrs{
			ID:         id,
			RaftAddr:   fmt.Sprintf("127.0.0.1:%d7101", i+1),
			GRPCAddr:   fmt.Sprintf("127.0.0.1:%d7100", i+1),
			HTTPAddr:   fmt.Sprintf("127.0.0.1:%d7102", i+1),
			GossipAddr: fmt.Sprintf("127.0.0.1:%d7103", i+1),
		})
	}
	return s
}

func TestStateSaveLoad(t *testing.T) {
	dir := t.TempDir()
	if s, err := loadState(dir); s != nil || err != nil {
		t.Fatalf("loadState of an empty dir = %v, %v; want nil, nil", s, err)
	}
	want := stState(t, 8)
	if err := saveState(dir, want); err != nil {
		t.Fatalf("saveState: %v", err)
	}
	got, err := loadState(dir)
	if err != nil {
		t.Fatalf("loadState: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loadState = %+v, want %+v", got, want)
	}

	// Overwriting replaces the file and leaves no temp file behind.
	want.Bootstrapped = true
	want.Nodes[0].HTTPAddr = ""
	if err := saveState(dir, want); err != nil {
		t.Fatalf("saveState again: %v", err)
	}
	got, err = loadState(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("loadState after overwrite = %+v, %v; want %+v", got, err, want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != stateFile {
		t.Fatalf("data dir holds %v, want only %s", entries, stateFile)
	}
}

func TestSaveStateErrors(t *testing.T) {
	if err := saveState(filepath.Join(t.TempDir(), "missing"), stState(t, 1)); err == nil {
		t.Fatal("saveState into a missing dir succeeded")
	}
}

func TestLoadStateErrors(t *testing.T) {
	valid := func(t *testing.T) map[string]any {
		b, err := json.Marshal(stState(t, 4))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	slots := func(n int, f func(i int) int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		file func(t *testing.T) []byte // the file's content
		want string
	}{
		{"empty file", func(*testing.T) []byte { return nil }, "cluster.json: unexpected end of JSON input"},
		{"truncated", func(t *testing.T) []byte { b, _ := json.Marshal(valid(t)); return b[:len(b)/2] }, "cluster.json: unexpected end of JSON input"},
		{"not an object", func(*testing.T) []byte { return []byte(`[1, 2]`) }, "cluster.json: json: cannot unmarshal array"},
		{"wrong field type", func(t *testing.T) []byte {
			m := valid(t)
			m["num_shards"] = "four"
			b, _ := json.Marshal(m)
			return b
		}, "cluster.json: json: cannot unmarshal string"},
		{"negative shard in slots", func(t *testing.T) []byte {
			m := valid(t)
			m["slots"] = slots(shard.NumSlots, func(i int) int { return -1 })
			b, _ := json.Marshal(m)
			return b
		}, "cluster.json: json: cannot unmarshal number -1"},
		{"format version 0", func(t *testing.T) []byte {
			m := valid(t)
			delete(m, "format_version")
			b, _ := json.Marshal(m)
			return b
		}, "unsupported format version 0"},
		{"format version 3", func(t *testing.T) []byte {
			m := valid(t)
			m["format_version"] = 3
			b, _ := json.Marshal(m)
			return b
		}, "unsupported format version 3"},
		{"no slots", func(t *testing.T) []byte {
			m := valid(t)
			delete(m, "slots")
			b, _ := json.Marshal(m)
			return b
		}, "0 slots in cluster.json"},
		{"255 slots", func(t *testing.T) []byte {
			m := valid(t)
			m["slots"] = slots(shard.NumSlots-1, func(i int) int { return i % 4 })
			b, _ := json.Marshal(m)
			return b
		}, "255 slots in cluster.json"},
		{"257 slots", func(t *testing.T) []byte {
			m := valid(t)
			m["slots"] = slots(shard.NumSlots+1, func(i int) int { return i % 4 })
			b, _ := json.Marshal(m)
			return b
		}, "257 slots in cluster.json"},
		{"slot past the shards", func(t *testing.T) []byte {
			m := valid(t)
			m["slots"] = slots(shard.NumSlots, func(i int) int { return i % 5 })
			b, _ := json.Marshal(m)
			return b
		}, "maps to shard 4, want < 4"},
		// A shard that owns no slot is legal since elastic shards (a
		// split's target before its move publishes; ids with holes after
		// a merge): shard.Map's tests cover it.
		{"map version 0", func(t *testing.T) []byte {
			m := valid(t)
			m["map_version"] = 0
			b, _ := json.Marshal(m)
			return b
		}, "version 0, want >= 1"},
		{"zero shards", func(t *testing.T) []byte {
			m := valid(t)
			m["num_shards"] = 0
			b, _ := json.Marshal(m)
			return b
		}, "0 shards, want 1..256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, stateFile), tc.file(t), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := loadState(dir)
			if err == nil || s != nil {
				t.Fatalf("loadState = %+v, %v; want an error containing %q", s, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "cluster: cluster.json: ") {
				t.Fatalf("loadState: %v, want an error \"cluster: cluster.json: ...\" containing %q", err, tc.want)
			}
		})
	}
	t.Run("slot table errors wrap ErrInvalidMap", func(t *testing.T) {
		dir := t.TempDir()
		s := stState(t, 4)
		s.Slots = s.Slots[:10]
		if err := saveState(dir, s); err != nil {
			t.Fatal(err)
		}
		if _, err := loadState(dir); !errors.Is(err, shard.ErrInvalidMap) {
			t.Fatalf("loadState: %v, want ErrInvalidMap", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		dir := t.TempDir()
		// A directory where the file should be: reading it fails, and
		// that is not "absent".
		if err := os.Mkdir(filepath.Join(dir, stateFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if s, err := loadState(dir); err == nil || s != nil {
			t.Fatalf("loadState = %v, %v; want an error", s, err)
		}
	})
}
