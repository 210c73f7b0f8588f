package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestMuxIncarnation: with incarnations in the headers, the acceptor
// hands a connection only to its Layer of the same incarnation (a stale
// replica of a dead group whose shard id was reused neither reaches nor is
// reached by the new group); plain headers are accepted until the
// acceptor requires incarnations, then refused; a node that does not know
// incarnation headers (IncarnationRefuse) refuses them; ClosePlain closes
// the connections opened with a plain header. Run with the plain header
// and with the cluster-secret preface, whose MACs cover the incarnation.
func TestMuxIncarnation(t *testing.T) {
	for _, secret := range []string{"", strings.Repeat("s", 32)} {
		name := "plain"
		if secret != "" {
			name = "secret"
		}
		t.Run(name, func(t *testing.T) { testMuxIncarnation(t, []byte(secret)) })
	}
}

func testMuxIncarnation(t *testing.T, secret []byte) {
	const group = 5
	type node struct {
		m    *Mux
		l    *Layer
		mode atomic.Uint32
	}
	newNode := func(id string, inc uint64) *node {
		n := &node{}
		cfg := MuxConfig{Incarnations: func() IncarnationMode { return IncarnationMode(n.mode.Load()) }}
		if secret != nil {
			cfg.Secret, cfg.LocalID = secret, id
		}
		n.m = newTestMux(t, cfg)
		n.l = newTestLayer(t, n.m, group)
		if n.l.Incarnation() != 0 {
			t.Fatal("Layer(group, 0) has another incarnation")
		}
		n.l.Close()
		l, err := n.m.Layer(group, inc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		n.l = l
		return n
	}
	// acc leads the group of incarnation 7 that reused the shard id;
	// fresh is another replica of it, stale a replica of the dead group
	// (incarnation 3).
	acc, fresh, stale := newNode("n1", 7), newNode("n2", 7), newNode("n3", 3)
	setModes := func(m IncarnationMode) {
		for _, n := range []*node{acc, fresh, stale} {
			n.mode.Store(uint32(m))
		}
	}

	// accepted receives what acc's Layer accepts.
	accepted := make(chan net.Conn)
	go func() {
		for {
			a, err := acc.l.Accept()
			if err != nil {
				return // closed at cleanup
			}
			accepted <- a
		}
	}()
	takeAccepted := func() net.Conn {
		t.Helper()
		select {
		case a := <-accepted:
			return a
		case <-time.After(muxTestTimeout):
			t.Fatal("nothing accepted")
			return nil
		}
	}

	// dial dials acc from n and reports whether acc's Layer got the
	// connection (true) or acc closed it (false).
	dial := func(n *node) bool {
		t.Helper()
		c, err := n.l.Dial(raft.ServerAddress(acc.m.Addr().String()), muxTestTimeout)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		closed := make(chan error, 1)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(muxTestTimeout))
			_, err := c.Read(make([]byte, 1))
			closed <- err
		}()
		select {
		case a := <-accepted:
			defer a.Close()
			buf := make([]byte, 4)
			if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("accepted conn read %q, %v", buf, err)
			}
			return true
		case err := <-closed:
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("connection neither accepted nor closed")
			}
			return false
		}
	}
	stats := func(n *node) MuxStats { return n.m.Stats() }

	// A cluster at protocol version 1: plain headers everywhere, no check
	// (what binaries before incarnations did): the stale replica gets in.
	setModes(IncarnationAccept)
	if !dial(stale) || !dial(fresh) {
		t.Fatal("plain headers refused in accept mode")
	}
	if s := stats(acc); s.AcceptedPlain != 2 || s.AcceptedIncarnation != 0 {
		t.Fatalf("accept mode: %+v", s)
	}
	if s := stats(stale); s.DialedPlain != 1 || s.DialedIncarnation != 0 {
		t.Fatalf("accept mode dialer: %+v", s)
	}

	// Version 2, grace period: incarnations sent; the stale replica's is
	// refused, the fresh one's accepted, and a plain header from a node
	// that does not know version 2 yet still accepted.
	setModes(IncarnationSend)
	if dial(stale) {
		t.Fatal("a replica of another incarnation reached the group's Layer")
	}
	if !dial(fresh) {
		t.Fatal("a replica of the same incarnation was refused")
	}
	stale.mode.Store(uint32(IncarnationAccept))
	if !dial(stale) {
		t.Fatal("plain header refused during the grace period")
	}
	s := stats(acc)
	if s.RefusedIncarnation != 1 || s.AcceptedIncarnation != 1 || s.AcceptedPlain != 3 {
		t.Fatalf("send mode: %+v", s)
	}
	if s := stats(fresh); s.DialedIncarnation != 1 {
		t.Fatalf("send mode dialer: %+v", s)
	}

	// Connections opened with a plain header are closed once the node
	// requires incarnations.
	plainConn, err := stale.l.Dial(raft.ServerAddress(acc.m.Addr().String()), muxTestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer plainConn.Close()
	acceptedPlain := takeAccepted()
	defer acceptedPlain.Close()
	if n := acc.m.ClosePlain(); n != 1 {
		t.Fatalf("ClosePlain closed %d connections, want the 1 open plain one", n)
	}
	_ = plainConn.SetReadDeadline(time.Now().Add(muxTestTimeout))
	if _, err := plainConn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("plain connection after ClosePlain: %v, want closed", err)
	}
	if n := stale.m.ClosePlain(); n != 1 { // the dialer's end, still open
		t.Fatalf("dialer's ClosePlain closed %d connections, want 1", n)
	}

	// Required: plain headers refused, the stale replica still refused.
	setModes(IncarnationRequire)
	stale.mode.Store(uint32(IncarnationAccept))
	if dial(stale) {
		t.Fatal("plain header accepted while incarnations are required")
	}
	stale.mode.Store(uint32(IncarnationRequire))
	if dial(stale) {
		t.Fatal("a replica of another incarnation reached the group's Layer")
	}
	if !dial(fresh) {
		t.Fatal("a replica of the same incarnation was refused")
	}
	if s := stats(acc); s.RefusedPlain != 1 || s.RefusedIncarnation != 2 || s.AcceptedIncarnation != 2 {
		t.Fatalf("require mode: %+v", s)
	}

	// A node of a binary before incarnations refuses headers with one.
	acc.mode.Store(uint32(IncarnationRefuse))
	if dial(fresh) {
		t.Fatal("an incarnation header accepted in refuse mode")
	}
	fresh.mode.Store(uint32(IncarnationAccept))
	if !dial(fresh) {
		t.Fatal("a plain header refused in refuse mode")
	}
	if s := stats(acc); s.RefusedWithIncarnation != 1 {
		t.Fatalf("refuse mode: %+v", s)
	}
}

