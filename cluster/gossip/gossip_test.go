package gossip

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// version is the protocol version the tests speak.
const version = 1

// FuzzDecodeMeta: any peer metadata either decodes into a member with the
// right version, an id and addresses, or is refused; never a panic.
func FuzzDecodeMeta(f *testing.F) {
	good, _ := json.Marshal(Meta{Version: version, ID: "n1", Raft: "127.0.0.1:1", GRPC: "127.0.0.1:2", Shards: 8, Expect: 3, Inc: "00112233445566778899aabbccddeeff"})
	f.Add(good)
	f.Add([]byte(`{"v":2,"id":"n1","raft":"a","grpc":"b"}`))
	f.Add([]byte(`{"id":"n1"}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b, version)
		if err != nil {
			return
		}
		if m.Version != version || m.ID == "" || m.Raft == "" || m.GRPC == "" {
			t.Fatalf("accepted %+v", m)
		}
	})
}

func TestParseKeys(t *testing.T) {
	good := "# ring\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n\n" + base64.StdEncoding.EncodeToString(make([]byte, 16)) + "\n"
	keys, err := ParseKeys(good)
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "# only\n", "not base64!\n", "QUJD\n"} {
		if _, err := ParseKeys(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		} else if bad != "" && strings.Contains(err.Error(), strings.TrimSpace(bad)) && bad != "# only\n" {
			t.Errorf("%q: error quotes the key: %v", bad, err)
		}
	}
}

// TestMembers: the table keeps the last metadata of each member, when its
// liveness last changed, and ignores metadata of another version.
func TestMembers(t *testing.T) {
	var ms Members
	meta := func(id string, v int) []byte {
		b, _ := json.Marshal(Meta{Version: v, ID: id, Raft: "r" + id, GRPC: "g" + id})
		return b
	}
	ms.Set("n2", meta("n2", version), true, version)
	ms.Set("n1", meta("n1", version), true, version)
	ms.Set("n3", meta("n3", version), false, version)
	ms.Set("n9", meta("n9", version+1), true, version)
	if _, ok := ms.Get("n9"); ok {
		t.Fatal("member of another protocol version recorded")
	}
	first, _ := ms.Get("n1")
	ms.Set("n1", meta("n1", version), true, version)
	if again, _ := ms.Get("n1"); !again.Since.Equal(first.Since) {
		t.Fatal("Since moved without a liveness change")
	}
	var ids []string
	for _, m := range ms.Alive() {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"n1", "n2"}) {
		t.Fatalf("Alive = %v, want n1 n2", ids)
	}
	if alive, dead := ms.Count(); alive != 2 || dead != 1 {
		t.Fatalf("Count = %d alive %d dead, want 2 1", alive, dead)
	}
	if all := ms.All(); len(all) != 3 || all["n3"].Alive || all["n3"].Meta.Raft != "rn3" {
		t.Fatalf("All = %+v", all)
	}
}
