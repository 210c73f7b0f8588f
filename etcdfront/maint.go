package etcdfront

import (
	"context"
	"hash/fnv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	etcdversion "go.etcd.io/etcd/api/v3/version"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/fsm"
)

// ServedVersion is the etcd version whose API the front serves (the
// go.etcd.io/etcd/api/v3 module it is generated from), which Status
// reports.
var ServedVersion = etcdversion.Version

// memberID is the etcd member id of swarmkv node id (FNV-1a of the id).
func memberID(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// header is the response header at namespace revision rev.
func (f *Front) header(rev int64) *pb.ResponseHeader {
	h := &pb.ResponseHeader{MemberId: memberID(f.n.ID()), Revision: rev}
	if st, _ := f.n.LocalState(); st != nil {
		h.ClusterId = memberID(st.ClusterID)
	}
	return h
}

// maintenanceServer serves etcdserverpb.Maintenance: Status and Alarm.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	f *Front
}

// Status answers for the call's namespace: its shard's replica on this
// node (leader, Raft index and term, its store's disk size as db size and
// in use), the namespace's revision in the header. A node without a replica of the shard answers with its member
// id and an error in Errors.
func (s *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	ns, err := s.f.namespace(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.StatusResponse{Version: ServedVersion, StorageVersion: ServedVersion}
	r, err := s.f.shardOf(ns)
	if err != nil {
		out.Header = s.f.header(0)
		out.Errors = []string{err.Error()}
		return out, nil
	}
	rev := int64(0)
	_ = r.FSM().Read(nil, func(v fsm.View) error {
		rev, _, err = v.EtcdRevision(ns)
		return err
	})
	out.Header = s.f.header(rev)
	rf := r.Raft()
	out.RaftIndex, out.RaftTerm, out.RaftAppliedIndex = rf.LastIndex(), rf.CurrentTerm(), rf.AppliedIndex()
	if leader, _ := s.f.n.LeaderHint(r.ID()); leader != "" {
		out.Leader = memberID(leader)
	}
	// etcdctl endpoint status divides by the db size: the shard's store
	// (its Pebble LSM and WAL), all of it in use.
	if n, ok := r.FSM().DiskBytes(); ok {
		out.DbSize = int64(max(n, 1))
		out.DbSizeInUse = out.DbSize
	}
	return out, nil
}

// Alarm answers with no alarms: swarmkv raises none of etcd's (NOSPACE,
// CORRUPT); an activate or deactivate changes nothing.
func (s *maintenanceServer) Alarm(ctx context.Context, _ *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return &pb.AlarmResponse{Header: s.f.header(0)}, nil
}

// clusterServer serves etcdserverpb.Cluster: MemberList.
type clusterServer struct {
	pb.UnimplementedClusterServer
	f *Front
}

// MemberList lists the cluster's members that are not removed, each with
// its Raft address as peer URL; the client URL is this front's for this
// node, none for the others (a node's etcd address is not in the cluster
// state yet).
func (s *clusterServer) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	out := &pb.MemberListResponse{Header: s.f.header(0)}
	st, _ := s.f.n.LocalState()
	if st == nil {
		return out, nil
	}
	scheme := "http://"
	if s.f.n.ServerTLS() != nil {
		scheme = "https://"
	}
	for _, m := range st.Nodes {
		if m.Status == placement.StatusRemoved {
			continue
		}
		mem := &pb.Member{ID: memberID(m.ID), Name: m.ID, PeerURLs: []string{scheme + m.RaftAddr}}
		if m.ID == s.f.n.ID() {
			mem.ClientURLs = []string{scheme + s.f.Addr()}
		}
		out.Members = append(out.Members, mem)
	}
	return out, nil
}

// authServer serves etcdserverpb.Auth: Authenticate and AuthStatus.
type authServer struct {
	pb.UnimplementedAuthServer
	f *Front
}

// Authenticate maps etcd's user and password onto swarmkv's tokens: the
// password is a swarmkv token (the name is not checked, as RESP's AUTH),
// and the etcd token returned is that same token, which the client then
// sends with every call (metadata "token", read as a bearer token). Auth
// off: etcd's "authentication is not enabled".
func (s *authServer) Authenticate(ctx context.Context, req *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	a := s.f.n.Authn()
	if a == nil || !a.On() {
		return nil, rpctypes.ErrGRPCAuthNotEnabled
	}
	if _, ok := a.IdentifyToken(req.Password); !ok {
		a.Audit("etcd", nil, "/etcdserverpb.Auth/Authenticate", false, "bad token as password")
		return nil, rpctypes.ErrGRPCAuthFailed
	}
	return &pb.AuthenticateResponse{Header: s.f.header(0), Token: req.Password}, nil
}

// AuthStatus says whether the node checks credentials.
func (s *authServer) AuthStatus(ctx context.Context, _ *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	a := s.f.n.Authn()
	return &pb.AuthStatusResponse{Header: s.f.header(0), Enabled: a != nil && a.On()}, nil
}
