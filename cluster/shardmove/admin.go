package shardmove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// DecodeSlotCommand checks an Admin.SlotCommand's command: a well-formed
// slot move command (ops 50-55), valid under limits (the state machine's
// apply-time limits), else cluster.errInvalidArgument.
func DecodeSlotCommand(b []byte, limits fsm.Limits) (*fsm.Command, error) {
	if len(b) > fsm.MaxMultiBytes+64<<10 {
		return nil, fmt.Errorf("%w: slot command of %d bytes", errInvalidArgument, len(b))
	}
	c, err := fsm.DecodeCommand(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalidArgument, err)
	}
	if c.Op < fsm.OpFreezeSlots || c.Op > fsm.OpSyncSlots {
		return nil, fmt.Errorf("%w: op %s is not a slot move op", errInvalidArgument, c.Op)
	}
	if err := c.Validate(limits); err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalidArgument, err)
	}
	return c, nil
}

// The Admin service's side (on the shards' nodes): package cluster's
// Admin handlers delegate to these.

// SlotCommand proposes a slot move command on the local replica of its
// shard (Admin.SlotCommand).
func (mr *Mover) SlotCommand(ctx context.Context, req *rpc.SlotCommandRequest) (*rpc.SlotCommandResponse, error) {
	h := mr.h
	id := shard.ID(req.Shard)
	cmd, err := DecodeSlotCommand(req.Command, h.Limits)
	if err != nil {
		return nil, h.Status(err, id, nil)
	}
	r := h.Replica(id)
	if r == nil {
		return nil, h.Status(errNotLeader, id, func() (string, string) { return h.Hint(id) })
	}
	res, err := r.Propose(ctx, cmd)
	if err != nil {
		return nil, h.Status(err, id, func() (string, string) { return h.Hint(id) })
	}
	return &rpc.SlotCommandResponse{Index: res.Index, MoveIndex: res.MoveIndex, Remaining: uint32(res.Remaining)}, nil
}

// SlotStatus reports the local replica's slot ownership and move records
// after a read barrier (Admin.SlotStatus).
func (mr *Mover) SlotStatus(ctx context.Context, req *rpc.SlotStatusRequest) (*rpc.SlotStatusResponse, error) {
	h := mr.h
	id := shard.ID(req.Shard)
	hint := func() (string, string) { return h.Hint(id) }
	r := h.Replica(id)
	if r == nil {
		return nil, h.Status(errNotLeader, id, hint)
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return nil, h.Status(err, id, hint)
	}
	resp := &rpc.SlotStatusResponse{Owned: r.FSM().Owned().String(), AppliedIndex: r.FSM().AppliedIndex()}
	for _, m := range r.FSM().Moves() {
		resp.Moves = append(resp.Moves, &rpc.SlotMoveRecord{Id: m.ID, State: m.State.String(), Slots: m.Slots.String(),
			Peer: uint32(m.Peer), MapVersion: m.MapVersion, Dropped: m.Dropped})
	}
	return resp, nil
}

// Export streams move req.MoveId's frozen data from the local replica of
// the source shard (Admin.ExportSlots; the caller checked it is a node).
func (mr *Mover) Export(req *rpc.ExportSlotsRequest, ss grpc.ServerStreamingServer[rpc.ExportSlotsChunk]) error {
	h := mr.h
	ctx := ss.Context()
	id := shard.ID(req.Shard)
	r := h.Replica(id)
	if r == nil {
		return status.Errorf(codes.Unavailable, "cluster: node %s holds no replica of shard %d", h.ID, id)
	}
	send := func(pairs []fsm.Pair) error {
		msg := &rpc.ExportSlotsChunk{Pairs: make([]*rpc.SlotPair, len(pairs))}
		for i, p := range pairs {
			msg.Pairs[i] = &rpc.SlotPair{Key: p.Key, Value: p.Value}
		}
		return ss.Send(msg)
	}
	var err error
	if req.Live {
		slots, perr := shard.ParseSlotSet(req.Slots)
		if perr == nil && slots.IsEmpty() {
			perr = errors.New("no slots")
		}
		if perr != nil {
			return h.Status(fmt.Errorf("%w: live export: %v", errInvalidArgument, perr), id, nil)
		}
		err = r.FSM().ExportLiveChunks(ctx, slots, req.After, h.Limits, moveChunkBytes, send)
	} else {
		err = r.FSM().ExportChunks(ctx, req.MoveId, req.After, h.Limits, moveChunkBytes, send)
	}
	if errors.Is(err, fsm.ErrMoveConflict) {
		// Not frozen (or for a live export: not held) here (yet): this
		// replica may lag the freeze.
		return status.Error(codes.Unavailable, err.Error())
	}
	return h.Status(err, id, nil)
}

