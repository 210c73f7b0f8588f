package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
)

// TestEtcdOpsNeedVersion: the etcd ops (fsm.VersionEtcd) are refused by a
// cluster that runs an older protocol version (a binary before them is a
// member), nothing proposed; a cluster at the new version applies them.
func TestEtcdOpsNeedVersion(t *testing.T) {
	txn := &fsm.Command{Op: fsm.OpEtcdTxn, Etcd: &fsm.EtcdTxn{NS: "default",
		Success: []fsm.EtcdOp{{Kind: fsm.EtcdPut, Key: []byte("a"), Value: []byte("1")}}}}
	compact := &fsm.Command{Op: fsm.OpEtcdCompact, EtcdCompact: &fsm.EtcdCompact{NS: "default", Revision: 1}}
	for _, tc := range []struct {
		name string
		max  int // the binary's highest version; 0: ProtocolVersion
	}{{"old cluster", fsm.VersionEtcd - 1}, {"new cluster", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 1, 1, func(c *Config) { c.Testing.MaxProtocolVersion = tc.max })
			ctx := ctxT(t, 30*time.Second)
			id, _, err := c.nodes[0].Route(keys.EtcdRoutingKey("default"))
			if err != nil {
				t.Fatal(err)
			}
			_, r := c.leaderReplica(id)
			if r == nil {
				t.Fatalf("no leader of shard %d", id)
			}
			for _, cmd := range []*fsm.Command{txn, compact} {
				res, err := r.Propose(ctx, cmd)
				if tc.max != 0 {
					if !errors.Is(err, ErrProtocolVersion) {
						t.Fatalf("%s in a cluster at %d: %v, want ErrProtocolVersion", cmd.Op, c.nodes[0].ActiveVersion(), err)
					}
					continue
				}
				if err != nil || res.Err != nil || res.Etcd == nil {
					t.Fatalf("%s in a cluster at %d: %v %+v", cmd.Op, c.nodes[0].ActiveVersion(), err, res)
				}
			}
			if tc.max != 0 { // nothing was applied
				if rec, _ := r.FSM().Get(keys.EtcdRevs(keys.EtcdRoutingKey("default"))); rec != nil {
					t.Fatalf("the refused txn wrote the namespace's revisions: %x", rec)
				}
			}
		})
	}
}
