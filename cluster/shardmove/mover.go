package shardmove

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/placement"
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
//	          from protocol version 3, the target's leader pre-copies the
//	          slots while the source still serves them (Move.Precopy set
//	          first; Admin.PullSlots precopy: a live export, OpSyncSlots);
//	          freeze the slots on the source (OpFreezeSlots)
//	frozen    the target's leader pulls the frozen data from the source
//	          (Admin.PullSlots: ExportSlots stream, OpIngestSlots in order,
//	          OpAdoptSlots; from version 3 the sync pass instead: only
//	          what changed since the pre-copy, OpSyncSlots, then
//	          OpAdoptSlots)
//	adopted   publish: one meta update gives the slots to the target and
//	          sets the map version
//	published the source drops the moved data (OpDropSlots until none is
//	          left); then the move is removed (a merge's source group too)
//	aborting  (a refused pre-copy, freeze or ingest, or the operator's
//	          cancel before adoption) fence the target (register the move
//	          and drop what it ingested), unfreeze the source, remove a
//	          split's group and the move
//
// The pre-copy takes the copy of the slots' data out of the unavailable
// window (freeze to publish): what is left in it is the sync pass, which
// streams and compares the frozen data on two nodes and replicates only
// the writes made during the pre-copy.
//
// Every step is a command the state machines make idempotent by the move
// id, or a guarded meta update, so repeating one after a crash is safe.

const (
	moveInterval   = 100 * time.Millisecond
	moveDropBatch  = 4096    // keys one OpDropSlots deletes
	moveChunkBytes = 1 << 20 // about this many key and value bytes per ingest
	moveRecvBytes  = 64 << 20
)

// Kick wakes the mover (a move was planned).
func (mr *Mover) Kick() {
	select {
	case mr.kick <- struct{}{}:
	default:
	}
}

// RunMover runs the mover while this node leads the meta group, until ctx
// ends.
func (mr *Mover) RunMover(ctx context.Context) {
	tick := time.NewTicker(moveInterval)
	defer tick.Stop()
	last := map[uint64]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-mr.kick:
		}
		if mr.h.MetaTerm() == 0 || mr.halt.Load() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := mr.h.Read(sctx)
		if err == nil {
			for _, m := range st.Moves {
				if mr.halt.Load() {
					break
				}
				err := mr.stepMove(sctx, st, m)
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				if msg != last[m.ID] && ctx.Err() == nil {
					if err != nil {
						mr.h.Log.Info("move: waiting", "move", m.ID, "phase", m.Phase, "status", msg)
					}
					last[m.ID] = msg
				}
			}
		}
		cancel()
	}
}

// commitMove commits fn (a phase change of move id) and reports it.
func (mr *Mover) commitMove(ctx context.Context, id uint64, phase string, fn func(*placement.State) error, attrs ...any) error {
	if err := mr.h.Update(ctx, fn); err != nil {
		return err
	}
	mr.h.Log.Info("move: "+phase, append([]any{"move", id}, attrs...)...)
	if h := mr.h.AfterMovePhase; h != nil && h(id, phase) {
		mr.halt.Store(true)
	}
	mr.Kick()
	return nil
}

// refusal reports whether err is a state machine's refusal of a move step
// (or a bad step), not a transient failure.
func (mr *Mover) refusal(err error) bool {
	k := mr.h.Kind(err)
	return k == rpc.KindFailedPrecondition || k == rpc.KindInvalidArgument
}

