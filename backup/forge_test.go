package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// forge rewrites the backup file b with the package's own writer, as the
// live attack of issue 37 did: shard 0's last record gets another value
// and the manifest an admin token of the forger's, every checksum
// recomputed, and the file signed with keys (the forger's: not the
// operator's).
func forge(t testing.TB, b []byte, keys *Keys) []byte {
	t.Helper()
	got, m, err := readAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := NewWriter(&out, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Shards {
		fs := w.Section(s.Shard, s.Index)
		for i, r := range got[s.Shard] {
			v := r.v
			if s.Shard == 0 && i == len(got[s.Shard])-1 {
				v = []byte("forged value")
			}
			if err := fs.Record(r.k, v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fs.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	m.Tokens = append(m.Tokens, placement.Token{ID: "00000000deadbeef", Name: "planted", Roles: []string{"admin"},
		Hash: strings.Repeat("cd", 32), Created: time.Unix(2, 0).UTC()})
	if err := w.Finish(m); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// unsign turns a file of format version 2 into a file of version 1, as
// releases before signatures wrote it: the version in the header and the
// manifest, the whole-file checksum recomputed, no signature block.
func unsign(t testing.TB, b []byte) []byte {
	t.Helper()
	js := bytes.LastIndex(b, []byte(`{"format_version":2,`))
	if js < 5 || b[js-5] != tagManifest {
		t.Fatal("no manifest found")
	}
	n := int(binary.BigEndian.Uint32(b[js-4:]))
	out := bytes.Clone(b[:js+n])
	binary.BigEndian.PutUint32(out[len(magic):], 1)
	out[js+len(`{"format_version":`)] = '1'
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}

// seedRefused runs Seed on file b with o and fails unless it is refused
// with want, leaving the data dir absent.
func seedRefused(t *testing.T, b []byte, o ReadOptions, want error) error {
	t.Helper()
	from := filepath.Join(t.TempDir(), "file")
	os.WriteFile(from, b, 0o600)
	dir := filepath.Join(t.TempDir(), "d")
	_, err := Seed(from, dir, o)
	if !errors.Is(err, want) {
		t.Fatalf("Seed: %v, want %v", err, want)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("a refused seed left %s: %v", dir, serr)
	}
	return err
}

// TestForgedFileRefused: a backup rewritten with the package's own
// writer, an admin token planted and a record changed, checksums
// recomputed (the attack of issue 37, item 4), fails Verify and Seed,
// which leaves the data dir absent: signed with another key, carrying
// the original signature block, or made an unsigned file.
func TestForgedFileRefused(t *testing.T) {
	orig := newTestData(20).file(t)
	forged := forge(t, orig, mustKeys("the forger does not have the operator's key"))
	transplant := forge(t, orig, testKeys)
	copy(transplant[len(transplant)-sigLen:], orig[len(orig)-sigLen:])
	for _, c := range []struct {
		name string
		b    []byte
		want error
		msg  string
	}{
		{"signed with another key", forged, ErrSignature, "which is not in the backup key file"},
		{"the original signature", transplant, ErrSignature, "the file was changed after it was signed"},
		{"unsigned", unsign(t, forged), ErrUnsigned, "--trust-unsigned"},
	} {
		m, err := Verify(bytes.NewReader(c.b), testRead)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: Verify: %v (manifest %+v), want %v", c.name, err, m, c.want)
		}
		t.Logf("%s: %v", c.name, err)
		seedRefused(t, c.b, testRead, c.want)
	}
	// The transplanted file differs from the original in its sections
	// and manifest only: the signature covers them.
	if _, err := Verify(bytes.NewReader(orig), testRead); err != nil {
		t.Fatal(err)
	}
}

// TestSignature: a file verifies under the key file it was signed with
// and under one where that key is not first (rotation); a wrong key, no
// key, a changed key id or signature are refused; --trust-unsigned
// accepts an unsigned file, never a wrongly signed one; SkipSignature
// checks all but the signature.
func TestSignature(t *testing.T) {
	b := newTestData(10).file(t)
	newKey := "a new key, first in the file after a rotation"
	rotated := mustKeys(newKey, "0123456789abcdef0123456789abcdef-test")
	m, err := Verify(bytes.NewReader(b), ReadOptions{Keys: rotated})
	if err != nil || m.SignedBy != testKeys.SigningKeyID() {
		t.Fatalf("rotated key file: %v, signed by %q", err, m.SignedBy)
	}
	if rotated.SigningKeyID() == testKeys.SigningKeyID() {
		t.Fatal("the rotated file signs with the old key")
	}
	wrong := mustKeys("another cluster's key, not this one's")
	for _, c := range []struct {
		name string
		b    []byte
		o    ReadOptions
		want error
		msg  string
	}{
		{"wrong key", b, ReadOptions{Keys: wrong}, ErrSignature, "not in the backup key file"},
		{"wrong key, trust-unsigned", b, ReadOptions{Keys: wrong, TrustUnsigned: true}, ErrSignature, "not in the backup key file"},
		{"no key", b, ReadOptions{}, ErrSignature, "--backup-key-file"},
		{"unsigned", unsign(t, b), testRead, ErrUnsigned, "--trust-unsigned"},
		{"mac changed", flip(b, len(b)-1), testRead, ErrSignature, "does not match"},
		{"key id changed", flip(b, len(b)-sigLen+1), testRead, ErrSignature, "not in the backup key file"},
		{"tag changed", flip(b, len(b)-sigLen), testRead, ErrCorrupt, "where the signature starts"},
		{"signature cut", b[:len(b)-1], testRead, ErrTruncated, "in the signature"},
	} {
		_, err := Verify(bytes.NewReader(c.b), c.o)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: %v, want %v with %q", c.name, err, c.want, c.msg)
		}
		t.Logf("%s: %v", c.name, err)
	}
	seedRefused(t, b, ReadOptions{Keys: wrong}, ErrSignature)
	seedRefused(t, unsign(t, b), testRead, ErrUnsigned)

	// Trusted: an unsigned file with the flag; a seed is the file.
	u := unsign(t, b)
	if m, err := Verify(bytes.NewReader(u), ReadOptions{TrustUnsigned: true}); err != nil || m.SignedBy != "" || m.FormatVersion != 1 {
		t.Fatalf("unsigned, trusted: %v", err)
	}
	from := filepath.Join(t.TempDir(), "old")
	os.WriteFile(from, u, 0o600)
	dir := filepath.Join(t.TempDir(), "d")
	if _, err := Seed(from, dir, ReadOptions{TrustUnsigned: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, SeedFile)); !bytes.Equal(got, u) {
		t.Fatal("the seed is not the file")
	}
	// SkipSignature: the checksums still count.
	if m, err := Verify(bytes.NewReader(b), ReadOptions{SkipSignature: true}); err != nil || m.SignedBy != "" {
		t.Fatalf("skip: %v", err)
	}
	if _, err := Verify(bytes.NewReader(flip(b, len(b)/2)), ReadOptions{SkipSignature: true}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("skip, corrupt: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x41
	return c
}

// TestTokenRules: a file holding a token token create would refuse (a
// role that does not parse, none, a bound token with pools:impersonate, a
// bad actor, id or hash, the same id twice) is refused by the writer and
// the reader (a file made without the check), whatever its signature.
func TestTokenRules(t *testing.T) {
	good := placement.Token{ID: "0123456789abcdef", Name: "ok", Roles: []string{"kv:read"}, Hash: strings.Repeat("ab", 32)}
	for _, c := range []struct {
		name string
		edit func(*placement.Token)
		msg  string
	}{
		{"bad role", func(t *placement.Token) { t.Roles = []string{"root"} }, "root"},
		{"no role", func(t *placement.Token) { t.Roles = nil }, "at least one role"},
		{"bound impersonate", func(t *placement.Token) { t.Actor, t.Roles = "u1", []string{"pools:impersonate"} }, "pools:impersonate"},
		{"bad actor", func(t *placement.Token) { t.Actor = "bad\x00actor" }, "actor"},
		{"bad id", func(t *placement.Token) { t.ID = "t1" }, "16 hex digits"},
		{"bad hash", func(t *placement.Token) { t.Hash = "ab" }, "hash"},
		{"no name", func(t *placement.Token) { t.Name = "" }, "token name"},
		{"spaced name", func(t *placement.Token) { t.Name = " ops" }, "surrounding space"},
	} {
		tok := good
		c.edit(&tok)
		if err := CheckToken(tok); !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: CheckToken: %v", c.name, err)
		}
		st := testState()
		st.Tokens = append(st.Tokens, tok)
		b, err := rawFile(t, newTestData(3), ManifestOf(st, time.Unix(9, 0)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Verify(bytes.NewReader(b), testRead)
		if !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s: Verify: %v", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
		seedRefused(t, b, testRead, ErrBadToken)
		var out bytes.Buffer
		w, _ := NewWriter(&out, testKeys)
		d := newTestData(3)
		for _, id := range []shard.ID{0, 1, 3} {
			w.CopySection(bytes.NewReader(d.section(t, id)))
		}
		if err := w.Finish(ManifestOf(st, time.Unix(9, 0))); !errors.Is(err, ErrBadToken) {
			t.Fatalf("%s: the writer took it: %v", c.name, err)
		}
	}
	st := testState()
	st.Tokens = append(st.Tokens, st.Tokens[0])
	b, _ := rawFile(t, newTestData(3), ManifestOf(st, time.Unix(9, 0)))
	if _, err := Verify(bytes.NewReader(b), testRead); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("the same id twice: %v", err)
	}
}

// rawFile writes a signed file of d with manifest m as it is, without the
// writer's checks of m (as a writer without them would).
func rawFile(t testing.TB, d testData, m *Manifest) ([]byte, error) {
	var out bytes.Buffer
	w, err := NewWriter(&out, testKeys)
	if err != nil {
		return nil, err
	}
	for i, id := range []shard.ID{0, 1, 3} {
		info, err := w.CopySection(bytes.NewReader(d.section(t, id)))
		if err != nil {
			return nil, err
		}
		info.Incarnation, info.StartsEmpty = m.Shards[i].Incarnation, m.Shards[i].StartsEmpty
		m.Shards[i] = info
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	w.w.Write(append(binary.BigEndian.AppendUint32([]byte{tagManifest}, uint32(len(js))), js...))
	sum := w.sum.Sum(nil)
	w.out.Write(sum)
	w.out.Write(testKeys.sign(FormatVersion, sum))
	err = w.out.Flush()
	return out.Bytes(), err
}
