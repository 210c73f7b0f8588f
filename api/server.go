package api

import (
	"bytes"
	"context"
	"errors"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// server implements the KV and Cluster gRPC services on a Node.
type server struct {
	rpc.UnimplementedKVServer
	rpc.UnimplementedClusterServer
	node Node
	cfg  cluster.Config // node.Config(), read once
	// Streams per identity (streamlimit.go): watchers and lease
	// keep-alive streams.
	watchersOf, keepAlivesOf *identityLimit
	watchMem                 *watchMemory
}

// statusErr maps an error of this package (or of a replica of shard id) to
// a gRPC status with typed details, through the one table (errors.go).
func (s *server) statusErr(id shard.ID, err error) error {
	return cluster.StatusError(err, id, func() (string, string) { return s.node.LeaderHint(id) })
}

// notLeader answers with the leader hint this node has for shard id.
func (s *server) notLeader(id shard.ID) error { return s.statusErr(id, cluster.ErrNotLeader) }

func (s *server) Get(ctx context.Context, req *rpc.GetRequest) (*rpc.GetResponse, error) {
	if err := ValidateGet(req, s.cfg.Limits); err != nil {
		return nil, s.statusErr(0, err)
	}
	v, err := s.readKey(ctx, req.GetRoutingKey(), req.GetConsistency(), keys.KV(req.GetRoutingKey(), req.GetKey()))
	if errors.Is(err, fsm.ErrNotFound) {
		return &rpc.GetResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &rpc.GetResponse{Found: true, Value: v}, nil
}

func (s *server) Put(ctx context.Context, req *rpc.PutRequest) (*rpc.PutResponse, error) {
	if err := ValidatePut(req, s.cfg.Limits); err != nil {
		return nil, s.statusErr(0, err)
	}
	cmd := &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
		Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: keys.KV(req.GetRoutingKey(), req.GetKey()), Value: req.GetValue(), Lease: req.GetLease()}},
	}}
	res, err := s.proposeAttaching(ctx, rpc.KV_Put_FullMethodName, req.GetRoutingKey(), cmd)
	if err != nil {
		return nil, err
	}
	return &rpc.PutResponse{Index: res.Index}, nil
}

func (s *server) Delete(ctx context.Context, req *rpc.DeleteRequest) (*rpc.DeleteResponse, error) {
	if err := ValidateDelete(req, s.cfg.Limits); err != nil {
		return nil, s.statusErr(0, err)
	}
	res, err := s.proposeRouted(ctx, req.GetRoutingKey(), &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{
		Mutations: []fsm.Mutation{{Kind: fsm.MutDelete, Key: keys.KV(req.GetRoutingKey(), req.GetKey())}},
	}})
	if err != nil {
		return nil, err
	}
	return &rpc.DeleteResponse{Deleted: res.Deleted > 0, Index: res.Index}, nil
}

func (s *server) Batch(ctx context.Context, req *rpc.BatchRequest) (*rpc.BatchResponse, error) {
	if err := ValidateBatch(req, s.cfg.Limits); err != nil {
		return nil, s.statusErr(0, err)
	}
	res, err := s.proposeAttaching(ctx, rpc.KV_Batch_FullMethodName, req.GetRoutingKey(), batchCommand(req))
	if err != nil {
		return nil, err
	}
	return &rpc.BatchResponse{Succeeded: res.Succeeded, FailedGuard: int32(res.FailedGuard), Index: res.Index}, nil
}

func (s *server) Scan(ctx context.Context, req *rpc.ScanRequest) (*rpc.ScanResponse, error) {
	if err := ValidateScan(req, s.cfg.Limits); err != nil {
		return nil, s.statusErr(0, err)
	}
	var resp *rpc.ScanResponse
	err := s.read(ctx, req.GetRoutingKey(), req.GetConsistency(), func(v fsm.View) (err error) {
		resp, err = s.scan(v, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// scan answers req from v.
func (s *server) scan(v fsm.View, req *rpc.ScanRequest) (*rpc.ScanResponse, error) {
	pg := s.newPager(req.GetLimit())
	rk := req.GetRoutingKey()
	prefix := keys.KVPrefix(rk, req.GetPrefix())
	start := prefix
	if sa := req.GetStartAfter(); len(sa) > 0 {
		// The first key after start_after is start_after + 0x00.
		after := append(keys.KV(rk, sa), 0)
		if bytes.Compare(after, start) > 0 {
			start = after
		}
	}
	kvs, more, err := v.ScanPage(start, keys.PrefixEnd(prefix), pg.limit, pg.maxBytes)
	if err != nil {
		return nil, s.statusErr(v.Shard(), err)
	}
	resp := &rpc.ScanResponse{}
	for _, kv := range kvs {
		_, k, err := keys.DecodeKV(kv.Key)
		if err != nil {
			return nil, s.statusErr(v.Shard(), err)
		}
		item := &rpc.KeyValue{Key: k, Value: kv.Value}
		if !pg.take(kv.Key, item) {
			break
		}
		resp.Items = append(resp.Items, item)
	}
	resp.More = pg.next(more) != nil
	return resp, nil
}

func (s *server) ClusterMap(ctx context.Context, _ *rpc.ClusterMapRequest) (*rpc.ClusterMapResponse, error) {
	n := s.node
	st, smap := n.LocalState()
	if st == nil {
		return nil, s.statusErr(0, cluster.ErrNotBootstrapped)
	}
	resp := &rpc.ClusterMapResponse{MapVersion: smap.Version, NumShards: uint32(smap.NumShards), NodeId: s.cfg.ID}
	resp.Slots = make([]uint32, shard.NumSlots)
	for i, id := range smap.Slots {
		resp.Slots[i] = uint32(id)
	}
	seen := map[string]bool{}
	for _, p := range st.Shards {
		si := &rpc.ShardInfo{Id: uint32(p.Shard), Replicas: p.Voters}
		if r := n.LocalReplica(p.Shard); r != nil {
			si.LeaderId = r.Leader()
		}
		resp.Shards = append(resp.Shards, si)
		for _, v := range p.Voters {
			if seen[v] {
				continue
			}
			seen[v] = true
			if a, ok := n.NodeAddrs(v); ok {
				resp.Nodes = append(resp.Nodes, &rpc.NodeInfo{Id: a.ID, GrpcAddr: a.GRPCAddr, RaftAddr: a.RaftAddr, HttpAddr: a.HTTPAddr})
			}
		}
	}
	return resp, nil
}
