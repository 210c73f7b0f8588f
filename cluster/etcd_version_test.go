package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/replica"
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
			c, r := etcdCluster(t, tc.max)
			ctx := ctxT(t, 30*time.Second)
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

// TestEtcdNestedNeedsVersion: a txn with a nested txn
// (fsm.VersionEtcdNested) is refused by a cluster that runs version 5 (a
// binary of 5 would refuse the entry as malformed while its peers apply
// it), nothing proposed, while a flat txn goes through; a cluster at 6
// applies it.
func TestEtcdNestedNeedsVersion(t *testing.T) {
	flat := &fsm.Command{Op: fsm.OpEtcdTxn, Etcd: &fsm.EtcdTxn{NS: "default",
		Success: []fsm.EtcdOp{{Kind: fsm.EtcdPut, Key: []byte("a"), Value: []byte("1")}}}}
	nested := &fsm.Command{Op: fsm.OpEtcdTxn, Etcd: &fsm.EtcdTxn{NS: "default",
		Success: []fsm.EtcdOp{{Kind: fsm.EtcdTxnK, Txn: &fsm.EtcdTxn{
			Success: []fsm.EtcdOp{{Kind: fsm.EtcdPut, Key: []byte("b"), Value: []byte("2")}}}}}}}
	for _, tc := range []struct {
		name string
		max  int
	}{{"cluster at 5", fsm.VersionEtcdNested - 1}, {"cluster at 6", fsm.VersionEtcdNested}} {
		t.Run(tc.name, func(t *testing.T) {
			c, r := etcdCluster(t, tc.max)
			ctx := ctxT(t, 30*time.Second)
			if res, err := r.Propose(ctx, flat); err != nil || res.Err != nil {
				t.Fatalf("flat txn at %d: %v %+v", c.nodes[0].ActiveVersion(), err, res)
			}
			res, err := r.Propose(ctx, nested)
			if tc.max < fsm.VersionEtcdNested {
				if !errors.Is(err, ErrProtocolVersion) {
					t.Fatalf("nested txn in a cluster at %d: %v, want ErrProtocolVersion", c.nodes[0].ActiveVersion(), err)
				}
				return
			}
			if err != nil || res.Err != nil || res.Etcd == nil || res.Etcd.Results[0].Txn == nil || res.Etcd.Revision != 3 {
				t.Fatalf("nested txn in a cluster at %d: %v %+v", c.nodes[0].ActiveVersion(), err, res)
			}
		})
	}
}

// etcdCluster starts a one-node cluster whose binary speaks up to
// protocol version max (0: ProtocolVersion) and returns it with the
// leader replica of namespace "default"'s shard.
func etcdCluster(t *testing.T, max int) (*testCluster, *replica.Replica) {
	t.Helper()
	c := newTestCluster(t, 1, 1, func(c *Config) { c.Testing.MaxProtocolVersion = max })
	id, _, err := c.nodes[0].Route(keys.EtcdRoutingKey("default"))
	if err != nil {
		t.Fatal(err)
	}
	_, r := c.leaderReplica(id)
	if r == nil {
		t.Fatalf("no leader of shard %d", id)
	}
	return c, r
}
