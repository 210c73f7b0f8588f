package faultnet

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// testTimeout bounds every wait in these tests; reaching it is a failure.
const testTimeout = 5 * time.Second

// node is a test node: a wrapped listener whose accepted connections arrive
// on accepted. Its accept goroutine is joined on cleanup.
type node struct {
	name     string
	ln       net.Listener
	accepted chan net.Conn
}

func newNode(t *testing.T, fn *Network, name string) *node {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nd := &node{name: name, ln: fn.Listen(name, raw), accepted: make(chan net.Conn, 16)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := nd.ln.Accept()
			if err != nil {
				return
			}
			nd.accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = nd.ln.Close()
		wg.Wait()
		close(nd.accepted)
		for c := range nd.accepted {
			_ = c.Close()
		}
	})
	return nd
}

// connect dials to from from and returns both ends.
func connect(t *testing.T, fn *Network, from string, to *node) (dialed, accepted net.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dialed, err := fn.Dialer(from)(ctx, "tcp", to.ln.Addr().String())
	if err != nil {
		t.Fatalf("dial %s→%s: %v", from, to.name, err)
	}
	t.Cleanup(func() { _ = dialed.Close() })
	select {
	case accepted = <-to.accepted:
	case <-ctx.Done():
		t.Fatalf("%s never accepted the dial from %s", to.name, from)
	}
	t.Cleanup(func() { _ = accepted.Close() })
	return dialed, accepted
}

// transfer writes msg on w and checks it arrives intact on r.
func transfer(t *testing.T, w, r net.Conn, msg string) {
	t.Helper()
	if _, err := w.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	_ = r.SetReadDeadline(time.Now().Add(testTimeout))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatalf("read %q: %v", msg, err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}

// waitClosed blocks until a read on c fails, as it does once either end is
// closed; it fails the test if that takes testTimeout.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	var buf [64]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %s→%s still open", c.LocalAddr(), c.RemoteAddr())
		}
		return
	}
}

// eventually polls cond until it holds, failing the test after testTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(testTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func dialErr(fn *Network, from string, to *node) error {
	c, err := fn.Dialer(from)(context.Background(), "tcp", to.ln.Addr().String())
	if err == nil {
		_ = c.Close()
	}
	return err
}

func TestPartitionHeal(t *testing.T) {
	fn := New(1)
	n1, n2, n3 := newNode(t, fn, "n1"), newNode(t, fn, "n2"), newNode(t, fn, "n3")

	d12, a12 := connect(t, fn, "n1", n2)
	d31, a31 := connect(t, fn, "n3", n1) // dialed the other way: cut too
	d23, a23 := connect(t, fn, "n2", n3)
	transfer(t, d12, a12, "hello")
	transfer(t, a12, d12, "back")

	fn.Partition([]string{"n1"}, []string{"n2", "n3"})
	for _, c := range []net.Conn{d12, a12, d31, a31} {
		waitClosed(t, c)
	}
	if _, err := d12.Write([]byte("x")); err == nil {
		t.Fatal("write on a partitioned connection succeeded")
	}
	transfer(t, d23, a23, "same side") // n2↔n3 untouched
	transfer(t, a23, d23, "still")
	for _, dial := range []struct {
		from string
		to   *node
	}{{"n1", n2}, {"n2", n1}, {"n3", n1}} {
		if err := dialErr(fn, dial.from, dial.to); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("dial %s→%s during partition: %v, want ErrUnreachable", dial.from, dial.to.name, err)
		}
	}

	fn.Heal()
	d, a := connect(t, fn, "n1", n2)
	transfer(t, d, a, "healed")
	transfer(t, a, d, "healed too")

	st := fn.Stats()
	if st.FaultClosed != 2 || st.RefusedDials != 3 || st.Dials != 7 {
		t.Fatalf("stats %+v, want FaultClosed 2, RefusedDials 3, Dials 7", st)
	}
}

func TestPartitionUnlistedIsolated(t *testing.T) {
	fn := New(1)
	n1, n2, n3 := newNode(t, fn, "n1"), newNode(t, fn, "n2"), newNode(t, fn, "n3")
	d13, _ := connect(t, fn, "n1", n3)

	fn.Partition([]string{"n1", "n2"})
	waitClosed(t, d13)
	if err := dialErr(fn, "n3", n1); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dial from unlisted n3: %v, want ErrUnreachable", err)
	}
	if err := dialErr(fn, "n2", n3); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dial to unlisted n3: %v, want ErrUnreachable", err)
	}
	d, a := connect(t, fn, "n1", n2)
	transfer(t, d, a, "listed together")
	d, a = connect(t, fn, "n3", n3) // a node always reaches itself
	transfer(t, d, a, "self")
}

