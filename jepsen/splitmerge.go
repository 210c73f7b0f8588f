package jepsen

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

func init() {
	RegisterNemesis("split-merge", func() Nemesis { return &splitMergeNemesis{} })
}

// Resharding is implemented by a driver that can split and merge shards
// (the split-merge nemesis needs it; a driver without it makes the nemesis
// ErrUnsupported). Each call goes through the member via (InProc: its
// cluster.Node, which forwards to the meta leader; Docker: its admin HTTP
// API). A refusal (the plan is not allowed: unknown shard, a shard already
// in a move, ...) is a FailedPrecondition status.
type Resharding interface {
	// adminVia lists the members other than except that run.
	adminVia(except string) []string
	// adminSplit splits shard (slots nil: the upper half of its slots).
	adminSplit(ctx context.Context, via string, id shard.ID, slots *shard.SlotSet) (placement.Move, error)
	adminMerge(ctx context.Context, via string, into, from shard.ID) (placement.Move, error)
	// adminState is the committed cluster state (moves, slot map).
	adminState(ctx context.Context, via string) (*cluster.State, error)
}

// Move outcomes.
const (
	MoveDone    = "done"    // the slots belong to the target
	MoveAborted = "aborted" // the move was abandoned; the slots stayed with the source
	MoveRefused = "refused" // the plan was refused (nothing changed)
	// MoveUnfinished: still in progress when the nemesis stopped waiting,
	// or its fate could not be read.
	MoveUnfinished = "unfinished"
	// MoveInconsistent: the move is gone but its slots belong neither all
	// to the target nor all to the source (an anomaly).
	MoveInconsistent = "inconsistent"
)

// MoveRecord is one move the split-merge nemesis asked for, as the report
// lists it. Times are those of the history.
type MoveRecord struct {
	ID     uint64 `json:"id,omitempty"`
	Kind   string `json:"kind"`
	Source uint32 `json:"source"`
	Target uint32 `json:"target"`
	Slots  string `json:"slots,omitempty"`
	NSlots int    `json:"n_slots,omitempty"`
	// Phases are the phases the nemesis saw the move in, in order.
	Phases   []string      `json:"phases,omitempty"`
	Outcome  string        `json:"outcome"`
	Error    string        `json:"error,omitempty"`
	Start    int64         `json:"start_ns"`
	End      int64         `json:"end_ns"`
	Duration time.Duration `json:"duration_ns"`

	op      *Op           // its operation in the history
	planned shard.SlotSet // the slots the plan moves
}

// what says what the move does.
func (m MoveRecord) what() string {
	switch {
	case m.Kind == placement.MoveMerge:
		return fmt.Sprintf("merge %d into %d", m.Source, m.Target)
	case m.ID == 0:
		return fmt.Sprintf("split %d", m.Source)
	}
	return fmt.Sprintf("split %d -> %d", m.Source, m.Target)
}

func (m MoveRecord) String() string {
	what := m.what()
	slots := m.Slots
	if len(slots) > 40 {
		slots = slots[:37] + "..."
	}
	s := fmt.Sprintf("move %d %s (%d slots: %s) %s in %v", m.ID, what, m.NSlots, slots, m.Outcome, m.Duration.Round(time.Millisecond))
	if m.Error != "" {
		s += ": " + m.Error
	}
	return s
}

// MoveCounts sums moves by kind and outcome.
type MoveCounts struct {
	Splits, Merges int // done
	Aborted        int
	Refused        int
	Unfinished     int
	Inconsistent   int
}

func countMoves(ms []MoveRecord) MoveCounts {
	var c MoveCounts
	for _, m := range ms {
		switch m.Outcome {
		case MoveDone:
			if m.Kind == placement.MoveMerge {
				c.Merges++
			} else {
				c.Splits++
			}
		case MoveAborted:
			c.Aborted++
		case MoveRefused:
			c.Refused++
		case MoveUnfinished:
			c.Unfinished++
		case MoveInconsistent:
			c.Inconsistent++
		}
	}
	return c
}

func (c MoveCounts) String() string {
	s := fmt.Sprintf("%d splits, %d merges, %d aborted", c.Splits, c.Merges, c.Aborted)
	if c.Refused > 0 {
		s += fmt.Sprintf(", %d refused", c.Refused)
	}
	if c.Unfinished > 0 {
		s += fmt.Sprintf(", %d unfinished", c.Unfinished)
	}
	if c.Inconsistent > 0 {
		s += fmt.Sprintf(", %d INCONSISTENT", c.Inconsistent)
	}
	return s
}

