package console

import (
	"math"
	"time"

	"github.com/swarmkv/swarmkv/rpc"
)

// The arithmetic of the console's rates, pure: two samples of every
// node's cumulative counters (rpc.NodeStatsResponse) in, per-second rates
// and latency quantiles of the interval between them out.

// sample is the nodes' answers to NodeStats, by node id: each with the
// time it was taken (a node that missed a round keeps its older answer,
// so its next rate spans both rounds rather than dropping out of one).
type sample map[string]answer

type answer struct {
	at    time.Time
	stats *rpc.NodeStatsResponse
}

// delta is a counter's increase from prev to cur; a counter that went
// down was reset (the node restarted or reopened the replica): its
// increase is cur.
func delta(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// hist is a latency histogram's increase over an interval: counts[i]
// observations at most bounds[i] seconds (cumulative), count in all.
type hist struct {
	bounds []float64
	counts []uint64
	count  uint64
}

// histDelta returns cur minus prev (a reset, or prev nil: cur). A
// histogram of other buckets than prev's counts as reset too.
func histDelta(prev, cur *rpc.Histogram) hist {
	h := hist{bounds: cur.GetBounds(), counts: append([]uint64(nil), cur.GetCounts()...), count: cur.GetCount()}
	if prev == nil || prev.GetCount() > cur.GetCount() || len(prev.GetCounts()) != len(h.counts) {
		return h
	}
	for i := range h.counts {
		if prev.Counts[i] > h.counts[i] {
			return hist{bounds: cur.GetBounds(), counts: append([]uint64(nil), cur.GetCounts()...), count: cur.GetCount()}
		}
		h.counts[i] -= prev.Counts[i]
	}
	h.count -= prev.GetCount()
	return h
}

// add sums o into h (the same buckets; o is dropped otherwise).
func (h *hist) add(o hist) {
	if h.bounds == nil {
		h.bounds, h.counts = o.bounds, make([]uint64, len(o.counts))
	}
	if len(o.counts) != len(h.counts) {
		return
	}
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.count += o.count
}

// quantile returns the q-quantile (0 < q < 1) of h in seconds, linearly
// interpolated inside its bucket as Prometheus' histogram_quantile does:
// ok is false without observations. Observations above the last bound
// answer the last bound (the +Inf bucket has no upper end).
func (h hist) quantile(q float64) (v float64, ok bool) {
	if h.count == 0 || len(h.bounds) == 0 {
		return 0, false
	}
	rank := q * float64(h.count)
	lower, below := 0.0, uint64(0)
	for i, b := range h.bounds {
		c := h.counts[i]
		if float64(c) >= rank {
			in := c - below
			if in == 0 {
				return b, true
			}
			return lower + (b-lower)*(rank-float64(below))/float64(in), true
		}
		lower, below = b, c
	}
	return h.bounds[len(h.bounds)-1], true
}

// rates are what the console shows of one interval.
type rates struct {
	// Cluster-wide: writes (commands proposed by leaders) and
	// linearizable reads per second, the p99s of the write (apply) and
	// request latencies in seconds (ok false: no observation).
	writes, reads            float64
	writeP99, requestP99     float64
	writeP99ok, requestP99ok bool
	// By node id and by shard: writes and reads per second.
	nodes  map[string]pair
	shards map[string]pair
}

type pair struct{ writes, reads float64 }

// computeRates returns the rates from sample prev to cur, each node's
// over the time between its two answers. A node or a replica present in
// only one of them contributes nothing: its counters have no start.
func computeRates(prev, cur sample) rates {
	r := rates{nodes: map[string]pair{}, shards: map[string]pair{}}
	var apply, requests hist
	for id, ca := range cur {
		pa, ok := prev[id]
		seconds := ca.at.Sub(pa.at).Seconds()
		if !ok || seconds <= 0 {
			continue
		}
		c, p := ca.stats, pa.stats
		old := map[string]*rpc.ReplicaCounters{}
		for _, rc := range p.Replicas {
			old[rc.Shard] = rc
		}
		var np pair
		for _, rc := range c.Replicas {
			o := old[rc.Shard]
			if o == nil {
				continue
			}
			w := float64(delta(o.Commands, rc.Commands)) / seconds
			rd := float64(delta(o.Reads, rc.Reads)) / seconds
			np.writes += w
			np.reads += rd
			sp := r.shards[rc.Shard]
			sp.writes += w
			sp.reads += rd
			r.shards[rc.Shard] = sp
		}
		r.nodes[id] = np
		r.writes += np.writes
		r.reads += np.reads
		apply.add(histDelta(p.Apply, c.Apply))
		requests.add(histDelta(p.Requests, c.Requests))
	}
	r.writeP99, r.writeP99ok = apply.quantile(0.99)
	r.requestP99, r.requestP99ok = requests.quantile(0.99)
	return r
}

// maxApplyLag returns the largest apply lag of any replica in s.
func maxApplyLag(s sample) uint64 {
	var m uint64
	for _, a := range s {
		for _, rc := range a.stats.Replicas {
			m = max(m, rc.ApplyLag)
		}
	}
	return m
}

// ms returns seconds v in milliseconds, rounded to a microsecond, or nil
// when !ok (JSON null: no observation).
func ms(v float64, ok bool) *float64 {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	x := math.Round(v*1e6) / 1e3
	return &x
}
