package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The mover: the cluster half of elastic shards (split and merge). A move
// is planned in the cluster state (placement.PlanSplit, PlanMerge); the
// mover, a loop on the meta leader like the reconciler, advances each move
// one idempotent step at a time and commits every phase it reaches to the
// meta group first, so a new meta leader resumes from the recorded phase:
//
//	planned   a split's new group is placed (New) on the source's voters,
//	          which bootstrap it; wait for its leader, clear New
//	created   narrow a group made at bootstrap (owning every slot in its
//	          state machine) to its map's slots (OpRestrictSlots, once);
//	          freeze the slots on the source (OpFreezeSlots)
//	frozen    the target's leader pulls the frozen data from the source
//	          (Admin.PullSlots: ExportSlots stream, OpIngestSlots in order,
//	          OpAdoptSlots)
//	adopted   publish: one meta update gives the slots to the target and
//	          sets the map version
//	published the source drops the moved data (OpDropSlots until none is
//	          left); then the move is removed (a merge's source group too)
//	aborting  (a refused freeze or ingest, or the operator's cancel before
//	          adoption) fence the target (register the move and drop what
//	          it ingested), unfreeze the source, remove a split's group and
//	          the move
//
// Every step is a command the state machines make idempotent by the move
// id, or a guarded meta update, so repeating one after a crash is safe.

const (
	moveInterval   = 100 * time.Millisecond
	moveDropBatch  = 4096    // keys one OpDropSlots deletes
	moveChunkBytes = 1 << 20 // about this many key and value bytes per ingest
	moveRecvBytes  = 64 << 20
)

// errMoveRefused is wrapped by a move step a state machine refused for
// good (a key that collides in a merge, a move aborted on the target): the
// mover aborts the move. Its kind is FailedPrecondition.
var errMoveRefused = errors.New("cluster: slot move refused")

func (n *Node) kickMove() {
	select {
	case n.moveKick <- struct{}{}:
	default:
	}
}

// moveLoop runs the mover while this node leads the meta group.
func (n *Node) moveLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(moveInterval)
	defer tick.Stop()
	last := map[uint64]string{}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.moveKick:
		}
		r := n.metaReplica()
		if r == nil || r.Raft().State() != raft.Leader || r.ReadyTerm() == 0 || n.moveHalt.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		st, _, err := n.metaRead(ctx)
		if err == nil {
			for _, m := range st.Moves {
				if n.moveHalt.Load() {
					break
				}
				err := n.stepMove(ctx, st, m)
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				if msg != last[m.ID] && n.ctx.Err() == nil {
					if err != nil {
						n.log.Info("move: waiting", "move", m.ID, "phase", m.Phase, "status", msg)
					}
					last[m.ID] = msg
				}
			}
		}
		cancel()
	}
}

// commitMove commits fn (a phase change of move id) and reports it.
func (n *Node) commitMove(ctx context.Context, id uint64, phase string, fn func(*State) error, attrs ...any) error {
	if _, err := n.metaUpdate(ctx, fn); err != nil {
		return err
	}
	n.log.Info("move: "+phase, append([]any{"move", id}, attrs...)...)
	if h := n.cfg.Testing.AfterMovePhase; h != nil && h(id, phase) {
		n.moveHalt.Store(true)
	}
	n.kickMove()
	return nil
}

// refusal reports whether err is a state machine's refusal of a move step
// (or a bad step), not a transient failure.
func refusal(err error) bool {
	k := ErrorKind(err)
	return k == rpc.KindFailedPrecondition || k == rpc.KindInvalidArgument
}

