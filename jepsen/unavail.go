package jepsen

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/shard"
)

// Unavailability (issue 41: "the longest unavailability of any shard
// measured and reported"): while a fault is on, how long did a client that
// wanted a shard wait for it? The register workload's operations are the
// probe: each names its routing key (RegIn.Key), so its shard is known
// from the slot map. For a fault's window [start, end] (end: the heal, or
// the end of the workload phase if that came first) and a shard, the
// points are start, every completion of an OK operation on the shard
// inside the window, and end. Between two consecutive points p < q the
// shard was wanted from the first moment an operation on it was in
// flight (invoked before q, not completed by p: from p or its invocation,
// whichever is later); the gap is q minus that moment, or nothing when no
// operation on the shard was in flight (no key of the workload's fell in
// the shard then: not a gap). The shard's figure is its longest gap.
//
// What a gap holds besides the fault itself: an operation completes only
// after the client's retries (each attempt bounded by its timeout), so a
// gap is at least one operation's latency; a gap that runs until the end
// of the window (UntilHeal) means the shard did not serve a waiting
// client again before the heal. It is an upper bound: once an operation
// on the shard is left unanswered, the shard counts as unavailable until
// one succeeds, also while no worker happens to ask it (busy on other
// shards), so its precision is how often the workers come back to the
// shard.

// ShardGap is one shard's longest gap during one fault.
type ShardGap struct {
	Shard shard.ID `json:"shard"`
	// Fault is the index of the fault in Result.Faults, Nemesis its name.
	Fault   int    `json:"fault"`
	Nemesis string `json:"nemesis"`
	// From and To bound the gap (history times, ns): when a waiting
	// operation was first in flight, and the next OK completion or the
	// window's end.
	From int64 `json:"from_ns"`
	To   int64 `json:"to_ns"`
	// UntilHeal: no operation on the shard succeeded from From to the end
	// of the window (the heal, or the end of the workload phase).
	UntilHeal bool `json:"until_heal"`
	// Ops counts the shard's OK operations inside the window.
	Ops int `json:"ok_ops"`
}

// Gap is the gap's length.
func (g ShardGap) Gap() time.Duration { return time.Duration(g.To - g.From) }

func (g ShardGap) String() string {
	if g.To == 0 {
		return fmt.Sprintf("shard %d: no operation on it waited during a fault", g.Shard)
	}
	s := fmt.Sprintf("shard %d: %v (%s, %.1fs - %.1fs, %d ok ops in the fault)", g.Shard, g.Gap().Round(time.Millisecond),
		g.Nemesis, float64(g.From)/1e9, float64(g.To)/1e9, g.Ops)
	if g.UntilHeal {
		s += ", until the heal"
	}
	return s
}

// Unavailability returns, per shard with an operation that shardOf maps
// (a shard no probe key falls in is not measured), its longest gap over
// every fault (the earliest on a tie), sorted by shard. shardOf maps an
// operation to its shard (false: not a probe). until is the end of the
// workload phase (history time; 0: none), where every window ends at the
// latest. A fault that never ended (End 0) is left out.
func Unavailability(h History, faults []Fault, until int64, shardOf func(Op) (shard.ID, bool)) []ShardGap {
	byShard := map[shard.ID][]Op{} // every probed shard's operations
	for _, op := range h {
		if id, is := shardOf(op); is {
			byShard[id] = append(byShard[id], op)
		}
	}
	worst := map[shard.ID]ShardGap{}
	for fi, f := range faults {
		end := f.End
		if until > 0 {
			end = min(end, until)
		}
		if end <= f.Start {
			continue
		}
		for id, ops := range byShard {
			var oks []int64
			for _, op := range ops {
				if op.Outcome == OK && op.Complete > f.Start && op.Complete < end {
					oks = append(oks, op.Complete)
				}
			}
			sort.Slice(oks, func(i, j int) bool { return oks[i] < oks[j] })
			g := ShardGap{Shard: id, Fault: fi, Nemesis: f.Nemesis, Ops: len(oks)}
			points := append(append([]int64{f.Start}, oks...), end)
			for i := 1; i < len(points); i++ {
				p, q := points[i-1], points[i]
				wanted := q // no operation in flight: no gap
				for _, op := range ops {
					if op.Invoke < q && op.Complete > p {
						wanted = min(wanted, max(op.Invoke, p))
					}
				}
				if q-wanted > g.To-g.From {
					g.From, g.To, g.UntilHeal = wanted, q, i == len(points)-1
				}
			}
			if w, seen := worst[id]; !seen || g.Gap() > w.Gap() {
				worst[id] = g
			}
		}
	}
	out := make([]ShardGap, 0, len(worst))
	for _, g := range worst {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

// RegisterShardOf maps the register workload's operations to their shard
// by slots (slots[s]: the shard of slot s, as in the cluster state).
func RegisterShardOf(slots []shard.ID) func(Op) (shard.ID, bool) {
	return func(op Op) (shard.ID, bool) {
		in, ok := op.Input.(RegIn)
		if op.Workload != "register" || !ok {
			return 0, false
		}
		s := shard.SlotOf([]byte(in.Key))
		if int(s) >= len(slots) {
			return 0, false
		}
		return slots[s], true
	}
}

// slotsOf reads the slot map from the first member that answers.
func slotsOf(ctx context.Context, rs Resharding) ([]shard.ID, error) {
	var errs []string
	for _, via := range rs.adminVia("") {
		st, err := rs.adminState(ctx, via)
		if err == nil && len(st.Slots) == shard.NumSlots {
			return st.Slots, nil
		}
		if err == nil {
			err = fmt.Errorf("a slot map of %d slots", len(st.Slots))
		}
		errs = append(errs, via+": "+err.Error())
	}
	return nil, fmt.Errorf("jepsen: no member gives the slot map: %s", strings.Join(errs, "; "))
}
