package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

const (
	entryVersion   = 1
	flagAppendedAt = 0x01
	flagsKnown     = flagAppendedAt
	tagLog         = 0x01
	tagStable      = 0x02
	logKeyLen      = 4 + 1 + 8
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("raftlog: corrupt log entry")

// entryLen is the encoded size of l (see the layout in doc.go).
func entryLen(l *raft.Log) int {
	n := 3 + uvarintLen(l.Term)
	if !l.AppendedAt.IsZero() {
		n += varintLen(l.AppendedAt.UnixNano())
	}
	n += uvarintLen(uint64(len(l.Data))) + len(l.Data)
	n += uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions)
	return n
}

// encodeEntry writes l into dst, which has room for entryLen(l) bytes, and
// returns the number of bytes written.
func encodeEntry(dst []byte, l *raft.Log) int {
	dst[0] = entryVersion
	dst[1] = byte(l.Type)
	dst[2] = 0
	n := 3
	n += binary.PutUvarint(dst[n:], l.Term)
	if !l.AppendedAt.IsZero() {
		dst[2] |= flagAppendedAt
		n += binary.PutVarint(dst[n:], l.AppendedAt.UnixNano())
	}
	n += binary.PutUvarint(dst[n:], uint64(len(l.Data)))
	n += copy(dst[n:], l.Data)
	n += binary.PutUvarint(dst[n:], uint64(len(l.Extensions)))
	n += copy(dst[n:], l.Extensions)
	return n
}

// appendEntry appends the encoding of l to dst.
func appendEntry(dst []byte, l *raft.Log) []byte {
	n := entryLen(l)
	start := len(dst)
	if cap(dst)-start < n {
		grown := make([]byte, start, start+n)
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+n]
	encodeEntry(dst[start:], l)
	return dst
}

// decodeEntry decodes the value b of the entry at index into l. Data and
// Extensions are copied (one allocation for both); b may be reused after
// the call. Zero-length Data or Extensions decode as nil.
func decodeEntry(index uint64, b []byte, l *raft.Log) error {
	if len(b) < 3 {
		return fmt.Errorf("%w: index %d: %d bytes", ErrCorrupt, index, len(b))
	}
	if b[0] != entryVersion {
		return fmt.Errorf("%w: index %d: version %d", ErrCorrupt, index, b[0])
	}
	typ, flags := b[1], b[2]
	if flags&^flagsKnown != 0 {
		return fmt.Errorf("%w: index %d: flags %#x", ErrCorrupt, index, flags)
	}
	p := b[3:]
	term, ok := uvarint(&p)
	if !ok {
		return fmt.Errorf("%w: index %d: term", ErrCorrupt, index)
	}
	var appended time.Time
	if flags&flagAppendedAt != 0 {
		v, n := binary.Varint(p)
		if n <= 0 || n != varintLen(v) {
			return fmt.Errorf("%w: index %d: appended_at", ErrCorrupt, index)
		}
		p = p[n:]
		appended = time.Unix(0, v)
	}
	dl, ok := uvarint(&p)
	if !ok || dl > uint64(len(p)) {
		return fmt.Errorf("%w: index %d: data length", ErrCorrupt, index)
	}
	data := p[:dl]
	p = p[dl:]
	el, ok := uvarint(&p)
	if !ok || el != uint64(len(p)) {
		return fmt.Errorf("%w: index %d: extensions length", ErrCorrupt, index)
	}
	*l = raft.Log{Index: index, Term: term, Type: raft.LogType(typ), AppendedAt: appended}
	if dl+el > 0 {
		buf := make([]byte, dl+el)
		copy(buf, data)
		copy(buf[dl:], p)
		if dl > 0 {
			l.Data = buf[:dl:dl]
		}
		if el > 0 {
			l.Extensions = buf[dl:]
		}
	}
	return nil
}

// uvarint reads a canonical (shortest-form) uvarint from *p and advances it.
func uvarint(p *[]byte) (uint64, bool) {
	v, n := binary.Uvarint(*p)
	if n <= 0 || n != uvarintLen(v) {
		return 0, false
	}
	*p = (*p)[n:]
	return v, true
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// logKey is the key of group g's entry at index.
func logKey(dst []byte, g uint32, index uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, g)
	dst = append(dst, tagLog)
	return binary.BigEndian.AppendUint64(dst, index)
}

// stableKey is the key of group g's stable-store key k.
func stableKey(g uint32, k []byte) []byte {
	dst := make([]byte, 0, 5+len(k))
	dst = binary.BigEndian.AppendUint32(dst, g)
	dst = append(dst, tagStable)
	return append(dst, k...)
}

// groupBounds returns [lower, upper) of every key of group g with tag, or
// of every key of the group when tag is 0.
func groupBounds(g uint32, tag byte) (lower, upper []byte) {
	lower = binary.BigEndian.AppendUint32(make([]byte, 0, 5), g)
	upper = binary.BigEndian.AppendUint32(make([]byte, 0, 5), g)
	if tag == 0 {
		return append(lower, 0x00), append(upper, 0xff)
	}
	return append(lower, tag), append(upper, tag+1)
}
