package transport

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// prefaceConn is a net.Conn that reads a fixed input and discards writes.
type prefaceConn struct {
	net.Conn
	r *bytes.Reader
}

func (c prefaceConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c prefaceConn) Write(p []byte) (int, error) { return len(p), nil }

// FuzzMuxAuthPreface: whatever a connection sends after its 6-byte header,
// the acceptor's side of the cluster-secret preface refuses it (the proof
// covers a nonce the acceptor picks after reading it) and never panics.
func FuzzMuxAuthPreface(f *testing.F) {
	f.Add([]byte("SA\xff\xff\xff\xff\x02n1" + strings.Repeat("\x00", 16+32)))
	f.Add([]byte("SW\x00\x00\x00\x01"))
	f.Add([]byte("SA\x00\x00\x00\x01\xffshort"))
	f.Add([]byte("SB\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03\x02n1" + strings.Repeat("\x00", 16+32)))
	f.Add([]byte("SB\x00\x00\x00\x01\x00"))
	f.Add([]byte{})
	m := &Mux{secret: []byte(strings.Repeat("s", 32))}
	f.Fuzz(func(t *testing.T, b []byte) {
		var hdr [muxHeaderLen]byte
		n := copy(hdr[:], b)
		_, id, err := m.acceptAuth(prefaceConn{r: bytes.NewReader(b[n:])}, hdr)
		if err == nil {
			t.Fatalf("preface %q accepted as node %q", b, id)
		}
	})
}

// TestMuxAuthHandshake: both sides of the preface agree with one secret
// and both refuse with different ones.
func TestMuxAuthHandshake(t *testing.T) {
	run := func(dialSecret, acceptSecret string) (dialErr, acceptErr error, id string) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		d := &Mux{secret: []byte(dialSecret), localID: "n7"}
		acc := &Mux{secret: []byte(acceptSecret)}
		done := make(chan struct{})
		go func() {
			defer close(done)
			var hdr [muxHeaderLen]byte
			b.SetDeadline(time.Now().Add(5 * time.Second))
			if _, acceptErr = b.Read(hdr[:]); acceptErr == nil {
				_, id, acceptErr = acc.acceptAuth(b, hdr)
			}
			if acceptErr != nil {
				b.Close() // the acceptor closes a refused connection
			}
			// An accepted one stays open: closing it here would race the
			// dialer's last SetDeadline, which net.Pipe fails on a closed
			// pipe (TCP does not).
		}()
		ctx := ctxT(t, 5*time.Second)
		dialErr = d.dialAuth(ctx, a, 42, 0, false)
		if dialErr != nil {
			a.Close() // the dialer closes a refused connection
		}
		<-done
		return dialErr, acceptErr, id
	}
	s1, s2 := strings.Repeat("a", 32), strings.Repeat("b", 32)
	if d, a, id := run(s1, s1); d != nil || a != nil || id != "n7" {
		t.Fatalf("same secret: dial %v, accept %v, id %q", d, a, id)
	}
	if d, a, _ := run(s1, s2); d == nil || !errors.Is(a, errMuxBadAuth) && a == nil {
		t.Fatalf("different secrets: dial %v, accept %v", d, a)
	}
}
