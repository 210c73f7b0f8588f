package pki

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func issue(t *testing.T) (*CA, *Pair) {
	t.Helper()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(Request{Node: "n1", Valid: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return ca, p
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

// TestWriteFilesPrivateAndAtomic: keys are written 0600 through a fresh
// O_EXCL temporary file, whatever was planted at a predictable temporary
// name (a 0644 file, a symlink to elsewhere), and no temporary file stays.
func TestWriteFilesPrivateAndAtomic(t *testing.T) {
	_, p := issue(t)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "stolen")
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// What the previous writer used as its temporary names.
	if err := os.WriteFile(filepath.Join(dir, "n1-key.pem.tmp"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "n1.pem.tmp")); err != nil {
		t.Fatal(err)
	}
	// An existing key file open to others is replaced by a private one.
	if err := os.WriteFile(filepath.Join(dir, "n1-key.pem"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFiles(dir, "n1", p); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, filepath.Join(dir, "n1-key.pem")); m != 0o600 {
		t.Errorf("n1-key.pem: mode %v, want 0600", m)
	}
	if m := mode(t, filepath.Join(dir, "n1.pem")); m != 0o644 {
		t.Errorf("n1.pem: mode %v, want 0644", m)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "n1-key.pem")); !bytes.Equal(b, p.KeyPEM) {
		t.Errorf("n1-key.pem does not hold the key")
	}
	if b, _ := os.ReadFile(outside); len(b) != 0 {
		t.Errorf("a planted symlink was followed: %d bytes written outside", len(b))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestWriteCARefusesOverwrite: a second CA in the same folder is refused
// and the first key stays as it was; WriteNew never replaces.
func TestWriteCARefusesOverwrite(t *testing.T) {
	ca, _ := issue(t)
	dir := t.TempDir()
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, filepath.Join(dir, "ca-key.pem")); m != 0o600 {
		t.Errorf("ca-key.pem: mode %v, want 0600", m)
	}
	other, _ := issue(t)
	if err := other.WriteCA(dir); err == nil || !strings.Contains(err.Error(), "already holds a CA") {
		t.Fatalf("second WriteCA: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem")); !bytes.Equal(b, ca.KeyPEM) {
		t.Fatal("the CA key was replaced")
	}
	if err := WriteNew(filepath.Join(dir, "ca.pem"), []byte("x"), 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteNew over an existing file: %v", err)
	}
	if _, err := LoadCA(dir); err != nil {
		t.Fatal(err)
	}
}
