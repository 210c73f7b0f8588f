package authn

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ParseGossipKeys parses a gossip keyring: one base64 key (16, 24 or 32
// bytes: AES-128/192/256) per line, the first encrypts outgoing gossip and
// every key decrypts incoming gossip. Blank lines and '#' comments are
// skipped. Errors name the line, never its content.
//
// Rotation, on every node one step at a time (each step a rolling restart
// or config reload): add the new key as the second line; make it the first;
// remove the old one.
func ParseGossipKeys(text string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip key on line %d is not base64", i+1)
		}
		if !validGossipKeyLen(len(k)) {
			return nil, fmt.Errorf("cluster: gossip key on line %d has %d bytes: want 16, 24 or 32", i+1, len(k))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("cluster: gossip key file holds no key")
	}
	return keys, nil
}

// LoadGossipKeys reads a gossip keyring file (ParseGossipKeys).
func LoadGossipKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip key file: %w", err)
	}
	keys, err := ParseGossipKeys(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

func validGossipKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// ValidGossipKeys checks the lengths of a keyring's keys (16, 24 or 32
// bytes each).
func ValidGossipKeys(keys [][]byte) error {
	for i, k := range keys {
		if !validGossipKeyLen(len(k)) {
			return fmt.Errorf("gossip key %d has %d bytes: want 16, 24 or 32", i+1, len(k))
		}
	}
	return nil
}