// stepMove takes the next step of move m; an error says why it waits.
func (mr *Mover) stepMove(ctx context.Context, st *placement.State, m placement.Move) error {
	now := time.Now()
	slots := m.Slots
	switch m.Phase {
	case placement.PhasePlanned:
		if m.Kind == placement.MoveSplit {
			p := st.Placement(m.Target)
			if p == nil {
				return mr.abortMove(ctx, m, "the new shard has no placement")
			}
			if mr.h.Leader(ctx, placement.Group{Shard: m.Target, Voters: p.Voters, Learners: p.Learners}) == nil {
				return fmt.Errorf("new shard %d has no leader yet", m.Target)
			}
		}
		return mr.commitMove(ctx, m.ID, placement.PhaseCreated, func(s *placement.State) error {
			return placement.SetPhase(s, m.ID, placement.PhasePlanned, placement.PhaseCreated, now)
		}, "target", uint32(m.Target))

	case placement.PhaseCreated:
		// A freeze that failed just after a pre-copy (a leader changed)
		// is retried alone: the narrowing and the pre-copy before it are
		// done, and what was written since is the sync pass's (so a round
		// needs two leaders, not four, while leaderships move).
		if !mr.recentlyPrecopied(m, now) {
			for _, id := range []shard.ID{m.Source, m.Target} {
				if err := mr.narrow(ctx, st, id, m.ID); err != nil {
					return err
				}
			}
			if st.ActiveVersion() >= fsm.VersionPrecopy {
				if aborted, err := mr.precopy(ctx, st, m); aborted || err != nil {
					return err
				}
			}
		}
		// The window runs from here (not from the step's start: the
		// pre-copy above is outside it).
		frozenAt := time.Now()
		res, err := mr.slotCommand(ctx, st, m.Source, &fsm.Command{Op: fsm.OpFreezeSlots,
			Move: &fsm.SlotMove{ID: m.ID, Slots: &slots, Peer: m.Target, MapVersion: m.MapVersion}})
		if err != nil {
			if mr.refusal(err) {
				return mr.abortMove(ctx, m, "freeze refused: "+status.Convert(err).Message())
			}
			return fmt.Errorf("freeze on shard %d: %w", m.Source, err)
		}
		return mr.commitMove(ctx, m.ID, placement.PhaseFrozen, func(s *placement.State) error {
			return placement.Frozen(s, m.ID, res.MoveIndex, frozenAt)
		}, "source", uint32(m.Source), "slots", slots.String(), "freeze_index", res.MoveIndex)

	case placement.PhaseFrozen:
		// The pull is bounded by the round's 30 s; a pull that needs
		// longer resumes in the next round after the last key the
		// target ingested (fsm.MoveRecord.Pulled), so it finishes.
		resp, err := mr.pull(ctx, st, m, false)
		if err != nil {
			if mr.refusal(err) {
				return mr.abortMove(ctx, m, "pull refused: "+status.Convert(err).Message())
			}
			return fmt.Errorf("pull into shard %d: %w", m.Target, err)
		}
		return mr.commitMove(ctx, m.ID, placement.PhaseAdopted, func(s *placement.State) error {
			return placement.SetPhase(s, m.ID, placement.PhaseFrozen, placement.PhaseAdopted, now)
		}, "target", uint32(m.Target), "pairs", resp.Pairs, "adopt_index", resp.AdoptIndex)

	case placement.PhaseAdopted:
		var version uint64
		err := mr.commitMove(ctx, m.ID, placement.PhasePublished, func(s *placement.State) error {
			err := placement.Publish(s, m.ID, now)
			version = s.MapVersion
			return err
		}, "map_version", m.MapVersion, "unavailable", time.Since(m.FrozenAt).String())
		if err == nil && !m.FrozenAt.IsZero() {
			mr.h.Unavailable(time.Since(m.FrozenAt))
			mr.h.Log.Info("move: slots available again", "move", m.ID, "unavailable", time.Since(m.FrozenAt).String(), "map_version", version)
		}
		return err

	case placement.PhasePublished:
		if err := mr.dropAll(ctx, st, m.Source, m.ID); err != nil {
			return fmt.Errorf("drop on shard %d: %w", m.Source, err)
		}
		return mr.commitMove(ctx, m.ID, "done", func(s *placement.State) error { return placement.Finish(s, m.ID) },
			"kind", m.Kind, "source", uint32(m.Source), "target", uint32(m.Target))

	case placement.PhaseAborting:
		return mr.stepAbort(ctx, st, m)
	}
	return fmt.Errorf("unknown phase %q", m.Phase)
}

