package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/records"
)

// testKey returns a deterministic 32-byte key and its base64 text.
func testKey(seed uint64) ([]byte, string) {
	rng := rand.New(rand.NewPCG(seed, 0x5ec2e75))
	k := make([]byte, KeySize)
	for i := range k {
		k[i] = byte(rng.Uint32())
	}
	return k, base64.StdEncoding.EncodeToString(k)
}

func mustRing(t testing.TB, text string) *Ring {
	t.Helper()
	r, err := ParseRing(text)
	if err != nil {
		t.Fatalf("ParseRing: %v", err)
	}
	return r
}

// format writes r back as ring text (test only: the package never prints
// key material).
func format(r *Ring) string {
	var b strings.Builder
	for _, k := range r.keys {
		fmt.Fprintf(&b, "%s:%s\n", k.id, base64.StdEncoding.EncodeToString(k.raw[:]))
	}
	return b.String()
}

func sameRing(a, b *Ring) bool {
	if len(a.keys) != len(b.keys) {
		return false
	}
	for i := range a.keys {
		if a.keys[i].id != b.keys[i].id || a.keys[i].raw != b.keys[i].raw {
			return false
		}
	}
	return true
}

func TestParseRing(t *testing.T) {
	_, k1 := testKey(1)
	_, k2 := testKey(2)
	short := base64.StdEncoding.EncodeToString(make([]byte, 16))
	long := base64.StdEncoding.EncodeToString(make([]byte, 33))
	ok := []struct {
		name, text string
		ids        []string
	}{
		{"one", "k1:" + k1, []string{"k1"}},
		{"two, first active", "k2:" + k2 + "\nk1:" + k1 + "\n", []string{"k2", "k1"}},
		{"comments and blanks", "# rotated 2026-02\n\n  k2 : " + k2 + "  \r\n#k0:old\r\nk1:" + k1 + "\r\n", []string{"k2", "k1"}},
		{"visible ascii id", "a.B-9_~!@:" + k1, []string{"a.B-9_~!@"}},
		{"64-byte id", strings.Repeat("x", 64) + ":" + k1, []string{strings.Repeat("x", 64)}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRing(t, tc.text)
			if got := strings.Join(r.KeyIDs(), ","); got != strings.Join(tc.ids, ",") {
				t.Fatalf("ids %s, want %s", got, strings.Join(tc.ids, ","))
			}
			if r.ActiveKeyID() != tc.ids[0] {
				t.Fatalf("active %s, want %s", r.ActiveKeyID(), tc.ids[0])
			}
		})
	}

	bad := []struct {
		name, text, want string
	}{
		{"empty", "", "no keys"},
		{"only comments", "# k1:" + k1 + "\n\n", "no keys"},
		{"no colon", k1, "line 1: want key_id:base64key"},
		{"empty id", ":" + k1, "line 1: key id is 0 bytes"},
		{"long id", strings.Repeat("x", 65) + ":" + k1, "key id is 65 bytes"},
		{"space in id", "k 1:" + k1, "visible ASCII"},
		{"control in id", "k\x001:" + k1, "visible ASCII"},
		{"non-ascii id", "clé:" + k1, "visible ASCII"},
		{"duplicate id", "k1:" + k1 + "\nk1:" + k2, `line 2: key id "k1" repeats`},
		{"not base64", "k1:" + k1[:20] + "*" + k1[21:], `key "k1" is not standard base64`},
		{"url base64", "k1:" + strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16))), "not standard base64"},
		{"unpadded", "k1:" + strings.TrimRight(base64.StdEncoding.EncodeToString(make([]byte, 31)), "="), "not standard base64"},
		{"short key", "k1:" + short, `key "k1" is 16 bytes, want 32`},
		{"long key", "k1:" + long, `key "k1" is 33 bytes, want 32`},
		{"bad second line", "k1:" + k1 + "\n\nk2:" + short, "line 3:"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRing(tc.text)
			if err == nil {
				t.Fatalf("ParseRing accepted it: %v", r)
			}
			if !errors.Is(err, ErrInvalidRing) {
				t.Fatalf("error %v does not wrap ErrInvalidRing", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			for _, secret := range []string{k1, k2, short, long, k1[:20]} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q contains key material", err)
				}
			}
		})
	}
}

