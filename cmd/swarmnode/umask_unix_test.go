//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRestrictUmask: after serve's restrictUmask, files and dirs that
// libraries create with 0666 / 0777 (Pebble, raft snapshots) are owner-only.
func TestRestrictUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	restrictUmask()
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"f": 0o600, "d": 0o700} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
}
