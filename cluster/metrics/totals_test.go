package metrics

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestTotals: Totals sums the apply histograms of every shard and the
// handling times of the clients' unary calls, leaving out the
// node-to-node services.
func TestTotals(t *testing.T) {
	r := New(func() Scrape { return Scrape{} })
	if tt := r.Totals(); tt.Apply.Count != 0 || tt.Requests.Count != 0 {
		t.Fatalf("a new registry's totals %+v", tt)
	}
	r.ObserveApply(0, 2*time.Millisecond)
	r.ObserveApply(1, 2*time.Millisecond)
	r.ObserveApply(1, 2*time.Second)
	call := func(method string) {
		_, err := r.UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method},
			func(ctx context.Context, req any) (any, error) { return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	call("/swarmkv.v1.KV/Get")
	call("/swarmkv.v1.KV/Put")
	call("/swarmkv.v1.Admin/ReplicaStatus")
	call("/swarmkv.v1.Console/NodeStats")
	tt := r.Totals()
	a := tt.Apply
	if a.Count != 3 || len(a.Bounds) != len(a.Counts) || len(a.Bounds) == 0 {
		t.Fatalf("apply %+v, want 3 observations", a)
	}
	for i, b := range a.Bounds {
		want := uint64(0)
		switch {
		case b >= 2:
			want = 3
		case b >= 0.002:
			want = 2
		}
		if a.Counts[i] != want {
			t.Errorf("apply bucket le=%v holds %d, want %d", b, a.Counts[i], want)
		}
	}
	if q := tt.Requests; q.Count != 2 || len(q.Counts) != len(q.Bounds) || q.Counts[len(q.Counts)-1] > 2 {
		t.Errorf("requests %+v, want the 2 KV calls", q)
	}
	if runtime.GOOS == "linux" && tt.RSS == 0 {
		t.Error("no RSS on Linux")
	}
}
