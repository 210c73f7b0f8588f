package api

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// leaseServer implements the Lease service (rpc/lease.proto) on the
// shard leaders' lessors (cluster/replica/lease.go). A request about a
// lease is routed by the slot in its id; a grant by its routing key.
//
// Version gate: the lease commands need fsm.VersionLeases; before the
// cluster runs it, the replica refuses them (replica.Config.Admit): a
// Grant fails with FailedPrecondition, nothing changed, so no lease
// exists to keep alive, revoke or list.
type leaseServer struct {
	rpc.UnimplementedLeaseServer
	*server
}

// defaultMaxLeaseKeys is TimeToLive's list of attached keys when the
// request names no bound.
const defaultMaxLeaseKeys = 1000

// ValidateLeaseGrant checks a Grant request.
func ValidateLeaseGrant(req *rpc.LeaseGrantRequest) error {
	if err := validateRoutingKey(req.GetRoutingKey()); err != nil {
		return err
	}
	return validateLeaseTTL(req.GetTtlMs())
}

func validateLeaseTTL(ms int64) error {
	if ms < fsm.MinLeaseTTL.Milliseconds() || ms > fsm.MaxLeaseTTL.Milliseconds() {
		return invalid("ttl %v: want %v..%v", time.Duration(ms)*time.Millisecond, fsm.MinLeaseTTL, fsm.MaxLeaseTTL)
	}
	return nil
}

// ValidateLeaseID checks a lease id a request names.
func ValidateLeaseID(id uint64) error {
	if !keys.ValidLeaseID(id) {
		return invalid("lease id %016x: not one a grant returns (sequence 0)", id)
	}
	return nil
}

// validateAttachLease checks that lease (0: none) may hold keys of
// routing key rk: a lease id of rk's slot.
func validateAttachLease(lease uint64, rk []byte) error {
	if lease == 0 {
		return nil
	}
	if err := ValidateLeaseID(lease); err != nil {
		return err
	}
	if slot := shard.SlotOf(rk); byte(slot) != keys.LeaseSlot(lease) {
		return invalid("lease %016x is of slot %d, the routing key of slot %d: grant the lease for the same routing key", lease, keys.LeaseSlot(lease), slot)
	}
	return nil
}

// ValidateLeaseTimeToLive checks a TimeToLive request.
func ValidateLeaseTimeToLive(req *rpc.LeaseTimeToLiveRequest) error {
	if err := ValidateLeaseID(req.GetId()); err != nil {
		return err
	}
	if n := req.GetMaxKeys(); n > 100000 {
		return invalid("max_keys %d: want at most 100000", n)
	}
	return nil
}

// ValidateLeaseList checks a List request against the page size cap.
func ValidateLeaseList(req *rpc.LeaseListRequest, maxPage int) error {
	if req.GetShard() >= shard.MaxShards {
		return invalid("shard %d: shard ids are below %d", req.GetShard(), shard.MaxShards)
	}
	if req.GetAfter() != 0 && !keys.ValidLeaseID(req.GetAfter()) {
		return invalid("after %016x: not a lease id", req.GetAfter())
	}
	if int64(req.GetLimit()) > int64(maxPage) {
		return invalid("limit %d: the page size is at most %d", req.GetLimit(), maxPage)
	}
	return nil
}

// lessorOf routes lease id to this node's replica of its slot's shard and
// returns it with its lessor.
func (s *leaseServer) lessorOf(id uint64) (shard.ID, *replica.Replica, error) {
	smap := s.node.ShardMap()
	if smap == nil {
		return 0, nil, s.statusErr(0, cluster.ErrNotBootstrapped)
	}
	sid := smap.ShardOfSlot(shard.Slot(keys.LeaseSlot(id)))
	r := s.node.LocalReplica(sid)
	if r == nil || r.Leases() == nil {
		return sid, nil, s.notLeader(sid)
	}
	return sid, r, nil
}

