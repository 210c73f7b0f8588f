package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// registryServer implements the Registry gRPC service (seed 000) on a Node.
// Writes are state machine commands (indexes move in the same batch as
// their records); reads come from the local replica after the read barrier.
type registryServer struct {
	rpc.UnimplementedRegistryServer
	*server
}

// nowMs is the proposer's clock: timestamps are fixed here, before a
// command enters the log, never in the state machine.
func nowMs() int64 { return time.Now().UnixMilli() }

// getRecord reads key from v and decodes it into rec; codes.NotFound when
// absent.
func getRecord[R records.Record](s *server, v fsm.View, key []byte, rec R) error {
	b, err := v.Get(key)
	if errors.Is(err, fsm.ErrNotFound) {
		return status.Error(codes.NotFound, "not found")
	}
	if err != nil {
		return s.statusErr(v.Shard(), err)
	}
	if err := records.Decode(b, rec); err != nil {
		return s.statusErr(v.Shard(), fmt.Errorf("stored record %x: %w", key, err))
	}
	return nil
}

// appliedRecord decodes the record a write's state machine reported
// stored (fsm.Result.Record) into rec: the update handlers answer with it
// instead of reading the record back, which a freeze and drop of its slot
// landing between the apply and the read could have removed.
func appliedRecord[R records.Record](s *server, id shard.ID, res *fsm.Result, rec R) error {
	if res == nil || res.Record == nil {
		return s.statusErr(id, errors.New("api: the state machine reported no stored record"))
	}
	if err := records.Decode(res.Record, rec); err != nil {
		return s.statusErr(id, fmt.Errorf("applied record: %w", err))
	}
	return nil
}

// putRecord is the shape of every Put handler of a routed store: decode
// the record from its proto with fromProto (InvalidArgument, nothing
// proposed, when it does not decode), propose the command cmd builds from
// it, routed by the routing key cmd returns (the record's user), and answer
// an empty Resp.
func putRecord[Resp, P, R any](ctx context.Context, s *server, p P, fromProto func(P) (R, error),
	cmd func(R) (rk []byte, c *fsm.Command)) (*Resp, error) {
	rec, err := fromProto(p)
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	rk, c := cmd(rec)
	if _, err := s.proposeRouted(ctx, rk, c); err != nil {
		return nil, err
	}
	return new(Resp), nil
}

// getTargeted reads the record under key from the replica t addresses
// (after the read barrier) and, for a request routed by user, answers
// NotFound unless owner() (the decoded record's user) is that user.
//
// A shard-addressed request (fan-out) that finds the record in a slot the
// shard does not own answers the moved status: the slot is moving, and
// the record is the new owner's to answer.
func getTargeted[R records.Record](ctx context.Context, s *server, t *rpc.Target, idLen int, c rpc.Consistency,
	key []byte, rec R, owner func() []byte) error {
	return s.readTarget(ctx, t, idLen, c, func(v fsm.View) error {
		if err := getRecord(s, v, key, rec); err != nil {
			return err
		}
		if t.GetHasShard() {
			if err := s.checkViewSlot(v, owner()); err != nil {
				return err
			}
		}
		if !ownedBy(t, owner()) {
			return status.Error(codes.NotFound, "not found")
		}
		return nil
	})
}

// ownedBy reports whether a record of user may be answered to a request
// addressed by t: any record for a shard-addressed (fan-out) request, only
// the user's own records for a routed one (other users' records can live in
// the same shard).
func ownedBy(t *rpc.Target, user []byte) bool {
	return t.GetHasShard() || string(t.GetUserId()) == string(user)
}

func badInput(err error) error { return fmt.Errorf("%w: %v", cluster.ErrInvalidArgument, err) }

func (s *registryServer) PutAgent(ctx context.Context, req *rpc.PutAgentRequest) (*rpc.PutAgentResponse, error) {
	return putRecord[rpc.PutAgentResponse](ctx, s.server, req.GetAgent(), rpc.AgentFromProto,
		func(a *records.AgentRecord) ([]byte, *fsm.Command) {
			return a.UserID[:], &fsm.Command{Op: fsm.OpPutAgent, Agent: a}
		})
}

// agentOwner resolves the user of an agent: from the request when routed,
// else from the shard's agent_owners index (get reads it).
func (s *server) agentOwner(id shard.ID, get func([]byte) ([]byte, error), t *rpc.Target, agent keys.AgentID) (keys.UserID, error) {
	if !t.GetHasShard() {
		return rpc.UserIDFromBytes(t.GetUserId())
	}
	b, err := get(keys.AgentOwner(agent))
	if errors.Is(err, fsm.ErrNotFound) {
		return keys.UserID{}, status.Error(codes.NotFound, "agent not found")
	}
	if err != nil {
		return keys.UserID{}, s.statusErr(id, err)
	}
	return rpc.UserIDFromBytes(b)
}

