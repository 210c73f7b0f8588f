package connlimit

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestIPLimitListener: the N+1th connection from one IP is closed at
// once; closing one gives its slot back.
func TestIPLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan string, 10)
	ln := New(raw, 2, func(ip string) { refused <- ip })
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := dial(), dial()
	s1, s2 := <-accepted, <-accepted
	_ = c2
	c3 := dial()
	if ip := <-refused; ip != "127.0.0.1" {
		t.Fatalf("refused %q", ip)
	}
	c3.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c3.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("third connection: read %v, want it closed", err)
	}
	if got := ln.Open("127.0.0.1"); got != 2 {
		t.Fatalf("open = %d, want 2", got)
	}
	// Closing an accepted connection (twice: counted once) frees a slot.
	s1.Close()
	s1.Close()
	c1.Close()
	if got := ln.Open("127.0.0.1"); got != 1 {
		t.Fatalf("open after close = %d, want 1", got)
	}
	dial()
	select {
	case s := <-accepted:
		s.Close()
	case ip := <-refused:
		t.Fatalf("connection after a close refused (%s)", ip)
	case <-time.After(5 * time.Second):
		t.Fatal("connection after a close not accepted")
	}
	s2.Close()
}

// isReset reports a connection closed by the peer (not a timeout).
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}