// Pull pulls move req.MoveId's data from the source shard's leader into
// the local replica of the target shard, which leads it: the source's
// export stream, one OpIngestSlots per chunk in order, then OpAdoptSlots
// (Admin.PullSlots).
func (mr *Mover) Pull(ctx context.Context, req *rpc.PullSlotsRequest) (*rpc.PullSlotsResponse, error) {
	h := mr.h
	src, dst := shard.ID(req.Source), shard.ID(req.Target)
	slots, err := shard.ParseSlotSet(req.Slots)
	switch {
	case err != nil:
		return nil, h.Status(fmt.Errorf("%w: %v", errInvalidArgument, err), dst, nil)
	case req.MoveId == 0 || slots.IsEmpty() || src == dst:
		return nil, h.Status(fmt.Errorf("%w: pull needs a move id, slots and two shards", errInvalidArgument), dst, nil)
	}
	hint := func() (string, string) { return h.Hint(dst) }
	r := h.Replica(dst)
	if r == nil {
		return nil, h.Status(errNotLeader, dst, hint)
	}
	if err := r.ReadBarrier(ctx); err != nil {
		return nil, h.Status(err, dst, hint)
	}
	// A pull cut off (the mover's round ended, a leader changed) resumes
	// after the last key the target ingested: every round makes progress,
	// so a move of any size finishes.
	var after []byte
	var resumed uint64
	for _, m := range r.FSM().Moves() {
		if m.ID != req.MoveId {
			continue
		}
		switch m.State {
		case fsm.MoveAdopted:
			if req.Precopy {
				// Never before the freeze: say so, and change nothing.
				return nil, status.Errorf(codes.Unavailable, "move %d: pre-copy: shard %d adopted the slots already", req.MoveId, dst)
			}
			return &rpc.PullSlotsResponse{AdoptIndex: m.Index}, nil
		case fsm.MoveAborted:
			return nil, h.Status(fmt.Errorf("%w: move %d is aborted on shard %d", ErrRefused, req.MoveId, dst), dst, nil)
		case fsm.MoveIncoming:
			after, resumed = m.Pulled, m.PulledPairs
		}
	}
	if req.Precopy || req.Sync {
		return mr.pullDiff(ctx, req, r, src, dst, slots)
	}
	if after != nil {
		h.Log.Info("move: pull resumes", "move", req.MoveId, "source", uint32(src), "target", uint32(dst), "pairs_before", resumed)
	}
	var total uint64
	err = mr.export(ctx, src, &rpc.ExportSlotsRequest{Shard: uint32(src), MoveId: req.MoveId, After: after}, func(pairs []fsm.Pair) error {
		mv := &fsm.SlotMove{ID: req.MoveId, Slots: &slots, Peer: src, MapVersion: req.MapVersion, Pairs: pairs}
		if _, err := proposeMove(ctx, r, dst, &fsm.Command{Op: fsm.OpIngestSlots, Move: mv}); err != nil {
			return err
		}
		total += uint64(len(pairs))
		return mr.afterIngest(req.MoveId, total)
	})
	if err != nil {
		return nil, h.Status(err, dst, hint)
	}
	return mr.adopt(ctx, req, r, src, dst, slots, total)
}

// export streams req's chunks from shard src's leader to fn, in key
// order (a chunk's pairs are fn's to keep).
func (mr *Mover) export(ctx context.Context, src shard.ID, req *rpc.ExportSlotsRequest, fn func([]fsm.Pair) error) error {
	return mr.onShardLeader(ctx, nil, src, func(ctx context.Context, c rpc.AdminClient) error {
		stream, err := c.ExportSlots(ctx, req, grpc.MaxCallRecvMsgSize(moveRecvBytes))
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
			if hook := mr.h.PullChunk; hook != nil {
				hook(req.MoveId, len(chunk.Pairs))
			}
			pairs := make([]fsm.Pair, len(chunk.Pairs))
			for i, p := range chunk.Pairs {
				pairs[i] = fsm.Pair{Key: p.Key, Value: p.Value}
				if len(p.Value) == 0 {
					pairs[i].Value = nil
				}
			}
			if err := fn(pairs); err != nil {
				return err
			}
		}
	})
}

// afterIngest runs the test hook Host.AfterIngest.
func (mr *Mover) afterIngest(moveID, total uint64) error {
	if hook := mr.h.AfterIngest; hook != nil {
		if err := hook(moveID, total); err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
	}
	return nil
}