// stepMove takes the next step of move m; an error says why it waits.
func (n *Node) stepMove(ctx context.Context, st *State, m placement.Move) error {
	now := time.Now()
	slots := m.Slots
	switch m.Phase {
	case placement.PhasePlanned:
		if m.Kind == placement.MoveSplit {
			p := st.Placement(m.Target)
			if p == nil {
				return n.abortMove(ctx, m, "the new shard has no placement")
			}
			if obs := n.observe(ctx, placement.Group{Shard: m.Target, Voters: p.Voters, Learners: p.Learners}); obs.leader == nil {
				return fmt.Errorf("new shard %d has no leader yet", m.Target)
			}
		}
		return n.commitMove(ctx, m.ID, placement.PhaseCreated, func(s *State) error {
			return placement.SetPhase(s, m.ID, placement.PhasePlanned, placement.PhaseCreated, now)
		}, "target", uint32(m.Target))

	case placement.PhaseCreated:
		for _, id := range []shard.ID{m.Source, m.Target} {
			if err := n.narrow(ctx, st, id, m.ID); err != nil {
				return err
			}
		}
		res, err := n.slotCommand(ctx, st, m.Source, &fsm.Command{Op: fsm.OpFreezeSlots,
			Move: &fsm.SlotMove{ID: m.ID, Slots: &slots, Peer: m.Target, MapVersion: m.MapVersion}})
		if err != nil {
			if refusal(err) {
				return n.abortMove(ctx, m, "freeze refused: "+status.Convert(err).Message())
			}
			return fmt.Errorf("freeze on shard %d: %w", m.Source, err)
		}
		return n.commitMove(ctx, m.ID, placement.PhaseFrozen, func(s *State) error {
			return placement.Frozen(s, m.ID, res.MoveIndex, now)
		}, "source", uint32(m.Source), "slots", slots.String(), "freeze_index", res.MoveIndex)

	case placement.PhaseFrozen:
		var resp *rpc.PullSlotsResponse
		err := n.onShardLeader(ctx, st, m.Target, func(ctx context.Context, c rpc.AdminClient) (err error) {
			resp, err = c.PullSlots(ctx, &rpc.PullSlotsRequest{MoveId: m.ID, Source: uint32(m.Source), Target: uint32(m.Target),
				Slots: slots.String(), MapVersion: m.MapVersion})
			return err
		})
		if err != nil {
			if refusal(err) {
				return n.abortMove(ctx, m, "pull refused: "+status.Convert(err).Message())
			}
			return fmt.Errorf("pull into shard %d: %w", m.Target, err)
		}
		return n.commitMove(ctx, m.ID, placement.PhaseAdopted, func(s *State) error {
			return placement.SetPhase(s, m.ID, placement.PhaseFrozen, placement.PhaseAdopted, now)
		}, "target", uint32(m.Target), "pairs", resp.Pairs, "adopt_index", resp.AdoptIndex)

	case placement.PhaseAdopted:
		var version uint64
		err := n.commitMove(ctx, m.ID, placement.PhasePublished, func(s *State) error {
			err := placement.Publish(s, m.ID, now)
			version = s.MapVersion
			return err
		}, "map_version", m.MapVersion, "unavailable", time.Since(m.FrozenAt).String())
		if err == nil && !m.FrozenAt.IsZero() {
			n.metrics.ObserveMoveUnavailable(time.Since(m.FrozenAt))
			n.log.Info("move: slots available again", "move", m.ID, "unavailable", time.Since(m.FrozenAt).String(), "map_version", version)
		}
		return err

	case placement.PhasePublished:
		if err := n.dropAll(ctx, st, m.Source, m.ID); err != nil {
			return fmt.Errorf("drop on shard %d: %w", m.Source, err)
		}
		return n.commitMove(ctx, m.ID, "done", func(s *State) error { return placement.Finish(s, m.ID) },
			"kind", m.Kind, "source", uint32(m.Source), "target", uint32(m.Target))

	case placement.PhaseAborting:
		return n.stepAbort(ctx, st, m)
	}
	return fmt.Errorf("unknown phase %q", m.Phase)
}

// abortMove records that move m is aborting (why); the next steps undo it.
func (n *Node) abortMove(ctx context.Context, m placement.Move, why string) error {
	n.log.Warn("move: aborting", "move", m.ID, "phase", m.Phase, "reason", why)
	return n.commitMove(ctx, m.ID, placement.PhaseAborting, func(s *State) error {
		return placement.Abort(s, m.ID, why, time.Now())
	})
}

