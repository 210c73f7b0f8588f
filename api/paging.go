package api

import (
	"bytes"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Paged listings (KV Scan, ListAgentsByUser, ListShardAgents,
// ListSessionsByAgent, ListPools, ListBots, ListRunners) share one shape:
// the request carries a limit and a cursor, the response its items and the
// next cursor (KV Scan: start_after and more). A page ends
//
//   - at limit stored items (0 or over Config.MaxScanPage: MaxScanPage);
//   - before its items' encoded size would pass Config.MaxPageBytes less
//     pageEnvelope (room for the cursor and the response's other fields);
//     its first item is always taken, so paging progresses however large
//     one item is;
//   - at the end of the listing: next cursor empty.
//
// A cursor is the Pebble key of the last stored item the page examined
// (taken or skipped by a filter), opaque to callers; the next page starts
// just after it. Storage reads are bounded the same way (fsm.ScanPage), so
// a page never holds much more than MaxPageBytes in memory.

// pageEnvelope is the part of MaxPageBytes kept for a page response's own
// fields (its cursor is one key, at most maxCursorLen bytes).
const pageEnvelope = 1024

// maxCursorLen bounds a listing cursor: a stored key of a listing (the
// longest, bots_by_pool, is under 200 bytes).
const maxCursorLen = 512

// cursorStart returns the first key of the page of the listing under
// prefix that continues after cursor: prefix itself for an empty cursor.
// A cursor outside the listing (not under prefix) or longer than
// maxCursorLen is invalid: the scan never leaves the listing's range.
func cursorStart(prefix, cursor []byte) ([]byte, error) {
	if len(cursor) == 0 {
		return prefix, nil
	}
	if len(cursor) > maxCursorLen || !bytes.HasPrefix(cursor, prefix) {
		return nil, invalid("cursor does not belong to this listing")
	}
	// The first key after cursor is cursor + 0x00.
	return append(bytes.Clone(cursor), 0), nil
}

// pager builds one page of a listing.
type pager struct {
	limit    int // stored items to read
	maxBytes int // encoded bytes of the items
	size     int
	taken    int
	last     []byte // stored key of the last item examined
	full     bool   // stopped before an item that did not fit
}

// newPager returns the pager of a request asking for limit items.
func (s *server) newPager(limit uint32) *pager {
	l := int(limit)
	if l <= 0 || l > s.cfg.MaxScanPage {
		l = s.cfg.MaxScanPage
	}
	return &pager{limit: l, maxBytes: max(s.cfg.MaxPageBytes-pageEnvelope, 1)}
}

// itemSize is the encoded size of m as an element of a repeated field.
func itemSize(m proto.Message) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(m))
}

// take reports whether m, the listing item of stored key, fits the page,
// and counts it if so. Once an item does not fit the page is full: the
// caller stops and answers the items taken so far.
func (p *pager) take(key []byte, m proto.Message) bool {
	n := itemSize(m)
	if p.taken > 0 && p.size+n > p.maxBytes {
		p.full = true
		return false
	}
	p.size += n
	p.taken++
	p.last = key
	return true
}

// skip records that the item of stored key was examined and not listed
// (a filter left it out).
func (p *pager) skip(key []byte) { p.last = key }

// next returns the cursor of the next page: empty when the page ended with
// the listing (more: the scan found keys after the last one read).
func (p *pager) next(more bool) []byte {
	if !p.full && !more {
		return nil
	}
	return p.last
}

// collect lists the stored items of a page: item turns one into its
// listing item, or reports false when a filter leaves it out (the page
// still counts it as examined). It stops where the page is full and
// returns the items and the next page's cursor.
func collect[T proto.Message](pg *pager, kvs []fsm.KV, more bool, item func(fsm.KV) (T, bool, error)) ([]T, []byte, error) {
	var out []T
	for _, kv := range kvs {
		m, ok, err := item(kv)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			pg.skip(kv.Key)
			continue
		}
		if !pg.take(kv.Key, m) {
			break
		}
		out = append(out, m)
	}
	return out, pg.next(more), nil
}

// page reads one page of the listing under prefix from v, continuing after
// cursor, asking for limit items: the pager to fill, the stored items, and
// whether more follow them.
func (s *server) page(v fsm.View, prefix, cursor []byte, limit uint32) (*pager, []fsm.KV, bool, error) {
	start, err := cursorStart(prefix, cursor)
	if err != nil {
		return nil, nil, false, s.statusErr(v.Shard(), err)
	}
	pg := s.newPager(limit)
	kvs, more, err := v.ScanPage(start, keys.PrefixEnd(prefix), pg.limit, pg.maxBytes)
	if err != nil {
		return nil, nil, false, s.statusErr(v.Shard(), err)
	}
	return pg, kvs, more, nil
}
