// Package secrets seals bot tokens (seed 004) before they enter the Raft
// log: AES-256-GCM under a key ring whose first key is the active one.
// Older keys stay readable, so keys rotate by prepending a new one. It is
// pure apart from LoadRingFile: no other I/O, no logging.
//
// Usage:
//
//	ring, err := secrets.ParseRing("k2:" + base64Key2 + "\nk1:" + base64Key1)
//	sealed, err := ring.Encrypt(agentID, token)   // under k2
//	token, err = ring.Decrypt(agentID, sealed)    // by sealed.KeyID (k2 or k1)
//
// Ring text: one key per line, `key_id:base64(32 bytes)` (standard base64
// with padding, 44 characters); blank lines and lines starting with '#'
// are ignored; surrounding spaces are trimmed. A key id is 1..64 visible
// ASCII characters (0x21..0x7e) other than ':' and does not start with '#';
// ids are unique. Generate a key with `head -c 32 /dev/urandom | base64`.
//
// Sealed token layout (records.EncryptedToken):
//
//	KeyID      the ring key that sealed it
//	Nonce      12 random bytes (crypto/rand), fresh for every Encrypt
//	Ciphertext AES-256-GCM(key, Nonce, token, ad) = encrypted token | 16-byte tag
//	ad         "swarmkv/bot-token/" + agent_id (authenticated, not stored)
//
// The additional data binds a ciphertext to its bot: moved to another
// agent id it no longer decrypts. Errors of this package never contain a
// token or key material; they name key ids at most.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/swarmkv/swarmkv/records"
)

// Sizes of the ring's keys and of the sealed token's nonce.
const (
	KeySize     = 32 // AES-256
	NonceSize   = 12 // GCM standard nonce
	MaxKeyIDLen = 64
)

// adPrefix starts the additional data of every sealed token; the agent id
// follows.
const adPrefix = "swarmkv/bot-token/"

var (
	// ErrInvalidRing is wrapped by ParseRing and LoadRingFile errors.
	ErrInvalidRing = errors.New("secrets: invalid key ring")
	// ErrRingPermissions is returned by LoadRingFile for a file readable
	// or writable by its group or others.
	ErrRingPermissions = errors.New("secrets: key ring file permissions too open")
	// ErrNoRing is returned by Encrypt and Decrypt on a nil *Ring.
	ErrNoRing = errors.New("secrets: no key ring")
	// ErrUnknownKey is wrapped by Decrypt when the token was sealed under
	// a key id the ring does not hold.
	ErrUnknownKey = errors.New("secrets: unknown key id")
	// ErrDecrypt is wrapped by Decrypt when a sealed token does not
	// authenticate: wrong key, another agent id, or corrupted bytes.
	ErrDecrypt = errors.New("secrets: token does not decrypt")
)

// Ring is an ordered set of AES-256 keys; the first seals new tokens.
// A Ring is immutable and safe for concurrent use.
type Ring struct {
	keys []ringKey
}

type ringKey struct {
	id   string
	raw  [KeySize]byte
	aead cipher.AEAD
}

// ParseRing parses the ring text described in the package doc. Errors give
// the line number and, for a well-formed key id, the id; never key bytes.
func ParseRing(text string) (*Ring, error) {
	r := &Ring{}
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		idPart, keyPart, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: want key_id:base64key", ErrInvalidRing, n)
		}
		id := strings.TrimSpace(idPart)
		if err := checkKeyID(id); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrInvalidRing, n, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: line %d: key id %q repeats", ErrInvalidRing, n, id)
		}
		seen[id] = true
		raw, err := base64.StdEncoding.Strict().DecodeString(strings.TrimSpace(keyPart))
		if err != nil {
			// The decoder's error quotes an offset only, but say less:
			// nothing derived from the key goes into an error.
			return nil, fmt.Errorf("%w: line %d: key %q is not standard base64", ErrInvalidRing, n, id)
		}
		if len(raw) != KeySize {
			return nil, fmt.Errorf("%w: line %d: key %q is %d bytes, want %d", ErrInvalidRing, n, id, len(raw), KeySize)
		}
		k, err := newRingKey(id, raw)
		clear(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: key %q: %v", ErrInvalidRing, n, id, err)
		}
		r.keys = append(r.keys, k)
	}
	if len(r.keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidRing)
	}
	return r, nil
}