// stepAbort undoes move m: if the source may have been frozen (a pull may
// have run), the target is fenced first (the move registered there and its
// ingested data dropped, so a late pull can no longer adopt); then the
// source is unfrozen and the move removed (with a split's new group). A
// target that already adopted rolls the move forward instead: the source
// is still frozen, so publishing is safe.
func (n *Node) stepAbort(ctx context.Context, st *State, m placement.Move) error {
	slots := m.Slots
	if m.FreezeIndex != 0 {
		_, err := n.slotCommand(ctx, st, m.Target, &fsm.Command{Op: fsm.OpIngestSlots,
			Move: &fsm.SlotMove{ID: m.ID, Slots: &slots, Peer: m.Source, MapVersion: m.MapVersion}})
		if err != nil && refusal(err) {
			ss, serr := n.slotStatus(ctx, st, m.Target)
			if serr != nil {
				return serr
			}
			for _, r := range ss.Moves {
				if r.Id == m.ID && r.State == fsm.MoveAdopted.String() {
					n.log.Warn("move: the target adopted the slots: rolling forward", "move", m.ID)
					return n.commitMove(ctx, m.ID, placement.PhaseAdopted, func(s *State) error {
						return placement.SetPhase(s, m.ID, placement.PhaseAborting, placement.PhaseAdopted, time.Now())
					})
				}
			}
			// Aborted there already (the ingest refused "is aborted"):
			// the drop below finishes it.
		} else if err != nil {
			return fmt.Errorf("fence shard %d: %w", m.Target, err)
		}
		if err := n.dropAll(ctx, st, m.Target, m.ID); err != nil {
			return fmt.Errorf("drop on shard %d: %w", m.Target, err)
		}
	}
	if _, err := n.slotCommand(ctx, st, m.Source, &fsm.Command{Op: fsm.OpUnfreezeSlots, Move: &fsm.SlotMove{ID: m.ID}}); err != nil {
		return fmt.Errorf("unfreeze on shard %d: %w", m.Source, err)
	}
	return n.commitMove(ctx, m.ID, "aborted", func(s *State) error { return placement.Finish(s, m.ID) },
		"reason", m.Error)
}

// dropAll drops move id's data on shard id until none is left.
func (n *Node) dropAll(ctx context.Context, st *State, id shard.ID, moveID uint64) error {
	for {
		res, err := n.slotCommand(ctx, st, id, &fsm.Command{Op: fsm.OpDropSlots, Move: &fsm.SlotMove{ID: moveID, Max: moveDropBatch}})
		if err != nil {
			return err
		}
		if res.Remaining == 0 {
			return nil
		}
	}
}

// narrow makes shard id's state machine own exactly its map's slots if it
// still owns every slot (a group made at bootstrap) and never moved one.
func (n *Node) narrow(ctx context.Context, st *State, id shard.ID, moveID uint64) error {
	ss, err := n.slotStatus(ctx, st, id)
	if err != nil {
		return fmt.Errorf("slot status of shard %d: %w", id, err)
	}
	owned, err := shard.ParseSlotSet(ss.Owned)
	if err != nil {
		return err
	}
	want := st.SlotsOf(id)
	if !owned.IsFull() || want.IsFull() || want.IsEmpty() || len(ss.Moves) > 0 {
		return nil
	}
	if _, err := n.slotCommand(ctx, st, id, &fsm.Command{Op: fsm.OpRestrictSlots, Move: &fsm.SlotMove{Slots: &want}}); err != nil {
		return fmt.Errorf("restrict shard %d to its slots: %w", id, err)
	}
	n.log.Info("move: shard's state machine narrowed to its map's slots", "move", moveID, "shard", uint32(id), "slots", want.String())
	return nil
}

// onShardLeader calls fn with an Admin client of shard id's leader (as
// this node's replica knows it, else as its holders report it).
func (n *Node) onShardLeader(ctx context.Context, st *State, id shard.ID, fn func(context.Context, rpc.AdminClient) error) error {
	leader := ""
	if r := n.localReplica(id); r != nil {
		leader = r.Leader()
	}
	if leader == "" {
		if st == nil {
			n.mu.RLock()
			st = n.mu.state
			n.mu.RUnlock()
		}
		p := st.Placement(id)
		if p == nil {
			return fmt.Errorf("%w: shard %d has no placement", ErrLeaderNotReady, id)
		}
		obs := n.observe(ctx, placement.Group{Shard: id, Voters: p.Voters, Learners: p.Learners})
		if obs.leader == nil {
			return fmt.Errorf("%w: shard %d has no leader", ErrLeaderNotReady, id)
		}
		leader = obs.leader.NodeId
	}
	c, err := n.adminClient(leader)
	if err != nil {
		return err
	}
	return fn(ctx, c)
}

// slotCommand proposes a slot move command on shard id's leader.
func (n *Node) slotCommand(ctx context.Context, st *State, id shard.ID, cmd *fsm.Command) (*rpc.SlotCommandResponse, error) {
	b, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	var resp *rpc.SlotCommandResponse
	err = n.onShardLeader(ctx, st, id, func(ctx context.Context, c rpc.AdminClient) (err error) {
		resp, err = c.SlotCommand(ctx, &rpc.SlotCommandRequest{Shard: uint32(id), Command: b})
		return err
	})
	return resp, err
}

