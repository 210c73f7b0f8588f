package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/internal/faultnet"
)

// muxTestTimeout bounds every wait in the mux tests; reaching it is a failure.
const muxTestTimeout = 10 * time.Second

// newTestMux starts a Mux on 127.0.0.1:0 (unless cfg has a listener) and
// closes it on cleanup.
func newTestMux(t *testing.T, cfg MuxConfig) *Mux {
	t.Helper()
	if cfg.Listener == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = ln
	}
	m, err := NewMux(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newTestLayer(t *testing.T, m *Mux, group uint32) *Layer {
	t.Helper()
	l, err := m.Layer(group, 0)
	if err != nil {
		t.Fatalf("Layer(%d): %v", group, err)
	}
	return l
}

// muxEventually polls cond until it holds, failing after muxTestTimeout.
func muxEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(muxTestTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// muxAccept waits for l.Accept, failing after muxTestTimeout.
func muxAccept(t *testing.T, l *Layer) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Accept on group %d: %v", l.group, r.err)
		}
		t.Cleanup(func() { _ = r.c.Close() })
		return r.c
	case <-time.After(muxTestTimeout):
		t.Fatalf("Accept on group %d: nothing arrived", l.group)
		return nil
	}
}

// muxWaitClosed reads c until the peer closes it, failing on timeout.
func muxWaitClosed(t *testing.T, name string, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(muxTestTimeout))
	_, err := io.Copy(io.Discard, c) // nil on EOF, an error on a reset
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s connection %s was not closed by the mux", name, c.LocalAddr())
	}
}

// goroutinesIn counts the goroutines whose stack mentions any of funcs.
func goroutinesIn(funcs ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if slices.ContainsFunc(funcs, func(f string) bool { return strings.Contains(g, f) }) {
			count++
		}
	}
	return count
}

// muxFuncs name the code a leaked Mux goroutine would be in.
var muxFuncs = []string{"transport.(*Mux).", "transport.(*Layer)."}

// muxLogBuffer collects log output from concurrent goroutines.
type muxLogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *muxLogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *muxLogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMuxRoundTrip(t *testing.T) {
	a, b := newTestMux(t, MuxConfig{}), newTestMux(t, MuxConfig{})
	groups := []uint32{1, 7, metaGroup}
	la, lb := map[uint32]*Layer{}, map[uint32]*Layer{}
	for _, g := range groups {
		la[g], lb[g] = newTestLayer(t, a, g), newTestLayer(t, b, g)
	}
	if got := la[7].Addr(); got.String() != a.Addr().String() || got.Network() != "tcp" {
		t.Fatalf("Layer.Addr = %s/%s, want tcp/%s", got.Network(), got, a.Addr())
	}

	for _, g := range groups {
		c, err := la[g].Dial(raft.ServerAddress(b.Addr().String()), time.Second)
		if err != nil {
			t.Fatalf("dial group %d: %v", g, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ping := fmt.Sprintf("ping group %d", g)
		if _, err := c.Write([]byte(ping)); err != nil {
			t.Fatal(err)
		}
		acc := muxAccept(t, lb[g])
		buf := make([]byte, len(ping))
		if _, err := io.ReadFull(acc, buf); err != nil || string(buf) != ping {
			t.Fatalf("group %d received %q, %v; want %q", g, buf, err, ping)
		}
		if _, err := acc.Write([]byte("pong")); err != nil {
			t.Fatal(err)
		}
		buf = buf[:4]
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
			t.Fatalf("group %d reply %q, %v; want pong", g, buf, err)
		}
		for _, other := range groups {
			if n := len(lb[other].acceptCh); n != 0 {
				t.Fatalf("after dialing group %d, group %d has %d queued conns", g, other, n)
			}
		}
	}
}

func TestMuxRejectsBadHandshakes(t *testing.T) {
	const handshakeTimeout = 50 * time.Millisecond
	var logs muxLogBuffer
	m := newTestMux(t, MuxConfig{
		HandshakeTimeout: handshakeTimeout,
		Logger:           slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	l := newTestLayer(t, m, 7)

	for _, tc := range []struct {
		name string
		send []byte
		// closeWrite half-closes after send: the header ends early.
		closeWrite bool
		// slow: the mux closes the conn only after the handshake timeout.
		slow bool
		log  string
	}{
		{name: "unknown group", send: appendMuxHeader(nil, 99), log: "unknown group"},
		{name: "bad magic", send: []byte{'X', 'W', 0, 0, 0, 7}, log: "bad magic"},
		{name: "short header", send: []byte{'S', 'W', 0}, closeWrite: true, log: "EOF"},
		{name: "slow header", send: []byte{'S', 'W'}, slow: true, log: "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := net.Dial("tcp", m.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.closeWrite {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(muxTestTimeout))
			n, err := c.Read(make([]byte, 1))
			if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read on a rejected conn: n=%d err=%v; want the mux to close it", n, err)
			}
			if elapsed := time.Since(start); tc.slow && elapsed < handshakeTimeout {
				t.Fatalf("slow header closed after %s, before the %s handshake timeout", elapsed, handshakeTimeout)
			}
			muxEventually(t, "the rejection is logged", func() bool {
				return strings.Contains(logs.String(), tc.log)
			})
			if n := len(l.acceptCh); n != 0 {
				t.Fatalf("rejected conn reached group 7's queue (%d queued)", n)
			}
		})
	}
	if !strings.Contains(logs.String(), "level=DEBUG") || strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("rejections should log at debug level only:\n%s", logs.String())
	}
}

