package cluster

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

// FuzzGRPCNodeCred: a credential made for (id, method, time) checks out
// for exactly that id (a valid node id, as identifySecret requires) and
// method; the fuzzed credential text never panics the check; every
// credential round-trips.
func FuzzGRPCNodeCred(f *testing.F) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Unix(1_800_000_000, 0)
	good := grpcNodeCred(secret, "n1", metaStateMethod, now)
	f.Add("n1", metaStateMethod, good)
	f.Add("n2", metaStateMethod, good)
	f.Add("n1", "/x", "1800000000.00")
	f.Add("n1", "/x", "-9223372036854775808.")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, id, method, cred string) {
		checkGRPCNodeCred(secret, id, method, cred, now) // no panic
		if !idPattern.MatchString(id) {
			return
		}
		if ok := checkGRPCNodeCred(secret, id, method, good, now); ok != (id == "n1" && method == metaStateMethod) {
			t.Fatalf("n1's MetaState credential for %q %q: %v", id, method, ok)
		}
		if !checkGRPCNodeCred(secret, id, method, grpcNodeCred(secret, id, method, now), now) {
			t.Fatalf("round trip failed for %q %q", id, method)
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
			b.Close() // the acceptor closes a refused connection
		}()
		ctx := ctxT(t, 5*time.Second)
		dialErr = d.dialAuth(ctx, a, 42)
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

// FuzzAdminSecretAuth: a signed admin request checks out for exactly its
// method, path and query; a fuzzed Authorization value never panics the
// check and is accepted only if it is that signature (up to the scheme's
// case).
func FuzzAdminSecretAuth(f *testing.F) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Unix(1_800_000_000, 0)
	good := AdminSecretAuth(secret, "POST", "/v1/tokens", "", now)
	f.Add("POST", "/v1/tokens", "", good)
	f.Add("GET", "/v1/tokens", "", good)
	f.Add("POST", "/v1/tokens", "a=1", good)
	f.Add("POST", "/v1/tokens", "", "SwarmkvSecret 1800000000.00")
	f.Add("POST", "/v1/tokens", "", "SwarmkvSecret -9223372036854775808.")
	f.Add("POST", "/v1/tokens", "", "Bearer swk_x")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, method, path, query, h string) {
		ok := checkAdminSecretAuth(secret, method, path, query, h, now) // no panic
		if ok {
			_, cred, _ := strings.Cut(h, " ")
			_, want, _ := strings.Cut(AdminSecretAuth(secret, method, path, query, now), " ")
			ts, _, _ := strings.Cut(cred, ".")
			_, wantMAC, _ := strings.Cut(want, ".")
			// The time may differ within the skew; the MAC then differs
			// too, so only the exact time's MAC is comparable.
			if ts == "1800000000" && !strings.EqualFold(cred, "1800000000."+wantMAC) {
				t.Fatalf("%q accepted for %q %q %q", h, method, path, query)
			}
		}
		if got := checkAdminSecretAuth(secret, method, path, query, good, now); got != (method == "POST" && path == "/v1/tokens" && query == "") {
			t.Fatalf("the POST /v1/tokens signature for %q %q %q: %v", method, path, query, got)
		}
		if !checkAdminSecretAuth(secret, method, path, query, AdminSecretAuth(secret, method, path, query, now), now) {
			t.Fatalf("round trip failed for %q %q %q", method, path, query)
		}
	})
}
