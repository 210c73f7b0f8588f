package replica

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
)

// TestLoadAndSize: the leader's status carries its store's disk space and
// its load, the commands it proposed per second over the last complete
// interval (0 before one is complete; measured over a longer interval
// when nobody asked in between).
func TestLoadAndSize(t *testing.T) {
	r := openSingle(t, t.TempDir(), nil)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if got := r.Load(t0); got != 0 {
		t.Fatalf("first Load = %v, want 0", got)
	}
	for i := range 50 {
		put := &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: keys.KV([]byte("rk"), fmt.Appendf(nil, "k%d", i)), Value: []byte("v")}}}}
		if _, err := r.Propose(ctx, put); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Load(t0.Add(LoadInterval / 2)); got != 0 {
		t.Fatalf("Load within the first interval = %v, want 0", got)
	}
	// 50 commands over 10 s.
	if got := r.Load(t0.Add(LoadInterval)); math.Abs(got-50/LoadInterval.Seconds()) > 1e-9 {
		t.Fatalf("Load after one interval = %v, want %v", got, 50/LoadInterval.Seconds())
	}
	// Nothing proposed in the next 20 s: 0, measured over 20 s.
	if got := r.Load(t0.Add(3 * LoadInterval)); got != 0 {
		t.Fatalf("Load of an idle interval = %v", got)
	}
	st := r.Status("n1")
	if st.DiskBytes == 0 {
		t.Fatalf("leader's status without its disk space: %+v", st)
	}
}
