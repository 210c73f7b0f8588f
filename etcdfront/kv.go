package etcdfront

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
)

// fsmMaxTxnOps is the state machine's own bound on a txn, the highest
// Config.MaxTxnOps.
const fsmMaxTxnOps = fsm.MaxEtcdTxnOps

// kvServer serves etcdserverpb.KV.
type kvServer struct {
	pb.UnimplementedKVServer
	f *Front
}

// namespace is the call's namespace: its metadata's MetadataNamespace,
// else the front's.
func (f *Front) namespace(ctx context.Context) (string, error) {
	ns := f.cfg.Namespace
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(MetadataNamespace); len(v) > 0 {
			ns = v[0]
		}
	}
	if err := keys.ValidateEtcdNamespace(ns); err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return ns, nil
}

// shardOf is the local replica of namespace ns's shard, or the error that
// sends the client elsewhere.
func (f *Front) shardOf(ns string) (*replica.Replica, error) {
	id, r, err := f.n.Route(keys.EtcdRoutingKey(ns))
	if err != nil {
		return nil, f.statusErr(ns, id, err)
	}
	if r == nil {
		return nil, f.notLeader(ns, id)
	}
	return r, nil
}

func (s *kvServer) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	ns, err := s.f.namespace(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	q := rangeOf(req)
	if err := q.Validate(fsm.Limits{}); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r, err := s.f.shardOf(ns)
	if err != nil {
		return nil, err
	}
	c := replica.Linearizable
	if req.Serializable {
		c = replica.Stale
	}
	rk := keys.EtcdRoutingKey(ns)
	var res *fsm.EtcdRangeResult
	var rev int64
	err = r.Read(ctx, c, rk, func(v fsm.View) error {
		var err error
		res, rev, err = v.EtcdRange(ns, &q)
		return err
	})
	if err != nil {
		return nil, s.f.statusErr(ns, r.ID(), err)
	}
	return rangeResponse(s.f.header(rev), res), nil
}

func rangeOf(req *pb.RangeRequest) fsm.EtcdRange {
	return fsm.EtcdRange{
		Key: req.Key, End: req.RangeEnd, Limit: req.Limit, Revision: req.Revision,
		SortOrder: uint8(req.SortOrder), SortTarget: uint8(req.SortTarget),
		KeysOnly: req.KeysOnly, CountOnly: req.CountOnly,
		MinMod: req.MinModRevision, MaxMod: req.MaxModRevision,
		MinCreate: req.MinCreateRevision, MaxCreate: req.MaxCreateRevision,
	}
}

func rangeResponse(h *pb.ResponseHeader, res *fsm.EtcdRangeResult) *pb.RangeResponse {
	out := &pb.RangeResponse{Header: h, More: res.More, Count: res.Count}
	for i := range res.KVs {
		out.Kvs = append(out.Kvs, kvOf(&res.KVs[i]))
	}
	return out
}

func kvOf(kv *fsm.EtcdKV) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

