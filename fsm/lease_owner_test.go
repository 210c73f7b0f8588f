package fsm

import (
	"errors"
	"reflect"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

func ownedGrantCmd(rk, owner string, nonce uint64, maxKeys int64) *Command {
	return &Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: []byte(rk), TTLMs: 5000, Owner: owner, Nonce: nonce, MaxKeys: maxKeys}, Time: 100}
}

// TestLeaseOwnerAndNonce: a grant of VersionHardening records its owner
// and key bound and takes its id from the nonce; a nonce that makes the id
// of a live lease is refused, nothing written; a grant of the earlier
// versions still takes the slot's next sequence number, without owner.
func TestLeaseOwnerAndNonce(t *testing.T) {
	r := newReplica(t, 1, nil)
	slot := byte(shard.SlotOf([]byte("alice")))
	legacy := r.must(grantCmd("alice", 5000)).LeaseID
	if legacy != keys.LeaseIDOf(slot, 1) {
		t.Fatalf("legacy grant: id %016x", legacy)
	}
	const nonce = 0x00a1b2c3d4e5f607
	id := r.must(ownedGrantCmd("alice", "token:0123456789abcdef", nonce, 3)).LeaseID
	if id != keys.LeaseIDOf(slot, nonce) {
		t.Fatalf("owned grant: id %016x, want slot %d nonce %x", id, slot, nonce)
	}
	rec, err := r.f.Lease(id)
	if err != nil || rec.Owner != "token:0123456789abcdef" || rec.MaxKeys != 3 || rec.Keys != 0 || string(rec.RoutingKey) != "alice" {
		t.Fatalf("record %+v, %v", rec, err)
	}
	if rec, err := r.f.Lease(legacy); err != nil || rec.Owner != "" || rec.MaxKeys != 0 {
		t.Fatalf("legacy record %+v, %v", rec, err)
	}
	before := rawDump(t, r.f)
	if res := r.apply(ownedGrantCmd("alice", "token:ffffffffffffffff", nonce, 3)); !errors.Is(res.Err, ErrLeaseIDTaken) {
		t.Fatalf("grant of a taken id: %+v", res)
	}
	if d := diffKVs(before, rawDump(t, r.f)); d != "" {
		t.Fatalf("refused grant wrote: %s", d)
	}
	// The next legacy grant still follows the slot's sequence.
	if next := r.must(grantCmd("alice", 5000)).LeaseID; next != keys.LeaseIDOf(slot, 2) {
		t.Fatalf("legacy grant after an owned one: %016x", next)
	}
}