func TestMuxLayerRegistration(t *testing.T) {
	a, b := newTestMux(t, MuxConfig{}), newTestMux(t, MuxConfig{})
	first := newTestLayer(t, b, 7)
	if _, err := b.Layer(7, 0); !errors.Is(err, ErrGroupRegistered) {
		t.Fatalf("second Layer(7): %v, want ErrGroupRegistered", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("second Layer.Close: %v", err)
	}
	second := newTestLayer(t, b, 7) // the group is free again

	c, err := newTestLayer(t, a, 7).Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	muxAccept(t, second)
	if _, err := first.Accept(); !errors.Is(err, ErrLayerClosed) {
		t.Fatalf("Accept on the closed layer: %v, want ErrLayerClosed", err)
	}
}

func TestMuxCloseJoinsEverything(t *testing.T) {
	before := goroutinesIn(muxFuncs...)
	a := newTestMux(t, MuxConfig{})
	m := newTestMux(t, MuxConfig{})
	l1, l2 := newTestLayer(t, m, 1), newTestLayer(t, m, 2)
	a1, a2 := newTestLayer(t, a, 1), newTestLayer(t, a, 2)
	addr := raft.ServerAddress(m.Addr().String())

	// Connections in every state: established, stuck in the handshake,
	// queued for an Accept that never comes, and one more whose handshake
	// goroutine is blocked handing it to the full queue.
	established, err := a1.Dial(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	accepted := muxAccept(t, l1)
	stuck, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	conns := map[string]net.Conn{"established": established, "in handshake": stuck}
	for i := range muxAcceptBacklog + 1 {
		c, err := a2.Dial(addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns[fmt.Sprintf("queued %d", i)] = c
	}
	muxEventually(t, "group 2's queue fills and a handshake blocks", func() bool {
		return len(l2.acceptCh) == muxAcceptBacklog && goroutinesIn("transport.(*Layer).deliver") == 1
	})

	errc := make(chan error, 1)
	go func() {
		_, err := l1.Accept()
		errc <- err
	}()

	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, ErrLayerClosed) {
			t.Fatalf("Accept after Close: %v, want ErrLayerClosed wrapping net.ErrClosed", err)
		}
	case <-time.After(muxTestTimeout):
		t.Fatal("Close did not unblock Accept")
	}
	if _, err := l2.Accept(); !errors.Is(err, ErrLayerClosed) {
		t.Fatalf("Accept with conns queued before Close: %v, want ErrLayerClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := m.Layer(3, 0); !errors.Is(err, ErrMuxClosed) {
		t.Fatalf("Layer after Close: %v, want ErrMuxClosed", err)
	}
	if _, err := l1.Dial(raft.ServerAddress(a.Addr().String()), time.Second); !errors.Is(err, ErrLayerClosed) {
		t.Fatalf("Dial after Close: %v, want ErrLayerClosed", err)
	}
	for name, c := range conns {
		muxWaitClosed(t, name, c)
	}
	if _, err := accepted.Write([]byte("x")); err == nil {
		t.Fatal("an accepted conn is still writable after Close")
	}

	_ = a.Close()
	muxEventually(t, "every mux goroutine exits", func() bool { return goroutinesIn(muxFuncs...) <= before })
}

func TestMuxDialBounded(t *testing.T) {
	dialing := make(chan struct{}, 1)
	hang := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialing <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	m := newTestMux(t, MuxConfig{Dial: hang})
	l := newTestLayer(t, m, 1)

	if _, err := l.Dial("127.0.0.1:1", 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial past its timeout: %v, want context.DeadlineExceeded", err)
	}
	<-dialing

	errc := make(chan error, 1)
	go func() {
		_, err := l.Dial("127.0.0.1:1", 0) // no timeout: only Close ends it
		errc <- err
	}()
	<-dialing
	_ = l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrLayerClosed) {
			t.Fatalf("Dial cut by Close: %v, want ErrLayerClosed", err)
		}
	case <-time.After(muxTestTimeout):
		t.Fatal("Layer.Close did not abandon a pending Dial")
	}
}

