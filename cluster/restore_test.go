package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/seed"
	"github.com/swarmkv/swarmkv/shard"
)

// oneShardBackup is a signed backup file of a one-shard cluster holding
// one record and token tok.
func oneShardBackup(t *testing.T, tok placement.Token) []byte {
	t.Helper()
	m, _ := shard.DefaultMap(1)
	st := &placement.State{FormatVersion: placement.StateFormat, ClusterID: "src", ReplicationFactor: 1,
		MapVersion: m.Version, NumShards: m.NumShards, Slots: m.Slots[:], Shards: []placement.Placement{{Shard: 0, Voters: []string{"n1"}}},
		Tokens: []placement.Token{tok}}
	var b bytes.Buffer
	w, err := backup.NewWriter(&b, backupKeys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Section(0, 5).Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(backup.ManifestOf(st, time.Unix(100, 0))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// editManifest rewrites a file's manifest JSON with edit and recomputes
// the whole-file checksum, keeping the signature block (which a node's
// seed is not checked against: swarmnode restore checked it).
func editManifest(t *testing.T, b []byte, edit func(*backup.Manifest)) []byte {
	t.Helper()
	const sigLen = 1 + 8 + 32
	js := bytes.LastIndex(b, []byte(`{"format_version":`))
	n := int(binary.BigEndian.Uint32(b[js-4 : js]))
	var m backup.Manifest
	if err := json.Unmarshal(b[js:js+n], &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	nj, _ := json.Marshal(&m)
	out := binary.BigEndian.AppendUint32(bytes.Clone(b[:js-4]), uint32(len(nj)))
	out = append(out, nj...)
	sum := sha256.Sum256(out)
	return append(append(out, sum[:]...), b[len(b)-sigLen:]...)
}

// TestRestoreSeedRevalidatesTokens: a node whose seed holds a token token
// create would refuse (a role that does not parse; a token bound to an
// actor with pools:impersonate), as a seed edited in the data dir or
// restored from an older swarmnode would, refuses to start, naming the
// token, and installs nothing (no cluster state, no replica); a seed
// with valid tokens starts.
func TestRestoreSeedRevalidatesTokens(t *testing.T) {
	good := placement.Token{ID: "0123456789abcdef", Name: "ops", Roles: []string{"pools:read"}, Actor: "u1",
		Hash: strings.Repeat("ab", 32), Created: time.Unix(1, 0).UTC()}
	file := oneShardBackup(t, good)
	for _, c := range []struct {
		name string
		edit func(*placement.Token)
		msg  string
	}{
		{"bad role", func(tk *placement.Token) { tk.Roles = []string{"superuser"} }, `bad role "superuser"`},
		{"bound impersonate", func(tk *placement.Token) { tk.Roles = []string{"pools:impersonate", "admin"} }, "cannot have the pools:impersonate role"},
	} {
		seed := editManifest(t, file, func(m *backup.Manifest) { c.edit(&m.Tokens[0]) })
		dir := filepath.Join(t.TempDir(), "n1")
		os.Mkdir(dir, 0o700)
		if err := os.WriteFile(filepath.Join(dir, backup.SeedFile), seed, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := Config{ID: "n1", DataDir: dir, Seed: backup.Seeds{}, RaftAddr: freePort(t), GRPCAddr: freePort(t), GossipAddr: freePort(t),
			GossipProfile: "local", Logger: testLogger(t)}
		n, err := New(cfg, APIServices)
		if err == nil {
			n.Close()
			t.Fatalf("%s: the node started", c.name)
		}
		if !errors.Is(err, backup.ErrBadToken) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "nothing was restored") {
			t.Fatalf("%s: %v", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if slices.Contains([]string{"cluster.json", "shards", "meta"}, e.Name()) {
				t.Fatalf("%s: a refused restore installed %s", c.name, e.Name())
			}
		}
	}
	// The same file, untouched but for a recomputed checksum, restores.
	dir := filepath.Join(t.TempDir(), "n1")
	os.Mkdir(dir, 0o700)
	os.WriteFile(filepath.Join(dir, backup.SeedFile), editManifest(t, file, func(*backup.Manifest) {}), 0o600)
	n, err := New(Config{ID: "n1", DataDir: dir, Seed: backup.Seeds{}, RaftAddr: freePort(t), GRPCAddr: freePort(t), GossipAddr: freePort(t),
		GossipProfile: "local", Logger: testLogger(t)}, APIServices)
	if err != nil {
		t.Fatalf("a valid seed: %v", err)
	}
	n.Close()
}

// fakeSeeds is a Seeder of one restore, counting its calls; fail, while
// set, is returned by Read once the first shard is written.
type fakeSeeds struct {
	r              *seed.Restore
	fail           error
	opens, removes int
}

func (f *fakeSeeds) Open(string) (*seed.Restore, error) { f.opens++; return f.r, nil }
func (f *fakeSeeds) Remove(string) error                { f.removes++; return nil }

// TestRestoreSeamStartsOver, through Config.Seed with no backup file: a
// restore that fails after writing a shard records no cluster state and
// keeps the seed; the next start deletes the replica folders it left,
// restores, commits the new cluster's state (a new id; the source's tokens
// and next move id) and removes the seed; a start on the restored dir
// opens no seed and removes it again (an earlier start may have stopped
// before).
func TestRestoreSeamStartsOver(t *testing.T) {
	m, _ := shard.DefaultMap(2)
	tok := placement.Token{ID: "0123456789abcdef", Name: "ops", Roles: []string{"pools:read"},
		Hash: strings.Repeat("ab", 32), Created: time.Unix(1, 0).UTC()}
	f := &fakeSeeds{fail: errors.New("disk on fire")}
	f.r = &seed.Restore{Source: "fake", ClusterID: "src", Created: time.Unix(100, 0), ReplicationFactor: 3, Map: m,
		NextMoveID: 9, Tokens: []placement.Token{tok}, Shards: []seed.Shard{{ID: 0, Index: 5}, {ID: 1, Index: 7, Incarnation: 2}},
		Read: func(fn func(seed.Shard, func() ([]byte, []byte, error)) error) error {
			for i, s := range f.r.Shards {
				if i == 1 && f.fail != nil {
					return f.fail
				}
				if err := fn(s, func() ([]byte, []byte, error) { return nil, nil, io.EOF }); err != nil {
					return err
				}
			}
			return nil
		}}
	dir := filepath.Join(t.TempDir(), "n1")
	cfg := Config{ID: "n1", DataDir: dir, Seed: f, RaftAddr: freePort(t), GRPCAddr: freePort(t), GossipAddr: freePort(t),
		GossipProfile: "local", Logger: testLogger(t)}
	if n, err := New(cfg, APIServices); err == nil || !errors.Is(err, f.fail) || !strings.Contains(err.Error(), "restore from fake") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("a failing restore: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); !errors.Is(err, os.ErrNotExist) || f.removes != 0 {
		t.Fatalf("a failed restore committed (%v) or removed its seed (%d)", err, f.removes)
	}
	marker := filepath.Join(dir, "shards", "left-over")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.fail = nil
	n, err := New(cfg, APIServices)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the restored node ready", n.Ready)
	st, _ := n.LocalState()
	n.Close()
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the interrupted restore's folders were kept: %v", err)
	}
	if st.ClusterID == "src" || st.NextMoveID != 9 || len(st.Tokens) != 1 || st.ReplicationFactor != 3 ||
		len(st.Shards) != 2 || st.Shards[1].Incarnation != 2 || f.removes != 1 {
		t.Fatalf("restored state %+v, %d removes", st, f.removes)
	}
	f.opens = 0
	n, err = New(cfg, APIServices)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	if f.opens != 0 || f.removes != 2 {
		t.Fatalf("a restart opened the seed %d times, removed it %d", f.opens, f.removes-1)
	}
}
