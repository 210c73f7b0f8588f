package cluster

import (
	"encoding/json"
	"testing"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

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
