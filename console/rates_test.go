package console

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/rpc"
)

var bounds = []float64{.001, .005, .01, .05, .1, .5, 1}

// histOf returns the cumulative histogram of observations vs over bounds.
func histOf(vs ...float64) *rpc.Histogram {
	h := &rpc.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)), Count: uint64(len(vs))}
	for _, v := range vs {
		for i, b := range bounds {
			if v <= b {
				h.Counts[i]++
			}
		}
	}
	return h
}

// TestQuantile: the p99 of a histogram lies in the bucket that holds the
// true p99 of its observations (checked against sorting them), and is
// interpolated as Prometheus' histogram_quantile does.
func TestQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(500)
		vs := make([]float64, n)
		for i := range vs {
			vs[i] = math.Exp(rng.Float64()*7-7) * 0.9 // 0.9 ms .. 0.9 s, log-uniform
		}
		h := histDelta(nil, histOf(vs...))
		got, ok := h.quantile(0.99)
		if !ok {
			t.Fatal("no quantile of observations")
		}
		slices.Sort(vs)
		want := vs[int(math.Ceil(0.99*float64(n)))-1]
		lo, hi := 0.0, 0.0
		for i, b := range bounds {
			if want <= b {
				hi = b
				if i > 0 {
					lo = bounds[i-1]
				}
				break
			}
		}
		if got < lo || got > hi {
			t.Fatalf("round %d: p99 %v outside the bucket (%v, %v] of the true p99 %v", round, got, lo, hi, want)
		}
	}
	// 100 observations, 50 in (0, 1 ms] and 50 in (1, 5 ms]: the p99 is
	// 99 - 50 = 49 of 50 through the second bucket.
	h := hist{bounds: bounds, counts: []uint64{50, 100, 100, 100, 100, 100, 100}, count: 100}
	if got, _ := h.quantile(0.99); math.Abs(got-(0.001+0.004*49/50)) > 1e-12 {
		t.Errorf("p99 = %v, want %v", got, 0.001+0.004*49/50)
	}
	// Beyond the last bound: the last bound.
	if got, _ := (hist{bounds: bounds, counts: []uint64{0, 0, 0, 0, 0, 0, 0}, count: 3}).quantile(0.99); got != 1 {
		t.Errorf("p99 of observations above every bound = %v, want 1", got)
	}
	if _, ok := (hist{bounds: bounds, counts: make([]uint64, len(bounds))}).quantile(0.99); ok {
		t.Error("a quantile without observations")
	}
}

// TestHistDelta: an interval's histogram is the difference of two
// cumulative ones; one that went down (a restart) counts from zero.
func TestHistDelta(t *testing.T) {
	prev, cur := histOf(0.002, 0.2), histOf(0.002, 0.2, 0.003, 0.7)
	d := histDelta(prev, cur)
	if d.count != 2 || !slices.Equal(d.counts, []uint64{0, 1, 1, 1, 1, 1, 2}) {
		t.Errorf("delta %+v", d)
	}
	restarted := histOf(0.004)
	if d := histDelta(cur, restarted); d.count != 1 || !slices.Equal(d.counts, restarted.Counts) {
		t.Errorf("delta across a restart %+v, want the new histogram", d)
	}
	var sum hist
	sum.add(histDelta(nil, histOf(0.002)))
	sum.add(histDelta(nil, histOf(0.02)))
	sum.add(hist{bounds: []float64{1}, counts: []uint64{5}, count: 5}) // other buckets: dropped
	if sum.count != 2 || !slices.Equal(sum.counts, []uint64{0, 1, 1, 2, 2, 2, 2}) {
		t.Errorf("sum %+v", sum)
	}
	if delta(5, 7) != 2 || delta(7, 3) != 3 {
		t.Error("delta of counters")
	}
}

func counters(shard string, leader bool, commands, reads, lag uint64) *rpc.ReplicaCounters {
	return &rpc.ReplicaCounters{Shard: shard, Leader: leader, Commands: commands, Reads: reads, ApplyLag: lag}
}

// TestComputeRates: rates per second over the interval, by node and by
// shard, summed over the cluster; a node or replica seen only once adds
// nothing; a counter reset counts from zero.
func TestComputeRates(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(s time.Duration, st *rpc.NodeStatsResponse) answer {
		return answer{at: t0.Add(s * time.Second), stats: st}
	}
	prev := sample{
		"n1": at(0, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("0", true, 100, 1000, 0), counters("meta", false, 0, 0, 0)},
			Apply: histOf(0.002), Requests: histOf(0.002)}),
		"n2": at(0, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("0", false, 0, 0, 0), counters("1", true, 50, 0, 0)}}),
		"n3": at(0, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("1", false, 9, 0, 0)}}),
		"n5": at(-2, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("2", false, 0, 40, 0)}}), // missed a round
	}
	cur := sample{
		"n1": at(2, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("0", true, 300, 1400, 0), counters("meta", true, 4, 0, 7)},
			Apply: histOf(0.002, 0.02, 0.02), Requests: histOf(0.002, 0.0005)}),
		"n2": at(2, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("0", false, 0, 0, 3), counters("1", true, 10, 0, 0), counters("2", true, 99, 0, 0)}}),
		"n4": at(2, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("1", true, 1000, 0, 0)}}),
		"n5": at(2, &rpc.NodeStatsResponse{Replicas: []*rpc.ReplicaCounters{counters("2", false, 0, 80, 0)}}),
	}
	r := computeRates(prev, cur)
	// n1: shard 0 200 writes and 400 reads, meta 4 writes; n2: shard 1
	// reset to 10; n5: 40 reads over its 4 s; shard 2 on n2 and n4 are
	// new, n3 gone: nothing.
	if r.writes != (200+4+10)/2.0 || r.reads != 400/2.0+10 {
		t.Errorf("cluster %v writes/s %v reads/s", r.writes, r.reads)
	}
	if n1 := r.nodes["n1"]; n1.writes != 102 || n1.reads != 200 {
		t.Errorf("n1 %+v", n1)
	}
	if _, ok := r.nodes["n4"]; ok {
		t.Error("a node absent from the first sample has a rate")
	}
	if s := r.shards["1"]; s.writes != 5 {
		t.Errorf("shard 1 %+v, want 5 writes/s after a reset", s)
	}
	if s := r.shards["2"]; s.writes != 0 || s.reads != 10 {
		t.Errorf("shard 2 %+v: n2's new replica counts nothing, n5's 10 reads/s", s)
	}
	// The interval's writes: two of 20 ms (in (10, 50] ms): p99 near 50 ms.
	if !r.writeP99ok || r.writeP99 <= 0.01 || r.writeP99 > 0.05 {
		t.Errorf("write p99 %v %v", r.writeP99, r.writeP99ok)
	}
	if !r.requestP99ok || r.requestP99 > 0.001 {
		t.Errorf("request p99 %v %v: the interval has one request of 0.5 ms", r.requestP99, r.requestP99ok)
	}
	if maxApplyLag(cur) != 7 {
		t.Errorf("max apply lag %d", maxApplyLag(cur))
	}
	if r := computeRates(cur, cur); r.writes != 0 || len(r.nodes) != 0 {
		t.Errorf("an empty interval has rates %+v", r)
	}
	if ms(0.0123456, true) == nil || *ms(0.0123456, true) != 12.346 || ms(1, false) != nil || ms(math.NaN(), true) != nil {
		t.Error("ms")
	}
}