func (s *kvServer) Put(ctx context.Context, req *pb.PutRequest) (*pb.PutResponse, error) {
	if err := s.f.checkSize(req.Size()); err != nil {
		return nil, err
	}
	if len(req.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	res, err := s.f.txn(ctx, &fsm.EtcdTxn{Success: []fsm.EtcdOp{putOf(req)}})
	if err != nil {
		return nil, err
	}
	out := &pb.PutResponse{Header: s.f.header(res.Revision)}
	if p := res.Results[0].PrevKV; p != nil {
		out.PrevKv = kvOf(p)
	}
	return out, nil
}

func putOf(req *pb.PutRequest) fsm.EtcdOp {
	return fsm.EtcdOp{Kind: fsm.EtcdPut, Key: req.Key, Value: req.Value, Lease: req.Lease,
		PrevKV: req.PrevKv, IgnoreValue: req.IgnoreValue, IgnoreLease: req.IgnoreLease}
}

func (s *kvServer) DeleteRange(ctx context.Context, req *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if len(req.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	res, err := s.f.txn(ctx, &fsm.EtcdTxn{Success: []fsm.EtcdOp{deleteOf(req)}})
	if err != nil {
		return nil, err
	}
	return deleteResponse(s.f.header(res.Revision), &res.Results[0]), nil
}

func deleteOf(req *pb.DeleteRangeRequest) fsm.EtcdOp {
	return fsm.EtcdOp{Kind: fsm.EtcdDelete, Key: req.Key, End: req.RangeEnd, PrevKV: req.PrevKv}
}

func deleteResponse(h *pb.ResponseHeader, r *fsm.EtcdOpResult) *pb.DeleteRangeResponse {
	out := &pb.DeleteRangeResponse{Header: h, Deleted: r.Deleted}
	for i := range r.PrevKVs {
		out.PrevKvs = append(out.PrevKvs, kvOf(&r.PrevKVs[i]))
	}
	return out
}

func (s *kvServer) Txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := s.f.checkSize(req.Size()); err != nil {
		return nil, err
	}
	total := 0
	t, err := txnOf(req, 0, s.f.cfg.MaxTxnOps, &total)
	if err != nil {
		return nil, err
	}
	res, err := s.f.txn(ctx, t)
	if err != nil {
		return nil, err
	}
	return txnResponse(s.f.header(res.Revision), res), nil
}

// txnOf converts a txn request nested depth deep with budget ops left, as
// etcd checks it (v3rpc checkTxnRequest): the most of its compares,
// success and failure ops is at most budget (etcd's too many operations),
// and a txn in a branch has budget minus that; swarmkv also bounds the
// depth (fsm.MaxEtcdTxnDepth) and the compares and ops of the whole tree
// (fsm.MaxEtcdTxnTotalOps, counted in *total). Etcd's duplicate-key rule
// is the state machine's (fsm: ErrEtcdDuplicateKey).
func txnOf(req *pb.TxnRequest, depth, budget int, total *int) (*fsm.EtcdTxn, error) {
	opc := max(len(req.Compare), len(req.Success), len(req.Failure))
	if opc > budget {
		return nil, rpctypes.ErrGRPCTooManyOps
	}
	if *total += len(req.Compare) + len(req.Success) + len(req.Failure); *total > fsm.MaxEtcdTxnTotalOps {
		return nil, rpctypes.ErrGRPCTooManyOps
	}
	t := &fsm.EtcdTxn{}
	for _, c := range req.Compare {
		if len(c.Key) == 0 {
			return nil, rpctypes.ErrGRPCEmptyKey
		}
		fc := fsm.EtcdCompare{Target: uint8(c.Target), Result: uint8(c.Result), Key: c.Key, End: c.RangeEnd}
		switch u := c.TargetUnion.(type) {
		case *pb.Compare_Version:
			fc.Int = u.Version
		case *pb.Compare_CreateRevision:
			fc.Int = u.CreateRevision
		case *pb.Compare_ModRevision:
			fc.Int = u.ModRevision
		case *pb.Compare_Lease:
			fc.Int = u.Lease
		case *pb.Compare_Value:
			fc.Value = u.Value
		}
		t.Compare = append(t.Compare, fc)
	}
	var err error
	if t.Success, err = opsOf(req.Success, depth, budget-opc, total); err != nil {
		return nil, err
	}
	if t.Failure, err = opsOf(req.Failure, depth, budget-opc, total); err != nil {
		return nil, err
	}
	return t, nil
}

// opsOf converts a txn branch of a txn at depth depth; a nested txn has
// budget ops left.
func opsOf(ops []*pb.RequestOp, depth, budget int, total *int) ([]fsm.EtcdOp, error) {
	var out []fsm.EtcdOp
	for _, op := range ops {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestPut:
			if len(r.RequestPut.Key) == 0 {
				return nil, rpctypes.ErrGRPCEmptyKey
			}
			out = append(out, putOf(r.RequestPut))
		case *pb.RequestOp_RequestDeleteRange:
			if len(r.RequestDeleteRange.Key) == 0 {
				return nil, rpctypes.ErrGRPCEmptyKey
			}
			out = append(out, deleteOf(r.RequestDeleteRange))
		case *pb.RequestOp_RequestRange:
			if len(r.RequestRange.Key) == 0 {
				return nil, rpctypes.ErrGRPCEmptyKey
			}
			q := rangeOf(r.RequestRange)
			out = append(out, fsm.EtcdOp{Kind: fsm.EtcdRangeK, Range: &q})
		case *pb.RequestOp_RequestTxn:
			if depth+1 > fsm.MaxEtcdTxnDepth {
				return nil, status.Errorf(codes.InvalidArgument, "swarmkv: txns nested deeper than %d (docs/etcd.md)", fsm.MaxEtcdTxnDepth)
			}
			if r.RequestTxn == nil {
				r.RequestTxn = &pb.TxnRequest{}
			}
			t, err := txnOf(r.RequestTxn, depth+1, budget, total)
			if err != nil {
				return nil, err
			}
			out = append(out, fsm.EtcdOp{Kind: fsm.EtcdTxnK, Txn: t})
		default:
			return nil, status.Error(codes.InvalidArgument, "swarmkv: empty request op")
		}
	}
	return out, nil
}

