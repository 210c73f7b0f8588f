package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// The admin operations: membership (JoinNode, RemoveNode), Status,
// TransferLeader, Snapshot, ClusterState, which package admin serves over
// HTTP, and the Admin gRPC service between nodes (adminServer) they run on.

// adminServer implements the Admin gRPC service (node-to-node calls behind
// the admin HTTP API and the reconciler).
type adminServer struct {
	rpc.UnimplementedAdminServer
	node *Node
}

// onMetaLeader runs local when this node leads the meta group, else remote
// against the meta leader (never forwarding a call that was forwarded). While
// the meta group has no reachable leader (an election, a leadership move) it
// retries for up to 15 s: every admin change is idempotent, so running one
// again after an unknown outcome is safe.
func (n *Node) onMetaLeader(ctx context.Context, local func() error, remote func(context.Context, rpc.AdminClient) error) error {
	if forwarded(ctx) {
		return n.onMetaLeaderOnce(ctx, local, remote)
	}
	return retry.Do(ctx, retry.Options{Initial: 50 * time.Millisecond, Max: time.Second, MaxElapsed: 15 * time.Second,
		Retryable: func(err error) bool { c := status.Code(err); return c == codes.Unavailable || c == codes.Aborted }},
		func() error { return n.onMetaLeaderOnce(ctx, local, remote) })
}

// leadsMeta reports whether this node's meta replica leads the meta group.
func (n *Node) leadsMeta() bool {
	r := n.metaReplica()
	return r != nil && r.IsLeader()
}

func (n *Node) onMetaLeaderOnce(ctx context.Context, local func() error, remote func(context.Context, rpc.AdminClient) error) error {
	err := local()
	// Not the meta leader: said before the change (errMetaNotLeader), or
	// found by the meta replica's proposal when the leadership moved
	// during the change (ErrNotLeader, nothing committed): either way the
	// change belongs on the new leader.
	lostMeta := errors.Is(err, ErrNotLeader) && !n.leadsMeta()
	if !errors.Is(err, errMetaNotLeader) && !lostMeta {
		return StatusError(err, 0, nil)
	}
	if forwarded(ctx) {
		return status.Error(codes.Unavailable, "cluster: meta leader moved; retry")
	}
	leader := n.findMetaLeader(ctx)
	if leader == "" || leader == n.cfg.ID {
		return status.Error(codes.Unavailable, "cluster: meta group has no leader right now; retry")
	}
	c, err := n.adminClient(leader)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	return remote(forwarding(ctx), c)
}

