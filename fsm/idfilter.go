package fsm

import (
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
)

// idFilter answers, without a Pebble read, that a transaction id or a usage
// event id is certainly not recorded: the ledger's idempotency checks,
// which every charge makes twice and which almost always find nothing.
// Under the ledger load those two point reads were a third of the nodes'
// CPU even with Pebble's bloom filters on every table, since each read
// builds an iterator per L0 sublevel before it consults a table's filter
// (docs/performance-log.md, round 15).
//
// It is a chain of Bloom filters over every key of the transactions,
// usage_events and tx_directory tables (a charge also reads its id's
// directory entry when the directory is in its shard): filled by a scan at open, by a restore as it loads
// the snapshot, and by every path that writes those tables (change.flush,
// raw batches, slot ingests). A Bloom filter has no false negatives, so
// "absent" is exact; "maybe" (a false positive, about 0.5 % per segment,
// or a key deleted since) falls back to Pebble. Keys are never removed:
// holding a key the DB no longer has is only a false positive.
//
// Memory grows with the ledger, 1.4 to 2.8 bytes per id (the last segment
// may be half empty); past maxIDFilterKeys ids the filter turns itself off
// (every check reads Pebble, as before) until the next open or restore
// finds fewer. Used by the goroutine that applies only (Open and Restore
// included), like FSM.attached, so it takes no lock.
type idFilter struct {
	segs []*bloom.BloomFilter
	// n counts the keys added to the last segment, total to all.
	n, total uint
	off      bool // too many ids: every answer is "maybe"
}

const (
	idFilterFirstSegment = 1 << 16 // keys; each next segment doubles
	idFilterFalsePos     = 0.005   // per segment
	// maxIDFilterKeys bounds the filter's memory to at most 11 MiB per
	// replica: 2M charges (an event and a transaction each; 1.3M when
	// their directory entries are in the same shard).
	maxIDFilterKeys = 4 << 20
)

// idFilterK is the number of hash functions of every segment (mayHave
// hashes a key once for all of them).
var _, idFilterK = bloom.EstimateParameters(idFilterFirstSegment, idFilterFalsePos)

func isIDKey(key []byte) bool {
	return len(key) > 0 && (key[0] == keys.TableTransactions || key[0] == keys.TableUsageEvents || key[0] == keys.TableTxDirectory)
}

// mayHave reports whether key may be stored; false is certain. Keys of
// other tables always may.
func (f *idFilter) mayHave(key []byte) bool {
	if f == nil || !isIDKey(key) {
		return true
	}
	if f.off || len(f.segs) == 0 {
		return f.off
	}
	// Every segment has the same false positive rate, so the same number
	// of hash functions: hash the key once for all of them.
	locs := bloom.Locations(key, idFilterK)
	for _, s := range f.segs {
		if s.TestLocations(locs) {
			return true
		}
	}
	return false
}

// add records that key may be stored. Keys of other tables are ignored.
func (f *idFilter) add(key []byte) {
	if f == nil || !isIDKey(key) {
		return
	}
	if f.off {
		return
	}
	if f.total >= maxIDFilterKeys {
		f.off, f.segs = true, nil
		return
	}
	// Segment i holds up to idFilterFirstSegment<<i keys at its rate.
	if f.segs == nil || f.n >= uint(idFilterFirstSegment)<<(len(f.segs)-1) {
		m, _ := bloom.EstimateParameters(uint(idFilterFirstSegment)<<len(f.segs), idFilterFalsePos)
		f.segs = append(f.segs, bloom.New(m, idFilterK))
		f.n = 0
	}
	f.segs[len(f.segs)-1].Add(key)
	f.n++
	f.total++
}

// reset empties the filter and turns it on: the caller adds every id the
// DB holds before the next check.
func (f *idFilter) reset() {
	f.segs, f.n, f.total, f.off = nil, 0, 0, false
}

// build resets the filter to the ids r holds.
func (f *idFilter) build(r pebble.Reader) error {
	f.reset()
	for _, t := range []byte{keys.TableTransactions, keys.TableUsageEvents, keys.TableTxDirectory} {
		lo := keys.TablePrefix(t)
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keys.PrefixEnd(lo)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok && !f.off; ok = it.Next() {
			f.add(it.Key())
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}
