package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
)

// Group incarnations on the Raft port. A shard id is reused after its
// group is removed (a merge, an aborted split); the group's incarnation
// (the cluster state's placement Incarnation: the id of the move that made
// the group, 0 for a group made at bootstrap) tells the two groups apart.
// A node restarted from a cluster state older than the reuse reopens the
// dead group's replica until its first sync replaces it; with incarnations
// in the headers that replica can neither reach the new group's replicas
// nor be reached by them, since the acceptor hands a connection only to
// its Layer of the incarnation the header names.
//
// The header with an incarnation (14 bytes; with a cluster secret, the
// 'S' 'B' preface of mux_auth.go carries it instead):
//
//	  0     1     2 .. 5            6 .. 13
//	+-----+-----+-----------------+----------------------------+-------------
//	| 'S' | 'I' | group u32 BE    | incarnation u64 BE         | raft bytes ...
//	| 0x53| 0x49|                 |                            |
//	+-----+-----+-----------------+----------------------------+-------------
//
// Binaries before protocol version 2 know only the plain 'S' 'W' header
// (and 'S' 'A' preface) and close any other, so a node sends incarnations
// only once its cluster runs version 2, and refuses headers without one
// only a grace period later (package cluster decides: MuxConfig.Incarnations).

// muxIncMagic starts a header that carries the group incarnation.
var muxIncMagic = [2]byte{'S', 'I'}

// muxIncHeaderLen is the length of an 'S' 'I' header.
const muxIncHeaderLen = muxHeaderLen + 8

// IncarnationMode is what a Mux does with group incarnations in
// connection headers (MuxConfig.Incarnations).
type IncarnationMode uint8

const (
	// IncarnationAccept dials with the plain header and accepts headers
	// with or without an incarnation (a cluster that runs protocol
	// version 1, whose older binaries know only the plain header). The
	// default.
	IncarnationAccept IncarnationMode = iota
	// IncarnationSend dials with the incarnation and still accepts plain
	// headers (the grace period after version 2, while peers learn it).
	IncarnationSend
	// IncarnationRequire dials with the incarnation and refuses plain
	// headers.
	IncarnationRequire
	// IncarnationRefuse dials with the plain header and refuses headers
	// with an incarnation, as binaries before them do (tests run a node
	// as one).
	IncarnationRefuse
)

// String names the mode.
func (m IncarnationMode) String() string {
	switch m {
	case IncarnationAccept:
		return "accept"
	case IncarnationSend:
		return "send"
	case IncarnationRequire:
		return "require"
	case IncarnationRefuse:
		return "refuse"
	}
	return fmt.Sprintf("IncarnationMode(%d)", uint8(m))
}

// sends reports whether a Layer dials with its incarnation.
func (m IncarnationMode) sends() bool { return m == IncarnationSend || m == IncarnationRequire }

// mode returns the Mux's incarnation mode now.
func (m *Mux) mode() IncarnationMode {
	if m.incarnations == nil {
		return IncarnationAccept
	}
	return m.incarnations()
}

// incarnationError is a connection refused for its header's incarnation:
// another than its group's Layer, none where one is required, or one
// where none is understood.
type incarnationError struct{ msg string }

func (e *incarnationError) Error() string { return "transport: mux: " + e.msg }

var errMuxIncHeader = errors.New("transport: mux header: bad magic (an incarnation header, which this node does not accept)")

// checkIncarnation decides whether accepted header h may go to Layer l,
// counting the refusals.
func (m *Mux) checkIncarnation(h muxHeader, l *Layer) error {
	switch mode := m.mode(); {
	case h.hasInc && mode == IncarnationRefuse:
		m.stats.refusedWithInc.Add(1)
		return errMuxIncHeader
	case !h.hasInc && mode == IncarnationRequire:
		m.stats.refusedPlain.Add(1)
		return &incarnationError{fmt.Sprintf("group %d: a header without the group incarnation, which this node requires", h.group)}
	case h.hasInc && h.inc != l.incarnation:
		m.stats.refusedIncarnation.Add(1)
		return &incarnationError{fmt.Sprintf("group %d: the peer's replica is of incarnation %d, this node's of %d", h.group, h.inc, l.incarnation)}
	}
	return nil
}

