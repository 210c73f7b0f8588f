package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAddr(t *testing.T) {
	seen := map[string]bool{}
	lo, hi := portRange()
	for range 50 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, ps, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(ps)
		if p < lo || p >= hi {
			t.Fatalf("port %d outside %d-%d", p, lo, hi-1)
		}
		if q := p % 1000; q >= 100 && q <= 104 && p%10000/1000 >= 7 {
			t.Fatalf("port %d is one of the README clusters' ports", p)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s not free: %v", a, err)
		}
		ln.Close()
		seen[a] = true
	}
	if len(seen) != 50 {
		t.Fatalf("%d distinct addresses in 50 calls: a port was handed out twice", len(seen))
	}
}

// TestEnvRange: SWARMKV_PORTS narrows the ports handed out.
func TestEnvRange(t *testing.T) {
	t.Setenv(EnvRange, "33100-33109")
	for range 15 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(a)
		if n, _ := strconv.Atoi(p); n < 33100 || n > 33109 {
			t.Fatalf("Addr() = %s outside 33100-33109", a)
		}
	}
	t.Setenv(EnvRange, "junk")
	if lo, hi := portRange(); lo != defaultLo || hi != defaultHi {
		t.Fatalf("malformed range: %d-%d", lo, hi)
	}
}
