package placement

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// Elastic shards: the plan of a slot move and its phases, as data in the
// cluster state. The mover (package cluster/shardmove) runs on the meta
// leader and advances each move one idempotent step at a time; every
// phase it reaches is committed here first, so a new meta leader resumes
// from the recorded phase.

// Move kinds.
const (
	MoveSplit = "split" // some of Source's slots go to a new shard, Target
	MoveMerge = "merge" // every slot of Source goes to Target; Source is removed
)

// Move phases, in order (a move is removed from the state once done).
const (
	// PhasePlanned: recorded. A split's target group is placed (New) and
	// waits for its first leader.
	PhasePlanned = "planned"
	// PhaseCreated: the target group has a leader (the New flag is
	// cleared); next: narrow the groups' ownership if needed, freeze.
	PhaseCreated = "created"
	// PhaseFrozen: the source committed the freeze at FreezeIndex; the
	// slots are unavailable until PhasePublished. Next: the target pulls
	// the data, ingests and adopts it.
	PhaseFrozen = "frozen"
	// PhaseAdopted: the target owns the slots in its state machine; the
	// move can no longer be aborted. Next: publish the map.
	PhaseAdopted = "adopted"
	// PhasePublished: the map gives the slots to Target (MapVersion);
	// next: the source drops the moved data, then the move is done.
	PhasePublished = "published"
	// PhaseAborting: abandoned before adoption (Error says why): the
	// target's ingested data is dropped, the source unfrozen, a split's
	// new group removed, then the move.
	PhaseAborting = "aborting"
)

