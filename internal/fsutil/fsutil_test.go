package fsutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestPrivateDir: a new dir (and its missing parents) is 0700, and an
// existing wider one becomes 0700.
func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	nested := filepath.Join(base, "a", "b")
	if err := PrivateDir(nested); err != nil {
		t.Fatal(err)
	}
	wide := filepath.Join(base, "wide")
	if err := os.Mkdir(wide, 0o755); err != nil { // as an operator may have made it
		t.Fatal(err)
	}
	if err := os.Chmod(wide, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if err := PrivateDir(wide); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(base, "a"), nested, wide} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != fs.ModeDir|0o700 {
			t.Errorf("%s: mode %v, want drwx------", dir, st.Mode())
		}
	}
}

// TestWriteFileDurable: the file holds the content, mode 0600, and a second
// write replaces it whole, leaving no temporary file.
func TestWriteFileDurable(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"first, and longer than the second\n", "second\n"} {
		if err := WriteFileDurable(dir, "state.json", []byte(content)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != content {
			t.Errorf("content %q, want %q", b, content)
		}
		st, err := os.Stat(filepath.Join(dir, "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != 0o600 {
			t.Errorf("mode %v, want 0600", st.Mode())
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("dir holds %v, want state.json alone", ents)
	}
}

// TestWriteFileDurableStaleTemp: the file is 0600, with the new content,
// even over a stale temporary file left with a wider mode (moved from
// cluster's TestWriteFileDurablePrivate).
func TestWriteFileDurableStaleTemp(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json.tmp"), []byte("stale, partly written"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileDurable(dir, "state.json", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "state.json")); string(b) != "{}\n" {
		t.Errorf("content %q, want {}", b)
	}
}

// TestWriteFileDurableMissingDir: a write into a dir that does not exist
// fails and creates nothing.
func TestWriteFileDurableMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if err := WriteFileDurable(dir, "state.json", []byte("x")); err == nil {
		t.Fatal("write into a missing dir succeeded")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the write created the dir")
	}
}