func (s *adminServer) MetaState(ctx context.Context, _ *rpc.MetaStateRequest) (*rpc.MetaStateResponse, error) {
	n := s.node
	var resp *rpc.MetaStateResponse
	err := n.onMetaLeader(ctx, func() error {
		_, b, err := n.metaRead(ctx)
		if err == nil {
			resp = &rpc.MetaStateResponse{StateJson: b, LeaderId: n.cfg.ID}
		}
		return err
	}, func(ctx context.Context, c rpc.AdminClient) error {
		var err error
		resp, err = c.MetaState(ctx, &rpc.MetaStateRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	// A node identity that the committed state does not list as a member
	// (a removed node, a node waiting to be admitted) learns its own
	// record only (auth.go).
	if id := authn.CallerOf(ctx); id != nil && id.IsNode() {
		st, err := decodeState(resp.StateJson)
		if err != nil {
			return nil, StatusError(err, 0, nil)
		}
		if !stateHasMember(st, id.NodeID()) {
			b, err := json.Marshal(redactForNonMember(st, id.NodeID()))
			if err != nil {
				return nil, StatusError(err, 0, nil)
			}
			resp = &rpc.MetaStateResponse{StateJson: b, LeaderId: resp.LeaderId}
		}
	}
	return resp, nil
}

func (s *adminServer) JoinNode(ctx context.Context, req *rpc.JoinNodeRequest) (*rpc.JoinNodeResponse, error) {
	st, err := s.node.JoinNode(ctx, req.NodeId)
	if err != nil {
		return nil, err
	}
	return &rpc.JoinNodeResponse{Status: st.Status(req.NodeId), Epoch: st.Epoch}, nil
}

func (s *adminServer) RemoveNode(ctx context.Context, req *rpc.RemoveNodeRequest) (*rpc.RemoveNodeResponse, error) {
	st, err := s.node.RemoveNode(ctx, req.NodeId)
	if err != nil {
		return nil, err
	}
	return &rpc.RemoveNodeResponse{Status: st.Status(req.NodeId), Epoch: st.Epoch}, nil
}

func (s *adminServer) ReplicaStatus(ctx context.Context, req *rpc.ReplicaStatusRequest) (*rpc.ReplicaStatusResponse, error) {
	r := s.node.groupReplica(req.Meta, shard.ID(req.Shard))
	if r == nil {
		return &rpc.ReplicaStatusResponse{NodeId: s.node.cfg.ID}, nil
	}
	return r.Status(s.node.cfg.ID), nil
}

// maxStatusGroups bounds the groups of one ReplicaStatuses call: a
// node holds at most one replica per shard (256 slots, so at most 256
// shards) and the meta group's; more is not a caller of ours.
const maxStatusGroups = 1024

func (s *adminServer) ReplicaStatuses(ctx context.Context, req *rpc.ReplicaStatusesRequest) (*rpc.ReplicaStatusesResponse, error) {
	if len(req.Groups) > maxStatusGroups {
		return nil, StatusError(fmt.Errorf("%w: %d groups in one ReplicaStatuses call (at most %d)", ErrInvalidArgument, len(req.Groups), maxStatusGroups), 0, nil)
	}
	out := &rpc.ReplicaStatusesResponse{Statuses: make([]*rpc.ReplicaStatusResponse, 0, len(req.Groups))}
	for _, g := range req.Groups {
		st, _ := s.ReplicaStatus(ctx, g)
		out.Statuses = append(out.Statuses, st)
	}
	return out, nil
}

func (s *adminServer) ChangeReplica(ctx context.Context, req *rpc.ChangeReplicaRequest) (*rpc.ChangeReplicaResponse, error) {
	r := s.node.groupReplica(req.Meta, shard.ID(req.Shard))
	if r == nil {
		return nil, StatusError(ErrNotLeader, 0, nil)
	}
	idx, err := r.ChangeConfig(ctx, req.Change, req.NodeId, req.RaftAddr)
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	return &rpc.ChangeReplicaResponse{Index: idx}, nil
}

func (s *adminServer) TransferLeader(ctx context.Context, req *rpc.TransferLeaderRequest) (*rpc.TransferLeaderResponse, error) {
	r := s.node.groupReplica(req.Meta, shard.ID(req.Shard))
	if r == nil {
		return nil, StatusError(ErrNotLeader, 0, nil)
	}
	addr := ""
	if req.ToNode != "" {
		a, ok := s.node.nodeAddrs(req.ToNode)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "cluster: unknown node %q", req.ToNode)
		}
		addr = a.RaftAddr
	}
	if err := r.TransferLeadership(ctx, req.ToNode, addr); err != nil {
		return nil, StatusError(err, 0, nil)
	}
	return &rpc.TransferLeaderResponse{LeaderId: r.Leader()}, nil
}

func (s *adminServer) Snapshot(ctx context.Context, req *rpc.SnapshotRequest) (*rpc.SnapshotResponse, error) {
	r := s.node.groupReplica(req.Meta, shard.ID(req.Shard))
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "cluster: node %s holds no replica of shard %d", s.node.cfg.ID, req.Shard)
	}
	idx, err := r.Snapshot(ctx)
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	return &rpc.SnapshotResponse{NodeId: s.node.cfg.ID, Index: idx}, nil
}

