package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/cluster/placement"
)

// checkBackupCLI backs the one-node cluster up (making the key file),
// verifies the file and restores it; the refusals (a non-empty data dir,
// a corrupt, truncated or newer file; a forged, wrongly signed or
// unsigned one, see checkBackupSignatureCLI) exit 1 with the reason and
// change nothing.
func checkBackupCLI(ctx context.Context, t *testing.T, httpAddr string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "b.swkvbak")
	keyFile := filepath.Join(t.TempDir(), "backup.key")
	out, errOut, err := runCmd(ctx, "backup", "--admin", httpAddr, "--out", file, "--backup-key-file", keyFile)
	if err != nil || !strings.Contains(out, "backup "+file+": signed with key ") || !strings.Contains(out, "2 shards") ||
		!strings.Contains(errOut, "made the backup key file "+keyFile) {
		t.Fatalf("backup = %v, %q, %q", err, out, errOut)
	}
	if names := dirEntries(t, dir); !slices.Equal(names, []string{"b.swkvbak"}) {
		t.Fatalf("after the backup the dir holds %v", names)
	}
	out, _, err = runCmd(ctx, "backup", "verify", file, "--backup-key-file", keyFile)
	if err != nil || !strings.Contains(out, file+": ok (signature ok, key ") || !strings.Contains(out, "SHARD") || !strings.Contains(out, "total") {
		t.Fatalf("backup verify = %v\n%s", err, out)
	}
	var m backup.Manifest
	if out, _, err = runCmd(ctx, "backup", "verify", "--json", file, "--backup-key-file", keyFile); err != nil || json.Unmarshal([]byte(out), &m) != nil || len(m.Shards) != 2 {
		t.Fatalf("backup verify --json = %v\n%s", err, out)
	}
	checkBackupSignatureCLI(ctx, t, file, keyFile)

	data, _ := os.ReadFile(file)
	corrupt := slices.Clone(data)
	corrupt[len(corrupt)/2] ^= 0x10
	newer := slices.Clone(data)
	newer[11]++
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := filepath.Join(dir, "full")
	os.Mkdir(full, 0o700)
	os.WriteFile(filepath.Join(full, "cluster.json"), []byte("{}"), 0o600)
	for _, tc := range []struct {
		from, dataDir, want string
	}{
		{file, full, "data dir not empty"},
		{write("corrupt", corrupt), filepath.Join(dir, "d1"), "corrupt file"},
		{write("truncated", data[:len(data)-100]), filepath.Join(dir, "d2"), "truncated"},
		{write("newer", newer), filepath.Join(dir, "d3"), "newer format"},
	} {
		out, _, err := runCmd(ctx, "restore", "--from", tc.from, "--data-dir", tc.dataDir, "--backup-key-file", keyFile)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != 1 {
			t.Errorf("restore from %s into %s = %v, %q; want an error containing %q", tc.from, tc.dataDir, err, out, tc.want)
		}
		if tc.dataDir != full {
			if _, err := os.Stat(tc.dataDir); !os.IsNotExist(err) {
				t.Errorf("a refused restore made %s", tc.dataDir)
			}
		}
		if _, _, err := runCmd(ctx, "backup", "verify", tc.from, "--backup-key-file", keyFile); tc.dataDir != full && (err == nil || exitCode(err) != 1) {
			t.Errorf("verify %s = %v, want exit 1", tc.from, err)
		}
	}
	if names := dirEntries(t, full); !slices.Equal(names, []string{"cluster.json"}) {
		t.Fatalf("a refused restore changed a data dir: %v", names)
	}
	seeded := filepath.Join(dir, "seeded")
	if out, _, err = runCmd(ctx, "restore", "--from", file, "--data-dir", seeded, "--backup-key-file", keyFile); err != nil || !strings.Contains(out, "restored "+file+" (signature ok") {
		t.Fatalf("restore = %v, %q", err, out)
	}
	if names := dirEntries(t, seeded); !slices.Equal(names, []string{backup.SeedFile}) {
		t.Fatalf("seeded dir holds %v", names)
	}
	for _, args := range [][]string{{"backup", "--admin", httpAddr}, {"backup", "--admin", httpAddr, "--out", file}, {"restore", "--from", file}, {"backup", "verify"}} {
		if _, _, err := runCmd(ctx, args...); exitCode(err) != 2 {
			t.Errorf("%q = %v, want a usage error", args, err)
		}
	}
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
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

