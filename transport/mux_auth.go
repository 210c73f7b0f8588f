package transport

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/swarmkv/swarmkv/internal/pki"
)

// Authenticated connection preface of the Raft port (MuxConfig.Secret: a
// cluster secret, the node's Config.Auth without TLS). Both sides prove
// they know the secret with a challenge/response over fresh nonces, so a
// recorded preface is worth nothing on another connection:
//
//	dialer -> acceptor  'S' 'A' | group uint32 BE | idLen uint8 | id | nonceD [16]
//	acceptor -> dialer  nonceA [16] | macA [32]
//	dialer -> acceptor  macD [32]
//
//	macA = HMAC-SHA256(secret, "swarmkv raft accept" 0 group 0 id 0 nonceD 0 nonceA)
//	macD = HMAC-SHA256(secret, "swarmkv raft dial"   0 group 0 id 0 nonceD 0 nonceA)
//
// (group as its 4 bytes, nodeMAC's framing.) The preface that carries the
// group's incarnation (mux_inc.go) starts 'S' 'B' and has it after the
// group; its MACs cover it, under labels of their own:
//
//	dialer -> acceptor  'S' 'B' | group uint32 BE | incarnation uint64 BE | idLen uint8 | id | nonceD [16]
//	macA = HMAC-SHA256(secret, "swarmkv raft accept incarnation" 0 group 0 incarnation 0 id 0 nonceD 0 nonceA)
//	macD = HMAC-SHA256(secret, "swarmkv raft dial incarnation"   0 group 0 incarnation 0 id 0 nonceD 0 nonceA)
//
// The acceptor hands the
// connection to the group's Layer only after macD checks out and
// MuxConfig.AllowPeer accepts id; the dialer writes Raft traffic only after
// macA checks out. A connection without the preface ('S' 'W' header, or
// anything else) is closed before any Raft byte is read. The secret itself
// never crosses the wire; the traffic after the preface is not encrypted
// (loopback only: the node's config refuses Auth without TLS elsewhere).

// muxAuthMagic starts an authenticated preface, muxAuthIncMagic one that
// carries the group incarnation.
var (
	muxAuthMagic    = [2]byte{'S', 'A'}
	muxAuthIncMagic = [2]byte{'S', 'B'}
)

const muxNonceLen = 16

var (
	errMuxNoAuth  = errors.New("transport: mux: connection without the cluster-secret preface")
	errMuxBadAuth = errors.New("transport: mux: cluster-secret proof does not match")
)

// peerRefusedError is a connection refused for who its peer is: a failed
// cluster-secret proof, or a node id MuxConfig.AllowPeer refuses.
type peerRefusedError struct{ err error }

func (e *peerRefusedError) Error() string { return "transport: mux: peer refused: " + e.err.Error() }
func (e *peerRefusedError) Unwrap() error { return e.err }

// muxAuthMAC is a preface's MAC (label "swarmkv raft accept" or "swarmkv
// raft dial"); h's incarnation is covered, under the label with
// " incarnation", when it has one.
func muxAuthMAC(secret []byte, label string, h muxHeader, id string, nonceD, nonceA []byte) []byte {
	var g [4]byte
	binary.BigEndian.PutUint32(g[:], h.group)
	if !h.hasInc {
		return nodeMAC(secret, label, string(g[:]), id, string(nonceD), string(nonceA))
	}
	var inc [8]byte
	binary.BigEndian.PutUint64(inc[:], h.inc)
	return nodeMAC(secret, label+" incarnation", string(g[:]), string(inc[:]), id, string(nonceD), string(nonceA))
}