// GetAgent answers the agent of a user (routed, fenced) or, addressed to a
// shard, the agent its agent_owners index names, or moved when that
// owner's slot is not the shard's (as getTargeted).
func (s *registryServer) GetAgent(ctx context.Context, req *rpc.AgentRef) (*rpc.GetAgentResponse, error) {
	agent, err := rpc.AgentIDFromBytes(req.GetAgentId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	var a records.AgentRecord
	err = s.readTarget(ctx, req.GetTarget(), len(keys.UserID{}), req.GetConsistency(), func(v fsm.View) error {
		user, err := s.agentOwner(v.Shard(), v.Get, req.GetTarget(), agent)
		if err != nil {
			return err
		}
		if req.GetTarget().GetHasShard() {
			if err := s.checkViewSlot(v, user[:]); err != nil {
				return err
			}
		}
		return getRecord(s.server, v, keys.Agent(user, agent), &a)
	})
	if err != nil {
		return nil, err
	}
	return &rpc.GetAgentResponse{Agent: rpc.AgentToProto(&a)}, nil
}

func (s *registryServer) DeleteAgent(ctx context.Context, req *rpc.AgentRef) (*rpc.DeleteAgentResponse, error) {
	agent, err := rpc.AgentIDFromBytes(req.GetAgentId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	id, r, err := s.target(req.GetTarget(), len(keys.UserID{}))
	if err != nil {
		return nil, err
	}
	if req.GetTarget().GetHasShard() {
		if err := s.readAt(ctx, id, r, rpc.Consistency_CONSISTENCY_LINEARIZABLE); err != nil {
			return nil, err
		}
	}
	user, err := s.agentOwner(id, r.FSM().Get, req.GetTarget(), agent)
	if err != nil {
		return nil, err
	}
	if _, err := s.proposeTo(ctx, id, r, &fsm.Command{Op: fsm.OpDeleteAgent, UserID: &user, AgentID: &agent}); err != nil {
		return nil, err
	}
	return &rpc.DeleteAgentResponse{}, nil
}

// ListAgentsByUser answers one page of user's agents (paging.go).
func (s *registryServer) ListAgentsByUser(ctx context.Context, req *rpc.ListAgentsByUserRequest) (*rpc.AgentList, error) {
	var resp *rpc.AgentList
	err := userRead(ctx, s.server, req.GetUserId(), rpc.UserIDFromBytes, req.GetConsistency(), func(user keys.UserID, v fsm.View) error {
		pg, kvs, more, err := s.page(v, keys.AgentPrefix(user), req.GetCursor(), req.GetLimit())
		if err != nil {
			return err
		}
		agents, next, err := collect(pg, kvs, more, func(kv fsm.KV) (*rpc.Agent, bool, error) {
			var a records.AgentRecord
			if err := records.Decode(kv.Value, &a); err != nil {
				return nil, false, s.statusErr(v.Shard(), err)
			}
			return rpc.AgentToProto(&a), true, nil
		})
		resp = &rpc.AgentList{Agents: agents, NextCursor: next}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *registryServer) CountAgentsByUser(ctx context.Context, req *rpc.UserRef) (*rpc.CountResponse, error) {
	var n int
	err := userRead(ctx, s.server, req.GetUserId(), rpc.UserIDFromBytes, req.GetConsistency(), func(user keys.UserID, v fsm.View) (err error) {
		prefix := keys.AgentPrefix(user)
		if n, err = v.Count(prefix, keys.PrefixEnd(prefix)); err != nil {
			return s.statusErr(v.Shard(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rpc.CountResponse{Count: uint32(n)}, nil
}

func (s *registryServer) UpdateAgentStatus(ctx context.Context, req *rpc.UpdateAgentStatusRequest) (*rpc.UpdateAgentStatusResponse, error) {
	user, err := rpc.UserIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	agent, err := rpc.AgentIDFromBytes(req.GetAgentId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	st := records.AgentState(req.GetStatus())
	if req.GetStatus() > 255 || !st.Valid() {
		return nil, s.statusErr(0, invalid("agent status %d", req.GetStatus()))
	}
	u8 := uint8(st)
	id, r, err := s.route(user[:])
	if err != nil {
		return nil, err
	}
	res, err := s.proposeTo(ctx, id, r, &fsm.Command{Op: fsm.OpUpdateAgentStatus, UserID: &user, AgentID: &agent, Status: &u8, Time: nowMs()})
	if err != nil {
		return nil, err
	}
	var a records.AgentRecord
	if err := appliedRecord(s.server, id, res, &a); err != nil {
		return nil, err
	}
	return &rpc.UpdateAgentStatusResponse{Agent: rpc.AgentToProto(&a)}, nil
}

// AgentHeartbeat sets the agent's last_heartbeat_at; with a lease it is
// a keep-alive of the lease first, then attaches the agent to it.
func (s *registryServer) AgentHeartbeat(ctx context.Context, req *rpc.AgentHeartbeatRequest) (*rpc.AgentHeartbeatResponse, error) {
	user, err := rpc.UserIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	agent, err := rpc.AgentIDFromBytes(req.GetAgentId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	if err := validateAttachLease(req.GetLease(), user[:]); err != nil {
		return nil, s.statusErr(0, err)
	}
	id, r, err := s.route(user[:])
	if err != nil {
		return nil, err
	}
	if err := renewFor(ctx, s.server, id, r, req.GetLease()); err != nil {
		return nil, err
	}
	res, err := s.proposeTo(ctx, id, r, &fsm.Command{Op: fsm.OpAgentHeartbeat, UserID: &user, AgentID: &agent, Time: nowMs(), LeaseID: req.GetLease()})
	if err != nil {
		return nil, err
	}
	var a records.AgentRecord
	if err := appliedRecord(s.server, id, res, &a); err != nil {
		return nil, err
	}
	return &rpc.AgentHeartbeatResponse{Agent: rpc.AgentToProto(&a)}, nil
}

// ListShardAgents lists a page of the shard's agents (or of its status
// index), leaving out those of slots the shard does not own.
//
// By status, the status index and the agents' records are read from one
// view of the shard (fsm.FSM.Read), so every agent listed has the status
// asked for, however writes move agents between statuses meanwhile. A
// listing of several pages, or of several shards, reads one view per page
// and per shard: an agent may be listed twice or missed across pages.
func (s *registryServer) ListShardAgents(ctx context.Context, req *rpc.ShardAgentsRequest) (*rpc.AgentList, error) {
	var prefix []byte
	if req.GetByStatus() {
		if req.GetStatus() > 255 || !records.AgentState(req.GetStatus()).Valid() {
			return nil, s.statusErr(shard.ID(req.GetShard()), invalid("agent status %d", req.GetStatus()))
		}
		prefix = keys.AgentByStatusPrefix(byte(req.GetStatus()))
	} else {
		prefix = keys.TablePrefix(keys.TableAgents)
	}
	var resp *rpc.AgentList
	err := s.readShard(ctx, req.GetShard(), req.GetMapVersion(), req.GetConsistency(), func(v fsm.View) error {
		id := v.Shard()
		pg, kvs, more, err := s.page(v, prefix, req.GetCursor(), req.GetLimit())
		if err != nil {
			return err
		}
		agents, next, err := collect(pg, kvs, more, func(kv fsm.KV) (*rpc.Agent, bool, error) {
			if ok, err := s.ownsKey(v, kv); !ok || err != nil {
				return nil, false, err
			}
			b := kv.Value
			if req.GetByStatus() {
				_, user, agent, err := keys.DecodeAgentByStatus(kv.Key)
				if err != nil {
					return nil, false, s.statusErr(id, err)
				}
				if b, err = v.Get(keys.Agent(user, agent)); err != nil {
					return nil, false, s.statusErr(id, fmt.Errorf("status index entry without its agent: %w", err))
				}
			}
			var a records.AgentRecord
			if err := records.Decode(b, &a); err != nil {
				return nil, false, s.statusErr(id, err)
			}
			return rpc.AgentToProto(&a), true, nil
		})
		resp = &rpc.AgentList{Agents: agents, NextCursor: next}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *registryServer) PutSession(ctx context.Context, req *rpc.PutSessionRequest) (*rpc.PutSessionResponse, error) {
	return putRecord[rpc.PutSessionResponse](ctx, s.server, req.GetSession(), rpc.SessionFromProto,
		func(sess *records.SessionRecord) ([]byte, *fsm.Command) {
			return sess.UserID[:], &fsm.Command{Op: fsm.OpPutSession, Session: sess}
		})
}

func (s *registryServer) GetSession(ctx context.Context, req *rpc.SessionRef) (*rpc.GetSessionResponse, error) {
	sid, err := rpc.SessionIDFromBytes(req.GetSessionId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	var sess records.SessionRecord
	if err := getTargeted(ctx, s.server, req.GetTarget(), len(keys.UserID{}), req.GetConsistency(),
		keys.Session(sid), &sess, func() []byte { return sess.UserID[:] }); err != nil {
		return nil, err
	}
	return &rpc.GetSessionResponse{Session: rpc.SessionToProto(&sess)}, nil
}

func (s *registryServer) UpdateSessionStatus(ctx context.Context, req *rpc.UpdateSessionStatusRequest) (*rpc.UpdateSessionStatusResponse, error) {
	sid, err := rpc.SessionIDFromBytes(req.GetSessionId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	st := records.SessionStatus(req.GetStatus())
	if req.GetStatus() > 255 || !st.Valid() {
		return nil, s.statusErr(0, invalid("session status %d", req.GetStatus()))
	}
	u8 := uint8(st)
	id, r, err := s.target(req.GetTarget(), len(keys.UserID{}))
	if err != nil {
		return nil, err
	}
	cmd := &fsm.Command{Op: fsm.OpUpdateSessionStatus, SessionID: &sid, Status: &u8, Time: nowMs()}
	if !req.GetTarget().GetHasShard() {
		// Routed by user: the session must be that user's (checked in
		// the state machine, atomically with the update).
		owner, err := rpc.UserIDFromBytes(req.GetTarget().GetUserId())
		if err != nil {
			return nil, s.statusErr(id, badInput(err))
		}
		cmd.UserID = &owner
	}
	res, err := s.proposeTo(ctx, id, r, cmd)
	if err != nil {
		return nil, err
	}
	var sess records.SessionRecord
	if err := appliedRecord(s.server, id, res, &sess); err != nil {
		return nil, err
	}
	return &rpc.UpdateSessionStatusResponse{Session: rpc.SessionToProto(&sess)}, nil
}

// ListSessionsByAgent answers one page of the by-agent index (paging.go);
// routed by user, other users' sessions are skipped; addressed to a shard,
// the sessions of slots the shard does not own.
func (s *registryServer) ListSessionsByAgent(ctx context.Context, req *rpc.ListSessionsByAgentRequest) (*rpc.SessionList, error) {
	agent, err := rpc.AgentIDFromBytes(req.GetAgentId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	var resp *rpc.SessionList
	err = s.readTarget(ctx, req.GetTarget(), len(keys.UserID{}), req.GetConsistency(), func(v fsm.View) error {
		pg, kvs, more, err := s.page(v, keys.SessionByAgentPrefix(agent), req.GetCursor(), req.GetLimit())
		if err != nil {
			return err
		}
		sessions, next, err := collect(pg, kvs, more, func(kv fsm.KV) (*rpc.Session, bool, error) {
			_, sid, err := keys.DecodeSessionByAgent(kv.Key)
			if err != nil {
				return nil, false, s.statusErr(v.Shard(), err)
			}
			var sess records.SessionRecord
			if err := getRecord(s.server, v, keys.Session(sid), &sess); err != nil {
				return nil, false, s.statusErr(v.Shard(), fmt.Errorf("session index entry without its session: %w", err))
			}
			if !ownedBy(req.GetTarget(), sess.UserID[:]) {
				return nil, false, nil
			}
			if ok, err := s.owns(v, sess.UserID[:]); !ok || err != nil {
				return nil, false, err
			}
			return rpc.SessionToProto(&sess), true, nil
		})
		resp = &rpc.SessionList{Sessions: sessions, NextCursor: next}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *registryServer) PutUser(ctx context.Context, req *rpc.PutUserRequest) (*rpc.PutUserResponse, error) {
	return putRecord[rpc.PutUserResponse](ctx, s.server, req.GetUser(), rpc.UserFromProto,
		func(u *records.UserRecord) ([]byte, *fsm.Command) {
			return u.UserID[:], &fsm.Command{Op: fsm.OpPutUser, User: u}
		})
}

func (s *registryServer) GetUser(ctx context.Context, req *rpc.UserRef) (*rpc.GetUserResponse, error) {
	var u records.UserRecord
	err := userGet(ctx, s.server, req.GetUserId(), rpc.UserIDFromBytes, req.GetConsistency(), keys.User, &u)
	if err != nil {
		return nil, err
	}
	return &rpc.GetUserResponse{User: rpc.UserToProto(&u)}, nil
}