func TestIsolate(t *testing.T) {
	fn := New(1)
	n1, n2, n3 := newNode(t, fn, "n1"), newNode(t, fn, "n2"), newNode(t, fn, "n3")
	d12, _ := connect(t, fn, "n1", n2)
	d23, a23 := connect(t, fn, "n2", n3)

	fn.Isolate("n1")
	waitClosed(t, d12)
	transfer(t, d23, a23, "unaffected")
	if err := dialErr(fn, "n3", n1); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dial to isolated n1: %v, want ErrUnreachable", err)
	}
	fn.Heal()
	d, a := connect(t, fn, "n3", n1)
	transfer(t, d, a, "back")
}

func TestBlockOneWay(t *testing.T) {
	fn := New(1)
	n1, n2 := newNode(t, fn, "n1"), newNode(t, fn, "n2")
	d12, a12 := connect(t, fn, "n1", n2)

	fn.Block("n1", "n2")
	waitClosed(t, d12)
	waitClosed(t, a12)
	if err := dialErr(fn, "n1", n2); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("blocked dial: %v, want ErrUnreachable", err)
	}

	// n2 may still dial n1 and send to it, but n1's reply resets the conn.
	d21, a21 := connect(t, fn, "n2", n1)
	transfer(t, d21, a21, "n2 to n1 flows")
	if _, err := a21.Write([]byte("reply")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("n1's write to n2: %v, want ErrUnreachable", err)
	}
	waitClosed(t, d21)

	fn.Heal()
	d, a := connect(t, fn, "n1", n2)
	transfer(t, d, a, "unblocked")
	if st := fn.Stats(); st.FaultClosed != 2 || st.RefusedDials != 1 {
		t.Fatalf("stats %+v, want FaultClosed 2, RefusedDials 1", st)
	}
}

