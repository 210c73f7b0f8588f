package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// accountCache holds encoded account records as the applies leave them, so
// that a charge reads its account without a Pebble point read: under the
// ledger load that read was a sixth of the nodes' CPU, since an account
// rewritten by every charge sits in every L0 sublevel and Pebble builds an
// iterator stack per read (docs/performance-log.md, round 15).
//
// It is exact, not a guess: an entry is the value the apply batch holds for
// its key. Changes put what they write (change.flush) and what they read
// from the batch; every other path that writes account keys (raw batches,
// slot ingests and drops, snapshot restores, a storage error) drops entries
// or the whole cache. It is used by the goroutine that applies only, like
// FSM.attached, so it takes no lock.
type accountCache struct {
	m map[string]acctEntry // by account key; absent: ask Pebble
}

// acctEntry is an account's encoded record and, when an op wrote it, the
// record itself, so that the next charge skips decoding it too.
type acctEntry struct {
	v   []byte
	rec *records.Account // nil: decode v
}

// accountCacheEntries bounds the cache: an entry (key, encoded and
// decoded record, map slot) is about 250 bytes, so a full cache costs
// about 4 MiB per replica; when full, an arbitrary entry makes room.
const accountCacheEntries = 16384

func isAccountKey(key []byte) bool { return len(key) > 0 && key[0] == keys.TableAccounts }

// get returns key's cached value. The caller does not modify it.
func (c *accountCache) get(key []byte) ([]byte, bool) {
	if c == nil || !isAccountKey(key) {
		return nil, false
	}
	e, ok := c.m[string(key)]
	return e.v, ok
}

// record returns a copy of key's cached record, if an op wrote it.
func (c *accountCache) record(key []byte) (*records.Account, bool) {
	if c == nil {
		return nil, false
	}
	e, ok := c.m[string(key)]
	if !ok || e.rec == nil {
		return nil, false
	}
	a := *e.rec // plain values: the copy shares nothing
	return &a, true
}

// put records value, and rec if not nil (its decoded form), as key's;
// the caller modifies neither afterwards.
func (c *accountCache) put(key, value []byte, rec *records.Account) {
	if c == nil || !isAccountKey(key) {
		return
	}
	if c.m == nil {
		c.m = make(map[string]acctEntry)
	}
	if _, ok := c.m[string(key)]; !ok && len(c.m) >= accountCacheEntries {
		for k := range c.m { // Go's map order: an arbitrary victim
			delete(c.m, k)
			break
		}
	}
	c.m[string(key)] = acctEntry{v: value, rec: rec}
}

// forget drops key's entry.
func (c *accountCache) forget(key []byte) {
	if c != nil && isAccountKey(key) {
		delete(c.m, string(key))
	}
}

// reset drops every entry.
func (c *accountCache) reset() {
	if c != nil {
		c.m = nil
	}
}