// JoinNode admits node id, which gossip must know as alive (so it passed the
// protocol version check), into the cluster. Idempotent: joining a member
// changes nothing. A node id that is an active member with another data dir
// is refused (remove it first); a removed id may join again with a new data
// dir.
func (n *Node) JoinNode(ctx context.Context, id string) (*State, error) {
	if !transport.ValidNodeID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "node id %q: want 1-64 letters, digits, '.', '_' or '-'", id)
	}
	var out *State
	err := n.onMetaLeader(ctx, func() error {
		// With TLS the candidate proves its id first (admission.go).
		var proven gossip.Meta
		if g, ok := n.members.Get(id); ok && g.Alive {
			if err := n.verifyCandidate(ctx, id, g.Meta); err != nil {
				n.log.Warn("admin: node not admitted", "member", id, "err", status.Convert(err).Message())
				return err
			}
			proven = g.Meta
		}
		var err error
		out, err = n.metaUpdate(ctx, func(s *State) error {
			g, ok := n.members.Get(id)
			m := s.Member(id)
			if m != nil && s.Status(id) != StatusRemoved && (!ok || g.Meta.Inc == m.Incarnation) {
				return errNoChange // already a member
			}
			if !ok || !g.Alive {
				return status.Errorf(codes.FailedPrecondition, "node %s is not alive in gossip: start it with --join <gossip address of a member> (a node with an unsupported protocol version is refused and never shows up)", id)
			}
			if n.tls != nil && (g.Meta.GRPC != proven.GRPC || g.Meta.Raft != proven.Raft) {
				return status.Errorf(codes.Unavailable, "node %s changed its addresses during admission; retry", id)
			}
			lo, hi := g.Meta.Range()
			if err := speaks(id, lo, hi, s.ActiveVersion()); err != nil { // version.go
				return status.Error(codes.FailedPrecondition, err.Error())
			}
			if g.Meta.Cluster != "" && g.Meta.Cluster != s.ClusterID {
				return status.Errorf(codes.FailedPrecondition, "node %s belongs to cluster %s, not %s: wipe its data dir first", id, g.Meta.Cluster, s.ClusterID)
			}
			addrs := NodeAddrs{ID: id, RaftAddr: g.Meta.Raft, GRPCAddr: g.Meta.GRPC, HTTPAddr: g.Meta.HTTP, Incarnation: g.Meta.Inc, Status: StatusActive}
			if m != nil {
				if s.Status(id) != StatusRemoved {
					return status.Errorf(codes.FailedPrecondition, "node %s is a member with another data dir; run `swarmnode remove %s` and wait until it is removed before it joins with a new one", id, id)
				}
				if m.Incarnation == g.Meta.Inc {
					return status.Errorf(codes.FailedPrecondition, "node %s was removed and still has its old data dir: wipe it, restart the node, then join it", id)
				}
				*m = addrs
				return nil
			}
			s.Nodes = append(s.Nodes, addrs)
			slices.SortFunc(s.Nodes, func(a, b NodeAddrs) int { return cmpString(a.ID, b.ID) })
			return nil
		})
		if err == nil {
			n.log.Info("admin: node joined", "member", id, "epoch", out.Epoch)
		}
		return err
	}, func(ctx context.Context, c rpc.AdminClient) error {
		_, err := c.JoinNode(ctx, &rpc.JoinNodeRequest{NodeId: id})
		if err == nil {
			out, err = n.adminMeta(ctx)
		}
		return err
	})
	return out, err
}

// RemoveNode starts decommissioning node id: it is marked leaving, the
// reconciler moves its replicas (and its meta group seat) away, then marks
// it removed. Idempotent.
func (n *Node) RemoveNode(ctx context.Context, id string) (*State, error) {
	var out *State
	err := n.onMetaLeader(ctx, func() error {
		var err error
		out, err = n.metaUpdate(ctx, func(s *State) error {
			m := s.Member(id)
			if m == nil {
				return status.Errorf(codes.NotFound, "node %s is not a member", id)
			}
			if s.Status(id) != StatusActive {
				return errNoChange
			}
			active := 0
			for _, o := range s.Nodes {
				if s.Status(o.ID) == StatusActive {
					active++
				}
			}
			if active <= 1 {
				return status.Errorf(codes.FailedPrecondition, "node %s is the last active member; the cluster needs one", id)
			}
			m.Status = StatusLeaving
			return nil
		})
		if err == nil {
			n.log.Info("admin: node decommission requested", "member", id, "status", out.Status(id))
		}
		return err
	}, func(ctx context.Context, c rpc.AdminClient) error {
		_, err := c.RemoveNode(ctx, &rpc.RemoveNodeRequest{NodeId: id})
		if err == nil {
			out, err = n.adminMeta(ctx)
		}
		return err
	})
	return out, err
}