// precopy has the target's leader copy move m's slots from the source
// while the source still serves them, after recording Move.Precopy (so
// an abort fences the target). A refusal aborts the move (aborted: the
// move is aborting, err is the abort's): a merge's collision is found
// here, before the source is frozen. aborted is also true for a move no
// longer created once the pre-copy is done (cancelled meanwhile).
func (mr *Mover) precopy(ctx context.Context, st *placement.State, m placement.Move) (aborted bool, err error) {
	if !m.Precopy {
		err := mr.h.Update(ctx, func(s *placement.State) error { return placement.MarkPrecopy(s, m.ID, time.Now()) })
		if err != nil {
			return false, fmt.Errorf("record the pre-copy: %w", err)
		}
	}
	start := time.Now()
	resp, err := mr.pull(ctx, st, m, true)
	if err != nil {
		if mr.refusal(err) {
			return true, mr.abortMove(ctx, m, "pre-copy refused: "+status.Convert(err).Message())
		}
		return false, fmt.Errorf("pre-copy into shard %d: %w", m.Target, err)
	}
	mr.h.Log.Info("move: pre-copied", "move", m.ID, "target", uint32(m.Target), "written", resp.Pairs, "took", time.Since(start).String())
	mr.mu.Lock()
	mr.precopied[m.ID] = time.Now()
	mr.mu.Unlock()
	if hook := mr.h.AfterPrecopy; hook != nil {
		hook(m.ID)
	}
	// The pre-copy took a while: freeze only a move still created (an
	// operator may have cancelled it meanwhile; the next round aborts it
	// without freezing the source for nothing).
	now, err := mr.h.Read(ctx)
	if err != nil {
		return false, err
	}
	if cur := now.Move(m.ID); cur == nil || cur.Phase != placement.PhaseCreated {
		return true, nil
	}
	return false, nil
}

// precopyFresh is how long after a pre-copy a failed freeze is retried
// without pre-copying again.
const precopyFresh = 5 * time.Second

// recentlyPrecopied reports whether move m's pre-copy finished on this
// mover less than precopyFresh before now (and forgets older ones).
func (mr *Mover) recentlyPrecopied(m placement.Move, now time.Time) bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	for id, at := range mr.precopied {
		if now.Sub(at) >= precopyFresh {
			delete(mr.precopied, id)
		}
	}
	_, ok := mr.precopied[m.ID]
	return ok && m.Precopy
}

// pull has the target's leader pull move m's slots (Admin.PullSlots): a
// pre-copy, or the pull after the freeze (the sync pass once the cluster
// runs protocol version 3).
func (mr *Mover) pull(ctx context.Context, st *placement.State, m placement.Move, precopy bool) (*rpc.PullSlotsResponse, error) {
	req := &rpc.PullSlotsRequest{MoveId: m.ID, Source: uint32(m.Source), Target: uint32(m.Target), Slots: m.Slots.String(),
		MapVersion: m.MapVersion, Precopy: precopy, Sync: !precopy && st.ActiveVersion() >= fsm.VersionPrecopy}
	var resp *rpc.PullSlotsResponse
	err := mr.onShardLeader(ctx, st, m.Target, func(ctx context.Context, c rpc.AdminClient) (err error) {
		resp, err = c.PullSlots(ctx, req)
		return err
	})
	return resp, err
}

// abortMove records that move m is aborting (why); the next steps undo it.
func (mr *Mover) abortMove(ctx context.Context, m placement.Move, why string) error {
	mr.h.Log.Warn("move: aborting", "move", m.ID, "phase", m.Phase, "reason", why)
	return mr.commitMove(ctx, m.ID, placement.PhaseAborting, func(s *placement.State) error {
		return placement.Abort(s, m.ID, why, time.Now())
	})
}