// checkBackupSignatureCLI: the live attack of issue 37 (the backup
// rewritten with package backup's writer, an admin token planted and a
// record changed, checksums recomputed, signed with another key) and a
// wrong key file fail verify and restore with exit 1 and restore
// nothing; a signed file without a key file is refused, naming the flag;
// an unsigned file (format version 1) is refused without
// --trust-unsigned, naming it, and accepted with it.
func checkBackupSignatureCLI(ctx context.Context, t *testing.T, file, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	keys, err := backup.LoadKeys(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(file)
	forgerKeys, _ := backup.ParseKeys([]byte("the forger's own key, not the operator's"))
	forged := filepath.Join(dir, "forged")
	os.WriteFile(forged, forgeBackup(t, data, keys, forgerKeys), 0o600)
	otherKey := filepath.Join(dir, "other.key")
	if err := backup.MakeKeyFile(otherKey); err != nil {
		t.Fatal(err)
	}
	unsigned := filepath.Join(dir, "unsigned")
	os.WriteFile(unsigned, unsignBackup(t, data), 0o600)
	for _, c := range []struct {
		name, from string
		flags      []string
		want       string
	}{
		{"forged", forged, []string{"--backup-key-file", keyFile}, "bad signature: signed with key"},
		{"forged, trust-unsigned", forged, []string{"--backup-key-file", keyFile, "--trust-unsigned"}, "bad signature"},
		{"wrong key", file, []string{"--backup-key-file", otherKey}, "not in the backup key file"},
		{"no key", file, nil, "--backup-key-file"},
		{"unsigned", unsigned, []string{"--backup-key-file", keyFile}, "--trust-unsigned"},
	} {
		if out, _, err := runCmd(ctx, append([]string{"backup", "verify", c.from}, c.flags...)...); err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: verify = %v, %q; want exit 1 and %q", c.name, err, out, c.want)
		}
		to := filepath.Join(dir, "d-"+strings.ReplaceAll(c.name, " ", "-"))
		out, _, err := runCmd(ctx, append([]string{"restore", "--from", c.from, "--data-dir", to}, c.flags...)...)
		if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: restore = %v, %q; want exit 1 and %q", c.name, err, out, c.want)
		}
		t.Logf("%s: %v", c.name, err)
		if _, err := os.Stat(to); !os.IsNotExist(err) {
			t.Fatalf("%s: a refused restore made %s", c.name, to)
		}
	}
	if out, _, err := runCmd(ctx, "backup", "verify", unsigned, "--trust-unsigned"); err != nil || !strings.Contains(out, "UNSIGNED, trusted with --trust-unsigned") {
		t.Fatalf("unsigned, trusted: verify = %v, %q", err, out)
	}
	to := filepath.Join(dir, "d-trusted")
	if out, _, err := runCmd(ctx, "restore", "--from", unsigned, "--data-dir", to, "--trust-unsigned"); err != nil || !strings.Contains(out, "UNSIGNED") {
		t.Fatalf("unsigned, trusted: restore = %v, %q", err, out)
	}
	if names := dirEntries(t, to); !slices.Equal(names, []string{backup.SeedFile}) {
		t.Fatalf("trusted restore: %v", names)
	}
}

// forgeBackup rewrites a backup with package backup's writer: the last
// record of the first non-empty shard gets another value, the manifest
// an admin token, and the file is signed with forger.
func forgeBackup(t *testing.T, data []byte, keys, forger *backup.Keys) []byte {
	t.Helper()
	r, err := backup.NewReader(bytes.NewReader(data), backup.ReadOptions{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := backup.NewWriter(&out, forger)
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for {
		s, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var recs [][2][]byte
		for {
			k, v, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		}
		fs := w.Section(s.Shard, s.Index)
		for i, kv := range recs {
			if i == len(recs)-1 && !changed && kv[0][0] != 0 {
				kv[1], changed = []byte("forged"), true
			}
			if err := fs.Record(kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fs.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	m := r.Manifest()
	m.Tokens = append(m.Tokens, placement.Token{ID: "00000000deadbeef", Name: "planted", Roles: []string{"admin"},
		Hash: strings.Repeat("cd", 32), Created: time.Unix(2, 0).UTC()})
	if err := w.Finish(m); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// unsignBackup turns a signed file into one of format version 1, as
// releases before signatures wrote them.
func unsignBackup(t *testing.T, b []byte) []byte {
	t.Helper()
	js := bytes.LastIndex(b, []byte(`{"format_version":2,`))
	n := int(binary.BigEndian.Uint32(b[js-4 : js]))
	out := bytes.Clone(b[:js+n])
	binary.BigEndian.PutUint32(out[8:], 1)
	out[js+len(`{"format_version":`)] = '1'
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}