// Move is one slot move in the cluster state.
type Move struct {
	ID     uint64   `json:"id"` // unique over the cluster's life (State.NextMoveID)
	Kind   string   `json:"kind"`
	Source shard.ID `json:"source"`
	Target shard.ID `json:"target"`
	// Slots are the slots that move (text form, "0-15,32").
	Slots shard.SlotSet `json:"slots"`
	// MapVersion is the least map version the publish sets (the freeze
	// records it, so a stale client learns which map to wait for).
	MapVersion uint64 `json:"map_version"`
	Phase      string `json:"phase"`
	// FreezeIndex is the source's log index of the freeze (PhaseFrozen on).
	FreezeIndex uint64 `json:"freeze_index,omitempty"`
	// Precopy is set before the target first pre-copies the slots
	// (PhaseCreated, protocol version 3): from then on the target may hold
	// data of the move, so an abort fences it and drops that data.
	Precopy bool `json:"precopy,omitempty"`
	// Error is why the move is aborting.
	Error   string    `json:"error,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// FrozenAt is when the freeze committed (the unavailability window
	// runs from it to the publish).
	FrozenAt time.Time `json:"frozen_at,omitzero"`
}

// ErrMoveRefused is wrapped by the errors of the plan and phase functions
// for a request the state does not allow (unknown shard, shard already in
// a move, bad slots, a transition out of order): nothing changed.
var ErrMoveRefused = errors.New("move refused")

// ErrMoveNotFound is wrapped by the errors of the phase functions for a
// move id the state does not hold (never planned, or finished): nothing
// changed.
var ErrMoveNotFound = errors.New("no such move")

// ErrMoveInProgress is CheckNoMoves's refusal: a split or merge runs (no
// backup during a move: its copy of the shards would not be one shard
// map's). Its text keeps the "backup:" of its first home (package backup,
// which aliases it): backup.HTTPSource recognizes it by that text in a
// node's HTTP error, from nodes of any version.
var ErrMoveInProgress = errors.New("backup: a split or merge is in progress")

// CheckNoMoves refuses (ErrMoveInProgress) a cluster state with a split
// or merge in progress, naming the first move and how to end it.
func CheckNoMoves(st *State) error {
	if len(st.Moves) == 0 {
		return nil
	}
	mv := st.Moves[0]
	return fmt.Errorf("%w (move %d, %s of shard %d into shard %d, %s): wait for it to finish, or cancel it (swarmnode shards cancel %d)",
		ErrMoveInProgress, mv.ID, mv.Kind, mv.Source, mv.Target, mv.Phase, mv.ID)
}

func unknownMove(id uint64) error {
	return fmt.Errorf("%w: %d (never planned, or already finished)", ErrMoveNotFound, id)
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMoveRefused, fmt.Sprintf(format, args...))
}

// Move returns a pointer to move id in s, or nil.
func (s *State) Move(id uint64) *Move {
	for i := range s.Moves {
		if s.Moves[i].ID == id {
			return &s.Moves[i]
		}
	}
	return nil
}

// moving returns the move that involves shard id, or nil.
func (s *State) moving(id shard.ID) *Move {
	for i := range s.Moves {
		if s.Moves[i].Source == id || s.Moves[i].Target == id {
			return &s.Moves[i]
		}
	}
	return nil
}

// samePending returns the move in progress, not aborting, that a request
// for a move of kind from source (into target, for a merge; of slots, for
// a split: nil means the upper half by count, as PlanSplit computes it
// from the map, which a pending split leaves as it is) would plan, or nil.
// Planning is idempotent through it: a request retried after its commit's
// outcome was lost (a leader change) finds its own move instead of being
// refused for the shard being "already in a move", and an operator who
// repeats a split or merge gets the one in progress.
func (s *State) samePending(kind string, source, target shard.ID, slots *shard.SlotSet) *Move {
	m := s.moving(source)
	if m == nil || m.Kind != kind || m.Source != source || m.Phase == PhaseAborting {
		return nil
	}
	switch kind {
	case MoveMerge:
		if m.Target != target {
			return nil
		}
	case MoveSplit:
		want := slots
		if want == nil {
			half := upperHalf(s.SlotsOf(source))
			want = &half
		}
		if m.Slots != *want {
			return nil
		}
	}
	return m
}

// upperHalf is the upper half of slots by count (a split's default).
func upperHalf(slots shard.SlotSet) shard.SlotSet {
	all := slots.Slots()
	return shard.SlotSetOf(all[len(all)-len(all)/2:]...)
}

// SlotsOf returns the slots the map of s gives shard id.
func (s *State) SlotsOf(id shard.ID) shard.SlotSet {
	var out shard.SlotSet
	for x, owner := range s.Slots {
		if owner == id {
			out.Add(shard.Slot(x))
		}
	}
	return out
}

// checkMovable refuses a shard that is unknown (no placement, or owns no
// slot) or already in a move.
func (s *State) checkMovable(id shard.ID) error {
	if s.Placement(id) == nil || s.SlotsOf(id).IsEmpty() {
		return refused("unknown shard %d", id)
	}
	if m := s.moving(id); m != nil {
		return refused("shard %d is already in move %d (%s %d -> %d, %s)", id, m.ID, m.Kind, m.Source, m.Target, m.Phase)
	}
	return nil
}

// nextMapVersion is the map version a move planned now publishes: above
// the map's and every pending move's.
func (s *State) nextMapVersion() uint64 {
	v := s.MapVersion
	for _, m := range s.Moves {
		v = max(v, m.MapVersion)
	}
	return v + 1
}

// NewShardID returns the lowest shard id used by no placement and no move
// (ids may have holes after merges); ok is false when every id below
// shard.MaxShards is taken.
func (s *State) NewShardID() (shard.ID, bool) {
	for id := range shard.ID(shard.MaxShards) {
		if s.Placement(id) == nil && !slices.ContainsFunc(s.Moves, func(m Move) bool { return m.Source == id || m.Target == id }) {
			return id, true
		}
	}
	return 0, false
}

func (s *State) addMove(m Move) Move {
	if s.NextMoveID == 0 {
		s.NextMoveID = 1
	}
	m.ID = s.NextMoveID
	s.NextMoveID++
	m.MapVersion = s.nextMapVersion()
	m.Phase = PhasePlanned
	m.Updated = m.Created
	s.Moves = append(s.Moves, m)
	return m
}

// PlanSplit records a split of source in s: slots (nil: the upper half of
// the source's slots by count) move to a new shard, the lowest free id,
// placed on the source's voters (co-located; the reconciler may move its
// replicas later) and marked New (bootstrapped by its voters) and
// StartsEmpty, with the move's id as its Incarnation (the id may have
// been another group's). It refuses (ErrMoveRefused, s unchanged) an unknown source,
// a source with one slot, slots it does not own or that would leave it
// none, and a source already in another move. The same split already in
// progress is returned with ErrNoChange (see samePending).
func PlanSplit(s *State, source shard.ID, slots *shard.SlotSet, now time.Time) (Move, error) {
	if m := s.samePending(MoveSplit, source, 0, slots); m != nil {
		return *m, ErrNoChange
	}
	if err := s.checkMovable(source); err != nil {
		return Move{}, err
	}
	owned := s.SlotsOf(source)
	if owned.Len() < 2 {
		return Move{}, refused("shard %d owns one slot; it cannot be split", source)
	}
	var move shard.SlotSet
	if slots == nil {
		move = upperHalf(owned)
	} else {
		move = *slots
		switch {
		case move.IsEmpty():
			return Move{}, refused("no slots given to split off shard %d", source)
		case !owned.Contains(move):
			return Move{}, refused("shard %d does not own slots %s", source, move.Minus(owned).String())
		case move == owned:
			return Move{}, refused("a split must leave shard %d at least one slot", source)
		}
	}
	target, ok := s.NewShardID()
	if !ok {
		return Move{}, refused("no free shard id (limit %d)", shard.MaxShards)
	}
	p := s.Placement(source)
	m := s.addMove(Move{Kind: MoveSplit, Source: source, Target: target, Slots: move, Created: now})
	s.Shards = append(s.Shards, Placement{Shard: target, Voters: slices.Clone(p.Voters), New: true, StartsEmpty: true,
		Incarnation: m.ID})
	slices.SortFunc(s.Shards, func(a, b Placement) int { return int(a.Shard) - int(b.Shard) })
	return m, nil
}

// PlanMerge records a merge in s: every slot of from goes to into, and
// from is removed once done. It refuses (ErrMoveRefused, s unchanged) the
// same shard twice, an unknown shard and a shard already in another move.
// The same merge already in progress is returned with ErrNoChange.
func PlanMerge(s *State, into, from shard.ID, now time.Time) (Move, error) {
	if into == from {
		return Move{}, refused("cannot merge shard %d into itself", into)
	}
	if m := s.samePending(MoveMerge, from, into, nil); m != nil {
		return *m, ErrNoChange
	}
	for _, id := range []shard.ID{into, from} {
		if err := s.checkMovable(id); err != nil {
			return Move{}, err
		}
	}
	return s.addMove(Move{Kind: MoveMerge, Source: from, Target: into, Slots: s.SlotsOf(from), Created: now}), nil
}

// transitions are the phase changes SetPhase allows (PhaseAborting also
// back to PhaseAdopted: an abort that finds the target adopted rolls the
// move forward, since the source is still frozen).
var transitions = map[string][]string{
	PhasePlanned:  {PhaseCreated, PhaseAborting},
	PhaseCreated:  {PhaseFrozen, PhaseAborting},
	PhaseFrozen:   {PhaseAdopted, PhaseAborting},
	PhaseAdopted:  {PhasePublished},
	PhaseAborting: {PhaseAdopted},
}

// SetPhase moves move id from phase from to phase to, for the mover: ok
// (ErrNoChange) if it is already in to, ErrMoveNotFound if it is unknown,
// ErrMoveRefused if it is in another phase or the transition is not
// allowed. Entering
// PhaseCreated clears a split target's New flag; PhasePublished is
// Publish's.
func SetPhase(s *State, id uint64, from, to string, now time.Time) error {
	m := s.Move(id)
	switch {
	case m == nil:
		return unknownMove(id)
	case m.Phase == to:
		return ErrNoChange
	case m.Phase != from:
		return refused("move %d is %s, not %s", id, m.Phase, from)
	case !slices.Contains(transitions[from], to) || to == PhasePublished:
		return refused("move %d: %s -> %s is not a step", id, from, to)
	}
	m.Phase, m.Updated = to, now
	if to == PhaseCreated {
		if p := s.Placement(m.Target); p != nil {
			p.New = false
		}
	}
	return nil
}

// Frozen records that the source committed move id's freeze at index.
func Frozen(s *State, id uint64, index uint64, now time.Time) error {
	if err := SetPhase(s, id, PhaseCreated, PhaseFrozen, now); err != nil {
		return err
	}
	m := s.Move(id)
	m.FreezeIndex, m.FrozenAt = index, now
	return nil
}

// MarkPrecopy records that move id's target may begin pre-copying its
// slots (Move.Precopy); the move must be created, not frozen yet
// (ErrNoChange when already marked).
func MarkPrecopy(s *State, id uint64, now time.Time) error {
	m := s.Move(id)
	switch {
	case m == nil:
		return unknownMove(id)
	case m.Precopy:
		return ErrNoChange
	case m.Phase != PhaseCreated:
		return refused("move %d is %s, not created: no pre-copy", id, m.Phase)
	}
	m.Precopy, m.Updated = true, now
	return nil
}

// Publish gives move id's slots to its target in the map: the map version
// becomes max(current + 1, the move's), NumShards covers the target. The
// move must be adopted (ErrNoChange when already published).
func Publish(s *State, id uint64, now time.Time) error {
	m := s.Move(id)
	switch {
	case m == nil:
		return unknownMove(id)
	case m.Phase == PhasePublished:
		return ErrNoChange
	case m.Phase != PhaseAdopted:
		return refused("move %d is %s, not adopted: it cannot be published", id, m.Phase)
	}
	for _, x := range m.Slots.Slots() {
		s.Slots[x] = m.Target
	}
	s.MapVersion = max(s.MapVersion+1, m.MapVersion)
	s.NumShards = max(s.NumShards, int(m.Target)+1)
	m.Phase, m.Updated = PhasePublished, now
	return nil
}

// Abort marks move id aborting with reason (ErrNoChange if it already
// is); a move adopted or later cannot be aborted (ErrMoveRefused), an
// unknown one is ErrMoveNotFound.
func Abort(s *State, id uint64, reason string, now time.Time) error {
	m := s.Move(id)
	switch {
	case m == nil:
		return unknownMove(id)
	case m.Phase == PhaseAborting:
		return ErrNoChange
	case m.Phase == PhaseAdopted || m.Phase == PhasePublished:
		return refused("move %d is %s: the target owns the slots, it can no longer be cancelled", id, m.Phase)
	}
	m.Phase, m.Error, m.Updated = PhaseAborting, reason, now
	return nil
}

// Finish removes move id once its last step is done: a published move
// (a merge's source placement goes with it, and NumShards shrinks to the
// highest id left, with a new map version), or an aborting one (a split's new group goes with it).
// ErrNoChange if the move is gone.
func Finish(s *State, id uint64) error {
	m := s.Move(id)
	switch {
	case m == nil:
		return ErrNoChange
	case m.Phase != PhasePublished && m.Phase != PhaseAborting:
		return refused("move %d is %s: not finished", id, m.Phase)
	}
	var drop shard.ID
	dropping := false
	switch {
	case m.Phase == PhasePublished && m.Kind == MoveMerge:
		drop, dropping = m.Source, true
	case m.Phase == PhaseAborting && m.Kind == MoveSplit:
		drop, dropping = m.Target, true
	}
	s.Moves = slices.DeleteFunc(s.Moves, func(x Move) bool { return x.ID == id })
	if dropping && s.SlotsOf(drop).IsEmpty() {
		s.Shards = slices.DeleteFunc(s.Shards, func(p Placement) bool { return p.Shard == drop })
	}
	top := 0
	for _, owner := range s.Slots {
		top = max(top, int(owner)+1)
	}
	for _, p := range s.Shards {
		top = max(top, int(p.Shard)+1)
	}
	if top != s.NumShards { // the id bound is part of the map
		s.NumShards = top
		s.MapVersion++
	}
	return nil
}
