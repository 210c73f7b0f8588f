package gossip

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// version is the protocol version the tests' cluster runs.
const version = 1

// runs accepts peers that speak version v (a node whose cluster runs v).
func runs(v int) AcceptFunc {
	return func(lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("speaks protocol versions %d..%d, the cluster runs %d", lo, hi, v)
		}
		return nil
	}
}

// FuzzDecodeMeta: any peer metadata either decodes into a member whose
// version range is well-formed and includes the version the node runs,
// with an id and addresses, or is refused; never a panic.
func FuzzDecodeMeta(f *testing.F) {
	good, _ := json.Marshal(Meta{Version: version, ID: "n1", Raft: "127.0.0.1:1", GRPC: "127.0.0.1:2", Shards: 8, Expect: 3, Inc: "00112233445566778899aabbccddeeff"})
	f.Add(good)
	f.Add([]byte(`{"v":2,"id":"n1","raft":"a","grpc":"b"}`))
	f.Add([]byte(`{"v":1,"min":1,"max":2,"id":"n1","raft":"a","grpc":"b"}`))
	f.Add([]byte(`{"v":2,"min":3,"max":1,"id":"n1","raft":"a","grpc":"b"}`))
	f.Add([]byte(`{"v":1,"min":-1,"id":"n1","raft":"a","grpc":"b"}`))
	f.Add([]byte(`{"id":"n1"}`))
	f.Add([]byte{})
	f.Add([]byte(`{"v":2,"id":"n1","raft":"a","grpc":"b","zone":"eu-1a","host":"rack4.m2"}`))
	f.Add([]byte(`{"v":2,"id":"n1","raft":"a","grpc":"b","zone":"a b"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b, runs(version))
		if err != nil {
			return
		}
		lo, hi := m.Range()
		if lo < 1 || lo > m.Version || m.Version > hi || version < lo || version > hi || m.ID == "" || m.Raft == "" || m.GRPC == "" {
			t.Fatalf("accepted %+v", m)
		}
		if ValidLabel(m.Zone) != nil || ValidLabel(m.Host) != nil {
			t.Fatalf("accepted labels %q %q", m.Zone, m.Host)
		}
		// Round trip: what was accepted encodes to metadata accepted
		// as the same member.
		again, _ := json.Marshal(m)
		if m2, err := DecodeMeta(again, runs(version)); err != nil || m2 != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, m2, err)
		}
	})
}

// decodeMetaV1 is what binaries before version ranges (f6c5d17) do with
// a peer's metadata: decode the JSON and refuse a "v" other than 1.
func decodeMetaV1(b []byte) error {
	var m struct {
		Version int    `json:"v"`
		ID      string `json:"id"`
		Raft    string `json:"raft"`
		GRPC    string `json:"grpc"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if m.Version != 1 {
		return fmt.Errorf("speaks protocol version %d", m.Version)
	}
	if m.ID == "" || m.Raft == "" || m.GRPC == "" {
		return fmt.Errorf("lacks id or addresses")
	}
	return nil
}

// TestMetaVersions: a node that speaks 1..2 in a cluster that runs 1
// announces v 1, which binaries before version ranges accept, and its
// range, which they ignore; a node of such a binary (v only) speaks its v
// alone; a peer is accepted only when its range includes the version the
// cluster runs.
func TestMetaVersions(t *testing.T) {
	upgraded, _ := json.Marshal(Meta{Version: 1, Min: 1, Max: 2, ID: "n1", Raft: "r", GRPC: "g"})
	if err := decodeMetaV1(upgraded); err != nil {
		t.Fatalf("a binary before version ranges refuses %s: %v", upgraded, err)
	}
	raised, _ := json.Marshal(Meta{Version: 2, Min: 1, Max: 2, ID: "n1", Raft: "r", GRPC: "g"})
	if err := decodeMetaV1(raised); err == nil {
		t.Fatalf("a binary before version ranges accepts %s", raised)
	}
	old := []byte(`{"v":1,"id":"n2","raft":"r","grpc":"g"}`)
	for _, tc := range []struct {
		meta   []byte
		runs   int
		lo, hi int
		ok     bool
	}{
		{upgraded, 1, 1, 2, true},
		{upgraded, 2, 1, 2, true},
		{upgraded, 3, 1, 2, false},
		{raised, 2, 1, 2, true},
		{old, 1, 1, 1, true},
		{old, 2, 1, 1, false},
	} {
		m, err := DecodeMeta(tc.meta, runs(tc.runs))
		if (err == nil) != tc.ok {
			t.Errorf("%s in a cluster at %d: %v, want ok %v", tc.meta, tc.runs, err, tc.ok)
			continue
		}
		if lo, hi := m.Range(); err == nil && (lo != tc.lo || hi != tc.hi) {
			t.Errorf("%s: range %d..%d, want %d..%d", tc.meta, lo, hi, tc.lo, tc.hi)
		}
		if err != nil && !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("refusal without the reason: %v", err)
		}
	}
}

// TestMetaLabels: labels are carried, optional (metadata of older
// binaries has none), and refused when malformed; older binaries ignore
// them.
func TestMetaLabels(t *testing.T) {
	b, _ := json.Marshal(Meta{Version: 1, ID: "n1", Raft: "r", GRPC: "g", Zone: "eu-1a", Host: "m2.rack4"})
	if err := decodeMetaV1(b); err != nil {
		t.Fatalf("a binary before labels refuses %s: %v", b, err)
	}
	m, err := DecodeMeta(b, runs(1))
	if err != nil || m.Zone != "eu-1a" || m.Host != "m2.rack4" {
		t.Fatalf("%+v, %v", m, err)
	}
	if m, err := DecodeMeta([]byte(`{"v":1,"id":"n2","raft":"r","grpc":"g"}`), runs(1)); err != nil || m.Zone != "" || m.Host != "" {
		t.Fatalf("without labels: %+v, %v", m, err)
	}
	for _, bad := range []string{`"zone":"a b"`, `"host":"x/y"`, `"zone":"` + strings.Repeat("z", MaxLabel+1) + `"`} {
		if _, err := DecodeMeta([]byte(`{"v":1,"id":"n2","raft":"r","grpc":"g",`+bad+`}`), runs(1)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if ValidLabel(strings.Repeat("z", MaxLabel)) != nil || ValidLabel("") != nil {
		t.Error("ValidLabel refuses a label of MaxLabel bytes or none")
	}
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
// liveness last changed, and ignores metadata of another version; Set
// reports a new member or a liveness change.
func TestMembers(t *testing.T) {
	var ms Members
	meta := func(id string, v int) []byte {
		b, _ := json.Marshal(Meta{Version: v, ID: id, Raft: "r" + id, GRPC: "g" + id})
		return b
	}
	for _, id := range []string{"n2", "n1"} {
		if !ms.Set(id, meta(id, version), true, runs(version)) {
			t.Errorf("Set(%s) of a new member reported no change", id)
		}
	}
	ms.Set("n3", meta("n3", version), false, runs(version))
	if ms.Set("n9", meta("n9", version+1), true, runs(version)) {
		t.Error("Set of another protocol version reported a change")
	}
	if _, ok := ms.Get("n9"); ok {
		t.Fatal("member of another protocol version recorded")
	}
	first, _ := ms.Get("n1")
	if ms.Set("n1", meta("n1", version), true, runs(version)) {
		t.Error("Set without a liveness change reported one")
	}
	if again, _ := ms.Get("n1"); !again.Since.Equal(first.Since) {
		t.Fatal("Since moved without a liveness change")
	}
	if !ms.Set("n3", meta("n3", version), true, runs(version)) || !ms.Set("n3", meta("n3", version), false, runs(version)) {
		t.Error("a liveness change was not reported")
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
