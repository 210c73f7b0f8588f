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
	return dataIter(f.db, start, end)
}

// dataIter opens an iterator of r over [start, end) minus the meta table;
// it returns a nil iterator for an empty range. An empty end means no
// upper bound.
func dataIter(r pebble.Reader, start, end []byte) (*pebble.Iterator, error) {
	lower, upper, ok := dataBounds(start, end)
	if !ok {
		return nil, nil
	}
	return r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
}

// dataBounds returns the iterator bounds of [start, end) minus the meta
// table (an empty end: no upper bound), ok false for an empty range.
func dataBounds(start, end []byte) (lower, upper []byte, ok bool) {
	lower = start
	if bytes.Compare(lower, dataStart) < 0 {
		lower = dataStart
	}
	if len(end) == 0 {
		return lower, nil, true
	}
	return lower, end, bytes.Compare(end, lower) > 0
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
	if f.restoring.Load() {
		return nil, ErrRestoring
	}
	return scanReverse(f.db, start, end, limit, skip)
}

func scanReverse(r pebble.Reader, start, end []byte, limit, skip int) ([]KV, error) {
	it, err := dataIter(r, start, end)
	if err != nil || it == nil {
		return nil, wrapRead("scan reverse", err)
	}
	out, err := scanReverseIter(it, limit, skip)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = wrapRead("scan reverse", cerr)
	}
	return out, err
}

// scanReverseIter is scanReverse on a bounded iterator it, left open.
func scanReverseIter(it *pebble.Iterator, limit, skip int) ([]KV, error) {
	var out []KV
	ok := it.Last()
	for ; ok && skip > 0; ok = it.Prev() {
		skip--
	}
	for ; ok && (limit <= 0 || len(out) < limit); ok = it.Prev() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, wrapRead("scan reverse", err)
		}
		out = append(out, KV{
			Key:   append([]byte(nil), it.Key()...),
			Value: append(make([]byte, 0, len(v)), v...),
		})
	}
	return out, wrapRead("scan reverse", it.Error())
}

// Count returns the number of keys in [start, end) (an empty end means no
// upper bound; the meta table is never counted) without reading values.
func (f *FSM) Count(start, end []byte) (int, error) {
	if err := f.rlock(); err != nil {
		return 0, err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return 0, ErrRestoring
	}
	return count(f.db, start, end)
}

func count(r pebble.Reader, start, end []byte) (int, error) {
	it, err := dataIter(r, start, end)
	if err != nil || it == nil {
		return 0, wrapRead("count", err)
	}
	n, err := countIter(it)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = wrapRead("count", cerr)
	}
	return n, err
}

// countIter is count on a bounded iterator it, left open.
func countIter(it *pebble.Iterator) (int, error) {
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, wrapRead("count", it.Error())
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
	if f.restoring.Load() {
		return nil, false, ErrRestoring
	}
	return scanPage(f.db, start, end, limit, maxBytes)
}

func scanPage(r pebble.Reader, start, end []byte, limit, maxBytes int) (page []KV, more bool, err error) {
	it, err := dataIter(r, start, end)
	if err != nil || it == nil {
		return nil, false, wrapRead("scan page", err)
	}
	page, more, err = scanPageIter(it, limit, maxBytes)
	if cerr := it.Close(); err == nil && cerr != nil {
		return nil, false, wrapRead("scan page", cerr)
	}
	return page, more, err
}

// scanPageIter is scanPage on a bounded iterator it, left open.
func scanPageIter(it *pebble.Iterator, limit, maxBytes int) (page []KV, more bool, err error) {
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
			return nil, false, wrapRead("scan page", err)
		}
		size += n
		page = append(page, KV{
			Key:   append([]byte(nil), it.Key()...),
			Value: append(make([]byte, 0, len(v)), v...),
		})
	}
	if err := it.Error(); err != nil {
		return nil, false, wrapRead("scan page", err)
	}
	return page, ok, nil
}