// moveBook is shared by every split-merge nemesis of a run (Env.moves):
// the shard count the cluster started with and the moves so far.
type moveBook struct {
	mu    sync.Mutex
	base  int // shards owning slots at the first activation (0: unknown)
	moves []MoveRecord
}

func (b *moveBook) add(m MoveRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.moves = append(b.moves, m)
}

func (b *moveBook) records() []MoveRecord {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.moves)
}

// baseline returns the recorded shard count, recording n if none is.
func (b *moveBook) baseline(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.base == 0 {
		b.base = n
	}
	return b.base
}

// Timeouts of the split-merge nemesis.
const (
	// moveSubmitTimeout bounds the submission of a move (retried through
	// every running member).
	moveSubmitTimeout = 20 * time.Second
	// movePollInterval is how often the nemesis reads the state while a
	// move runs.
	movePollInterval = 100 * time.Millisecond
)

// moveTimeout bounds one move as a whole (the schedule gives Stop a
// minute); a variable for tests.
var moveTimeout = 55 * time.Second

// splitMergeNemesis changes the shards under load: each activation reads
// the cluster state and either splits a random shard that owns more than
// one slot (half the time a random subset of its slots, otherwise the
// upper half) or, when the cluster has more shards than at the first
// activation, merges a random shard into another. Start submits the move
// and returns; the move runs in the background (a fault started after it,
// as in "split-merge+kill", which staggers its parts, hits it in some
// phase). Stop waits until the move is
// gone from the cluster state and records its outcome, which the slot map
// decides: done (the slots are the target's), aborted (still the
// source's, which is legitimate under faults) or inconsistent (an
// anomaly). Each move is an operation of the history (workload
// "nemesis", f split or merge; ok done, fail aborted or refused, info
// unfinished) and a row of the report.
type splitMergeNemesis struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	rec *MoveRecord // the move of the current activation
}

func (s *splitMergeNemesis) Name() string { return "split-merge" }

func (s *splitMergeNemesis) Start(_ context.Context, env *Env) (string, error) {
	rs, ok := env.Driver.(Resharding)
	if !ok {
		return "", fmt.Errorf("%w: %s driver cannot split or merge shards", ErrUnsupported, env.Driver.Name())
	}
	rng := rand.New(rand.NewPCG(env.Rng.Uint64(), 0x5e1))
	// The move runs until it ends (or moveTimeout), not until Start's
	// ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	s.cancel, s.done = cancel, make(chan struct{})
	s.mu.Lock()
	s.rec = nil
	s.mu.Unlock()
	rec, m, err := s.submit(ctx, env, rs, rng)
	if errors.Is(err, ErrUnsupported) {
		close(s.done)
		if rec != nil && rec.op != nil {
			env.Rec.Complete(rec.op, Fail, nil, err)
		}
		return "", err
	}
	book := env.moveBook()
	if err != nil || rec.Outcome != "" {
		close(s.done)
		s.finish(env, book, rec)
		return rec.String(), nil
	}
	desc := fmt.Sprintf("move %d: %s (%d slots)", rec.ID, rec.what(), rec.NSlots)
	go func() {
		defer close(s.done)
		s.follow(ctx, rs, m, rec)
		s.finish(env, book, rec)
	}()
	return desc, nil
}

