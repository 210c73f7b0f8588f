package faultnet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Local injects faults into the connections of one node whose peers run
// in other processes (the docker-compose cluster), where a Network cannot
// see both ends of a connection. Peers are named by IP address: a
// connection's peer is the remote address of the TCP connection (dialed or
// accepted). The rules (Faults) apply to this node's side only:
//
//   - Block: dials to a blocked IP fail with ErrUnreachable, and a Write on
//     any connection with a blocked peer closes it (so requests from the
//     peer get no answers either). Setting a block closes the existing
//     connections with that peer.
//   - Delay: each Write waits the delay first.
//   - DropRate: each Write kills its connection with that probability.
//
// Rules are replaced as a whole by Set, typically from the node's
// PUT /debug/faults (enabled by swarmnode serve --fault-injection).
type Local struct {
	mu struct {
		sync.Mutex
		rng    *rand.Rand
		faults Faults
		block  map[netip.Addr]bool
		conns  map[*localConn]struct{}
		stats  Stats
	}
}

// Faults are the rules of a Local, in the JSON of PUT /debug/faults:
// {"delay": "50ms", "drop_rate": 0.01, "block": ["172.29.71.13"]}.
type Faults struct {
	Delay    Duration `json:"delay"`
	DropRate float64  `json:"drop_rate"`
	Block    []string `json:"block"`
}

// Duration is a time.Duration written as "50ms" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("delay: want a duration such as \"50ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Limits of ParseFaults.
const (
	maxFaultDelay = time.Minute
	maxFaultBlock = 64
	maxFaultsBody = 8 << 10
)

// ParseFaults decodes and validates a Faults document: a delay within
// [0, 1m], a drop rate within [0, 1], at most 64 IP addresses to block,
// and nothing else.
func ParseFaults(body []byte) (Faults, error) {
	var f Faults
	if len(body) > maxFaultsBody {
		return f, fmt.Errorf("faultnet: faults document over %d bytes", maxFaultsBody)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Faults{}, fmt.Errorf("faultnet: faults document: %w", err)
	}
	if dec.More() {
		return Faults{}, fmt.Errorf("faultnet: faults document: trailing data")
	}
	if d := time.Duration(f.Delay); d < 0 || d > maxFaultDelay {
		return Faults{}, fmt.Errorf("faultnet: delay %v: want 0 to %v", d, maxFaultDelay)
	}
	if !(f.DropRate >= 0 && f.DropRate <= 1) { // also refuses NaN
		return Faults{}, fmt.Errorf("faultnet: drop_rate %v: want 0 to 1", f.DropRate)
	}
	if len(f.Block) > maxFaultBlock {
		return Faults{}, fmt.Errorf("faultnet: %d addresses to block: at most %d", len(f.Block), maxFaultBlock)
	}
	for _, s := range f.Block {
		if _, err := netip.ParseAddr(s); err != nil {
			return Faults{}, fmt.Errorf("faultnet: block %q: want an IP address", s)
		}
	}
	return f, nil
}

// NewLocal returns a Local without faults; drops are drawn from seed.
func NewLocal(seed int64) *Local {
	l := &Local{}
	l.mu.rng = rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	l.mu.block = map[netip.Addr]bool{}
	l.mu.conns = map[*localConn]struct{}{}
	return l
}

// Set replaces the rules (validate them with ParseFaults first; an
// unparsable block address is ignored) and closes the connections with
// peers it blocks.
func (l *Local) Set(f Faults) {
	block := map[netip.Addr]bool{}
	for _, s := range f.Block {
		if a, err := netip.ParseAddr(s); err == nil {
			block[a.Unmap()] = true
		}
	}
	l.mu.Lock()
	l.mu.faults = f
	l.mu.faults.Block = slices.Clone(f.Block)
	l.mu.block = block
	var kill []*localConn
	for c := range l.mu.conns {
		if block[c.peer] {
			kill = append(kill, c)
			l.mu.stats.FaultClosed++
		}
	}
	l.mu.Unlock()
	for _, c := range kill {
		c.Close()
	}
}

// Faults returns the current rules.
func (l *Local) Faults() Faults {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.mu.faults
	f.Block = slices.Clone(f.Block)
	return f
}

// Stats returns a snapshot of the counters.
func (l *Local) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.stats
}

// Dialer wraps dial: dials to a blocked peer fail, and dialed connections
// suffer the rules.
func (l *Local) Dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		l.mu.stats.Dials++
		anyBlock := len(l.mu.block) > 0
		l.mu.Unlock()
		if anyBlock {
			cands, err := candidates(ctx, addr)
			if err != nil {
				return nil, err
			}
			l.mu.Lock()
			for _, ap := range cands {
				if l.mu.block[ap.Addr()] {
					l.mu.stats.RefusedDials++
					l.mu.Unlock()
					return nil, fmt.Errorf("dial %s: %w", addr, ErrUnreachable)
				}
			}
			l.mu.Unlock()
		}
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return l.wrap(raw), nil
	}
}

// Listen wraps ln: accepted connections suffer the rules.
func (l *Local) Listen(ln net.Listener) net.Listener { return &localListener{Listener: ln, l: l} }

type localListener struct {
	net.Listener
	l *Local
}

func (ll *localListener) Accept() (net.Conn, error) {
	c, err := ll.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return ll.l.wrap(c), nil
}

func (l *Local) wrap(raw net.Conn) net.Conn {
	var peer netip.Addr
	if ap, err := netip.ParseAddrPort(raw.RemoteAddr().String()); err == nil {
		peer = ap.Addr().Unmap()
	}
	c := &localConn{Conn: raw, l: l, peer: peer}
	l.mu.Lock()
	l.mu.conns[c] = struct{}{}
	l.mu.Unlock()
	return c
}

type localConn struct {
	net.Conn
	l    *Local
	peer netip.Addr
	once sync.Once
}

func (c *localConn) Write(p []byte) (int, error) {
	l := c.l
	l.mu.Lock()
	var err error
	switch {
	case l.mu.block[c.peer]:
		err = ErrUnreachable
		l.mu.stats.FaultClosed++
	case l.mu.faults.DropRate > 0 && l.mu.rng.Float64() < l.mu.faults.DropRate:
		err = ErrDropped
		l.mu.stats.Drops++
		l.mu.stats.FaultClosed++
	}
	delay := time.Duration(l.mu.faults.Delay)
	if err == nil && delay > 0 {
		l.mu.stats.DelayedWrites++
	}
	l.mu.Unlock()
	if err != nil {
		c.Close()
		return 0, err
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	return c.Conn.Write(p)
}

func (c *localConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.mu.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