// stepAbort undoes move m: if the source may have been frozen (a pull may
// have run) or the target may have pre-copied, the target is fenced first
// (the move registered there and its ingested data dropped, so a late
// pull can no longer adopt); then the
// source is unfrozen and the move removed (with a split's new group). A
// target that already adopted rolls the move forward instead: the source
// is still frozen, so publishing is safe.
func (mr *Mover) stepAbort(ctx context.Context, st *placement.State, m placement.Move) error {
	slots := m.Slots
	if m.FreezeIndex != 0 || m.Precopy {
		_, err := mr.slotCommand(ctx, st, m.Target, &fsm.Command{Op: fsm.OpIngestSlots,
			Move: &fsm.SlotMove{ID: m.ID, Slots: &slots, Peer: m.Source, MapVersion: m.MapVersion}})
		if err != nil && mr.refusal(err) {
			ss, serr := mr.slotStatus(ctx, st, m.Target)
			if serr != nil {
				return serr
			}
			for _, r := range ss.Moves {
				if r.Id == m.ID && r.State == fsm.MoveAdopted.String() {
					mr.h.Log.Warn("move: the target adopted the slots: rolling forward", "move", m.ID)
					return mr.commitMove(ctx, m.ID, placement.PhaseAdopted, func(s *placement.State) error {
						return placement.SetPhase(s, m.ID, placement.PhaseAborting, placement.PhaseAdopted, time.Now())
					})
				}
			}
			// Aborted there already (the ingest refused "is aborted"):
			// the drop below finishes it.
		} else if err != nil {
			return fmt.Errorf("fence shard %d: %w", m.Target, err)
		}
		if err := mr.dropAll(ctx, st, m.Target, m.ID); err != nil {
			return fmt.Errorf("drop on shard %d: %w", m.Target, err)
		}
	}
	if _, err := mr.slotCommand(ctx, st, m.Source, &fsm.Command{Op: fsm.OpUnfreezeSlots, Move: &fsm.SlotMove{ID: m.ID}}); err != nil {
		return fmt.Errorf("unfreeze on shard %d: %w", m.Source, err)
	}
	return mr.commitMove(ctx, m.ID, "aborted", func(s *placement.State) error { return placement.Finish(s, m.ID) },
		"reason", m.Error)
}

// dropAll drops move id's data on shard id until none is left.
func (mr *Mover) dropAll(ctx context.Context, st *placement.State, id shard.ID, moveID uint64) error {
	for {
		res, err := mr.slotCommand(ctx, st, id, &fsm.Command{Op: fsm.OpDropSlots, Move: &fsm.SlotMove{ID: moveID, Max: moveDropBatch}})
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
func (mr *Mover) narrow(ctx context.Context, st *placement.State, id shard.ID, moveID uint64) error {
	ss, err := mr.slotStatus(ctx, st, id)
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
	if _, err := mr.slotCommand(ctx, st, id, &fsm.Command{Op: fsm.OpRestrictSlots, Move: &fsm.SlotMove{Slots: &want}}); err != nil {
		return fmt.Errorf("restrict shard %d to its slots: %w", id, err)
	}
	mr.h.Log.Info("move: shard's state machine narrowed to its map's slots", "move", moveID, "shard", uint32(id), "slots", want.String())
	return nil
}

// onShardLeader calls fn with an Admin client of shard id's leader (as
// this node's replica knows it, else as its holders report it).
func (mr *Mover) onShardLeader(ctx context.Context, st *placement.State, id shard.ID, fn func(context.Context, rpc.AdminClient) error) error {
	leader := ""
	if r := mr.h.Replica(id); r != nil {
		leader = r.Leader()
	}
	if leader == "" {
		if st == nil {
			st = mr.h.Local()
		}
		p := st.Placement(id)
		if p == nil {
			return fmt.Errorf("%w: shard %d has no placement", errLeaderNotReady, id)
		}
		l := mr.h.Leader(ctx, placement.Group{Shard: id, Voters: p.Voters, Learners: p.Learners})
		if l == nil {
			return fmt.Errorf("%w: shard %d has no leader", errLeaderNotReady, id)
		}
		leader = l.NodeId
	}
	c, err := mr.h.Admin(leader)
	if err != nil {
		return err
	}
	return fn(ctx, c)
}

// slotCommand proposes a slot move command on shard id's leader.
func (mr *Mover) slotCommand(ctx context.Context, st *placement.State, id shard.ID, cmd *fsm.Command) (*rpc.SlotCommandResponse, error) {
	b, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	var resp *rpc.SlotCommandResponse
	err = mr.onShardLeader(ctx, st, id, func(ctx context.Context, c rpc.AdminClient) (err error) {
		resp, err = c.SlotCommand(ctx, &rpc.SlotCommandRequest{Shard: uint32(id), Command: b})
		return err
	})
	return resp, err
}

// slotStatus reads shard id's ownership on its leader.
func (mr *Mover) slotStatus(ctx context.Context, st *placement.State, id shard.ID) (*rpc.SlotStatusResponse, error) {
	var resp *rpc.SlotStatusResponse
	err := mr.onShardLeader(ctx, st, id, func(ctx context.Context, c rpc.AdminClient) (err error) {
		resp, err = c.SlotStatus(ctx, &rpc.SlotStatusRequest{Shard: uint32(id)})
		return err
	})
	return resp, err
}
