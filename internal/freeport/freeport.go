// Package freeport hands tests and in-process clusters loopback addresses
// whose port is free and below the kernel's ephemeral range (32768-60999 on
// Linux). An address from the ephemeral range (what listening on port 0
// gives) can be taken by any outgoing connection between the moment it is
// picked and the moment its node binds it, or while a node is down between
// a kill and a restart; a port below that range is only ever taken by
// someone listening on it explicitly.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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
	defaultLo = 10000
	defaultHi = 32000
)

// EnvRange names the environment variable that narrows the ports handed
// out to "LO-HI" (inclusive), so that test runs sharing one machine use
// disjoint ranges (SWARMKV_PORTS=33000-33999). Unset or malformed: the
// default 10000-31999.
const EnvRange = "SWARMKV_PORTS"

// portRange returns [lo, hi) from EnvRange or the default.
func portRange() (lo, hi int) {
	a, b, ok := strings.Cut(os.Getenv(EnvRange), "-")
	l, err1 := strconv.Atoi(strings.TrimSpace(a))
	h, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || l < 1024 || h > 65535 || h < l {
		return defaultLo, defaultHi
	}
	return l, h + 1
}

// Addr returns "127.0.0.1:<port>" with a port in 10000-31999 (EnvRange
// narrows it) that is free
// for both TCP and UDP (memberlist binds both), away from the ports the
// clusters of docs/usage.md use (x7100-x7104, x8100-x8104, x9100-x9104).
func Addr() (string, error) {
	lo, hi := portRange()
	next.Lock()
	defer next.Unlock()
	if next.port < lo || next.port >= hi {
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
	return "", fmt.Errorf("freeport: no free port in %d-%d", lo, hi-1)
}