// checkKeyID reports why id is not a valid key id, without quoting it (an
// invalid id may be a pasted key).
func checkKeyID(id string) error {
	if id == "" || len(id) > MaxKeyIDLen {
		return fmt.Errorf("key id is %d bytes, want 1..%d", len(id), MaxKeyIDLen)
	}
	if id[0] == '#' {
		return errors.New("key id starts with '#'")
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e || c == ':' {
			return fmt.Errorf("key id has a character other than visible ASCII at byte %d", i)
		}
	}
	return nil
}

func newRingKey(id string, raw []byte) (ringKey, error) {
	k := ringKey{id: id}
	copy(k.raw[:], raw)
	block, err := aes.NewCipher(k.raw[:])
	if err != nil {
		return ringKey{}, err
	}
	if k.aead, err = cipher.NewGCM(block); err != nil {
		return ringKey{}, err
	}
	return k, nil
}

// LoadRingFile reads and parses a ring file. The error names the path,
// never the file's contents. A file that its group or others may read or
// write (any of the mode bits 0o077) is refused with ErrRingPermissions,
// before anything is read from it: keys there are as good as published.
func LoadRingFile(path string) (*Ring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: key ring file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat() // the file opened, not whatever the path names next
	if err != nil {
		return nil, fmt.Errorf("secrets: key ring file: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %#o, open to group or others; run `chmod 600 %s` (owner only)",
			ErrRingPermissions, path, perm, path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("secrets: key ring file: %w", err)
	}
	defer clear(b)
	r, err := ParseRing(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ActiveKeyID returns the id of the key Encrypt uses ("" for a nil ring).
func (r *Ring) ActiveKeyID() string {
	if r == nil {
		return ""
	}
	return r.keys[0].id
}

// KeyIDs returns the ring's key ids, active first.
func (r *Ring) KeyIDs() []string {
	if r == nil {
		return nil
	}
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// String describes the ring by its key ids only, so printing a Ring (or a
// Config holding one) never prints key material.
func (r *Ring) String() string {
	if r == nil {
		return "secrets.Ring(nil)"
	}
	return fmt.Sprintf("secrets.Ring(keys %s, active %s)", strings.Join(r.KeyIDs(), ","), r.ActiveKeyID())
}

// GoString is String, for %#v.
func (r *Ring) GoString() string { return r.String() }

func additionalData(agentID string) []byte { return []byte(adPrefix + agentID) }

// Encrypt seals token for the bot agentID under the active key with a
// fresh random nonce.
func (r *Ring) Encrypt(agentID, token string) (records.EncryptedToken, error) {
	if r == nil {
		return records.EncryptedToken{}, ErrNoRing
	}
	nonce := make([]byte, NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return records.EncryptedToken{}, fmt.Errorf("secrets: nonce: %w", err)
	}
	return r.seal(agentID, token, nonce), nil
}

// seal encrypts under the active key with the given nonce (tests fix it;
// Encrypt draws it at random).
func (r *Ring) seal(agentID, token string, nonce []byte) records.EncryptedToken {
	k := &r.keys[0]
	ct := k.aead.Seal(nil, nonce, []byte(token), additionalData(agentID))
	return records.EncryptedToken{KeyID: k.id, Nonce: nonce, Ciphertext: ct}
}

// Decrypt opens a token sealed for the bot agentID, with the ring key
// named by t.KeyID. Errors wrap ErrUnknownKey (naming the key id) or
// ErrDecrypt.
func (r *Ring) Decrypt(agentID string, t records.EncryptedToken) (string, error) {
	if r == nil {
		return "", ErrNoRing
	}
	var k *ringKey
	for i := range r.keys {
		if r.keys[i].id == t.KeyID {
			k = &r.keys[i]
			break
		}
	}
	if k == nil {
		return "", fmt.Errorf("%w %q", ErrUnknownKey, truncate(t.KeyID, MaxKeyIDLen))
	}
	if len(t.Nonce) != NonceSize {
		return "", fmt.Errorf("%w: nonce is %d bytes, want %d", ErrDecrypt, len(t.Nonce), NonceSize)
	}
	if len(t.Ciphertext) < k.aead.Overhead() {
		return "", fmt.Errorf("%w: ciphertext is %d bytes, shorter than the tag", ErrDecrypt, len(t.Ciphertext))
	}
	pt, err := k.aead.Open(nil, t.Nonce, t.Ciphertext, additionalData(agentID))
	if err != nil {
		return "", fmt.Errorf("%w: wrong key, another agent id, or corrupted", ErrDecrypt)
	}
	return string(pt), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