// ClusterState returns the committed cluster state document (for the admin
// API's GET /v1/state) without the tokens' secret hashes, retrying for up
// to 10 s while the meta group has no reachable leader.
func (n *Node) ClusterState(ctx context.Context) (*State, error) {
	st, err := n.adminMeta(ctx)
	return redactTokenHashes(st), err
}

// adminMeta fetches the committed cluster state for an admin call,
// retrying for up to 10 s while the meta group has no reachable leader.
func (n *Node) adminMeta(ctx context.Context) (*State, error) {
	var st *State
	err := retry.Do(ctx, retry.Options{Initial: 100 * time.Millisecond, MaxElapsed: 10 * time.Second}, func() (err error) {
		st, err = n.fetchMeta(ctx)
		return err
	})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return st, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// MemberInfo is one member in the admin API's listing.
type MemberInfo struct {
	ID      string `json:"id"`
	Status  string `json:"status"`  // active, leaving, removed
	Gossip  string `json:"gossip"`  // alive, dead, unknown
	Version int    `json:"version"` // protocol version announced in gossip: the one it runs (0: unknown)
	// MinVersion and MaxVersion are the protocol versions its binary
	// speaks, as gossip announces them (0: unknown).
	MinVersion  int    `json:"min_version"`
	MaxVersion  int    `json:"max_version"`
	RaftAddr    string `json:"raft_addr"`
	GRPCAddr    string `json:"grpc_addr"`
	HTTPAddr    string `json:"http_addr,omitempty"`
	Replicas    int    `json:"replicas"`    // shard replicas placed on it
	Leaderships int    `json:"leaderships"` // shards it leads
	MetaVoter   bool   `json:"meta_voter"`
	MetaLeader  bool   `json:"meta_leader"`
	// Zone and Host are its recorded failure-domain labels (empty: none,
	// it is its own zone and host).
	Zone string `json:"zone,omitempty"`
	Host string `json:"host,omitempty"`
}

// ReplicaInfo is one replica of a shard in the admin API's status.
type ReplicaInfo struct {
	Node         string `json:"node"`
	Role         string `json:"role"` // voter, nonvoter, learner (placed, not yet in the configuration)
	State        string `json:"state,omitempty"`
	AppliedIndex uint64 `json:"applied_index"`
	Lag          uint64 `json:"lag"` // leader's commit index minus this replica's applied index
	Reachable    bool   `json:"reachable"`
}

// ShardInfo is one group (a shard or the meta group) in the admin status.
type ShardInfo struct {
	Shard       string        `json:"shard"` // shard number, or "meta"
	Leader      string        `json:"leader"`
	Term        uint64        `json:"term"`
	CommitIndex uint64        `json:"commit_index"`
	Voters      []string      `json:"voters"`
	Replicas    []ReplicaInfo `json:"replicas"`
	// ZoneSafe and HostSafe: the group's voters keep a majority after the
	// loss of any one zone (host), by the recorded labels
	// (placement.State.ZoneSafe).
	ZoneSafe bool `json:"zone_safe"`
	HostSafe bool `json:"host_safe"`
	// Shards only (0 for the meta group): the slots the map gives the
	// shard (count, and text form "0-15,32"), and its leader's numbers:
	// Bytes, the disk space its state machine's store uses, and Load, the
	// commands it handed to Raft per second over its last load interval
	// (about 10 s: replica.Replica.Load). The automatic shard policy
	// decides on these.
	Slots      int     `json:"slots"`
	SlotRanges string  `json:"slot_ranges,omitempty"`
	Bytes      uint64  `json:"bytes"`
	Load       float64 `json:"load"`
}

// ClusterStatus is the admin API's overview.
type ClusterStatus struct {
	ClusterID         string `json:"cluster_id"`
	Epoch             uint64 `json:"epoch"`
	ReplicationFactor int    `json:"replication_factor"`
	NumShards         int    `json:"num_shards"`
	// ProtocolVersion is the protocol version the cluster runs, and
	// Protocol where it stands: the version the meta leader raises it to
	// and what a raise waits for (version.go).
	ProtocolVersion int          `json:"protocol_version"`
	Protocol        VersionPlan  `json:"protocol"`
	Members         []MemberInfo `json:"members"`
	Shards          []ShardInfo  `json:"shards"`
	// Policy is the automatic shard policy (nil: the state has none).
	Policy *placement.ShardPolicy `json:"shard_policy,omitempty"`
	// Moves are the slot moves in progress.
	Moves []placement.Move `json:"moves,omitempty"`
}

// Status gathers the cluster overview: the committed state, gossip, and
// every group's replicas as their nodes report them.
func (n *Node) Status(ctx context.Context) (*ClusterStatus, error) {
	st, err := n.adminMeta(ctx)
	if err != nil {
		return nil, err
	}
	gs := placement.Groups(st)
	infos := make([]ShardInfo, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos[i] = n.groupInfo(ctx, g)
		}()
	}
	wg.Wait()
	for i, g := range gs {
		infos[i].ZoneSafe, infos[i].HostSafe = st.ZoneSafe(g.Voters), st.HostSafe(g.Voters)
		if !g.Meta {
			s := st.SlotsOf(g.Shard)
			infos[i].Slots, infos[i].SlotRanges = s.Len(), s.String()
		}
	}
	out := &ClusterStatus{ClusterID: st.ClusterID, Epoch: st.Epoch, ReplicationFactor: st.ReplicationFactor, NumShards: st.NumShards, Shards: infos,
		Policy: st.Policy, Moves: st.Moves, ProtocolVersion: st.ActiveVersion(), Protocol: n.versionPlan(st)}
	gossiped := n.members.All()
	for _, m := range st.Nodes {
		mi := MemberInfo{ID: m.ID, Status: st.Status(m.ID), Gossip: "unknown", RaftAddr: m.RaftAddr, GRPCAddr: m.GRPCAddr, HTTPAddr: m.HTTPAddr,
			Replicas: st.ReplicaCount(m.ID), MetaVoter: slices.Contains(st.MetaVoters, m.ID), Zone: m.Zone, Host: m.Host}
		if g, ok := gossiped[m.ID]; ok && g.Meta.Inc == m.Incarnation {
			mi.Gossip, mi.Version = "dead", g.Meta.Version
			mi.MinVersion, mi.MaxVersion = g.Meta.Range()
			if g.Alive {
				mi.Gossip = "alive"
			}
		}
		if m.ID == n.cfg.ID {
			mi.Gossip, mi.Version = "alive", n.announcedVersion()
			mi.MinVersion, mi.MaxVersion = n.cfg.protocolRange()
		}
		for _, si := range infos {
			if si.Leader != m.ID {
				continue
			}
			if si.Shard == "meta" {
				mi.MetaLeader = true
			} else {
				mi.Leaderships++
			}
		}
		out.Members = append(out.Members, mi)
	}
	return out, nil
}