// acceptAuth runs the acceptor's side of the preface after the 6-byte
// header hdr; it returns the header (group, incarnation) and the dialer's
// node id.
func (m *Mux) acceptAuth(c net.Conn, hdr [muxHeaderLen]byte) (muxHeader, string, error) {
	h := muxHeader{group: binary.BigEndian.Uint32(hdr[2:])}
	switch {
	case hdr[0] == muxAuthMagic[0] && hdr[1] == muxAuthMagic[1]:
	case hdr[0] == muxAuthIncMagic[0] && hdr[1] == muxAuthIncMagic[1]:
		var inc [8]byte
		if _, err := io.ReadFull(c, inc[:]); err != nil {
			return muxHeader{}, "", fmt.Errorf("transport: mux preface: %w", err)
		}
		h.inc, h.hasInc = binary.BigEndian.Uint64(inc[:]), true
	default:
		return muxHeader{}, "", &peerRefusedError{errMuxNoAuth}
	}
	var l [1]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return muxHeader{}, "", fmt.Errorf("transport: mux preface: %w", err)
	}
	rest := make([]byte, int(l[0])+muxNonceLen)
	if _, err := io.ReadFull(c, rest); err != nil {
		return muxHeader{}, "", fmt.Errorf("transport: mux preface: %w", err)
	}
	id, nonceD := string(rest[:l[0]]), rest[l[0]:]
	if !ValidNodeID(id) {
		return muxHeader{}, "", &peerRefusedError{fmt.Errorf("bad node id in the preface")}
	}
	nonceA := make([]byte, muxNonceLen)
	if _, err := rand.Read(nonceA); err != nil {
		return muxHeader{}, "", err
	}
	out := append(nonceA, muxAuthMAC(m.secret, "swarmkv raft accept", h, id, nonceD, nonceA)...)
	if _, err := c.Write(out); err != nil {
		return muxHeader{}, "", fmt.Errorf("transport: mux preface: %w", err)
	}
	macD := make([]byte, 32)
	if _, err := io.ReadFull(c, macD); err != nil {
		return muxHeader{}, "", fmt.Errorf("transport: mux preface: %w", err)
	}
	if !hmac.Equal(macD, muxAuthMAC(m.secret, "swarmkv raft dial", h, id, nonceD, nonceA)) {
		return muxHeader{}, "", &peerRefusedError{fmt.Errorf("node %q: %w", id, errMuxBadAuth)}
	}
	return h, id, nil
}

// dialAuth runs the dialer's side of the preface for group on c, within
// ctx's deadline; with withInc the preface carries the group's
// incarnation inc.
func (m *Mux) dialAuth(ctx context.Context, c net.Conn, group uint32, inc uint64, withInc bool) error {
	h := muxHeader{group: group, inc: inc, hasInc: withInc}
	dl, _ := ctx.Deadline() // zero: no deadline
	if err := c.SetDeadline(dl); err != nil {
		return err
	}
	nonceD := make([]byte, muxNonceLen)
	if _, err := rand.Read(nonceD); err != nil {
		return err
	}
	b := make([]byte, 0, muxIncHeaderLen+1+len(m.localID)+muxNonceLen)
	if withInc {
		b = append(b, muxAuthIncMagic[:]...)
		b = binary.BigEndian.AppendUint32(b, group)
		b = binary.BigEndian.AppendUint64(b, inc)
	} else {
		b = append(b, muxAuthMagic[:]...)
		b = binary.BigEndian.AppendUint32(b, group)
	}
	b = append(b, byte(len(m.localID)))
	b = append(append(b, m.localID...), nonceD...)
	if _, err := c.Write(b); err != nil {
		return err
	}
	in := make([]byte, muxNonceLen+32)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("no cluster-secret proof from the peer: %w", err)
	}
	nonceA, macA := in[:muxNonceLen], in[muxNonceLen:]
	if !hmac.Equal(macA, muxAuthMAC(m.secret, "swarmkv raft accept", h, m.localID, nonceD, nonceA)) {
		return fmt.Errorf("the peer's cluster-secret proof does not match: %w", errMuxBadAuth)
	}
	if _, err := c.Write(muxAuthMAC(m.secret, "swarmkv raft dial", h, m.localID, nonceD, nonceA)); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

// checkPeer asks AllowPeer about the node id of an accepted connection: id
// from the preface, or the TLS node certificate's.
func (m *Mux) checkPeer(c net.Conn, id string) error {
	if m.allowPeer == nil {
		return nil
	}
	if tc, ok := c.(*tls.Conn); ok {
		if cs := tc.ConnectionState(); len(cs.PeerCertificates) > 0 {
			id = pki.NodeID(cs.PeerCertificates[0])
		}
	}
	if id == "" {
		return nil // neither TLS nor a secret: no identity to check
	}
	if err := m.allowPeer(id); err != nil {
		return &peerRefusedError{err}
	}
	return nil
}
