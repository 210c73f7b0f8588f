package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestDiskBytes: the store's disk space grows with what it holds, and the
// accessor reports !ok once the FSM is closed.
func TestDiskBytes(t *testing.T) {
	f := mustOpen(t, testConfig(0, t.TempDir()), nil)
	before, ok := f.DiskBytes()
	if !ok {
		t.Fatal("DiskBytes of an open FSM: not ok")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 64<<10)
	for i := range 64 { // 4 MiB of incompressible values
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		var muts []Mutation
		muts = append(muts, Mutation{Kind: MutPut, Key: fmt.Appendf(nil, "k%03d", i), Value: val})
		if res := f.Apply(cmdLog(uint64(i+1), mustEncode(t, batchCmd(nil, muts...)))); res != nil {
			if r, isRes := res.(*Result); !isRes || r.Err != nil {
				t.Fatalf("apply %d: %v", i, res)
			}
		}
	}
	after, ok := f.DiskBytes()
	if !ok || after < before+2<<20 {
		t.Fatalf("DiskBytes after 4 MiB of values: %d (before %d), ok %v", after, before, ok)
	}
	f.Close()
	if n, ok := f.DiskBytes(); ok || n != 0 {
		t.Fatalf("DiskBytes after Close = %d, %v", n, ok)
	}
}