// submit plans a move from the cluster state and submits it; the record
// has an outcome if no move is to be followed. Only ErrUnsupported is
// returned as an error (the driver cannot reach the shard routes).
func (s *splitMergeNemesis) submit(ctx context.Context, env *Env, rs Resharding, rng *rand.Rand) (*MoveRecord, placement.Move, error) {
	st, err := readState(ctx, rs)
	if err != nil {
		return &MoveRecord{Kind: "plan", Outcome: MoveUnfinished, Error: err.Error()}, placement.Move{}, nil
	}
	owned := ownedSlots(st)
	base := len(owned)
	if env.moves != nil {
		base = env.moves.baseline(base)
	}
	busy := map[shard.ID]bool{}
	for _, m := range st.Moves {
		busy[m.Source], busy[m.Target] = true, true
	}
	var free []shard.ID
	for _, id := range sortedShards(owned) {
		if !busy[id] {
			free = append(free, id)
		}
	}
	rec := &MoveRecord{}
	var submit func(ctx context.Context, via string) (placement.Move, error)
	if len(owned) > base && len(free) >= 2 {
		i := rng.IntN(len(free))
		from := free[i]
		rest := slices.Delete(slices.Clone(free), i, i+1)
		into := rest[rng.IntN(len(rest))]
		rec.Kind, rec.Source, rec.Target = placement.MoveMerge, uint32(from), uint32(into)
		rec.Slots, rec.NSlots, rec.planned = ptr(owned[from]).String(), owned[from].Len(), owned[from]
		submit = func(ctx context.Context, via string) (placement.Move, error) {
			return rs.adminMerge(ctx, via, into, from)
		}
	} else {
		var splittable []shard.ID
		for _, id := range free {
			if owned[id].Len() > 1 {
				splittable = append(splittable, id)
			}
		}
		if len(splittable) == 0 {
			return &MoveRecord{Kind: placement.MoveSplit, Outcome: MoveRefused,
				Error: fmt.Sprintf("no shard to split (%d shards, %d in moves)", len(owned), len(owned)-len(free))}, placement.Move{}, nil
		}
		src := splittable[rng.IntN(len(splittable))]
		var slots *shard.SlotSet
		if rng.IntN(2) == 0 {
			slots = randomSubset(rng, owned[src])
		}
		rec.Kind, rec.Source = placement.MoveSplit, uint32(src)
		if slots != nil {
			rec.planned = *slots
		} else { // as placement.PlanSplit: the upper half by count
			all := owned[src].Slots()
			rec.planned = shard.SlotSetOf(all[len(all)-len(all)/2:]...)
		}
		rec.Slots, rec.NSlots = rec.planned.String(), rec.planned.Len()
		submit = func(ctx context.Context, via string) (placement.Move, error) {
			return rs.adminSplit(ctx, via, src, slots)
		}
	}
	rec.Start = env.now()
	if env.Rec != nil {
		rec.op = env.Rec.Invoke("nemesis", -1, rec.Kind, MoveRecord{Kind: rec.Kind, Source: rec.Source, Target: rec.Target, Slots: rec.Slots})
	}
	s.mu.Lock()
	s.rec = rec
	s.mu.Unlock()

	// The id the move gets (placement.State.addMove: ids start at 1).
	m, err := submitMove(ctx, rs, max(st.NextMoveID, 1), rec, submit)
	if errors.Is(err, ErrUnsupported) {
		return rec, m, err
	}
	env.moveBook().baseline(len(owned))
	if err != nil {
		rec.Outcome, rec.Error = MoveUnfinished, err.Error()
		if refusal(err) {
			rec.Outcome = MoveRefused
		}
		return rec, m, nil
	}
	rec.ID, rec.Target, rec.Slots, rec.NSlots, rec.Phases = m.ID, uint32(m.Target), m.Slots.String(), m.Slots.Len(), []string{m.Phase}
	return rec, m, nil
}