// appendMuxIncHeader appends the 'S' 'I' header for group of incarnation
// inc to b.
func appendMuxIncHeader(b []byte, group uint32, inc uint64) []byte {
	b = append(b, muxIncMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, group)
	return binary.BigEndian.AppendUint64(b, inc)
}

// readMuxHeader parses the first 6 bytes of a plain connection's header,
// reading the incarnation from c after an 'S' 'I' start.
func readMuxHeader(c io.Reader, hdr [muxHeaderLen]byte) (muxHeader, error) {
	if hdr[0] == muxIncMagic[0] && hdr[1] == muxIncMagic[1] {
		var inc [8]byte
		if _, err := io.ReadFull(c, inc[:]); err != nil {
			return muxHeader{}, fmt.Errorf("transport: mux header: %w", err)
		}
		return muxHeader{group: binary.BigEndian.Uint32(hdr[2:]), inc: binary.BigEndian.Uint64(inc[:]), hasInc: true}, nil
	}
	group, err := parseMuxHeader(hdr)
	return muxHeader{group: group}, err
}

// MuxStats counts a Mux's connections by header since it started.
type MuxStats struct {
	// DialedPlain and DialedIncarnation are the connections its Layers
	// dialed, by header.
	DialedPlain, DialedIncarnation uint64
	// AcceptedPlain and AcceptedIncarnation are the accepted connections
	// handed to a Layer, by header.
	AcceptedPlain, AcceptedIncarnation uint64
	// RefusedPlain: headers without an incarnation refused
	// (IncarnationRequire); RefusedIncarnation: headers naming another
	// incarnation than the group's Layer; RefusedWithIncarnation: headers
	// with one refused (IncarnationRefuse).
	RefusedPlain, RefusedIncarnation, RefusedWithIncarnation uint64
	// OpenPlain is the connections open now, dialed or accepted, whose
	// header carried no incarnation (none once the node requires them
	// and ClosePlain ran).
	OpenPlain uint64
}

// muxStats are the counters behind MuxStats.
type muxStats struct {
	dialedPlain, dialedInc, acceptedPlain, acceptedInc atomic.Uint64
	refusedPlain, refusedIncarnation, refusedWithInc   atomic.Uint64
}

func (s *muxStats) dialed(withInc bool) {
	if withInc {
		s.dialedInc.Add(1)
	} else {
		s.dialedPlain.Add(1)
	}
}

func (s *muxStats) accepted(withInc bool) {
	if withInc {
		s.acceptedInc.Add(1)
	} else {
		s.acceptedPlain.Add(1)
	}
}

// Stats returns the Mux's connection counts.
func (m *Mux) Stats() MuxStats {
	s := &m.stats
	return MuxStats{
		DialedPlain: s.dialedPlain.Load(), DialedIncarnation: s.dialedInc.Load(),
		AcceptedPlain: s.acceptedPlain.Load(), AcceptedIncarnation: s.acceptedInc.Load(),
		RefusedPlain: s.refusedPlain.Load(), RefusedIncarnation: s.refusedIncarnation.Load(),
		RefusedWithIncarnation: s.refusedWithInc.Load(),
		OpenPlain:              uint64(len(m.plainConns())),
	}
}

// plainConns returns the open connections whose header carried no
// incarnation.
func (m *Mux) plainConns() []net.Conn {
	m.mu.Lock()
	layers := make([]*Layer, 0, len(m.mu.layers))
	for _, l := range m.mu.layers {
		layers = append(layers, l)
	}
	m.mu.Unlock()
	var plain []net.Conn
	for _, l := range layers {
		l.mu.Lock()
		for c := range l.mu.conns {
			if c.plain {
				plain = append(plain, c)
			}
		}
		l.mu.Unlock()
	}
	return plain
}

// ClosePlain closes every open connection, dialed or accepted, whose
// header carried no incarnation, and returns how many it closed. A node
// calls it when it starts to require incarnations, so that no Raft
// connection opened before goes on unchecked: Raft dials again, with the
// incarnation.
func (m *Mux) ClosePlain() int {
	plain := m.plainConns()
	for _, c := range plain {
		_ = c.Close()
	}
	return len(plain)
}