// txnResponse is the answer of a txn (or of a nested one) whose header
// is h: every response in it carries h.
func txnResponse(h *pb.ResponseHeader, res *fsm.EtcdResult) *pb.TxnResponse {
	out := &pb.TxnResponse{Header: h, Succeeded: res.Succeeded}
	for i := range res.Results {
		r := &res.Results[i]
		switch r.Kind {
		case fsm.EtcdPut:
			p := &pb.PutResponse{Header: h}
			if r.PrevKV != nil {
				p.PrevKv = kvOf(r.PrevKV)
			}
			out.Responses = append(out.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: p}})
		case fsm.EtcdDelete:
			out.Responses = append(out.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: deleteResponse(h, r)}})
		case fsm.EtcdRangeK:
			out.Responses = append(out.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rangeResponse(h, r.Range)}})
		case fsm.EtcdTxnK:
			out.Responses = append(out.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: txnResponse(h, r.Txn)}})
		}
	}
	return out
}

func (s *kvServer) Compact(ctx context.Context, req *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	ns, err := s.f.namespace(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.f.shardOf(ns)
	if err != nil {
		return nil, err
	}
	if req.Revision <= 0 {
		// etcd: compacting at 0 or below is compacting at the compacted
		// revision, which is already compacted.
		return nil, rpctypes.ErrGRPCCompacted
	}
	res, err := s.f.propose(ctx, ns, r, &fsm.Command{Op: fsm.OpEtcdCompact, EtcdCompact: &fsm.EtcdCompact{NS: ns, Revision: req.Revision}})
	if err != nil {
		return nil, err
	}
	return &pb.CompactionResponse{Header: s.f.header(res.Revision)}, nil
}

// checkSize refuses a write request over Config.MaxRequestBytes (etcd's
// request too large).
func (f *Front) checkSize(n int) error {
	if n > f.cfg.MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

// txn proposes t on the call's namespace and returns its answer.
func (f *Front) txn(ctx context.Context, t *fsm.EtcdTxn) (*fsm.EtcdResult, error) {
	ns, err := f.namespace(ctx)
	if err != nil {
		return nil, err
	}
	t.NS = ns
	r, err := f.shardOf(ns)
	if err != nil {
		return nil, err
	}
	return f.propose(ctx, ns, r, &fsm.Command{Op: fsm.OpEtcdTxn, Etcd: t})
}

// propose proposes cmd to r and returns its etcd answer, or the error in
// etcd's terms.
func (f *Front) propose(ctx context.Context, ns string, r *replica.Replica, cmd *fsm.Command) (*fsm.EtcdResult, error) {
	res, err := r.Propose(ctx, cmd)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, f.statusErr(ns, r.ID(), err)
	}
	return res.Etcd, nil
}
