package api

import (
	"errors"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// leaseOf is a lease id of routing key rk's slot.
func leaseOf(rk string, seq uint64) uint64 {
	return keys.LeaseIDOf(byte(shard.SlotOf([]byte(rk))), seq)
}

func TestValidateLease(t *testing.T) {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"grant", ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: []byte("alice"), TtlMs: ms(10 * time.Second)}), ""},
		{"grant min", ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: []byte("alice"), TtlMs: ms(fsm.MinLeaseTTL)}), ""},
		{"grant max", ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: []byte("alice"), TtlMs: ms(fsm.MaxLeaseTTL)}), ""},
		{"grant ttl 1ms", ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: []byte("alice"), TtlMs: 1}), "ttl 1ms: want 2s..24h0m0s"},
		{"grant ttl over", ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: []byte("alice"), TtlMs: ms(25 * time.Hour)}), "ttl 25h0m0s: want 2s..24h0m0s"},
		{"grant negative ttl", ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: []byte("alice"), TtlMs: -5}), "want 2s..24h0m0s"},
		{"grant no routing key", ValidateLeaseGrant(&rpc.LeaseGrantRequest{TtlMs: ms(10 * time.Second)}), "routing key is empty"},
		{"id", ValidateLeaseID(leaseOf("alice", 1)), ""},
		{"id 0", ValidateLeaseID(0), "lease id 0000000000000000: not one a grant returns"},
		{"id seq 0", ValidateLeaseID(keys.LeaseIDOf(9, 0)), "sequence 0"},
		{"ttl keys", ValidateLeaseTimeToLive(&rpc.LeaseTimeToLiveRequest{Id: leaseOf("a", 1), Keys: true, MaxKeys: 100000}), ""},
		{"ttl too many keys", ValidateLeaseTimeToLive(&rpc.LeaseTimeToLiveRequest{Id: leaseOf("a", 1), MaxKeys: 100001}), "max_keys 100001"},
		{"ttl bad id", ValidateLeaseTimeToLive(&rpc.LeaseTimeToLiveRequest{}), "lease id"},
		{"list", ValidateLeaseList(&rpc.LeaseListRequest{Shard: 3, After: leaseOf("a", 2), Limit: 10}, 1000), ""},
		{"list over page", ValidateLeaseList(&rpc.LeaseListRequest{Limit: 1001}, 1000), "limit 1001: the page size is at most 1000"},
		{"list shard", ValidateLeaseList(&rpc.LeaseListRequest{Shard: shard.MaxShards}, 1000), "shard ids are below"},
		{"list after", ValidateLeaseList(&rpc.LeaseListRequest{After: keys.LeaseIDOf(3, 0)}, 1000), "after 0300000000000000: not a lease id"},
		{"put lease", ValidatePut(&rpc.PutRequest{RoutingKey: []byte("alice"), Key: []byte("k"), Lease: leaseOf("alice", 3)}, valDefaults), ""},
		{"put lease of another slot", ValidatePut(&rpc.PutRequest{RoutingKey: []byte("alice"), Key: []byte("k"), Lease: leaseOf("bob", 3)}, valDefaults),
			"grant the lease for the same routing key"},
		{"batch lease", ValidateBatch(&rpc.BatchRequest{RoutingKey: []byte("alice"), Ops: []*rpc.Op{{Kind: rpc.Op_KIND_PUT, Key: []byte("k"), Lease: leaseOf("alice", 1)}}}, valDefaults), ""},
		{"batch lease of another slot", ValidateBatch(&rpc.BatchRequest{RoutingKey: []byte("alice"), Ops: []*rpc.Op{{Kind: rpc.Op_KIND_PUT, Key: []byte("k"), Lease: leaseOf("bob", 1)}}}, valDefaults), "op 0: invalid argument: lease"},
		{"batch delete with lease", ValidateBatch(&rpc.BatchRequest{RoutingKey: []byte("alice"), Ops: []*rpc.Op{{Kind: rpc.Op_KIND_DELETE, Key: []byte("k"), Lease: leaseOf("alice", 1)}}}, valDefaults), "op 0: delete takes no lease"},
	} {
		t.Run(tc.name, func(t *testing.T) { valCheck(t, tc.err, tc.want) })
	}
}

// FuzzValidateLease: the lease validators never panic, and what they
// accept the state machine accepts (a grant's command validates; a put's
// lease may attach its key).
func FuzzValidateLease(f *testing.F) {
	f.Add([]byte("alice"), int64(5000), uint64(0), uint32(0), []byte("k"))
	f.Add([]byte("alice"), int64(1), leaseOf("alice", 1), uint32(10), []byte("k"))
	f.Add([]byte{}, int64(86_400_001), leaseOf("bob", 7), uint32(100001), []byte{})
	f.Add([]byte("pools"), int64(-1), keys.LeaseIDOf(0, 0), uint32(5), []byte("x"))
	f.Fuzz(func(t *testing.T, rk []byte, ttl int64, id uint64, n uint32, key []byte) {
		if err := ValidateLeaseGrant(&rpc.LeaseGrantRequest{RoutingKey: rk, TtlMs: ttl}); err == nil {
			c := &fsm.Command{Op: fsm.OpLeaseGrant, Lease: &fsm.LeaseArgs{RoutingKey: rk, TTLMs: ttl}, Time: 1}
			if err := c.Validate(cluster.ApplyLimits()); err != nil {
				t.Fatalf("grant accepted by the API, refused by the state machine: %v", err)
			}
		} else if !errors.Is(err, cluster.ErrInvalidArgument) {
			t.Fatalf("grant error %v does not wrap ErrInvalidArgument", err)
		}
		if err := ValidateLeaseID(id); (err == nil) != keys.ValidLeaseID(id) {
			t.Fatalf("ValidateLeaseID(%016x): %v", id, err)
		}
		_ = ValidateLeaseTimeToLive(&rpc.LeaseTimeToLiveRequest{Id: id, MaxKeys: n})
		_ = ValidateLeaseList(&rpc.LeaseListRequest{Shard: n, After: id, Limit: n}, 1000)
		put := &rpc.PutRequest{RoutingKey: rk, Key: key, Lease: id}
		if ValidatePut(put, valDefaults) == nil && id != 0 {
			c := &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{
				{Kind: fsm.MutPut, Key: keys.KV(rk, key), Lease: id}}}}
			if err := c.Validate(cluster.ApplyLimits()); err != nil {
				t.Fatalf("put with lease %016x accepted by the API, refused by the state machine: %v", id, err)
			}
		}
	})
}