func TestMuxConfigValidate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wild, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	for _, tc := range []struct {
		name string
		cfg  MuxConfig
		ok   bool
	}{
		{"defaults", MuxConfig{Listener: ln}, true},
		{"no listener", MuxConfig{}, false},
		{"negative handshake timeout", MuxConfig{Listener: ln, HandshakeTimeout: -time.Second}, false},
		{"unspecified listener", MuxConfig{Listener: wild}, false},
		{"unspecified listener, advertised", MuxConfig{Listener: wild, Advertise: "10.0.0.1:7101"}, true},
		{"advertise without port", MuxConfig{Listener: ln, Advertise: "10.0.0.1"}, false},
		{"advertise port 0", MuxConfig{Listener: ln, Advertise: "10.0.0.1:0"}, false},
	} {
		err := tc.cfg.Validate()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrMuxConfig)) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if _, err := NewMux(MuxConfig{Listener: wild}); !errors.Is(err, ErrMuxConfig) {
		t.Fatalf("NewMux with a bad config: %v, want ErrMuxConfig", err)
	}
}

// FuzzMuxHeader: a plain header ('S' 'W') or one with the group
// incarnation ('S' 'I') parses to what encodes back to the same bytes;
// anything else is a bad magic or a short header, never a panic.
func FuzzMuxHeader(f *testing.F) {
	f.Add([]byte("SW\x00\x00\x00\x07"))
	f.Add([]byte("SW\xff\xff\xff\xff"))
	f.Add([]byte("XW\x00\x00\x00\x07"))
	f.Add([]byte("SI\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x2a"))
	f.Add([]byte("SI\x00\x00\x00\x07\x00\x01"))
	f.Add([]byte{0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var hdr [muxHeaderLen]byte
		n := copy(hdr[:], b)
		b = append(hdr[:], b[n:]...) // the header's first bytes, zero-padded
		h, err := readMuxHeader(bytes.NewReader(b[muxHeaderLen:]), hdr)
		incMagic := hdr[0] == 'S' && hdr[1] == 'I'
		if err != nil {
			if incMagic && len(b) < muxIncHeaderLen {
				return // short
			}
			if !errors.Is(err, errMuxBadMagic) || (hdr[0] == 'S' && hdr[1] == 'W') || incMagic {
				t.Fatalf("parse %x: unexpected error %v", b, err)
			}
			return
		}
		re := appendMuxHeader(nil, h.group)
		if h.hasInc {
			re = appendMuxIncHeader(nil, h.group, h.inc)
		}
		if h.hasInc != incMagic || len(b) < len(re) || !bytes.Equal(re, b[:len(re)]) {
			t.Fatalf("parse %x = %+v, which encodes as %x", b, h, re)
		}
	})
}

// muxTestFSM records applied commands. Raft calls Apply, Snapshot and
// Restore from one goroutine; entries is read by the test concurrently.
type muxTestFSM struct {
	mu      sync.Mutex
	entries []string
}

var _ raft.FSM = (*muxTestFSM)(nil)

func (f *muxTestFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return nil
}

func (f *muxTestFSM) Snapshot() (raft.FSMSnapshot, error) {
	return muxTestSnapshot(f.applied()), nil
}

func (f *muxTestFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	return nil
}

func (f *muxTestFSM) applied() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type muxTestSnapshot []string