// TestMuxAuthCoversIncarnation: the cluster-secret preface's MACs cover
// the incarnation, so a preface whose incarnation was changed on the way
// is refused; and an 'S' 'B' preface is told from an 'S' 'A' one.
func TestMuxAuthCoversIncarnation(t *testing.T) {
	secret := []byte(strings.Repeat("k", 32))
	run := func(tamper bool) (muxHeader, error, error) {
		a, relayIn := net.Pipe()
		relayOut, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		defer relayIn.Close()
		defer relayOut.Close()
		go func() { // dialer -> acceptor, the incarnation's last byte flipped
			pre := make([]byte, muxIncHeaderLen)
			if _, err := io.ReadFull(relayIn, pre); err != nil {
				return
			}
			if tamper {
				pre[muxIncHeaderLen-1] ^= 1
			}
			relayOut.Write(pre)
			io.Copy(relayOut, relayIn)
			relayOut.Close() // the dialer gave up: the acceptor sees EOF
		}()
		go io.Copy(relayIn, relayOut) // acceptor -> dialer
		d := &Mux{secret: secret, localID: "n7"}
		acc := &Mux{secret: secret}
		var h muxHeader
		var acceptErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			var hdr [muxHeaderLen]byte
			b.SetDeadline(time.Now().Add(muxTestTimeout))
			if _, acceptErr = io.ReadFull(b, hdr[:]); acceptErr == nil {
				h, _, acceptErr = acc.acceptAuth(b, hdr)
			}
			if acceptErr != nil {
				b.Close()
			}
		}()
		dialErr := d.dialAuth(ctxT(t, muxTestTimeout), a, 9, 41, true)
		if dialErr != nil {
			a.Close()
		}
		<-done
		return h, dialErr, acceptErr
	}
	if h, d, a := run(false); d != nil || a != nil || h != (muxHeader{group: 9, inc: 41, hasInc: true}) {
		t.Fatalf("untouched preface: %+v, dial %v, accept %v", h, d, a)
	}
	// The acceptor proves the secret over the incarnation it read, which
	// the dialer refuses; the acceptor never gets the dialer's proof.
	if _, d, a := run(true); !errors.Is(d, errMuxBadAuth) || a == nil {
		t.Fatalf("preface with a changed incarnation: dial %v, accept %v; want both refused", d, a)
	}
	plain := muxAuthMAC(secret, "l", muxHeader{group: 9}, "n7", nil, nil)
	for _, inc := range []uint64{0, 41} {
		if bytes.Equal(plain, muxAuthMAC(secret, "l", muxHeader{group: 9, inc: inc, hasInc: true}, "n7", nil, nil)) {
			t.Fatalf("the MAC of incarnation %d equals the plain preface's", inc)
		}
	}
}
