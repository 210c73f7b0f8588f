package cluster

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// FuzzDecodeGossipMeta: any peer metadata either decodes into a member with
// the right version, an id and addresses, or is refused; never a panic.
func FuzzDecodeGossipMeta(f *testing.F) {
	good, _ := json.Marshal(gossipMeta{Version: ProtocolVersion, ID: "n1", Raft: "127.0.0.1:1", GRPC: "127.0.0.1:2", Shards: 8, Expect: 3, Inc: "00112233445566778899aabbccddeeff"})
	f.Add(good)
	f.Add([]byte(`{"v":2,"id":"n1","raft":"a","grpc":"b"}`))
	f.Add([]byte(`{"id":"n1"}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeGossipMeta(b, ProtocolVersion)
		if err != nil {
			return
		}
		if m.Version != ProtocolVersion || m.ID == "" || m.Raft == "" || m.GRPC == "" {
			t.Fatalf("accepted %+v", m)
		}
	})
}

// FuzzDecodeState: a cluster state document from the meta group either
// decodes into a state with a valid shard map, or is rejected.
func FuzzDecodeState(f *testing.F) {
	st := &State{FormatVersion: stateFormat, ClusterID: "c", MapVersion: 1, NumShards: 2, ReplicationFactor: 3,
		Shards: placement.Place([]string{"a", "b", "c"}, 2, 3), MetaVoters: []string{"a", "b", "c"},
		Nodes: []NodeAddrs{{ID: "a", RaftAddr: "x", Status: StatusActive}}}
	st.Slots = make([]shard.ID, shard.NumSlots)
	good, _ := json.Marshal(st)
	f.Add(good)
	f.Add([]byte(`{"format_version":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		if _, err := s.Map(); err != nil || s.FormatVersion != stateFormat {
			t.Fatalf("accepted a state with a bad map: %v", err)
		}
		s.Clone() // must not panic
	})
}

// FuzzHostAllowed: the admin API's Host check (DNS rebinding) passes only
// localhost, names under .localhost, loopback IPs and the configured
// hosts, with or without a port; never a panic.
func FuzzHostAllowed(f *testing.F) {
	for _, s := range []string{"localhost:7102", "[::1]:7102", "127.0.0.1", "evil.example", "node1.lan:7102", "[::1", "[]:1", "x.localhost.", "::ffff:127.0.0.1", "%", "[fe80::1%lo]:1"} {
		f.Add(s)
	}
	allowed := map[string]bool{"node1.lan": true}
	f.Fuzz(func(t *testing.T, host string) {
		if !hostAllowed(host, allowed) {
			return
		}
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = normHost(strings.Trim(h, "[]"))
		if i := strings.IndexByte(h, '%'); i >= 0 {
			h = h[:i]
		}
		ip := net.ParseIP(h)
		if h != "localhost" && !strings.HasSuffix(h, ".localhost") && h != "node1.lan" && (ip == nil || !ip.IsLoopback()) {
			t.Fatalf("allowed Host %q (%q)", host, h)
		}
	})
}
