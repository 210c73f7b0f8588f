// Package freeport hands tests and in-process clusters loopback addresses
// whose port is free and below the kernel's ephemeral range (32768-60999 on
// Linux). An address from the ephemeral range (what listening on port 0
// gives) can be taken by any outgoing connection between the moment it is
// picked and the moment its node binds it, or while a node is down between
// a kill and a restart; a port below that range is only ever taken by
// someone listening on it explicitly.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// The ports are handed out in turn from a random starting point, so a
// process never gets the same port twice (until it has used the whole
// range), and two test processes walking the range rarely meet.
var next struct {
	sync.Mutex
	port int // 0 until the first call
}

const (
	lo = 10000
	hi = 32000
)

// Addr returns "127.0.0.1:<port>" with a port in 10000-31999 that is free
// for both TCP and UDP (memberlist binds both), away from the ports the
// clusters of docs/usage.md use (x7100-x7104, x8100-x8104, x9100-x9104).
func Addr() (string, error) {
	next.Lock()
	defer next.Unlock()
	if next.port == 0 {
		next.port = lo + rand.IntN(hi-lo)
	}
	for range hi - lo {
		p := next.port
		next.port++
		if next.port >= hi {
			next.port = lo
		}
		if q := p % 1000; q >= 100 && q <= 104 && p%10000/1000 >= 7 {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return addr, nil
	}
	return "", errors.New("freeport: no free port in 10000-31999")
}