// proposeMove proposes a move command on replica r of shard dst; a
// refusal of the state machine becomes ErrRefused.
func proposeMove(ctx context.Context, r *replica.Replica, dst shard.ID, cmd *fsm.Command) (*fsm.Result, error) {
	res, err := r.Propose(ctx, cmd)
	if errors.Is(err, fsm.ErrInvalidCommand) || errors.Is(err, fsm.ErrMoveConflict) {
		err = fmt.Errorf("%w: shard %d refused %s of move %d: %v", ErrRefused, dst, cmd.Op, cmd.Move.ID, err)
	}
	return res, err
}

// adopt proposes OpAdoptSlots of a pulled move (after the test hook
// Host.BeforeAdopt).
func (mr *Mover) adopt(ctx context.Context, req *rpc.PullSlotsRequest, r *replica.Replica, src, dst shard.ID, slots shard.SlotSet, total uint64) (*rpc.PullSlotsResponse, error) {
	h := mr.h
	if hook := h.BeforeAdopt; hook != nil {
		if err := hook(req.MoveId); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	res, err := proposeMove(ctx, r, dst, &fsm.Command{Op: fsm.OpAdoptSlots,
		Move: &fsm.SlotMove{ID: req.MoveId, Slots: &slots, Peer: src, MapVersion: req.MapVersion}})
	if err != nil {
		return nil, h.Status(err, dst, func() (string, string) { return h.Hint(dst) })
	}
	h.Log.Info("move: slots pulled and adopted", "move", req.MoveId, "source", uint32(src), "target", uint32(dst), "pairs", total, "index", res.Index)
	return &rpc.PullSlotsResponse{Pairs: total, AdoptIndex: res.Index}, nil
}

// pullDiff is a pull by difference (protocol version 3): the source's
// data, live for a pre-copy (req.Precopy) or frozen for the sync pass
// (req.Sync), streamed from its first key and compared chunk by chunk with
// what the target holds of the move (fsm.ScanIncoming over the chunk's key
// range), and only the difference proposed, as OpSyncSlots commands: the
// pairs the target lacks or holds with another value and, in the sync
// pass, the keys the source no longer has. A pre-copy leaves deletions to
// the sync pass; the sync pass proposes them last, sessions_by_agent
// entries first (they are routed through the session and agent owner
// records, which must still be there), and then adopts. Both are
// idempotent, and a pass cut off while it copies (the mover's round
// ended, the source's leader changed) resumes on the next pull after the
// last chunk it took whole, as long as this node leads the target in the
// same term (savePass): a pass of any size finishes, one round at a time.
// Cut off later (its deletes, its adoption), or under another leader, a
// pass runs again from the first key and proposes only what is still
// different.
func (mr *Mover) pullDiff(ctx context.Context, req *rpc.PullSlotsRequest, r *replica.Replica, src, dst shard.ID, slots shard.SlotSet) (*rpc.PullSlotsResponse, error) {
	h := mr.h
	key, term := passKey{move: req.MoveId, sync: req.Sync}, r.Raft().CurrentTerm()
	pass := mr.takePass(key, term, time.Now())
	if pass == nil {
		pass = &fsm.SyncPass{Limits: h.Limits, MaxBytes: moveChunkBytes, Deletes: req.Sync}
	} else {
		h.Log.Info("move: pass resumes", "move", req.MoveId, "sync", req.Sync, "source", uint32(src), "target", uint32(dst), "compared_before", pass.Compared)
	}
	pass.Local = func(after, upTo []byte) ([]fsm.Pair, error) {
		var out []fsm.Pair
		err := r.FSM().ScanIncoming(ctx, req.MoveId, after, upTo, func(k, v []byte) error {
			out = append(out, fsm.Pair{Key: bytes.Clone(k), Value: nilEmpty(v)})
			return nil
		})
		if errors.Is(err, fsm.ErrMoveConflict) {
			err = fmt.Errorf("%w: shard %d: %v", ErrRefused, dst, err)
		}
		return out, err
	}
	pass.Propose = func(part fsm.SyncPart) error {
		_, err := proposeMove(ctx, r, dst, &fsm.Command{Op: fsm.OpSyncSlots, Move: &fsm.SlotMove{ID: req.MoveId, Slots: &slots,
			Peer: src, MapVersion: req.MapVersion, Pairs: part.Pairs, Deletes: part.Deletes}})
		if err != nil {
			return err
		}
		return mr.afterIngest(req.MoveId, pass.Written+uint64(len(part.Pairs)+len(part.Deletes)))
	}
	exp := &rpc.ExportSlotsRequest{Shard: uint32(src), MoveId: req.MoveId, Live: req.Precopy, After: pass.Cursor()}
	if req.Precopy {
		exp.Slots = slots.String()
	}
	err := mr.export(ctx, src, exp, pass.Chunk)
	if err != nil && !errors.Is(err, ErrRefused) {
		mr.savePass(key, term, pass, time.Now())
	}
	if err == nil {
		err = pass.Finish()
	}
	if err != nil {
		return nil, h.Status(err, dst, func() (string, string) { return h.Hint(dst) })
	}
	name := "pre-copy"
	if req.Sync {
		name = "sync"
	}
	h.Log.Info("move: "+name+" pass", "move", req.MoveId, "source", uint32(src), "target", uint32(dst), "compared", pass.Compared, "written", pass.Written)
	if req.Precopy {
		return &rpc.PullSlotsResponse{Pairs: pass.Written}, nil
	}
	return mr.adopt(ctx, req, r, src, dst, slots, pass.Written)
}

// nilEmpty is a copy of v, nil when empty (as exported pairs carry it).
func nilEmpty(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return bytes.Clone(v)
}

// MoveAdmin runs an operator's split, merge or cancel forwarded to the
// meta leader (Admin.MoveAdmin).
func (mr *Mover) MoveAdmin(ctx context.Context, req *rpc.MoveAdminRequest) (*rpc.MoveAdminResponse, error) {
	h := mr.h
	var m placement.Move
	var err error
	switch req.Op {
	case "split":
		var slots *shard.SlotSet
		if req.HasSlots {
			set, perr := shard.ParseSlotSet(req.Slots)
			if perr != nil {
				return nil, h.Status(fmt.Errorf("%w: %v", errInvalidArgument, perr), 0, nil)
			}
			slots = &set
		}
		m, err = mr.Split(ctx, shard.ID(req.Shard), slots)
	case "merge":
		m, err = mr.Merge(ctx, shard.ID(req.Shard), shard.ID(req.From))
	case "cancel":
		m, err = mr.Cancel(ctx, req.MoveId)
	default:
		err = fmt.Errorf("%w: unknown move op %q (want split, merge or cancel)", errInvalidArgument, req.Op)
	}
	if err != nil {
		return nil, h.Status(err, 0, nil)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, h.Status(err, 0, nil)
	}
	return &rpc.MoveAdminResponse{MoveJson: b}, nil
}

// The node's API for operators (package admin, the CLI; package
// cluster's Node methods of the same names delegate to these).

// Split starts splitting shard id: slots (nil: the upper half of its
// slots by count) move to a new shard. It returns the move as planned; the
// mover carries it out (Moves reports its phase). Bad input (unknown
// shard, slots it does not own, a shard with one slot or already in a
// move) is refused with a clear error and changes nothing. Runs on the
// meta leader (forwarded).
func (mr *Mover) Split(ctx context.Context, id shard.ID, slots *shard.SlotSet) (placement.Move, error) {
	return mr.planMove(ctx, func(s *placement.State) (placement.Move, error) { return placement.PlanSplit(s, id, slots, time.Now()) },
		&rpc.MoveAdminRequest{Op: "split", Shard: uint32(id), HasSlots: slots != nil, Slots: slotsText(slots)})
}

// Merge starts merging shard from into shard into (every slot of
// from moves; from is removed once done). Refuses the same shard twice,
// unknown shards and shards already in a move; runs on the meta leader.
func (mr *Mover) Merge(ctx context.Context, into, from shard.ID) (placement.Move, error) {
	return mr.planMove(ctx, func(s *placement.State) (placement.Move, error) {
		return placement.PlanMerge(s, into, from, time.Now())
	},
		&rpc.MoveAdminRequest{Op: "merge", Shard: uint32(into), From: uint32(from)})
}

// Cancel aborts move id if it is not adopted yet (the mover then
// unfreezes the source and removes what the move made); a move past
// adoption is refused (FailedPrecondition: it finishes), an unknown or
// finished one is NotFound (placement.ErrMoveNotFound). Runs on the meta
// leader.
func (mr *Mover) Cancel(ctx context.Context, id uint64) (placement.Move, error) {
	return mr.planMove(ctx, func(s *placement.State) (placement.Move, error) {
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
func (mr *Mover) Moves(ctx context.Context) ([]placement.Move, error) {
	st, err := mr.h.Committed(ctx)
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
func (mr *Mover) planMove(ctx context.Context, plan func(*placement.State) (placement.Move, error), req *rpc.MoveAdminRequest) (placement.Move, error) {
	var out placement.Move
	err := mr.h.OnMetaLeader(ctx, func() error {
		var m placement.Move
		err := mr.h.Update(ctx, func(s *placement.State) error {
			var err error
			m, err = plan(s)
			return err
		})
		if err != nil {
			return err
		}
		out = m
		mr.h.Log.Info("move: "+req.Op, "move", m.ID, "kind", m.Kind, "source", uint32(m.Source), "target", uint32(m.Target),
			"slots", m.Slots.String(), "map_version", m.MapVersion, "phase", m.Phase)
		mr.Kick()
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