func TestEncryptDecrypt(t *testing.T) {
	_, k1 := testKey(1)
	r := mustRing(t, "k1:"+k1)
	for _, token := range []string{"", "MTIz.abc.xyz", strings.Repeat("t", 4096)} {
		a, err := r.Encrypt("123456789012345678", token)
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Encrypt("123456789012345678", token)
		if err != nil {
			t.Fatal(err)
		}
		if a.KeyID != "k1" || len(a.Nonce) != NonceSize || len(a.Ciphertext) != len(token)+16 {
			t.Fatalf("sealed %q: key %q, nonce %d bytes, ciphertext %d bytes", token, a.KeyID, len(a.Nonce), len(a.Ciphertext))
		}
		if bytes.Equal(a.Nonce, b.Nonce) || bytes.Equal(a.Ciphertext, b.Ciphertext) {
			t.Fatal("two seals of one token share a nonce or ciphertext")
		}
		if len(token) >= 8 && bytes.Contains(a.Ciphertext, []byte(token[:8])) {
			t.Fatal("ciphertext contains the plaintext")
		}
		for _, s := range []records.EncryptedToken{a, b} {
			got, err := r.Decrypt("123456789012345678", s)
			if err != nil || got != token {
				t.Fatalf("Decrypt = %q, %v; want the token", got, err)
			}
		}
	}
}