// submitMove submits a move through the running members until it is
// accepted, refused, or its deadline. After a failed attempt it looks for
// the move in the state (ids from next on): an attempt whose answer was
// lost may have committed it, and a second one is then refused because
// the shard is already in a move.
func submitMove(ctx context.Context, rs Resharding, next uint64, rec *MoveRecord,
	submit func(ctx context.Context, via string) (placement.Move, error)) (placement.Move, error) {
	ctx, cancel := context.WithTimeout(ctx, moveSubmitTimeout)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		vias := rs.adminVia("")
		if len(vias) == 0 {
			last = errors.New("no running member")
		} else {
			via := vias[attempt%len(vias)]
			actx, acancel := context.WithTimeout(ctx, adminAttemptTimeout)
			m, err := submit(actx, via)
			acancel()
			if err == nil {
				return m, nil
			}
			last = fmt.Errorf("via %s: %w", via, err)
			// Did this or an earlier attempt commit the move (the node's
			// own retries included)?
			actx, acancel = context.WithTimeout(ctx, adminAttemptTimeout)
			st, serr := rs.adminState(actx, via)
			acancel()
			if serr == nil {
				if m, ok := findMove(st, next, rec); ok {
					return m, nil
				}
			}
			if refusal(err) || errors.Is(err, ErrUnsupported) {
				return placement.Move{}, err
			}
		}
		select {
		case <-ctx.Done():
			return placement.Move{}, fmt.Errorf("not submitted in time (%v); last: %w", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// refusal reports whether err refuses a plan (FailedPrecondition), but not
// as a node that lost the meta group's leadership meanwhile (not leader:
// retried).
func refusal(err error) bool {
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || strings.Contains(st.Message(), "not the leader") {
		return false
	}
	k, _ := rpc.KindOf(st)
	return k != rpc.KindNotLeader
}

// findMove returns the move in st with an id from next on that is the one
// rec asks for. A move that was made and has already ended (the state's
// next move id is past next) is returned as rec plans it, with the target
// of a split read from the map, and phase "ended": this assumes the
// nemesis is the only one moving slots (the automatic shard policy is off
// in both drivers' clusters, which fix their shard count).
func findMove(st *cluster.State, next uint64, rec *MoveRecord) (placement.Move, bool) {
	for _, m := range st.Moves {
		if m.ID >= next && m.Kind == rec.Kind && uint32(m.Source) == rec.Source &&
			(rec.Kind == placement.MoveSplit || uint32(m.Target) == rec.Target) {
			return m, true
		}
	}
	if st.NextMoveID <= next || rec.planned.IsEmpty() {
		return placement.Move{}, false
	}
	m := placement.Move{ID: next, Kind: rec.Kind, Source: shard.ID(rec.Source), Target: shard.ID(rec.Target), Slots: rec.planned, Phase: "ended"}
	if x, ok := rec.planned.First(); ok && m.Kind == placement.MoveSplit && int(x) < len(st.Slots) {
		m.Target = st.Slots[x]
	}
	return m, true
}

// follow polls the state until move m is gone from it (or ctx ends) and
// sets rec's phases and outcome.
func (s *splitMergeNemesis) follow(ctx context.Context, rs Resharding, m placement.Move, rec *MoveRecord) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		select {
		case <-ctx.Done():
			rec.Outcome, rec.Error = MoveUnfinished, fmt.Sprintf("still %s after %v (last state read: %v)",
				rec.Phases[len(rec.Phases)-1], moveTimeout, lastErr)
			return
		case <-time.After(movePollInterval):
		}
		vias := rs.adminVia("")
		if len(vias) == 0 {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, adminAttemptTimeout)
		st, err := rs.adminState(actx, vias[attempt%len(vias)])
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		if cur := st.Move(m.ID); cur != nil {
			if cur.Phase != rec.Phases[len(rec.Phases)-1] {
				rec.Phases = append(rec.Phases, cur.Phase)
			}
			if cur.Error != "" {
				rec.Error = cur.Error
			}
			continue
		}
		rec.Outcome = judgeMove(st, m)
		if rec.Outcome == MoveInconsistent {
			rec.Error = strings.TrimPrefix(rec.Error+"; ", "; ") + slotOwners(st, m.Slots)
		}
		return
	}
}

// judgeMove decides a finished move's outcome from the slot map.
func judgeMove(st *cluster.State, m placement.Move) string {
	toTarget, toSource := true, true
	for _, x := range m.Slots.Slots() {
		if int(x) >= len(st.Slots) {
			return MoveInconsistent
		}
		toTarget = toTarget && st.Slots[x] == m.Target
		toSource = toSource && st.Slots[x] == m.Source
	}
	switch {
	case toTarget:
		return MoveDone
	case toSource:
		return MoveAborted
	}
	return MoveInconsistent
}

// slotOwners describes who owns slots in st's map.
func slotOwners(st *cluster.State, slots shard.SlotSet) string {
	by := map[shard.ID]*shard.SlotSet{}
	for _, x := range slots.Slots() {
		if int(x) < len(st.Slots) {
			o := st.Slots[x]
			if by[o] == nil {
				by[o] = &shard.SlotSet{}
			}
			by[o].Add(x)
		}
	}
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("shard %d owns %s", id, by[id]))
	}
	return "slot map: " + strings.Join(parts, ", ")
}

// finish records rec in the book and the history.
func (s *splitMergeNemesis) finish(env *Env, book *moveBook, rec *MoveRecord) {
	if rec.Start == 0 {
		rec.Start = env.now()
	}
	rec.End = env.now()
	rec.Duration = time.Duration(rec.End - rec.Start)
	s.mu.Lock()
	s.rec = rec
	s.mu.Unlock()
	if env.Rec != nil {
		op := rec.op
		if op == nil { // nothing was submitted
			op = env.Rec.Invoke("nemesis", -1, rec.Kind, nil)
		}
		outcome := Info
		switch rec.Outcome {
		case MoveDone:
			outcome = OK
		case MoveAborted, MoveRefused:
			outcome = Fail
		}
		var err error
		if rec.Error != "" {
			err = errors.New(rec.Error)
		}
		out := *rec
		out.op = nil
		env.Rec.Complete(op, outcome, out, err)
	}
	rec.op = nil
	book.add(*rec)
}