func (s *leaseServer) Grant(ctx context.Context, req *rpc.LeaseGrantRequest) (*rpc.LeaseGrantResponse, error) {
	if err := ValidateLeaseGrant(req); err != nil {
		return nil, s.statusErr(0, err)
	}
	id, r, err := s.route(req.GetRoutingKey())
	if err != nil {
		return nil, err
	}
	if r.Leases() == nil {
		return nil, s.notLeader(id)
	}
	c := s.leaseCallerOf(ctx, rpc.Lease_Grant_FullMethodName)
	lease, err := r.Leases().GrantOwned(ctx, req.GetRoutingKey(), time.Duration(req.GetTtlMs())*time.Millisecond, c.grantOwner())
	if err != nil {
		return nil, s.statusErr(id, err)
	}
	return &rpc.LeaseGrantResponse{Id: lease, TtlMs: req.GetTtlMs()}, nil
}

func (s *leaseServer) Revoke(ctx context.Context, req *rpc.LeaseRevokeRequest) (*rpc.LeaseRevokeResponse, error) {
	if err := ValidateLeaseID(req.GetId()); err != nil {
		return nil, s.statusErr(0, err)
	}
	id, r, err := s.lessorOf(req.GetId())
	if err != nil {
		return nil, err
	}
	// The owner, then the keyspaces of the attached keys (checked here,
	// and again by the state machine as the revoke applies: Deny).
	const method = rpc.Lease_Revoke_FullMethodName
	c := s.leaseCallerOf(ctx, method)
	if _, err := s.checkLeaseUse(ctx, c, method, id, r, req.GetId()); err != nil {
		return nil, err
	}
	if err := s.checkLeaseKinds(c, method, id, r, req.GetId(), true); err != nil {
		return nil, err
	}
	n, err := r.Leases().RevokeDenying(ctx, req.GetId(), c.missing(true))
	if errors.Is(err, fsm.ErrLeaseDenied) {
		return nil, s.refuseLease(c, method, err.Error())
	}
	if err != nil {
		return nil, s.statusErr(id, err)
	}
	return &rpc.LeaseRevokeResponse{Deleted: uint32(n)}, nil
}

// keepAlive renews lease on this node's replica of its shard, for its
// owner (checkLeaseUse).
func (s *leaseServer) keepAlive(ctx context.Context, c leaseCaller, lease uint64) (time.Duration, error) {
	id, r, err := s.lessorOf(lease)
	if err != nil {
		return 0, err
	}
	if _, err := s.checkLeaseUse(ctx, c, rpc.Lease_KeepAlive_FullMethodName, id, r, lease); err != nil {
		return 0, err
	}
	ttl, err := r.Leases().KeepAlive(ctx, lease)
	if err != nil {
		return 0, s.statusErr(id, err)
	}
	return ttl, nil
}

func (s *leaseServer) KeepAlive(ctx context.Context, req *rpc.LeaseKeepAliveRequest) (*rpc.LeaseKeepAliveResponse, error) {
	if err := ValidateLeaseID(req.GetId()); err != nil {
		return nil, s.statusErr(0, err)
	}
	ttl, err := s.keepAlive(ctx, s.leaseCallerOf(ctx, rpc.Lease_KeepAlive_FullMethodName), req.GetId())
	if err != nil {
		return nil, err
	}
	return &rpc.LeaseKeepAliveResponse{Id: req.GetId(), TtlMs: ttl.Milliseconds()}, nil
}

// maxStreamKeepAlives bounds the keep-alives of one KeepAliveStream that
// are being answered at once (a client multiplexes all its leases of a
// shard on one stream; concurrent keep-alives share read barriers). It
// was 1024: with a stream's goroutines and read barriers that let one
// identity's streams run a node's work (issue 37 item 9); the streams of
// an identity are capped too (Config.MaxKeepAliveStreamsPerIdentity).
const maxStreamKeepAlives = 64