func TestDelay(t *testing.T) {
	const delay = 50 * time.Millisecond
	fn := New(1)
	n2 := newNode(t, fn, "n2")
	d, a := connect(t, fn, "n1", n2)

	fn.SetDelay("n1", "n2", delay)
	start := time.Now()
	transfer(t, d, a, "slow")
	if got := time.Since(start); got < delay {
		t.Fatalf("delayed write took %s, want at least %s", got, delay)
	}
	transfer(t, a, d, "reverse is not delayed")
	if st := fn.Stats(); st.DelayedWrites != 1 {
		t.Fatalf("DelayedWrites %d, want 1", st.DelayedWrites)
	}

	// The accepted end's writes are delayed by a wildcard rule too.
	fn.SetDelay("n1", "n2", 0)
	fn.SetDelay(Any, "n1", delay)
	start = time.Now()
	transfer(t, a, d, "slow reply")
	if got := time.Since(start); got < delay {
		t.Fatalf("delayed reply took %s, want at least %s", got, delay)
	}

	// A write deadline shorter than the delay fails the write.
	fn.SetDelay(Any, "n1", time.Hour)
	_ = a.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := a.Write([]byte("late")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if st := fn.Stats(); st.DelayedWrites != 3 {
		t.Fatalf("DelayedWrites %d, want 3", st.DelayedWrites)
	}
}

func TestDelayedWriteUnblockedByPartition(t *testing.T) {
	fn := New(1)
	_, n2 := newNode(t, fn, "n1"), newNode(t, fn, "n2")
	d, _ := connect(t, fn, "n1", n2)
	fn.SetDelay("n1", "n2", time.Hour)

	errc := make(chan error, 1)
	go func() {
		_, err := d.Write([]byte("stuck"))
		errc <- err
	}()
	// Partition once the write is waiting (DelayedWrites counts it).
	eventually(t, "the write waits on its delay", func() bool { return fn.Stats().DelayedWrites == 1 })
	fn.Partition([]string{"n1"}, []string{"n2"})
	select {
	case err := <-errc:
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("delayed write cut by partition: %v, want ErrUnreachable", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("partition did not unblock a delayed write")
	}
}

func TestDropRateOneKills(t *testing.T) {
	fn := New(1)
	_, n2 := newNode(t, fn, "n1"), newNode(t, fn, "n2")
	d, a := connect(t, fn, "n1", n2)

	fn.SetDropRate("n1", "n2", 1)
	if _, err := d.Write([]byte("lost")); !errors.Is(err, ErrDropped) {
		t.Fatalf("write at drop rate 1: %v, want ErrDropped", err)
	}
	waitClosed(t, a)
	if _, err := a.Write([]byte("reply")); !errors.Is(err, ErrDropped) {
		t.Fatalf("write on the other end of a dropped conn: %v, want ErrDropped", err)
	}
	if st := fn.Stats(); st.Drops != 1 || st.FaultClosed != 1 {
		t.Fatalf("stats %+v, want Drops 1, FaultClosed 1", st)
	}

	fn.SetDropRate("n1", "n2", 0)
	d, a = connect(t, fn, "n1", n2)
	transfer(t, d, a, "no more drops")
}

// writesUntilDrop counts the writes a fresh connection survives at drop rate
// p, for a Network seeded with seed.
func writesUntilDrop(t *testing.T, seed int64, p float64) []int {
	t.Helper()
	fn := New(seed)
	n2 := newNode(t, fn, "n2")
	fn.SetDropRate("n1", Any, p)
	var out []int
	for range 5 {
		d, a := connect(t, fn, "n1", n2)
		writes := 0
		for {
			if _, err := d.Write([]byte("x")); err != nil {
				break
			}
			writes++
		}
		waitClosed(t, a)
		out = append(out, writes)
	}
	return out
}

func TestDropRateSeeded(t *testing.T) {
	a := writesUntilDrop(t, 42, 0.3)
	b := writesUntilDrop(t, 42, 0.3)
	if len(a) != len(b) {
		t.Fatalf("lengths differ: %v vs %v", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different drops: %v vs %v", a, b)
		}
	}
}

func TestUnknownAddr(t *testing.T) {
	fn := New(1)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_, err = fn.Dialer("n1")(context.Background(), "tcp", raw.Addr().String())
	if !errors.Is(err, ErrUnknownAddr) {
		t.Fatalf("dial to an unregistered listener: %v, want ErrUnknownAddr", err)
	}

	// Closing a wrapped listener unregisters its address.
	n2 := newNode(t, fn, "n2")
	addr := n2.ln.Addr().String()
	_ = n2.ln.Close()
	if _, err := fn.Dialer("n1")(context.Background(), "tcp", addr); !errors.Is(err, ErrUnknownAddr) {
		t.Fatalf("dial to a closed listener: %v, want ErrUnknownAddr", err)
	}
}

func TestHostnameAndUnspecifiedListener(t *testing.T) {
	fn := New(1)
	raw, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	nd := &node{name: "n2", ln: fn.Listen("n2", raw), accepted: make(chan net.Conn, 1)}
	defer nd.ln.Close()
	_, port, _ := net.SplitHostPort(raw.Addr().String())
	fn.Isolate("n2")
	_, err = fn.Dialer("n1")(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dial localhost:%s, owned by isolated n2: %v, want ErrUnreachable", port, err)
	}
}

// TestConcurrentFaults exercises the locking under -race: writers on both
// ends of several connections while faults come and go.
func TestConcurrentFaults(t *testing.T) {
	fn := New(7)
	nodes := []*node{newNode(t, fn, "n1"), newNode(t, fn, "n2"), newNode(t, fn, "n3")}
	fn.SetDelay(Any, Any, time.Microsecond)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, from := range nodes {
		to := nodes[(i+1)%len(nodes)]
		d, a := connect(t, fn, from.name, to)
		for _, c := range []net.Conn{d, a} {
			wg.Add(2)
			go func() { // writer: until its connection dies or the test stops
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := c.Write([]byte("payload")); err != nil {
						return
					}
				}
			}()
			go func() { // reader: drains until the connection dies
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}
	fn.SetDropRate("n3", "n1", 0.001)
	fn.Partition([]string{"n1", "n2"}, []string{"n3"})
	fn.Block("n1", "n2")
	fn.Heal()
	fn.Isolate("n2")
	_ = fn.Stats()
	fn.Heal()
	close(stop)
	fn.Isolate("n1") // kills what is left, so the readers return
	fn.Isolate("n2")
	fn.Isolate("n3")
	wg.Wait()
	if st := fn.Stats(); st.FaultClosed != 3 {
		t.Fatalf("stats %+v, want every one of the 3 connections closed by a fault", st)
	}
}