func TestRotation(t *testing.T) {
	_, oldKey := testKey(1)
	_, newKey := testKey(2)
	oldRing := mustRing(t, "old:"+oldKey)
	rotated := mustRing(t, "new:"+newKey+"\nold:"+oldKey)

	sealedOld, err := oldRing.Encrypt("bot1", "tok-old")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Decrypt("bot1", sealedOld); err != nil || got != "tok-old" {
		t.Fatalf("rotated ring: Decrypt(old token) = %q, %v", got, err)
	}
	sealedNew, err := rotated.Encrypt("bot1", "tok-new")
	if err != nil {
		t.Fatal(err)
	}
	if sealedNew.KeyID != "new" {
		t.Fatalf("rotated ring sealed under %q, want the active key new", sealedNew.KeyID)
	}
	_, err = oldRing.Decrypt("bot1", sealedNew)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"new"`) {
		t.Fatalf("old ring on a new token: %v, want ErrUnknownKey naming new", err)
	}
	// A key id that names the wrong key does not decrypt.
	swapped := mustRing(t, "old:"+newKey)
	if _, err := swapped.Decrypt("bot1", sealedOld); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("wrong key under the right id: %v, want ErrDecrypt", err)
	}
}

func TestAdditionalDataBindsAgent(t *testing.T) {
	_, k1 := testKey(1)
	r := mustRing(t, "k1:"+k1)
	s, err := r.Encrypt("agent-a", "secret-token")
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"agent-b", "agent-a ", "", "agent-", "swarmkv/bot-token/agent-a"} {
		if got, err := r.Decrypt(other, s); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("Decrypt for %q = %q, %v; want ErrDecrypt", other, got, err)
		}
	}
}

func TestTampering(t *testing.T) {
	_, k1 := testKey(1)
	r := mustRing(t, "k1:"+k1)
	s, err := r.Encrypt("bot", "secret-token")
	if err != nil {
		t.Fatal(err)
	}
	clone := func() records.EncryptedToken {
		return records.EncryptedToken{KeyID: s.KeyID, Nonce: bytes.Clone(s.Nonce), Ciphertext: bytes.Clone(s.Ciphertext)}
	}
	for i := range len(s.Nonce) * 8 {
		c := clone()
		c.Nonce[i/8] ^= 1 << (i % 8)
		if _, err := r.Decrypt("bot", c); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("nonce bit %d flipped: %v", i, err)
		}
	}
	for i := range len(s.Ciphertext) * 8 {
		c := clone()
		c.Ciphertext[i/8] ^= 1 << (i % 8)
		if _, err := r.Decrypt("bot", c); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("ciphertext bit %d flipped: %v", i, err)
		}
	}
	for _, c := range []records.EncryptedToken{
		{KeyID: "k1", Nonce: s.Nonce[:11], Ciphertext: s.Ciphertext},
		{KeyID: "k1", Nonce: append(bytes.Clone(s.Nonce), 0), Ciphertext: s.Ciphertext},
		{KeyID: "k1", Nonce: s.Nonce, Ciphertext: s.Ciphertext[:len(s.Ciphertext)-1]},
		{KeyID: "k1", Nonce: s.Nonce, Ciphertext: s.Ciphertext[:15]},
		{KeyID: "k1", Nonce: s.Nonce},
		{KeyID: "k1"},
	} {
		if _, err := r.Decrypt("bot", c); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("malformed %d-byte nonce, %d-byte ciphertext: %v", len(c.Nonce), len(c.Ciphertext), err)
		}
	}
	if _, err := r.Decrypt("bot", records.EncryptedToken{}); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("empty sealed token: %v, want ErrUnknownKey", err)
	}
}

// TestNoSecretsInOutput: neither errors nor the ring's printed forms carry
// a token or key material.
func TestNoSecretsInOutput(t *testing.T) {
	raw1, k1 := testKey(1)
	raw2, k2 := testKey(2)
	r := mustRing(t, "k1:"+k1+"\nk2:"+k2)
	const token = "MTA5ODc2NTQzMjEwOTg3NjU0.GaBcDe.super-secret-bot-token"
	s, err := r.Encrypt("bot", token)
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	add := func(err error) {
		if err == nil {
			t.Fatal("want an error")
		}
		outputs = append(outputs, err.Error())
	}
	_, err = r.Decrypt("other-bot", s)
	add(err)
	_, err = mustRing(t, "k3:"+k1).Decrypt("bot", s)
	add(err)
	_, err = mustRing(t, "k1:"+k2).Decrypt("bot", s)
	add(err)
	_, err = ParseRing("k1:" + k1 + "\nk1:" + k2)
	add(err)
	_, err = ParseRing(k1 + "\n" + k2)
	add(err)
	_, err = ParseRing("k1:" + k1[:43])
	add(err)
	_, err = ParseRing("k1:" + base64.StdEncoding.EncodeToString(raw1[:31]))
	add(err)
	outputs = append(outputs, r.String(), fmt.Sprint(r), fmt.Sprintf("%v %+v %#v %s", r, r, r, r),
		fmt.Sprintf("%+v", struct{ Keys *Ring }{r}))
	for _, out := range outputs {
		for _, secret := range []string{token, token[:16], k1, k2, k1[:16], k2[:16], string(raw1), string(raw2),
			fmt.Sprint(raw1), fmt.Sprintf("%x", raw1), fmt.Sprint(raw1[:8])} {
			if strings.Contains(out, secret) {
				t.Fatalf("output %q contains a secret", out)
			}
		}
	}
}

func TestNilRing(t *testing.T) {
	var r *Ring
	if _, err := r.Encrypt("bot", "tok"); !errors.Is(err, ErrNoRing) {
		t.Fatalf("Encrypt on nil ring: %v", err)
	}
	if _, err := r.Decrypt("bot", records.EncryptedToken{KeyID: "k1"}); !errors.Is(err, ErrNoRing) {
		t.Fatalf("Decrypt on nil ring: %v", err)
	}
	if r.ActiveKeyID() != "" || r.KeyIDs() != nil || r.String() != "secrets.Ring(nil)" {
		t.Fatal("nil ring accessors")
	}
}

func TestLoadRingFile(t *testing.T) {
	_, k1 := testKey(1)
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	if err := os.WriteFile(path, []byte("# swarmkv token keys\nk1:"+k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRingFile(path)
	if err != nil || r.ActiveKeyID() != "k1" {
		t.Fatalf("LoadRingFile = %v, %v", r, err)
	}
	if _, err := LoadRingFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("k1:"+k1[:40]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadRingFile(path)
	if !errors.Is(err, ErrInvalidRing) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), k1[:40]) {
		t.Fatalf("bad file: %v", err)
	}
}

// TestLoadRingFileRefusesOpenPermissions: a ring file its group or others
// may read or write is refused, with an error naming the fix and no key
// material; 0600 and 0400 load.
func TestLoadRingFileRefusesOpenPermissions(t *testing.T) {
	_, k1 := testKey(1)
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("k1:"+k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRingFile(path)
		if !errors.Is(err, ErrRingPermissions) || !strings.Contains(err.Error(), "chmod 600 "+path) || strings.Contains(err.Error(), k1[:20]) {
			t.Errorf("mode %#o: %v, want ErrRingPermissions naming chmod 600", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if r, err := LoadRingFile(path); err != nil || r.ActiveKeyID() != "k1" {
			t.Errorf("mode %#o: %v, %v", mode, r, err)
		}
	}
}

func FuzzParseRing(f *testing.F) {
	_, k1 := testKey(1)
	_, k2 := testKey(2)
	for _, s := range []string{
		"k1:" + k1,
		"k2:" + k2 + "\nk1:" + k1 + "\n",
		"# c\n\n k2 : " + k2 + " \r\nk1:" + k1,
		"k1:" + k1 + "\nk1:" + k2,
		":" + k1, "k1:", "k1", "", "#", "k1:" + k1[:43],
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		r, err := ParseRing(text)
		if err != nil {
			if !errors.Is(err, ErrInvalidRing) {
				t.Fatalf("error %v does not wrap ErrInvalidRing", err)
			}
			// No key text reaches the error (unless it is also the id,
			// which errors may name).
			for _, line := range strings.Split(text, "\n") {
				id, key, ok := strings.Cut(strings.TrimSpace(line), ":")
				key = strings.TrimSpace(key)
				if ok && len(key) >= 16 && !strings.Contains(id, key) && strings.Contains(err.Error(), key) {
					t.Fatalf("error %q contains the key text %q", err, key)
				}
			}
			return
		}
		if len(r.keys) == 0 || r.ActiveKeyID() != r.keys[0].id {
			t.Fatal("accepted ring without an active key")
		}
		back, err := ParseRing(format(r))
		if err != nil {
			t.Fatalf("ParseRing(format(ring)): %v", err)
		}
		if !sameRing(r, back) {
			t.Fatal("ParseRing(format(ring)) differs from ring")
		}
	})
}

// FuzzDecrypt: arbitrary sealed tokens never panic, and only the ones
// Encrypt made (for that agent id) decrypt.
func FuzzDecrypt(f *testing.F) {
	_, k1 := testKey(1)
	_, k2 := testKey(2)
	r := mustRing(f, "k2:"+k2+"\nk1:"+k1)
	old := mustRing(f, "k1:"+k1)
	type sealed struct{ agent, key, nonce, ct string }
	authentic := map[sealed]string{}
	for i, seal := range []*Ring{r, old, r} {
		agent, token := fmt.Sprintf("agent-%d", i), fmt.Sprintf("token-%d", i)
		// A fixed nonce: every fuzz worker process must rebuild the same
		// authentic set.
		s := seal.seal(agent, token, bytes.Repeat([]byte{byte(i)}, NonceSize))
		authentic[sealed{agent, s.KeyID, string(s.Nonce), string(s.Ciphertext)}] = token
		f.Add(agent, s.KeyID, s.Nonce, s.Ciphertext)
		f.Add(agent+"x", s.KeyID, s.Nonce, s.Ciphertext)
	}
	f.Add("", "", []byte{}, []byte{})
	f.Add("a", "k9", make([]byte, 12), make([]byte, 16))
	f.Fuzz(func(t *testing.T, agent, keyID string, nonce, ct []byte) {
		got, err := r.Decrypt(agent, records.EncryptedToken{KeyID: keyID, Nonce: nonce, Ciphertext: ct})
		want, ok := authentic[sealed{agent, keyID, string(nonce), string(ct)}]
		switch {
		case err == nil && !ok:
			t.Fatalf("forged token decrypted: agent %q key %q", agent, keyID)
		case err == nil && got != want:
			t.Fatalf("decrypted %q, want %q", got, want)
		case err != nil && ok:
			t.Fatalf("authentic token did not decrypt: %v", err)
		case err != nil && !errors.Is(err, ErrDecrypt) && !errors.Is(err, ErrUnknownKey):
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

func BenchmarkEncrypt(b *testing.B) {
	_, k1 := testKey(1)
	r := mustRing(b, "k1:"+k1)
	token := strings.Repeat("t", 72)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Encrypt("123456789012345678", token); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecrypt(b *testing.B) {
	_, k1 := testKey(1)
	r := mustRing(b, "k1:"+k1)
	s, err := r.Encrypt("123456789012345678", strings.Repeat("t", 72))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Decrypt("123456789012345678", s); err != nil {
			b.Fatal(err)
		}
	}
}