// KeepAliveStream answers each keep-alive of the stream with the new TTL,
// 0 for a lease that no longer exists; the answers name their lease and
// come as they are ready (up to maxStreamKeepAlives are answered
// concurrently, so not necessarily in the order asked; an identity holds
// at most Config.MaxKeepAliveStreamsPerIdentity streams on the node,
// ResourceExhausted beyond). A lease of another identity is answered 0
// too, as if it did not exist (the refusal is audited; leaseauth.go). Any other error
// ends the stream with its status (the client reconnects to the shard's
// leader) once the keep-alives in flight have ended. Each keep-alive is
// bounded by the request timeout.
//
// Threads: the stream is received on a goroutine of its own (so that an
// error ends the stream at once, not at the next message); it ends with
// the stream, which gRPC ends when this handler returns. The keep-alives
// run on goroutines joined before it returns.
func (s *leaseServer) KeepAliveStream(st rpc.Lease_KeepAliveStreamServer) error {
	release, err := s.keepAlivesOf.admit(s.streamIdentity(st.Context(), rpc.Lease_KeepAliveStream_FullMethodName))
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	caller := s.leaseCallerOf(ctx, rpc.Lease_KeepAliveStream_FullMethodName)
	reqs := make(chan uint64)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req.GetId():
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		wg     sync.WaitGroup
		sendMu sync.Mutex
		errMu  sync.Mutex
		first  error // the error that ends the stream
	)
	failed := make(chan struct{})
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if first == nil && err != nil {
			first = err
			close(failed)
			cancel()
		}
	}
	end := func(err error) error {
		fail(err)
		wg.Wait()
		errMu.Lock()
		defer errMu.Unlock()
		return first
	}
	sem := make(chan struct{}, maxStreamKeepAlives)
	for {
		var id uint64
		select {
		case id = <-reqs:
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				return end(err)
			}
			// The client is done sending: answer what it sent.
			wg.Wait()
			errMu.Lock()
			defer errMu.Unlock()
			return first
		case <-failed:
			return end(nil)
		case <-ctx.Done():
			// The stream is cancelled (the client went away, the server
			// stops): the receiver may have returned without a word
			// while handing over a request (it selects on ctx too).
			return end(ctx.Err())
		}
		if err := ValidateLeaseID(id); err != nil {
			return end(s.statusErr(0, err))
		}
		select {
		case sem <- struct{}{}:
		case <-failed:
			return end(nil)
		case <-ctx.Done():
			return end(ctx.Err())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sid, r, err := s.lessorOf(id)
			if err != nil {
				fail(err)
				return
			}
			kctx, kcancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			defer kcancel()
			// Another identity's lease is answered as one that does not
			// exist (the refusal is audited): the stream carries the
			// caller's other leases.
			var ttl time.Duration
			_, err = s.checkLeaseUse(kctx, caller, rpc.Lease_KeepAliveStream_FullMethodName, sid, r, id)
			switch {
			case status.Code(err) == codes.PermissionDenied:
				err = nil
			case err == nil:
				ttl, err = r.Leases().KeepAlive(kctx, id)
			}
			kcancel()
			if err != nil && !errors.Is(err, fsm.ErrLeaseNotFound) {
				fail(s.statusErr(sid, err))
				return
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			if ctx.Err() != nil {
				return // the stream is ending: its error says why
			}
			if err := st.Send(&rpc.LeaseKeepAliveResponse{Id: id, TtlMs: ttl.Milliseconds()}); err != nil {
				fail(err)
			}
		}()
	}
}