// Stop waits for the move to finish (or ctx to end, which gives up on it:
// it is recorded unfinished).
func (s *splitMergeNemesis) Stop(ctx context.Context, _ *Env) error {
	if s.cancel == nil {
		return nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		s.cancel()
		<-s.done
	}
	s.cancel()
	s.cancel = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec != nil && s.rec.Outcome == MoveInconsistent {
		return fmt.Errorf("move %d left its slots split between shards: %s", s.rec.ID, s.rec.Error)
	}
	return nil
}

// Result describes the activation's move.
func (s *splitMergeNemesis) Result() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec == nil {
		return "no move"
	}
	return s.rec.String()
}

// readState reads the cluster state through the running members.
func readState(ctx context.Context, rs Resharding) (*cluster.State, error) {
	ctx, cancel := context.WithTimeout(ctx, moveSubmitTimeout)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		if vias := rs.adminVia(""); len(vias) == 0 {
			last = errors.New("no running member")
		} else {
			via := vias[attempt%len(vias)]
			actx, acancel := context.WithTimeout(ctx, adminAttemptTimeout)
			st, err := rs.adminState(actx, via)
			acancel()
			if err == nil {
				return st, nil
			}
			last = fmt.Errorf("via %s: %w", via, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("jepsen: read the cluster state: %v; last: %w", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ownedSlots maps each shard owning slots in st's map to its slots.
func ownedSlots(st *cluster.State) map[shard.ID]shard.SlotSet {
	out := map[shard.ID]shard.SlotSet{}
	for x, id := range st.Slots {
		s := out[id]
		s.Add(shard.Slot(x))
		out[id] = s
	}
	return out
}

func sortedShards(m map[shard.ID]shard.SlotSet) []shard.ID {
	return slices.Sorted(maps.Keys(m))
}

// randomSubset returns a random non-empty proper subset of s (len(s) > 1).
func randomSubset(rng *rand.Rand, s shard.SlotSet) *shard.SlotSet {
	all := s.Slots()
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	n := 1 + rng.IntN(len(all)-1)
	out := shard.SlotSetOf(all[:n]...)
	return &out
}

// waitNoMoves waits until the cluster state holds no move (after healing,
// every move must end) and returns the moves left when ctx ends.
func waitNoMoves(ctx context.Context, rs Resharding) ([]placement.Move, error) {
	var last []placement.Move
	var lastErr error
	for attempt := 0; ; attempt++ {
		if vias := rs.adminVia(""); len(vias) > 0 {
			actx, cancel := context.WithTimeout(ctx, adminAttemptTimeout)
			st, err := rs.adminState(actx, vias[attempt%len(vias)])
			cancel()
			if err == nil {
				if len(st.Moves) == 0 {
					return nil, nil
				}
				last = st.Moves
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if last == nil && lastErr != nil {
				return nil, lastErr
			}
			return last, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkMoves is the verdict on the moves of a run: each must end with its
// slots all the target's or all the source's, and none may be left once
// the cluster is healed (left: the moves still in the state then).
func checkMoves(ms []MoveRecord, left []placement.Move, leftErr error) Verdict {
	v := Verdict{Checker: "moves", Valid: true}
	c := countMoves(ms)
	v.count("splits", c.Splits)
	v.count("merges", c.Merges)
	v.count("aborted", c.Aborted)
	v.count("refused", c.Refused)
	v.count("unfinished", c.Unfinished)
	for _, m := range ms {
		if m.Outcome == MoveInconsistent {
			v.anomaly("%s", m)
		}
	}
	for _, m := range left {
		v.anomaly("move %d (%s %d -> %d) still %s after healing (error %q)", m.ID, m.Kind, m.Source, m.Target, m.Phase, m.Error)
	}
	if leftErr != nil {
		v.Unknown = true
		v.Anomalies = append(v.Anomalies, "could not read the moves after healing: "+leftErr.Error())
	}
	return v
}

func ptr[T any](v T) *T { return &v }
