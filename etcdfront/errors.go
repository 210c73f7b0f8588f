package etcdfront

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// etcdErrors is the front's table from the core's errors to etcd's own
// (rpctypes: the codes and messages etcd's clients switch on). The first
// row whose error err wraps wins; an error of no row is answered by the
// node's table (cluster.StatusError).
var etcdErrors = []struct {
	err  error
	grpc error
}{
	{fsm.ErrEtcdCompacted, rpctypes.ErrGRPCCompacted},
	{fsm.ErrEtcdFutureRev, rpctypes.ErrGRPCFutureRev},
	{fsm.ErrEtcdDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
	{fsm.ErrEtcdKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
	{fsm.ErrEtcdLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
}

// statusErr answers err, an error of namespace ns's shard id, in etcd's
// terms: etcdErrors; this node not leading the shard (or the shard not
// owning the namespace's slot any more, or a leader not ready yet) is
// codes.Unavailable naming the leader, which the official client retries
// on its next endpoint for a Range and not for a write; an invalid request
// InvalidArgument; the rest as the node's API answers them.
func (f *Front) statusErr(ns string, id shard.ID, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, row := range etcdErrors {
		if errors.Is(err, row.err) {
			return row.grpc
		}
	}
	var moved *fsm.MovedError
	switch {
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrLeaderNotReady), errors.As(err, &moved):
		return f.notLeader(ns, id)
	case errors.Is(err, fsm.ErrInvalidCommand):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return cluster.StatusError(err, id, func() (string, string) { return f.n.LeaderHint(id) })
}

// notLeader is codes.Unavailable naming the leader of namespace ns's shard
// as this node knows it.
func (f *Front) notLeader(ns string, id shard.ID) error {
	leader, addr := f.n.LeaderHint(id)
	if leader == "" {
		return status.Errorf(codes.Unavailable, "swarmkv: this node does not lead namespace %q (shard %d); leader unknown: try another endpoint", ns, id)
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("swarmkv: this node does not lead namespace %q (shard %d); its leader is node %s (%s): use its etcd endpoint", ns, id, leader, addr))
}
