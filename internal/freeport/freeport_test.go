package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAddr(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, ps, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(ps)
		if p < 10000 || p >= 32000 {
			t.Fatalf("port %d outside 10000-31999", p)
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
