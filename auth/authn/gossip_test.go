package authn

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestParseGossipKeys: a keyring's keys in order, comments and blank lines
// skipped; a bad one refused without quoting it.
func TestParseGossipKeys(t *testing.T) {
	good := "# ring\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n\n" + base64.StdEncoding.EncodeToString(make([]byte, 16)) + "\n"
	keys, err := ParseGossipKeys(good)
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "# only\n", "not base64!\n", "QUJD\n"} {
		if _, err := ParseGossipKeys(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		} else if bad != "" && strings.Contains(err.Error(), strings.TrimSpace(bad)) && bad != "# only\n" {
			t.Errorf("%q: error quotes the key: %v", bad, err)
		}
	}
}