func (s *leaseServer) TimeToLive(ctx context.Context, req *rpc.LeaseTimeToLiveRequest) (*rpc.LeaseTimeToLiveResponse, error) {
	if err := ValidateLeaseTimeToLive(req); err != nil {
		return nil, s.statusErr(0, err)
	}
	id, r, err := s.lessorOf(req.GetId())
	if err != nil {
		return nil, err
	}
	st, err := r.Leases().TimeToLive(ctx, req.GetId())
	if err != nil {
		return nil, s.statusErr(id, err)
	}
	// Another identity's lease is refused; the keys of a lease without an
	// owner are listed to a caller with the read role of their keyspaces.
	const method = rpc.Lease_TimeToLive_FullMethodName
	c := s.leaseCallerOf(ctx, method)
	if !c.open(st.Record) {
		return nil, s.refuseLease(c, method, notOwner(req.GetId()))
	}
	if req.GetKeys() && st.Record.Owner != c.owner {
		if err := s.checkLeaseKinds(c, method, id, r, req.GetId(), false); err != nil {
			return nil, err
		}
	}
	limit := int(req.GetMaxKeys())
	if limit == 0 {
		limit = defaultMaxLeaseKeys
	}
	if !req.GetKeys() {
		limit = -1
	}
	attached, n, err := r.FSM().LeaseKeys(req.GetId(), limit)
	if err != nil {
		return nil, s.statusErr(id, err)
	}
	resp := &rpc.LeaseTimeToLiveResponse{Lease: leaseInfo(st), KeyCount: uint32(n)}
	if req.GetKeys() {
		for _, k := range attached {
			resp.Keys = append(resp.Keys, attachedKey(k))
		}
	}
	return resp, nil
}

func (s *leaseServer) List(ctx context.Context, req *rpc.LeaseListRequest) (*rpc.LeaseListResponse, error) {
	if err := ValidateLeaseList(req, s.cfg.MaxScanPage); err != nil {
		return nil, s.statusErr(0, err)
	}
	id, r, err := s.shardReplica(req.GetShard())
	if err != nil {
		return nil, err
	}
	if r.Leases() == nil {
		return nil, s.notLeader(id)
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = s.cfg.MaxScanPage
	}
	// A caller sees its own leases and those without an owner (any lease
	// when privileged or without authentication).
	c := s.leaseCallerOf(ctx, rpc.Lease_List_FullMethodName)
	sts, err := r.Leases().List(ctx, req.GetAfter(), limit+1, c.open)
	if err != nil {
		return nil, s.statusErr(id, err)
	}
	if err := s.staleMap(id, r, req.GetMapVersion()); err != nil {
		return nil, err
	}
	resp := &rpc.LeaseListResponse{}
	if len(sts) > limit {
		sts, resp.More = sts[:limit], true
	}
	for i := range sts {
		resp.Leases = append(resp.Leases, leaseInfo(&sts[i]))
	}
	return resp, nil
}

func leaseInfo(st *replica.LeaseStatus) *rpc.LeaseInfo {
	return &rpc.LeaseInfo{Id: st.Record.ID, RoutingKey: st.Record.RoutingKey, TtlMs: st.Record.TTLMs,
		RemainingMs: st.Remaining.Milliseconds(), GrantedAt: st.Record.GrantedAt}
}

// attachedKey describes the stored key k attached to a lease.
func attachedKey(k []byte) *rpc.AttachedKey {
	switch k[0] {
	case keys.TableKV:
		if rk, key, err := keys.DecodeKV(k); err == nil {
			return &rpc.AttachedKey{Kind: "kv", RoutingKey: rk, Key: key}
		}
	case keys.TableRunners:
		return &rpc.AttachedKey{Kind: "runner", RoutingKey: []byte(keys.PoolsRoutingKey), Key: k[1:]}
	case keys.TableAgents:
		if u, a, err := keys.DecodeAgent(k); err == nil {
			return &rpc.AttachedKey{Kind: "agent", RoutingKey: u[:], Key: a[:]}
		}
	}
	return &rpc.AttachedKey{Kind: keys.TableName(k[0]), Key: k}
}

// renewFor keeps lease (0: none) alive on replica r, before a heartbeat
// that attaches a record to it is proposed there.
func renewFor(ctx context.Context, s *server, id shard.ID, r *replica.Replica, lease uint64) error {
	if lease == 0 {
		return nil
	}
	if r.Leases() == nil {
		return s.notLeader(id)
	}
	// A heartbeat keeps its lease alive: only for the lease's owner.
	c := s.leaseCallerOf(ctx, "heartbeat")
	if _, err := s.checkLeaseUse(ctx, c, "heartbeat of a lease", id, r, lease); err != nil {
		return err
	}
	if _, err := r.Leases().KeepAlive(ctx, lease); err != nil {
		return s.statusErr(id, err)
	}
	return nil
}
