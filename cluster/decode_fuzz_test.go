package cluster

import (
	"encoding/json"
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
