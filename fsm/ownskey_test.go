package fsm

import (
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// TestOwnsKey: while the shard owns every slot every key is owned; once a
// user's slot is frozen, that user's stored keys (routed by key, by value
// and by lookup) are not, another user's still are.
func TestOwnsKey(t *testing.T) {
	r := newReplica(t, 1, nil)
	u, u7 := uid(1), uid(7)
	if shard.SlotOf(u[:]) == shard.SlotOf(u7[:]) {
		t.Fatal("test ids share a slot")
	}
	r.must(putAgentCmd(agentRec(1, 2, records.AgentRunning)))
	r.must(putAgentCmd(agentRec(7, 3, records.AgentRunning)))
	r.must(putSessionCmd(&records.SessionRecord{SessionID: sid(4), AgentID: aid(2), UserID: u, CreatedAt: 1}))
	owned := func() map[string]bool {
		out := map[string]bool{}
		for _, kv := range mustDump(t, r.f) {
			ok, err := r.f.OwnsKey(kv.Key, kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[string(kv.Key)] = ok
		}
		return out
	}
	for k, ok := range owned() {
		if !ok {
			t.Errorf("key %x not owned while the shard owns every slot", k)
		}
	}
	r.must(freezeCmd(1, shard.SlotSetOf(shard.SlotOf(u[:])), 2, 3))
	got := owned()
	for k, want := range map[string]bool{
		string(keys.Agent(u, aid(2))):               false,
		string(keys.AgentOwner(aid(2))):             false, // routed by its value
		string(keys.Session(sid(4))):                false, // routed by its value
		string(keys.SessionByAgent(aid(2), sid(4))): false, // routed by its session
		string(keys.Agent(u7, aid(3))):              true,
		string(keys.AgentOwner(aid(3))):             true,
	} {
		if g, ok := got[k]; !ok || g != want {
			t.Errorf("key %x: owned %t (stored %t), want %t", k, g, ok, want)
		}
	}
	if ok, err := r.f.OwnsKey(metaSlots, nil); ok || err != nil {
		t.Errorf("a meta key is owned: %t, %v", ok, err)
	}
}
