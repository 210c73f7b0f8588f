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
// measured and reported"): while a fault is on, how long did each shard go
// without a successful operation? The register workload's operations are
// the probe: each names its routing key (RegIn.Key), so its shard is known
// from the slot map. For a fault [start, end] and a shard, the points are
// start, every completion of an OK operation on the shard inside the
// window, and end; the shard's gap is the longest distance between two
// consecutive points. A shard that served nothing until the fault was
// healed has the whole window as its gap (UntilHeal, Ops 0).
//
// What the gap holds besides the fault itself: an operation completes
// only after the client's retries (each attempt bounded by its timeout),
// and a worker blocked on a shard that is down issues nothing on the
// others, so a shard that never lost its leader can show a gap of up to
// one operation timeout when every worker waits on one that did.

// ShardGap is one shard's longest gap during one fault.
type ShardGap struct {
	Shard shard.ID `json:"shard"`
	// Fault is the index of the fault in Result.Faults, Nemesis its name.
	Fault   int    `json:"fault"`
	Nemesis string `json:"nemesis"`
	// From and To bound the gap (history times, ns): the fault's start or
	// an OK completion, and the next OK completion or the fault's end.
	From int64 `json:"from_ns"`
	To   int64 `json:"to_ns"`
	// UntilHeal: no operation on the shard succeeded from From until the
	// fault was healed (To is the heal); with Ops 0, the shard served
	// nothing during the whole fault.
	UntilHeal bool `json:"until_heal"`
	// Ops counts the shard's OK operations inside the fault.
	Ops int `json:"ok_ops"`
}

// Gap is the gap's length.
func (g ShardGap) Gap() time.Duration { return time.Duration(g.To - g.From) }

func (g ShardGap) String() string {
	s := fmt.Sprintf("shard %d: %v (%s, %.1fs - %.1fs, %d ok ops in the fault)", g.Shard, g.Gap().Round(time.Millisecond),
		g.Nemesis, float64(g.From)/1e9, float64(g.To)/1e9, g.Ops)
	if g.UntilHeal {
		s += ", until the heal"
	}
	return s
}

// Unavailability returns, per shard with an operation shardOf maps (a
// shard no probe key falls in is not measured), its longest gap over
// every fault (the earliest on a tie), sorted by shard. shardOf maps an
// operation to its shard (false: not a probe). A fault that never ended
// (End 0) or failed to start (Error set and no description) is left out.
func Unavailability(h History, faults []Fault, shardOf func(Op) (shard.ID, bool)) []ShardGap {
	ok := map[shard.ID][]int64{} // every probed shard, with its OK completions
	for _, op := range h {
		if id, is := shardOf(op); is {
			if op.Outcome == OK {
				ok[id] = append(ok[id], op.Complete)
			} else if ok[id] == nil {
				ok[id] = []int64{}
			}
		}
	}
	for _, ts := range ok {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	}
	worst := map[shard.ID]ShardGap{}
	for fi, f := range faults {
		if f.End <= f.Start || (f.Error != "" && f.Description == "") {
			continue
		}
		for id, ts := range ok {
			g := ShardGap{Shard: id, Fault: fi, Nemesis: f.Nemesis}
			prev := f.Start
			for i := sort.Search(len(ts), func(i int) bool { return ts[i] > f.Start }); i < len(ts) && ts[i] < f.End; i++ {
				g.Ops++
				if ts[i]-prev > g.To-g.From {
					g.From, g.To = prev, ts[i]
				}
				prev = ts[i]
			}
			if f.End-prev > g.To-g.From {
				g.From, g.To, g.UntilHeal = prev, f.End, true
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