func (n *Node) groupInfo(ctx context.Context, g placement.Group) ShardInfo {
	obs := n.recon.Observe(ctx, g)
	si := ShardInfo{Shard: g.String(), Voters: g.Voters}
	if !g.Meta {
		si.Shard = fmt.Sprint(g.Shard)
	}
	var commit uint64
	roles := map[string]string{}
	for _, v := range g.Voters {
		roles[v] = "voter"
	}
	for _, l := range g.Learners {
		roles[l] = "learner"
	}
	if obs.Leader != nil {
		si.Leader, si.Term, commit = obs.Leader.NodeId, obs.Leader.Term, obs.Leader.CommitIndex
		if !g.Meta {
			si.Bytes, si.Load = obs.Leader.DiskBytes, obs.Leader.Load
		}
		si.CommitIndex = commit
		for _, s := range obs.Leader.Servers {
			roles[s.Id] = s.Suffrage
		}
	}
	ids := make([]string, 0, len(roles))
	for id := range roles {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ri := ReplicaInfo{Node: id, Role: roles[id]}
		if st := obs.Replicas[id]; st != nil {
			ri.Reachable, ri.State, ri.AppliedIndex = true, st.State, st.AppliedIndex
			if commit > st.AppliedIndex {
				ri.Lag = commit - st.AppliedIndex
			}
		}
		si.Replicas = append(si.Replicas, ri)
	}
	return si
}

