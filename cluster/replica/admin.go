package replica

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/rpc"
)

// Status describes r for the admin API and the node's reconciler; nodeID
// is this node's id.
func (r *Replica) Status(nodeID string) *rpc.ReplicaStatusResponse {
	leader := r.Leader()
	st := &rpc.ReplicaStatusResponse{
		Present:      true,
		NodeId:       nodeID,
		State:        r.raft.State().String(),
		Term:         r.raft.CurrentTerm(),
		LastIndex:    r.raft.LastIndex(),
		CommitIndex:  r.raft.CommitIndex(),
		AppliedIndex: r.fsm.AppliedIndex(),
		LeaderId:     leader,
		Ready:        r.readyTerm.Load() != 0 && r.readyTerm.Load() == r.raft.CurrentTerm(),
	}
	if v, err := strconv.ParseUint(r.raft.Stats()["last_snapshot_index"], 10, 64); err == nil {
		st.LastSnapshotIndex = v
	}
	if st.State == raft.Leader.String() {
		st.DiskBytes, _ = r.fsm.DiskBytes()
		st.Load = r.Load(time.Now())
	}
	if f := r.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			suf := "voter"
			if s.Suffrage != raft.Voter {
				suf = "nonvoter"
			}
			st.Servers = append(st.Servers, &rpc.RaftServer{Id: string(s.ID), Address: string(s.Address), Suffrage: suf})
		}
	}
	return st
}

// LoadInterval is the least interval a replica's load is measured over
// (Load).
const LoadInterval = 10 * time.Second

// loadMeter turns the replica's command counter into a rate.
type loadMeter struct {
	mu   sync.Mutex
	at   time.Time // start of the current interval
	n    uint64    // the counter then
	rate float64   // commands per second over the last complete interval
}

// Load is the commands per second this replica handed to Raft (as leader:
// the coalesced proposals, each command counted once, Stats.Commands)
// over its last complete interval. The interval ends at the first call
// LoadInterval or more after it began (Status calls it on the leader; the
// reconciler asks every ReconcileInterval), so it is about LoadInterval
// long, longer if nobody asked. 0 until one interval is complete; a new
// leader starts from 0 (followers propose nothing).
func (r *Replica) Load(now time.Time) float64 {
	m := &r.load
	n := r.propCmds.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch el := now.Sub(m.at); {
	case m.at.IsZero() || n < m.n:
		m.at, m.n = now, n
	case el >= LoadInterval:
		m.rate = float64(n-m.n) / el.Seconds()
		m.at, m.n = now, n
	}
	return m.rate
}

const configChangeTimeout = 10 * time.Second

// ChangeConfig adds a non-voter, adds or promotes a voter, or removes a
// server; the replica must lead its group. Each change is idempotent: adding
// a server that is already there (with that suffrage) or removing one that
// is not changes nothing that matters. It returns the index of the
// configuration that holds the change.
func (r *Replica) ChangeConfig(ctx context.Context, change rpc.ReplicaChange, id, addr string) (uint64, error) {
	r.touch()
	if r.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	if cur := r.raft.GetConfiguration(); cur.Error() == nil {
		for _, s := range cur.Configuration().Servers {
			if string(s.ID) != id {
				continue
			}
			switch {
			case change == rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER && string(s.Address) == addr:
				return cur.Index(), nil // already a member (voter or not)
			case change == rpc.ReplicaChange_REPLICA_CHANGE_ADD_VOTER && s.Suffrage == raft.Voter && string(s.Address) == addr:
				return cur.Index(), nil
			}
		}
		if change == rpc.ReplicaChange_REPLICA_CHANGE_REMOVE && !hasServer(cur.Configuration(), id) {
			return cur.Index(), nil
		}
	}
	var f raft.IndexFuture
	sid, saddr := raft.ServerID(id), raft.ServerAddress(addr)
	switch change {
	case rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER:
		f = r.raft.AddNonvoter(sid, saddr, 0, configChangeTimeout)
	case rpc.ReplicaChange_REPLICA_CHANGE_ADD_VOTER:
		f = r.raft.AddVoter(sid, saddr, 0, configChangeTimeout)
	case rpc.ReplicaChange_REPLICA_CHANGE_REMOVE:
		f = r.raft.RemoveServer(sid, 0, configChangeTimeout)
	default:
		return 0, fmt.Errorf("%w: unknown replica change %v", ErrInvalidArgument, change)
	}
	if err := r.await(ctx, f); err != nil {
		return 0, err
	}
	r.log.Info("raft configuration changed", "change", change.String(), "server", id)
	return f.Index(), nil
}

func hasServer(c raft.Configuration, id string) bool {
	for _, s := range c.Servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// TransferLeadership hands leadership to node to (any up-to-date voter when
// to is empty); the replica must lead its group.
func (r *Replica) TransferLeadership(ctx context.Context, to, addr string) error {
	r.touch()
	if r.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if to == r.Leader() && to != "" {
		return nil
	}
	var f raft.Future
	if to == "" {
		f = r.raft.LeadershipTransfer()
	} else {
		f = r.raft.LeadershipTransferToServer(raft.ServerID(to), raft.ServerAddress(addr))
	}
	return r.await(ctx, f)
}

// Snapshot takes a snapshot now and returns its index (the last one's when
// nothing changed since).
func (r *Replica) Snapshot(ctx context.Context) (uint64, error) {
	f := r.raft.Snapshot()
	err := r.await(ctx, f)
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		err = nil
	}
	if err != nil {
		return 0, err
	}
	idx, _ := strconv.ParseUint(r.raft.Stats()["last_snapshot_index"], 10, 64)
	return idx, nil
}
