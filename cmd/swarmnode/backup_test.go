package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/backup"
)

// checkBackupCLI backs the one-node cluster up, verifies the file and
// restores it; the refusals (a non-empty data dir, a corrupt, truncated
// or newer file) exit 1 with the reason and change nothing.
func checkBackupCLI(ctx context.Context, t *testing.T, httpAddr string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "b.swkvbak")
	out, _, err := runCmd(ctx, "backup", "--admin", httpAddr, "--out", file)
	if err != nil || !strings.Contains(out, "backup "+file+": cluster ") || !strings.Contains(out, "2 shards") {
		t.Fatalf("backup = %v, %q", err, out)
	}
	if names := dirEntries(t, dir); !slices.Equal(names, []string{"b.swkvbak"}) {
		t.Fatalf("after the backup the dir holds %v", names)
	}
	out, _, err = runCmd(ctx, "backup", "verify", file)
	if err != nil || !strings.Contains(out, file+": ok") || !strings.Contains(out, "SHARD") || !strings.Contains(out, "total") {
		t.Fatalf("backup verify = %v\n%s", err, out)
	}
	var m backup.Manifest
	if out, _, err = runCmd(ctx, "backup", "verify", "--json", file); err != nil || json.Unmarshal([]byte(out), &m) != nil || len(m.Shards) != 2 {
		t.Fatalf("backup verify --json = %v\n%s", err, out)
	}

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
		out, _, err := runCmd(ctx, "restore", "--from", tc.from, "--data-dir", tc.dataDir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != 1 {
			t.Errorf("restore from %s into %s = %v, %q; want an error containing %q", tc.from, tc.dataDir, err, out, tc.want)
		}
		if tc.dataDir != full {
			if _, err := os.Stat(tc.dataDir); !os.IsNotExist(err) {
				t.Errorf("a refused restore made %s", tc.dataDir)
			}
		}
		if _, _, err := runCmd(ctx, "backup", "verify", tc.from); tc.dataDir != full && (err == nil || exitCode(err) != 1) {
			t.Errorf("verify %s = %v, want exit 1", tc.from, err)
		}
	}
	if names := dirEntries(t, full); !slices.Equal(names, []string{"cluster.json"}) {
		t.Fatalf("a refused restore changed a data dir: %v", names)
	}
	seeded := filepath.Join(dir, "seeded")
	if out, _, err = runCmd(ctx, "restore", "--from", file, "--data-dir", seeded); err != nil || !strings.Contains(out, "restored "+file) {
		t.Fatalf("restore = %v, %q", err, out)
	}
	if names := dirEntries(t, seeded); !slices.Equal(names, []string{backup.SeedFile}) {
		t.Fatalf("seeded dir holds %v", names)
	}
	for _, args := range [][]string{{"backup", "--admin", httpAddr}, {"restore", "--from", file}, {"backup", "verify"}} {
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