// slotStatus reads shard id's ownership on its leader.
func (n *Node) slotStatus(ctx context.Context, st *State, id shard.ID) (*rpc.SlotStatusResponse, error) {
	var resp *rpc.SlotStatusResponse
	err := n.onShardLeader(ctx, st, id, func(ctx context.Context, c rpc.AdminClient) (err error) {
		resp, err = c.SlotStatus(ctx, &rpc.SlotStatusRequest{Shard: uint32(id)})
		return err
	})
	return resp, err
}

// decodeSlotCommand checks an Admin.SlotCommand's command: a well-formed,
// valid slot move command (ops 50-55), else ErrInvalidArgument.
func decodeSlotCommand(b []byte) (*fsm.Command, error) {
	if len(b) > fsm.MaxMultiBytes+64<<10 {
		return nil, fmt.Errorf("%w: slot command of %d bytes", ErrInvalidArgument, len(b))
	}
	c, err := fsm.DecodeCommand(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if c.Op < fsm.OpFreezeSlots || c.Op > fsm.OpRestrictSlots {
		return nil, fmt.Errorf("%w: op %s is not a slot move op", ErrInvalidArgument, c.Op)
	}
	if err := c.Validate(applyLimits); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return c, nil
}

// The Admin service's side (on the shards' nodes).

func (s *adminServer) SlotCommand(ctx context.Context, req *rpc.SlotCommandRequest) (*rpc.SlotCommandResponse, error) {
	n := s.node
	id := shard.ID(req.Shard)
	cmd, err := decodeSlotCommand(req.Command)
	if err != nil {
		return nil, StatusError(err, id, nil)
	}
	r := n.localReplica(id)
	if r == nil {
		return nil, StatusError(ErrNotLeader, id, func() (string, string) { return n.leaderHint(id) })
	}
	res, err := r.Propose(ctx, cmd)
	if err != nil {
		return nil, StatusError(err, id, func() (string, string) { return n.leaderHint(id) })
	}
	return &rpc.SlotCommandResponse{Index: res.Index, MoveIndex: res.MoveIndex, Remaining: uint32(res.Remaining)}, nil
}

func (s *adminServer) SlotStatus(ctx context.Context, req *rpc.SlotStatusRequest) (*rpc.SlotStatusResponse, error) {
	n := s.node
	id := shard.ID(req.Shard)
	hint := func() (string, string) { return n.leaderHint(id) }
	r := n.localReplica(id)
	if r == nil {
		return nil, StatusError(ErrNotLeader, id, hint)
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return nil, StatusError(err, id, hint)
	}
	resp := &rpc.SlotStatusResponse{Owned: r.FSM().Owned().String(), AppliedIndex: r.FSM().AppliedIndex()}
	for _, m := range r.FSM().Moves() {
		resp.Moves = append(resp.Moves, &rpc.SlotMoveRecord{Id: m.ID, State: m.State.String(), Slots: m.Slots.String(),
			Peer: uint32(m.Peer), MapVersion: m.MapVersion, Dropped: m.Dropped})
	}
	return resp, nil
}

func (s *adminServer) ExportSlots(req *rpc.ExportSlotsRequest, ss grpc.ServerStreamingServer[rpc.ExportSlotsChunk]) error {
	n := s.node
	ctx := ss.Context()
	if a := n.authn; a.On() { // the api's stream guard authenticates only
		id, msg := a.IdentifyGRPC(ctx, rpc.Admin_ExportSlots_FullMethodName)
		if id == nil || !id.IsNode() {
			if msg == "" {
				msg = "swarmkv: ExportSlots is node-to-node"
			}
			return status.Error(codes.PermissionDenied, msg)
		}
	}
	id := shard.ID(req.Shard)
	r := n.localReplica(id)
	if r == nil {
		return status.Errorf(codes.Unavailable, "cluster: node %s holds no replica of shard %d", n.cfg.ID, id)
	}
	err := r.FSM().ExportChunks(ctx, req.MoveId, applyLimits, moveChunkBytes, func(pairs []fsm.Pair) error {
		msg := &rpc.ExportSlotsChunk{Pairs: make([]*rpc.SlotPair, len(pairs))}
		for i, p := range pairs {
			msg.Pairs[i] = &rpc.SlotPair{Key: p.Key, Value: p.Value}
		}
		return ss.Send(msg)
	})
	if errors.Is(err, fsm.ErrMoveConflict) {
		// Not frozen here (yet): this replica may lag the freeze.
		return status.Error(codes.Unavailable, err.Error())
	}
	return StatusError(err, id, nil)
}

func (s *adminServer) PullSlots(ctx context.Context, req *rpc.PullSlotsRequest) (*rpc.PullSlotsResponse, error) {
	n := s.node
	src, dst := shard.ID(req.Source), shard.ID(req.Target)
	slots, err := shard.ParseSlotSet(req.Slots)
	switch {
	case err != nil:
		return nil, StatusError(fmt.Errorf("%w: %v", ErrInvalidArgument, err), dst, nil)
	case req.MoveId == 0 || slots.IsEmpty() || src == dst:
		return nil, StatusError(fmt.Errorf("%w: pull needs a move id, slots and two shards", ErrInvalidArgument), dst, nil)
	}
	hint := func() (string, string) { return n.leaderHint(dst) }
	r := n.localReplica(dst)
	if r == nil {
		return nil, StatusError(ErrNotLeader, dst, hint)
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return nil, StatusError(err, dst, hint)
	}
	for _, m := range r.FSM().Moves() {
		if m.ID != req.MoveId {
			continue
		}
		switch m.State {
		case fsm.MoveAdopted:
			return &rpc.PullSlotsResponse{AdoptIndex: m.Index}, nil
		case fsm.MoveAborted:
			return nil, StatusError(fmt.Errorf("%w: move %d is aborted on shard %d", errMoveRefused, req.MoveId, dst), dst, nil)
		}
	}
	mv := func(pairs []fsm.Pair) *fsm.SlotMove {
		return &fsm.SlotMove{ID: req.MoveId, Slots: &slots, Peer: src, MapVersion: req.MapVersion, Pairs: pairs}
	}
	propose := func(cmd *fsm.Command) (*fsm.Result, error) {
		res, err := r.Propose(ctx, cmd)
		if errors.Is(err, fsm.ErrInvalidCommand) || errors.Is(err, fsm.ErrMoveConflict) {
			err = fmt.Errorf("%w: shard %d refused %s of move %d: %v", errMoveRefused, dst, cmd.Op, req.MoveId, err)
		}
		return res, err
	}
	var total uint64
	err = n.onShardLeader(ctx, nil, src, func(ctx context.Context, c rpc.AdminClient) error {
		stream, err := c.ExportSlots(ctx, &rpc.ExportSlotsRequest{Shard: uint32(src), MoveId: req.MoveId}, grpc.MaxCallRecvMsgSize(moveRecvBytes))
		if err != nil {
			return err
		}
		for {
			chunk, err := stream.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return status.Errorf(codes.Unavailable, "export from shard %d: %s", src, status.Convert(err).Message())
			}
			pairs := make([]fsm.Pair, len(chunk.Pairs))
			for i, p := range chunk.Pairs {
				pairs[i] = fsm.Pair{Key: p.Key, Value: p.Value}
				if len(p.Value) == 0 {
					pairs[i].Value = nil
				}
			}
			if _, err := propose(&fsm.Command{Op: fsm.OpIngestSlots, Move: mv(pairs)}); err != nil {
				return err
			}
			total += uint64(len(pairs))
		}
	})
	if err != nil {
		return nil, StatusError(err, dst, hint)
	}
	if h := n.cfg.Testing.BeforeAdopt; h != nil {
		if err := h(req.MoveId); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	m := mv(nil)
	res, err := propose(&fsm.Command{Op: fsm.OpAdoptSlots, Move: m})
	if err != nil {
		return nil, StatusError(err, dst, hint)
	}
	n.log.Info("move: slots pulled and adopted", "move", req.MoveId, "source", uint32(src), "target", uint32(dst), "pairs", total, "index", res.Index)
	return &rpc.PullSlotsResponse{Pairs: total, AdoptIndex: res.Index}, nil
}

func (s *adminServer) MoveAdmin(ctx context.Context, req *rpc.MoveAdminRequest) (*rpc.MoveAdminResponse, error) {
	n := s.node
	var m placement.Move
	var err error
	switch req.Op {
	case "split":
		var slots *shard.SlotSet
		if req.HasSlots {
			set, perr := shard.ParseSlotSet(req.Slots)
			if perr != nil {
				return nil, StatusError(fmt.Errorf("%w: %v", ErrInvalidArgument, perr), 0, nil)
			}
			slots = &set
		}
		m, err = n.SplitShard(ctx, shard.ID(req.Shard), slots)
	case "merge":
		m, err = n.MergeShards(ctx, shard.ID(req.Shard), shard.ID(req.From))
	case "cancel":
		m, err = n.CancelMove(ctx, req.MoveId)
	default:
		err = fmt.Errorf("%w: unknown move op %q (want split, merge or cancel)", ErrInvalidArgument, req.Op)
	}
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	return &rpc.MoveAdminResponse{MoveJson: b}, nil
}

// The node's API for operators (package admin, the CLI).

// SplitShard starts splitting shard id: slots (nil: the upper half of its
// slots by count) move to a new shard. It returns the move as planned; the
// mover carries it out (Moves reports its phase). Bad input (unknown
// shard, slots it does not own, a shard with one slot or already in a
// move) is refused with a clear error and changes nothing. Runs on the
// meta leader (forwarded).
func (n *Node) SplitShard(ctx context.Context, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	return n.planMove(ctx, func(s *State) (placement.Move, error) { return placement.PlanSplit(s, id, slots, time.Now()) },
		&rpc.MoveAdminRequest{Op: "split", Shard: uint32(id), HasSlots: slots != nil, Slots: slotsText(slots)})
}

// MergeShards starts merging shard from into shard into (every slot of
// from moves; from is removed once done). Refuses the same shard twice,
// unknown shards and shards already in a move; runs on the meta leader.
func (n *Node) MergeShards(ctx context.Context, into, from shard.ID) (placement.Move, error) {
	return n.planMove(ctx, func(s *State) (placement.Move, error) { return placement.PlanMerge(s, into, from, time.Now()) },
		&rpc.MoveAdminRequest{Op: "merge", Shard: uint32(into), From: uint32(from)})
}

// CancelMove aborts move id if it is not adopted yet (the mover then
// unfreezes the source and removes what the move made); a move past
// adoption is refused (FailedPrecondition: it finishes), an unknown or
// finished one is NotFound (placement.ErrMoveNotFound). Runs on the meta
// leader.
func (n *Node) CancelMove(ctx context.Context, id uint64) (placement.Move, error) {
	return n.planMove(ctx, func(s *State) (placement.Move, error) {
		if err := placement.Abort(s, id, "cancelled by the operator", time.Now()); err != nil {
			if m := s.Move(id); m != nil && errors.Is(err, placement.ErrNoChange) {
				return *m, err
			}
			return placement.Move{}, err
		}
		return *s.Move(id), nil
	}, &rpc.MoveAdminRequest{Op: "cancel", MoveId: id})
}

// Moves returns the moves in progress, as the committed cluster state
// records them.
func (n *Node) Moves(ctx context.Context) ([]placement.Move, error) {
	st, err := n.adminMeta(ctx)
	if err != nil {
		return nil, err
	}
	return st.Moves, nil
}

func slotsText(s *shard.SlotSet) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// planMove commits plan on the meta leader (forwarding req to it).
func (n *Node) planMove(ctx context.Context, plan func(*State) (placement.Move, error), req *rpc.MoveAdminRequest) (placement.Move, error) {
	var out placement.Move
	err := n.onMetaLeader(ctx, func() error {
		var m placement.Move
		_, err := n.metaUpdate(ctx, func(s *State) error {
			var err error
			m, err = plan(s)
			return err
		})
		if err != nil {
			return err
		}
		out = m
		n.log.Info("move: "+req.Op, "move", m.ID, "kind", m.Kind, "source", uint32(m.Source), "target", uint32(m.Target),
			"slots", m.Slots.String(), "map_version", m.MapVersion, "phase", m.Phase)
		n.kickMove()
		return nil
	}, func(ctx context.Context, c rpc.AdminClient) error {
		resp, err := c.MoveAdmin(ctx, req)
		if err != nil {
			return err
		}
		return json.Unmarshal(resp.MoveJson, &out)
	})
	return out, err
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

// shardReady is every shard replica's OnReady hook: the leader of the
// shard that owns the pools namespace in this node's current map ensures
// the default pool (seed 004). The pool record moves with its slot's data;
// a shard that stops owning it gets the state machine's MovedError and
// stops (replica.EnsureDefaultPool).
func (n *Node) shardReady(r *replica.Replica) {
	n.mu.RLock()
	smap := n.mu.smap
	n.mu.RUnlock()
	if smap != nil && smap.ShardOf(poolsRoutingKey) == r.ID() {
		replica.EnsureDefaultPool(r)
	}
}
