package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/shard"
)

// The API the gRPC services above the core use (package api): the hook
// that registers them on the node's gRPC server, a routing key routed to
// a local replica (or the leader hint to answer NotLeader with; the
// replica's own methods, package cluster/replica, propose commands and
// serve reads: its read barrier, then its state machine), the node's settings
// (Config: the Redis bounds too) and shard map (front.go), and the callers'
// identities (Authn, auth.go). These are concrete types and methods: a KV
// Put or Get, or a Redis request (api/redis.go), makes the same calls as
// when the services lived in this package.

// Services is what a package above the core adds to a node's gRPC server
// (New's services argument; package api builds it). Unary and Stream run
// after the core's interceptors (the server-side deadline, metrics);
// Register registers the services before the server serves, given the
// whole unary chain (for calls a service runs itself: the Pipeline);
// Close stops the server's goroutines: Stop before the gRPC server
// stops, Close after. Any field may be nil.
type Services struct {
	Unary    grpc.UnaryServerInterceptor
	Stream   grpc.StreamServerInterceptor
	Register func(s *grpc.Server, unary grpc.UnaryServerInterceptor)
	Stop     func()
	Close    func()
}

// refuseUnguarded and refuseUnguardedStream answer every call of a node
// with auth on that was given no Services (no auth interceptors): fail
// closed.
func refuseUnguarded(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
	return nil, status.Error(codes.PermissionDenied, "swarmkv: method not allowed")
}

func refuseUnguardedStream(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
	return status.Error(codes.PermissionDenied, "swarmkv: method not allowed")
}

// chainUnary runs interceptors in order around handler, as
// grpc.ChainUnaryInterceptor does for the server's own unary calls.
func chainUnary(ics ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		h := handler
		for i := len(ics) - 1; i >= 0; i-- {
			ic, next := ics[i], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}

// Route resolves a routing key to its shard and this node's replica of
// it: nil when the node holds none (the caller answers NotLeader with
// LeaderHint), ErrNotBootstrapped before the cluster has a shard map.
func (n *Node) Route(routingKey []byte) (shard.ID, *replica.Replica, error) {
	return n.replicaFor(routingKey)
}

// LocalReplica returns this node's replica of shard id, nil when it holds
// none.
func (n *Node) LocalReplica(id shard.ID) *replica.Replica { return n.localReplica(id) }

// LeaderHint is the leader id and gRPC address this node knows for shard
// id ("" when unknown).
func (n *Node) LeaderHint(id shard.ID) (leaderID, leaderAddr string) { return n.leaderHint(id) }

// leaderHint is LeaderHint.
func (n *Node) leaderHint(id shard.ID) (leaderID, leaderAddr string) {
	if r := n.localReplica(id); r != nil {
		leaderID = r.Leader()
		if a, ok := n.nodeAddrs(leaderID); ok {
			leaderAddr = a.GRPCAddr
		}
	}
	return leaderID, leaderAddr
}

func (n *Node) localReplica(id shard.ID) *replica.Replica {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.replicas[id]
}

// NodeAddrs returns the addresses of node id: gossip first (fresh), then
// the cluster state.
func (n *Node) NodeAddrs(id string) (NodeAddrs, bool) { return n.nodeAddrs(id) }

// LocalState returns this node's copy of the cluster state (nil before
// bootstrap) with the shard map derived from it; neither is ever changed
// once published.
func (n *Node) LocalState() (*State, *shard.Map) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.state, n.mu.smap
}

// ObserveApply records the time a proposal to shard id took (the
// swarmkv_apply_duration_seconds metric).
func (n *Node) ObserveApply(id shard.ID, d time.Duration) { n.metrics.ObserveApply(uint32(id), d) }

// CountPipeline counts one Pipeline message in direction dir ("in",
// "out") carrying items calls or results.
func (n *Node) CountPipeline(dir string, items int) {
	n.metrics.CountPipeline(dir, items)
}

// errShardPending is wrapped by UnknownShard's answer for a shard id a
// newer map than this node's may name: Unavailable, so the client retries
// (this node's map catches up within a sync).
var errShardPending = errors.New("cluster: shard unknown to this node's map")

// UnknownShard is the answer to a request addressed to shard id that this
// node's map does not name and of which the node holds no replica. For up
// to a sync interval after a split publishes, a node may still have the
// older map: when a newer map may name id (a move in this node's cluster
// state creates it, or the meta group's committed state places it: a sync
// is kicked), the answer is retryable (Unavailable, errShardPending);
// when the committed state does not know id either, InvalidArgument. A
// committed state that cannot be read is Unavailable too.
func (n *Node) UnknownShard(id shard.ID) error {
	if int(id) >= shard.MaxShards {
		return fmt.Errorf("%w: shard %d: shard ids are below %d", ErrInvalidArgument, id, shard.MaxShards)
	}
	n.mu.RLock()
	st := n.mu.state
	n.mu.RUnlock()
	version := uint64(0)
	if st != nil {
		version = st.MapVersion
		if shardKnown(st, id) {
			return fmt.Errorf("%w: shard %d is being created or this node's map (version %d) is behind: retry", errShardPending, id, version)
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, time.Second)
	defer cancel()
	fresh, err := n.fetchMeta(ctx)
	if err != nil {
		return fmt.Errorf("%w: shard %d is unknown to this node's map (version %d), and the cluster state cannot be read: %v",
			errShardPending, id, version, err)
	}
	if shardKnown(fresh, id) {
		n.kickSync()
		return fmt.Errorf("%w: this node's map (version %d) is behind the cluster's (version %d), which has shard %d: retry",
			errShardPending, version, fresh.MapVersion, id)
	}
	return fmt.Errorf("%w: shard %d owns no slot (map version %d)", ErrInvalidArgument, id, fresh.MapVersion)
}

// shardKnown reports whether st places shard id, gives it a slot, or has
// a move that makes it.
func shardKnown(st *State, id shard.ID) bool {
	if st.Placement(id) != nil || slices.Contains(st.Slots, id) {
		return true
	}
	return slices.ContainsFunc(st.Moves, func(m placement.Move) bool { return m.Target == id })
}