func (s muxTestSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (muxTestSnapshot) Release() {}

// muxRaftNode is one in-memory Raft replica over a mux Layer.
type muxRaftNode struct {
	id    raft.ServerID
	r     *raft.Raft
	trans *raft.NetworkTransport
	fsm   *muxTestFSM
}

// startMuxRaftGroup starts one replica per layer (node i is "n<i+1>"),
// bootstraps them as one group, and shuts them down on cleanup.
func startMuxRaftGroup(t *testing.T, layers []*Layer) []*muxRaftNode {
	t.Helper()
	nodes := make([]*muxRaftNode, len(layers))
	var servers []raft.Server
	for i, l := range layers {
		nodes[i] = &muxRaftNode{
			id:    raft.ServerID(fmt.Sprintf("n%d", i+1)),
			trans: raft.NewNetworkTransport(l, 3, time.Second, io.Discard),
			fsm:   &muxTestFSM{},
		}
		servers = append(servers, raft.Server{ID: nodes[i].id, Address: nodes[i].trans.LocalAddr()})
	}
	for _, n := range nodes {
		conf := raft.DefaultConfig()
		conf.LocalID = n.id
		conf.HeartbeatTimeout = 150 * time.Millisecond
		conf.ElectionTimeout = 150 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.LogOutput = io.Discard
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, n.fsm, store, store, raft.NewInmemSnapshotStore(), n.trans)
		if err != nil {
			t.Fatalf("raft %s: %v", n.id, err)
		}
		n.r = r
		t.Cleanup(func() { // before the muxes close: cleanups run last-in first-out
			if err := r.Shutdown().Error(); err != nil {
				t.Errorf("shutdown %s: %v", n.id, err)
			}
			_ = n.trans.Close()
		})
	}
	if err := nodes[0].r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	return nodes
}

// muxWaitLeader waits until a node other than except is leader.
func muxWaitLeader(t *testing.T, nodes []*muxRaftNode, except *muxRaftNode) *muxRaftNode {
	t.Helper()
	var leader *muxRaftNode
	muxEventually(t, "a leader is elected", func() bool {
		for _, n := range nodes {
			if n != except && n.r.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

// muxWaitApplied waits until every node's FSM holds exactly want.
func muxWaitApplied(t *testing.T, nodes []*muxRaftNode, want []string) {
	t.Helper()
	muxEventually(t, fmt.Sprintf("every FSM applies %q", want), func() bool {
		for _, n := range nodes {
			if !slices.Equal(n.fsm.applied(), want) {
				return false
			}
		}
		return true
	})
}

func muxApply(t *testing.T, leader *muxRaftNode, data string) {
	t.Helper()
	if err := leader.r.Apply([]byte(data), muxTestTimeout).Error(); err != nil {
		t.Fatalf("apply %q on %s: %v", data, leader.id, err)
	}
}

// TestMuxRaftGroups runs two 3-node Raft groups over three muxes, each
// node's groups sharing its one port.
func TestMuxRaftGroups(t *testing.T) {
	goroutinesBefore := goroutinesIn(append(muxFuncs, "raft.(*NetworkTransport).")...)
	var muxes []*Mux
	for range 3 {
		muxes = append(muxes, newTestMux(t, MuxConfig{}))
	}
	groups := map[uint32][]*muxRaftNode{}
	for _, g := range []uint32{1, metaGroup} {
		var layers []*Layer
		for _, m := range muxes {
			layers = append(layers, newTestLayer(t, m, g))
		}
		groups[g] = startMuxRaftGroup(t, layers)
	}
	for g, nodes := range groups {
		leader := muxWaitLeader(t, nodes, nil)
		var want []string
		for i := range 5 {
			want = append(want, fmt.Sprintf("group %d entry %d", g, i))
			muxApply(t, leader, want[i])
		}
		muxWaitApplied(t, nodes, want)
	}

	// Shut down in order: replicas, transports (closing their layers), muxes.
	for _, nodes := range groups {
		for _, n := range nodes {
			if err := n.r.Shutdown().Error(); err != nil {
				t.Fatal(err)
			}
			if err := n.trans.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range muxes {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	muxEventually(t, "mux and transport goroutines exit", func() bool {
		return goroutinesIn(append(muxFuncs, "raft.(*NetworkTransport).")...) <= goroutinesBefore
	})
}

// TestMuxRaftFailover runs a group through faultnet: isolating the leader
// elects another, and after healing the old leader catches up.
func TestMuxRaftFailover(t *testing.T) {
	fn := faultnet.New(1)
	var layers []*Layer
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1) // the replica ids
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := newTestMux(t, MuxConfig{Listener: fn.Listen(name, raw), Dial: fn.Dialer(name)})
		layers = append(layers, newTestLayer(t, m, 5))
	}
	nodes := startMuxRaftGroup(t, layers)
	old := muxWaitLeader(t, nodes, nil)
	muxApply(t, old, "before")
	muxWaitApplied(t, nodes, []string{"before"})

	fn.Isolate(string(old.id))
	leader := muxWaitLeader(t, nodes, old)
	muxApply(t, leader, "during")
	if got := old.fsm.applied(); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("isolated %s applied %q", old.id, got)
	}

	fn.Heal()
	muxWaitApplied(t, nodes, []string{"before", "during"})
	if st := fn.Stats(); st.RefusedDials == 0 || st.FaultClosed == 0 {
		t.Fatalf("isolation left no trace in the stats: %+v", st)
	}
}