// groupByName resolves "meta" or a shard number.
func (n *Node) groupByName(st *State, name string) (placement.Group, error) {
	for _, g := range placement.Groups(st) {
		if g.Meta && name == "meta" || !g.Meta && name == fmt.Sprint(g.Shard) {
			return g, nil
		}
	}
	ids := make([]string, 0, len(st.Shards)) // ids may have holes after merges
	for _, p := range st.Shards {
		ids = append(ids, fmt.Sprint(p.Shard))
	}
	return placement.Group{}, status.Errorf(codes.NotFound, "no shard %q (want one of %s, or meta)", name, strings.Join(ids, ", "))
}

// TransferLeader moves the leadership of a shard ("meta" for the meta
// group) to node to (any up-to-date voter when empty) and returns the new
// leader.
func (n *Node) TransferLeader(ctx context.Context, name, to string) (string, error) {
	st, err := n.adminMeta(ctx)
	if err != nil {
		return "", err
	}
	g, err := n.groupByName(st, name)
	if err != nil {
		return "", err
	}
	if to != "" && !slices.Contains(g.Voters, to) {
		return "", status.Errorf(codes.FailedPrecondition, "node %s is not a voter of %s (voters: %v)", to, g, g.Voters)
	}
	obs := n.recon.Observe(ctx, g)
	if obs.Leader == nil {
		return "", status.Errorf(codes.Unavailable, "%s has no leader right now; retry", g)
	}
	if to != "" && obs.Leader.NodeId == to {
		return to, nil
	}
	if err := n.recon.Transfer(ctx, g, obs, to); err != nil {
		return "", StatusError(err, 0, nil)
	}
	// Report the leader once a voter confirms it.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if o := n.recon.Observe(ctx, g); o.Leader != nil && o.Leader.NodeId != obs.Leader.NodeId {
			return o.Leader.NodeId, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", status.Errorf(codes.Unavailable, "%s: leadership transfer started, no new leader confirmed yet", g)
}

// SnapshotResult is one replica's answer to a snapshot request.
type SnapshotResult struct {
	Node  string `json:"node"`
	Index uint64 `json:"index,omitempty"`
	Error string `json:"error,omitempty"`
}

// Snapshot makes every replica of a shard ("meta" for the meta group) take
// a snapshot now.
func (n *Node) Snapshot(ctx context.Context, name string) ([]SnapshotResult, error) {
	st, err := n.adminMeta(ctx)
	if err != nil {
		return nil, err
	}
	g, err := n.groupByName(st, name)
	if err != nil {
		return nil, err
	}
	ids := g.Holders()
	out := make([]SnapshotResult, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Node = id
			var err error
			if id == n.cfg.ID {
				r := n.groupReplica(g.Meta, g.Shard)
				if r == nil {
					err = fmt.Errorf("no local replica")
				} else {
					out[i].Index, err = r.Snapshot(ctx)
				}
			} else if c, cerr := n.adminClient(id); cerr != nil {
				err = cerr
			} else {
				var resp *rpc.SnapshotResponse
				if resp, err = c.Snapshot(ctx, &rpc.SnapshotRequest{Shard: uint32(g.Shard), Meta: g.Meta}); err == nil {
					out[i].Index = resp.Index
				}
			}
			if err != nil {
				out[i].Error = err.Error()
			}
		}()
	}
	wg.Wait()
	return out, nil
}