// TestLeaseRecordLegacyDecode: a record stored before VersionHardening
// (no owner, no bound, no count) decodes as ownerless and unbounded.
func TestLeaseRecordLegacyDecode(t *testing.T) {
	type v2Record struct { // LeaseRecord as version 2 wrote it
		ID          uint64 `cbor:"id"`
		RoutingKey  []byte `cbor:"rk"`
		TTLMs       int64  `cbor:"ttl_ms"`
		GrantedAt   int64  `cbor:"granted_at"`
		RemainingMs int64  `cbor:"rem,omitempty"`
	}
	id := keys.LeaseIDOf(7, 3)
	b, err := encMode.Marshal(&v2Record{ID: id, RoutingKey: []byte("rk"), TTLMs: 5000, GrantedAt: 9, RemainingMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decodeLease(keys.Lease(id), b)
	want := &LeaseRecord{ID: id, RoutingKey: []byte("rk"), TTLMs: 5000, GrantedAt: 9, RemainingMs: 100}
	if err != nil || !reflect.DeepEqual(rec, want) {
		t.Fatalf("legacy record: %+v, %v", rec, err)
	}
}

// TestLeaseAttachBound: a lease granted with MaxKeys holds at most that
// many keys, whichever command attaches them (a batch, a runner or agent
// heartbeat); a refused attachment changes nothing; detaching, moving and
// deleting keys give room back; the record's count stays the number of
// keys attached. A legacy lease has no bound.
func TestLeaseAttachBound(t *testing.T) {
	r := newReplica(t, 1, nil)
	l := r.must(ownedGrantCmd("alice", "o", 0x11, 2)).LeaseID
	other := r.must(ownedGrantCmd("alice", "o", 0x22, 2)).LeaseID
	count := func(id uint64) int64 {
		t.Helper()
		rec, err := r.f.Lease(id)
		if err != nil {
			t.Fatal(err)
		}
		_, n, err := r.f.LeaseKeys(id, -1)
		if err != nil || int64(n) != rec.Keys {
			t.Fatalf("lease %016x counts %d keys, holds %d (%v)", id, rec.Keys, n, err)
		}
		return rec.Keys
	}
	refused := func(c *Command) {
		t.Helper()
		before := rawDump(t, r.f)
		if res := r.apply(c); !errors.Is(res.Err, ErrLeaseFull) {
			t.Fatalf("attach over the bound: %+v", res)
		}
		if d := diffKVs(before, rawDump(t, r.f)); d != "" {
			t.Fatalf("refused attach wrote: %s", d)
		}
	}
	r.must(batchCmd(nil, kvPut("alice", "a", "1", l), kvPut("alice", "b", "1", l)))
	if count(l) != 2 {
		t.Fatal("two keys attached")
	}
	refused(batchCmd(nil, kvPut("alice", "c", "1", l)))
	// A key attached already is put again under its lease.
	r.must(batchCmd(nil, kvPut("alice", "a", "2", l), kvPut("alice", "a", "3", l)))
	// Detaching gives room: a put without a lease, a delete, a move.
	r.must(batchCmd(nil, kvPut("alice", "a", "4", 0)))
	if count(l) != 1 {
		t.Fatal("a detached")
	}
	r.must(batchCmd(nil, kvPut("alice", "c", "1", l)))
	refused(batchCmd(nil, kvPut("alice", "d", "1", l)))
	r.must(batchCmd(nil, kvDel("alice", "c")))
	r.must(batchCmd(nil, kvPut("alice", "b", "2", other)))
	if count(l) != 0 || count(other) != 1 {
		t.Fatal("after delete and move")
	}
	// A batch of two new keys when the lease holds room for one: refused.
	r.must(batchCmd(nil, kvPut("alice", "e", "1", other)))
	if count(other) != 2 {
		t.Fatal("other full")
	}
	r.must(batchCmd(nil, kvPut("alice", "f", "1", l), kvPut("alice", "g", "1", l)))
	refused(batchCmd(nil, kvPut("alice", "b", "3", l), kvPut("alice", "e", "3", l), kvPut("alice", "h", "1", l)))
	refused(batchCmd(nil, kvPut("alice", "h", "1", other)))

	// Runners and agents count against the same bound.
	pools := r.must(ownedGrantCmd(keys.PoolsRoutingKey, "o", 0x33, 1)).LeaseID
	r.must(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r1", LastSeen: 5}, LeaseID: pools})
	r.must(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r1", LastSeen: 6}, LeaseID: pools})
	refused(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r2", LastSeen: 5}, LeaseID: pools})
	u := uid(1)
	agents := r.must(&Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: u[:], TTLMs: 5000, Nonce: 0x44, MaxKeys: 1}, Time: 1}).LeaseID
	r.must(putAgentCmd(agentRec(1, 1, records.AgentRunning)))
	r.must(putAgentCmd(agentRec(1, 2, records.AgentRunning)))
	r.must(&Command{Op: OpAgentHeartbeat, UserID: &u, AgentID: ptr(aid(1)), Time: 50, LeaseID: agents})
	refused(&Command{Op: OpAgentHeartbeat, UserID: &u, AgentID: ptr(aid(2)), Time: 50, LeaseID: agents})
	count(pools)
	count(agents)

	// A legacy lease is not bounded.
	legacy := r.must(grantCmd("alice", 5000)).LeaseID
	r.must(batchCmd(nil, kvPut("alice", "x", "1", legacy), kvPut("alice", "y", "1", legacy), kvPut("alice", "z", "1", legacy)))
	checkLeaseTables(t, r.f)
	// Ending a full lease deletes its keys as before.
	if res := r.must(revokeCmd(l)); res.Deleted != 2 {
		t.Fatalf("revoke: %+v", res)
	}
	checkLeaseTables(t, r.f)
}

// TestLeaseRevokeDeny: a revoke whose Deny names the kind of a key the
// lease holds is refused with ErrLeaseDenied (a PermissionDenied), and
// changes nothing; one that denies kinds the lease does not hold ends it.
func TestLeaseRevokeDeny(t *testing.T) {
	r := newReplica(t, 1, nil)
	l := r.must(grantCmd("alice", 5000)).LeaseID
	r.must(batchCmd(nil, kvPut("alice", "a", "1", l)))
	before := rawDump(t, r.f)
	res := r.apply(&Command{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: l, Deny: LeaseKindKV}, Time: 200})
	if !errors.Is(res.Err, ErrLeaseDenied) || !errors.Is(res.Err, ErrPermissionDenied) {
		t.Fatalf("denied revoke: %+v", res)
	}
	if d := diffKVs(before, rawDump(t, r.f)); d != "" {
		t.Fatalf("denied revoke wrote: %s", d)
	}
	if k, err := r.f.LeaseKinds(l); err != nil || k != LeaseKindKV {
		t.Fatalf("LeaseKinds: %b, %v", k, err)
	}
	res = r.must(&Command{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: l, Deny: LeaseKindAgent | LeaseKindRunner}, Time: 200})
	if res.Deleted != 1 || hasKV(t, r.f, "alice", "a") {
		t.Fatalf("revoke: %+v", res)
	}
}

// TestLeaseArgsHardening: the fields of VersionHardening belong to their
// ops and bounds, and make a command need that version.
func TestLeaseArgsHardening(t *testing.T) {
	id := keys.LeaseIDOf(3, 1)
	for _, tc := range []struct {
		c     *Command
		valid bool
	}{
		{ownedGrantCmd("rk", "o", 1, 1), true},
		{ownedGrantCmd("rk", string(make([]byte, MaxLeaseOwner+1)), 1, 1), false},
		{ownedGrantCmd("rk", "o", 1<<56, 1), false}, // no low bits
		{ownedGrantCmd("rk", "o", 1, -1), false},
		{ownedGrantCmd("rk", "o", 1, MaxLeaseKeysBound+1), false},
		{&Command{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: id, Owner: "o"}, Time: 1}, false},
		{&Command{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: id, Deny: 8}, Time: 1}, false},
		{&Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: []byte("rk"), TTLMs: 5000, Deny: 1}, Time: 1}, false},
		{&Command{Op: OpLeaseExpire, Lease: &LeaseArgs{IDs: []uint64{id}, Term: 1, Nonce: 1}, Time: 1}, false},
	} {
		if err := tc.c.Validate(Limits{}); (err == nil) != tc.valid {
			t.Errorf("%s %+v: %v", tc.c.Op, tc.c.Lease, err)
		}
	}
	for _, c := range []*Command{
		ownedGrantCmd("rk", "o", 0, 0),
		ownedGrantCmd("rk", "", 5, 0),
		ownedGrantCmd("rk", "", 0, 5),
		{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: id, Deny: LeaseKindKV}},
	} {
		if got := c.Since(); got != VersionHardening {
			t.Errorf("%s %+v: Since %d, want %d", c.Op, c.Lease, got, VersionHardening)
		}
	}
	if got := revokeCmd(id).Since(); got != VersionLeases {
		t.Errorf("plain revoke: Since %d", got)
	}
}

// FuzzDecodeLeaseRecord: a stored lease record never panics the decoder;
// whatever decodes re-encodes to a record that decodes equal.
func FuzzDecodeLeaseRecord(f *testing.F) {
	id := keys.LeaseIDOf(3, 9)
	f.Add(id, encodeLease(&LeaseRecord{ID: id, RoutingKey: []byte("rk"), TTLMs: 5000, GrantedAt: 1}))
	f.Add(id, encodeLease(&LeaseRecord{ID: id, RoutingKey: []byte("rk"), TTLMs: 5000, GrantedAt: 1, Owner: "token:0123456789abcdef", MaxKeys: 10, Keys: 3}))
	f.Add(id, []byte{0xa0})
	f.Add(uint64(0), []byte{0xff})
	f.Fuzz(func(t *testing.T, id uint64, v []byte) {
		r, err := decodeLease(keys.Lease(id), v)
		if err != nil {
			return
		}
		r2, err := decodeLease(keys.Lease(id), encodeLease(r))
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v vs %+v, %v", r, r2, err)
		}
	})
}
