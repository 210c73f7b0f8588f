package backup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyFile: the key file's rules (mode, length, no repeated key) and
// MakeKeyFile's file (owner-only, one key, never replaced).
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "backup.key")
	if err := MakeKeyFile(p); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	k, err := LoadKeys(p)
	if err != nil || len(k.keys) != 1 || len(k.keys[0]) != 64 {
		t.Fatalf("made key: %v", err)
	}
	before, _ := os.ReadFile(p)
	if err := MakeKeyFile(p); !errors.Is(err, os.ErrExist) {
		t.Fatalf("made over an existing key: %v", err)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
		t.Fatal("the key changed")
	}
	os.Chmod(p, 0o640)
	if _, err := LoadKeys(p); !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable: %v", err)
	}
	long := strings.Repeat("k", MinKeyBytes)
	for _, c := range []struct{ text, msg string }{
		{"", "no key"},
		{"\n  \n", "no key"},
		{"short\n", "line 1 holds 5 bytes"},
		{long + "\n" + long + "\n", "line 2 repeats a key"},
		{strings.Repeat("x", maxKeyFile+1), "over"},
	} {
		if _, err := ParseKeys([]byte(c.text)); !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%q: %v", c.text, err)
		}
	}
	k, err = ParseKeys([]byte("  " + long + " \n\n" + long + "2\n"))
	if err != nil || len(k.keys) != 2 || string(k.keys[0]) != long {
		t.Fatalf("two keys: %v", err)
	}
}

// FuzzParseKeys: the key file parser never panics; a key file it accepts
// signs what it verifies, under each of its keys.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte(strings.Repeat("k", 32)))
	f.Add([]byte(strings.Repeat("a", 40) + "\n" + strings.Repeat("b", 33) + "\n"))
	f.Add([]byte("short\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		k, err := ParseKeys(text)
		if err != nil {
			if !errors.Is(err, ErrKeyFile) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		sum := bytes.Repeat([]byte{7}, 32)
		sig, err := parseSignature(k.sign(FormatVersion, sum))
		if err != nil {
			t.Fatal(err)
		}
		if err := k.verify(sig, FormatVersion, sum); err != nil {
			t.Fatal(err)
		}
		if err := k.verify(sig, FormatVersion, bytes.Repeat([]byte{8}, 32)); !errors.Is(err, ErrSignature) {
			t.Fatalf("another checksum verified: %v", err)
		}
	})
}

// FuzzSignature: the signature block decoder never panics, accepts
// exactly the blocks of sigLen bytes with the tag, and a block it
// accepts verifies only if it is the signer's own block.
func FuzzSignature(f *testing.F) {
	sum := bytes.Repeat([]byte{1}, 32)
	good := testKeys.sign(FormatVersion, sum)
	f.Add(good)
	f.Add(good[:sigLen-1])
	f.Add(append(bytes.Clone(good), 0))
	f.Add(make([]byte, sigLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		sig, err := parseSignature(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || len(b) == sigLen && b[0] == tagSignature {
				t.Fatalf("refused %x: %v", b, err)
			}
			return
		}
		if len(b) != sigLen || b[0] != tagSignature {
			t.Fatalf("accepted %x", b)
		}
		err = testKeys.verify(sig, FormatVersion, sum)
		if (err == nil) != bytes.Equal(b, good) {
			t.Fatalf("block %x: verify %v", b, err)
		}
		if err != nil && !errors.Is(err, ErrSignature) {
			t.Fatalf("error of another kind: %v", err)
		}
	})
}
