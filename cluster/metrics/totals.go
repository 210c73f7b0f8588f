package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Histogram is a cumulative latency histogram: Counts[i] observations
// took at most Bounds[i] seconds; Count is every observation.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
}

// Totals are the node's cumulative latency histograms and its memory, as
// the console samples them (Registry.Totals).
type Totals struct {
	// Apply: swarmkv_apply_duration_seconds, every shard's summed.
	Apply Histogram
	// Requests: grpc_server_handling_seconds of the unary calls
	// (pipelined ones included) of every service but the node-to-node
	// ones (ExcludedServices).
	Requests Histogram
	// RSS: process_resident_memory_bytes (0 where the process collector
	// has none).
	RSS uint64
}

// ExcludedServices are the gRPC services whose calls Totals.Requests
// leaves out: the calls between nodes, not the clients'.
var ExcludedServices = []string{"swarmkv.v1.Admin", "swarmkv.v1.Console"}

// totalsRegistry holds the collectors Totals reads (also registered in
// the node's registry): gathering it leaves out the node's scrape of its
// replicas and the Go runtime's series.
func totalsRegistry(m *Registry) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.apply, m.grpc, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Totals returns the node's cumulative latency histograms and memory.
func (m *Registry) Totals() Totals {
	var t Totals
	fams, _ := m.totals.Gather() // a partial answer is still one
	for _, f := range fams {
		switch f.GetName() {
		case "swarmkv_apply_duration_seconds":
			for _, mt := range f.Metric {
				t.Apply.add(mt.GetHistogram())
			}
		case "grpc_server_handling_seconds":
			for _, mt := range f.Metric {
				if label(mt, "grpc_type") == "unary" && !excluded(label(mt, "grpc_service")) {
					t.Requests.add(mt.GetHistogram())
				}
			}
		case "process_resident_memory_bytes":
			if len(f.Metric) > 0 {
				t.RSS = uint64(f.Metric[0].GetGauge().GetValue())
			}
		}
	}
	return t
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func excluded(service string) bool {
	for _, s := range ExcludedServices {
		if s == service {
			return true
		}
	}
	return false
}

// add sums histogram h (of the same buckets: one family's) into t.
func (t *Histogram) add(h *dto.Histogram) {
	if h == nil {
		return
	}
	if t.Bounds == nil {
		for _, b := range h.Bucket {
			t.Bounds = append(t.Bounds, b.GetUpperBound())
		}
		t.Counts = make([]uint64, len(t.Bounds))
	}
	for i, b := range h.Bucket {
		if i < len(t.Counts) && b.GetUpperBound() == t.Bounds[i] {
			t.Counts[i] += b.GetCumulativeCount()
		}
	}
	t.Count += h.GetSampleCount()
}
