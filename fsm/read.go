package fsm

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// iter opens an iterator over [start, end) minus the meta table, with f
// read-locked; it returns a nil iterator for an empty range. An empty end
// means no upper bound. The caller closes the iterator and then unlocks.
func (f *FSM) iter(start, end []byte) (*pebble.Iterator, error) {
	if f.restoring.Load() {
		return nil, ErrRestoring
	}
	lower := start
	if bytes.Compare(lower, dataStart) < 0 {
		lower = dataStart
	}
	if len(end) == 0 {
		end = nil
	} else if bytes.Compare(end, lower) <= 0 {
		return nil, nil
	}
	return f.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: end})
}

// ScanReverse returns copies of the keys in [start, end) and their values
// in descending order, skipping the first skip of them and returning at
// most limit (limit <= 0: no limit). An empty end means no upper bound. The
// meta table is never returned. Because a user's transaction ids are ULIDs,
// ScanReverse over keys.TransactionByUserPrefix lists them newest first.
func (f *FSM) ScanReverse(start, end []byte, limit, skip int) ([]KV, error) {
	if err := f.rlock(); err != nil {
		return nil, err
	}
	defer f.mu.RUnlock()
	it, err := f.iter(start, end)
	if err != nil || it == nil {
		return nil, wrapRead("scan reverse", err)
	}
	var out []KV
	ok := it.Last()
	for ; ok && skip > 0; ok = it.Prev() {
		skip--
	}
	for ; ok && (limit <= 0 || len(out) < limit); ok = it.Prev() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, wrapRead("scan reverse", err)
		}
		out = append(out, KV{
			Key:   append([]byte(nil), it.Key()...),
			Value: append(make([]byte, 0, len(v)), v...),
		})
	}
	if err := it.Close(); err != nil {
		return nil, wrapRead("scan reverse", err)
	}
	return out, nil
}

// Count returns the number of keys in [start, end) (an empty end means no
// upper bound; the meta table is never counted) without reading values.
func (f *FSM) Count(start, end []byte) (int, error) {
	if err := f.rlock(); err != nil {
		return 0, err
	}
	defer f.mu.RUnlock()
	it, err := f.iter(start, end)
	if err != nil || it == nil {
		return 0, wrapRead("count", err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, wrapRead("count", err)
	}
	return n, nil
}

// wrapRead prefixes a storage error; ErrRestoring and nil pass unchanged.
func wrapRead(what string, err error) error {
	if err == nil || err == ErrRestoring {
		return err
	}
	return fmt.Errorf("fsm: %s: %w", what, err)
}

// ScanPage returns copies of the keys in [start, end) and their values in
// ascending order, as one page of a listing: at most limit of them (limit
// <= 0: no count limit), and no more than fit in maxBytes counting each
// key's and value's length (maxBytes <= 0: no byte limit). The first item
// is returned whatever its size, so paging always progresses. more reports
// whether a key follows the last one returned in the range. The meta table
// is never returned. Unlike Scan, a page of large values never holds more
// than about maxBytes in memory.
func (f *FSM) ScanPage(start, end []byte, limit, maxBytes int) (page []KV, more bool, err error) {
	if err := f.rlock(); err != nil {
		return nil, false, err
	}
	defer f.mu.RUnlock()
	it, err := f.iter(start, end)
	if err != nil || it == nil {
		return nil, false, wrapRead("scan page", err)
	}
	size := 0
	ok := it.First()
	for ; ok; ok = it.Next() {
		if limit > 0 && len(page) >= limit {
			break
		}
		// Sized before the value is read: a value that would not fit is
		// never copied.
		lv := it.LazyValue()
		n := len(it.Key()) + lv.Len()
		if len(page) > 0 && maxBytes > 0 && size+n > maxBytes {
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, false, wrapRead("scan page", err)
		}
		size += n
		page = append(page, KV{
			Key:   append([]byte(nil), it.Key()...),
			Value: append(make([]byte, 0, len(v)), v...),
		})
	}
	if err := it.Close(); err != nil {
		return nil, false, wrapRead("scan page", err)
	}
	return page, ok, nil
}
