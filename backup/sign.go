package backup

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/swarmkv/swarmkv/internal/fsutil"
)

// Signatures (format version 2; the layout is in the package doc). The
// command that writes a file signs it with the first key of the
// operator's backup key file; verify and restore check the signature
// against every key of theirs, picked by the key id the file names.

// MinKeyBytes is the least length of a backup key (a key file's line,
// surrounding white space not counted): the cluster secret's rule, so a
// cluster secret file is a valid one-key backup key file.
const MinKeyBytes = 32

// maxKeyFile bounds a key file (a few keys of a few hundred bytes).
const maxKeyFile = 64 << 10

// keyIDLen is the length of a key id in a file's signature.
const keyIDLen = 8

// sigLen is the length of the signature block: 'G' | key id | HMAC.
const sigLen = 1 + keyIDLen + sha256.Size

const tagSignature = 'G'

var (
	// ErrUnsigned is a file without a signature (format version 1) read
	// without ReadOptions.TrustUnsigned.
	ErrUnsigned = errors.New("backup: unsigned file")
	// ErrSignature is a file whose signature does not verify under the
	// reader's keys (or that no key was given for).
	ErrSignature = errors.New("backup: bad signature")
	// ErrKeyFile is wrapped by every backup key file error.
	ErrKeyFile = errors.New("backup: key file")
)

// Keys are the backup keys of a key file: the first signs, all verify.
type Keys struct {
	keys [][]byte
	ids  [][keyIDLen]byte
}

// ParseKeys parses a key file's text: one key a line (blank lines
// skipped; a line's surrounding white space is not part of its key),
// each at least MinKeyBytes, no key twice, at least one key. Errors
// never quote a key.
func ParseKeys(text []byte) (*Keys, error) {
	if len(text) > maxKeyFile {
		return nil, fmt.Errorf("%w: %d bytes, over %d", ErrKeyFile, len(text), maxKeyFile)
	}
	k := &Keys{}
	for i, line := range bytes.Split(text, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) < MinKeyBytes {
			return nil, fmt.Errorf("%w: line %d holds %d bytes, want at least %d random ones (head -c 32 /dev/urandom | base64)", ErrKeyFile, i+1, len(line), MinKeyBytes)
		}
		id := keyID(line)
		for _, o := range k.ids {
			if o == id {
				return nil, fmt.Errorf("%w: line %d repeats a key", ErrKeyFile, i+1)
			}
		}
		k.keys = append(k.keys, bytes.Clone(line))
		k.ids = append(k.ids, id)
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("%w: no key (one a line, at least %d bytes: head -c 32 /dev/urandom | base64)", ErrKeyFile, MinKeyBytes)
	}
	return k, nil
}

// LoadKeys reads and parses the key file path, which must be readable by
// its owner only (mode 0600 or 0400), as the cluster secret.
func LoadKeys(path string) (*Keys, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by group or others (mode %#o): chmod 600 it", ErrKeyFile, path, st.Mode().Perm())
	}
	if st.Size() > maxKeyFile {
		return nil, fmt.Errorf("%w: %s: %d bytes, over %d", ErrKeyFile, path, st.Size(), maxKeyFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	k, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return k, nil
}

// MakeKeyFile writes a new key file at path holding one key of 32 random
// bytes in hex (mode 0600, synced); it refuses a path that exists.
func MakeKeyFile(path string) error {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if err := fsutil.CreateExclusive(path, []byte(hex.EncodeToString(raw[:])+"\n"), 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	return nil
}

// SigningKeyID is the id of the key that signs (the first), in hex.
func (k *Keys) SigningKeyID() string { return hex.EncodeToString(k.ids[0][:]) }

// keyID names a key in a signature without revealing it.
func keyID(key []byte) [keyIDLen]byte {
	h := sha256.New()
	h.Write([]byte("swarmkv backup key id\x00"))
	h.Write(key)
	var id [keyIDLen]byte
	copy(id[:], h.Sum(nil))
	return id
}

// mac is the signature of a file of format version with whole-file
// checksum sum (which covers every byte before it: the header, every
// section with its checksum, the manifest).
func mac(key []byte, version uint32, sum []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("swarmkv backup signature\x00"))
	h.Write(binary.BigEndian.AppendUint32(nil, version))
	h.Write(sum)
	return h.Sum(nil)
}

// sign returns the signature block of a file with checksum sum.
func (k *Keys) sign(version uint32, sum []byte) []byte {
	b := append([]byte{tagSignature}, k.ids[0][:]...)
	return append(b, mac(k.keys[0], version, sum)...)
}

// signature is a decoded signature block.
type signature struct {
	keyID [keyIDLen]byte
	mac   [sha256.Size]byte
}

// parseSignature decodes a signature block (exactly sigLen bytes).
func parseSignature(b []byte) (signature, error) {
	var s signature
	if len(b) != sigLen {
		return s, fmt.Errorf("%w: signature block of %d bytes, want %d", ErrCorrupt, len(b), sigLen)
	}
	if b[0] != tagSignature {
		return s, fmt.Errorf("%w: tag 0x%02x where the signature starts", ErrCorrupt, b[0])
	}
	copy(s.keyID[:], b[1:])
	copy(s.mac[:], b[1+keyIDLen:])
	return s, nil
}

// verify checks s against the file's checksum under the key it names.
func (k *Keys) verify(s signature, version uint32, sum []byte) error {
	for i, id := range k.ids {
		if id != s.keyID {
			continue
		}
		if !hmac.Equal(mac(k.keys[i], version, sum), s.mac[:]) {
			return fmt.Errorf("%w: the signature under key %x does not match: the file was changed after it was signed", ErrSignature, s.keyID)
		}
		return nil
	}
	return fmt.Errorf("%w: signed with key %x, which is not in the backup key file (its keys: %s)", ErrSignature, s.keyID, k.idList())
}

func (k *Keys) idList() string {
	var b []byte
	for i, id := range k.ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = hex.AppendEncode(b, id[:])
	}
	return string(b)
}
