package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

func grantCmd(rk string, ttlMs int64) *Command {
	return &Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: []byte(rk), TTLMs: ttlMs}, Time: 100}
}
func revokeCmd(id uint64) *Command {
	return &Command{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: id}, Time: 200}
}
func expireCmd(term uint64, ids ...uint64) *Command {
	return &Command{Op: OpLeaseExpire, Lease: &LeaseArgs{IDs: ids, Term: term}, Time: 300}
}
func checkpointCmd(term uint64, cps ...LeaseCheckpoint) *Command {
	return &Command{Op: OpLeaseCheckpoint, Lease: &LeaseArgs{Checkpoints: cps, Term: term}}
}
func kvPut(rk, k, v string, lease uint64) Mutation {
	return Mutation{Kind: MutPut, Key: keys.KV([]byte(rk), []byte(k)), Value: []byte(v), Lease: lease}
}
func kvDel(rk, k string) Mutation {
	return Mutation{Kind: MutDelete, Key: keys.KV([]byte(rk), []byte(k))}
}

// hasKV reports whether kv key rk/k is stored.
func hasKV(t testing.TB, f *FSM, rk, k string) bool {
	t.Helper()
	_, err := f.Get(keys.KV([]byte(rk), []byte(k)))
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// checkLeaseTables checks the lease tables' invariants: every attachment
// has its reverse entry and its lease, and the reverse.
func checkLeaseTables(t testing.TB, f *FSM) {
	t.Helper()
	for _, kv := range mustDump(t, f) {
		switch kv.Key[0] {
		case keys.TableLeaseKeys:
			id, k, err := keys.DecodeLeaseKey(kv.Key)
			if err != nil {
				t.Fatal(err)
			}
			v, err := f.Get(keys.KeyLease(k))
			if err != nil || binary.BigEndian.Uint64(v) != id {
				t.Fatalf("attachment of %x to %016x has key_lease %x, %v", k, id, v, err)
			}
			if _, err := f.Get(keys.Lease(id)); err != nil {
				t.Fatalf("attachment to lease %016x, which is gone: %v", id, err)
			}
		case keys.TableKeyLease:
			k, _ := keys.DecodeKeyLease(kv.Key)
			id := binary.BigEndian.Uint64(kv.Value)
			if _, err := f.Get(keys.LeaseKey(id, k)); err != nil {
				t.Fatalf("key_lease %x -> %016x without lease_keys: %v", k, id, err)
			}
			// A write of a key of this slot must look its attachment up.
			if slot, _ := attachSlot(k); f.attached.slots[slot] <= 0 {
				t.Fatalf("slot %d holds attachment %x but counts %d", slot, k, f.attached.slots[slot])
			}
		}
	}
}

func TestLeaseGrant(t *testing.T) {
	r := newReplica(t, 1, nil)
	slot := byte(shard.SlotOf([]byte("alice")))
	var ids []uint64
	for range 3 {
		ids = append(ids, r.must(grantCmd("alice", 5000)).LeaseID)
	}
	for i, id := range ids {
		if id != keys.LeaseIDOf(slot, uint64(i+1)) {
			t.Fatalf("lease %d: id %016x, want slot %d seq %d", i, id, slot, i+1)
		}
	}
	if other := r.must(grantCmd("bob", 5000)).LeaseID; keys.LeaseSlot(other) != byte(shard.SlotOf([]byte("bob"))) || other&keys.MaxLeaseSeq != 1 {
		t.Fatalf("bob's lease %016x", other)
	}
	rec, err := r.f.Lease(ids[1])
	if err != nil || rec.ID != ids[1] || string(rec.RoutingKey) != "alice" || rec.TTLMs != 5000 || rec.GrantedAt != 100 || rec.RemainingMs != 0 {
		t.Fatalf("record %+v, %v", rec, err)
	}
	all, err := r.f.Leases(0, 0, nil)
	if err != nil || len(all) != 4 {
		t.Fatalf("Leases: %d, %v", len(all), err)
	}
	page, err := r.f.Leases(all[0].ID, 2, nil)
	if err != nil || len(page) != 2 || page[0].ID != all[1].ID {
		t.Fatalf("Leases after %016x: %+v %v", all[0].ID, page, err)
	}
	if _, err := r.f.Lease(keys.LeaseIDOf(slot, 99)); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("absent lease: %v", err)
	}
	for _, c := range []*Command{grantCmd("alice", 1999), grantCmd("alice", MaxLeaseTTL.Milliseconds()+1), grantCmd("", 5000)} {
		if err := c.Validate(Limits{}); !errors.Is(err, ErrInvalidCommand) {
			t.Fatalf("grant %+v: %v", c.Lease, err)
		}
	}
	if err := grantCmd("alice", 1999).Validate(Limits{}); !strings.Contains(err.Error(), "ttl 1.999s: want 2s..24h0m0s") {
		t.Fatalf("ttl message: %v", err)
	}
}

func TestLeaseRevokeAndExpireDeleteAttached(t *testing.T) {
	r := newReplica(t, 1, nil)
	l1 := r.must(grantCmd("alice", 5000)).LeaseID
	l2 := r.must(grantCmd("alice", 5000)).LeaseID
	r.must(batchCmd(nil, kvPut("alice", "a", "1", l1), kvPut("alice", "b", "2", l1), kvPut("alice", "c", "3", 0), kvPut("alice", "d", "4", l2)))
	checkLeaseTables(t, r.f)
	if ks, n, err := r.f.LeaseKeys(l1, 0); err != nil || n != 2 || !bytes.Equal(ks[0], keys.KV([]byte("alice"), []byte("a"))) {
		t.Fatalf("LeaseKeys: %x %d %v", ks, n, err)
	}
	res := r.must(revokeCmd(l1))
	if res.Removed != 1 || res.Deleted != 2 {
		t.Fatalf("revoke: %+v", res)
	}
	if hasKV(t, r.f, "alice", "a") || hasKV(t, r.f, "alice", "b") || !hasKV(t, r.f, "alice", "c") || !hasKV(t, r.f, "alice", "d") {
		t.Fatal("revoke deleted the wrong keys")
	}
	if res := r.apply(revokeCmd(l1)); !errors.Is(res.Err, ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v", res.Err)
	}
	// Expire: absent ids are skipped.
	res = r.must(expireCmd(1, l1, l2))
	if res.Removed != 1 || res.Deleted != 1 || hasKV(t, r.f, "alice", "d") {
		t.Fatalf("expire: %+v", res)
	}
	checkLeaseTables(t, r.f)
	for _, kv := range mustDump(t, r.f) {
		if kv.Key[0] == keys.TableLeases || kv.Key[0] == keys.TableLeaseKeys || kv.Key[0] == keys.TableKeyLease {
			t.Fatalf("left in the lease tables: %x", kv.Key)
		}
	}
}

func TestLeaseAttachDetach(t *testing.T) {
	r := newReplica(t, 1, nil)
	l1 := r.must(grantCmd("alice", 5000)).LeaseID
	l2 := r.must(grantCmd("alice", 5000)).LeaseID
	// A put without a lease detaches.
	r.must(batchCmd(nil, kvPut("alice", "a", "1", l1)))
	r.must(batchCmd(nil, kvPut("alice", "a", "2", 0)))
	// A delete detaches: the key put again without a lease survives.
	r.must(batchCmd(nil, kvPut("alice", "b", "1", l1)))
	r.must(batchCmd(nil, kvDel("alice", "b")))
	r.must(batchCmd(nil, kvPut("alice", "b", "again", 0)))
	// A put with another lease moves the key to it.
	r.must(batchCmd(nil, kvPut("alice", "c", "1", l1)))
	r.must(batchCmd(nil, kvPut("alice", "c", "2", l2)))
	// One batch that attaches, then deletes.
	r.must(batchCmd(nil, kvPut("alice", "d", "1", l1), kvDel("alice", "d")))
	checkLeaseTables(t, r.f)
	if _, n, _ := r.f.LeaseKeys(l1, 0); n != 0 {
		t.Fatalf("lease 1 holds %d keys, want 0", n)
	}
	r.must(expireCmd(1, l1))
	if !hasKV(t, r.f, "alice", "a") || !hasKV(t, r.f, "alice", "b") || !hasKV(t, r.f, "alice", "c") {
		t.Fatal("expiry of lease 1 deleted a detached key")
	}
	r.must(expireCmd(1, l2))
	if hasKV(t, r.f, "alice", "c") {
		t.Fatal("expiry of lease 2 left its key")
	}

	// Refusals change nothing.
	l3 := r.must(grantCmd("alice", 5000)).LeaseID
	before := rawDump(t, r.f)
	absent := keys.LeaseIDOf(keys.LeaseSlot(l3), 77)
	if res := r.apply(batchCmd(nil, kvPut("alice", "x", "1", 0), kvPut("alice", "y", "1", absent))); !errors.Is(res.Err, ErrLeaseNotFound) {
		t.Fatalf("attach to an absent lease: %+v", res)
	}
	for _, c := range []*Command{
		batchCmd(nil, kvPut("bob", "x", "1", l3)),                                                       // another slot
		batchCmd(nil, Mutation{Kind: MutDelete, Key: keys.KV([]byte("alice"), []byte("x")), Lease: l3}), // a delete
		batchCmd(nil, Mutation{Kind: MutPut, Key: keys.Runner("r"), Lease: l3}),                         // not by a batch
		batchCmd(nil, Mutation{Kind: MutPut, Key: keys.Lease(l3), Value: []byte("x")}),                  // a lease table
		batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KeyLease(keys.KV([]byte("alice"), []byte("x")))}),
	} {
		if res := r.apply(c); !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("%+v: %v", c.Batch.Mutations[0], res.Err)
		}
	}
	if d := diffKVs(before, rawDump(t, r.f)); d != "" {
		t.Fatalf("refusals wrote: %s", d)
	}
	if res := r.apply(batchCmd(nil, kvPut("bob", "x", "1", l3))); !strings.Contains(res.Err.Error(), "a lease holds keys of its own routing key's slot") {
		t.Fatalf("slot message: %v", res.Err)
	}
}

// TestLeaseExpiryTerm: an expiry or a checkpoint decided in one term does
// nothing when applied in an entry of another term (a lessor that
// decided, lost leadership and leads again must not expire a lease its new
// term renewed).
func TestLeaseExpiryTerm(t *testing.T) {
	r := newReplica(t, 1, nil)
	l := r.must(grantCmd("alice", 5000)).LeaseID
	r.must(batchCmd(nil, kvPut("alice", "a", "1", l)))
	at := func(term uint64, c *Command) *Result {
		t.Helper()
		e := &raft.Log{Index: uint64(len(r.logs) + 1), Term: term, Type: raft.LogCommand, Data: mustEncode(t, c)}
		r.logs = append(r.logs, e)
		return r.f.Apply(e).(*Result)
	}
	before := rawDump(t, r.f)
	for _, c := range []*Command{expireCmd(1, l), checkpointCmd(1, LeaseCheckpoint{ID: l, RemainingMs: 10})} {
		if res := at(3, c); !errors.Is(res.Err, ErrStaleLeaseCommand) {
			t.Fatalf("%s of term 1 in an entry of term 3: %+v", c.Op, res)
		}
	}
	// Inside a coalesced entry too.
	e := &raft.Log{Index: uint64(len(r.logs) + 1), Term: 3, Type: raft.LogCommand, Data: mustEncode(t, multiCmd(expireCmd(2, l)))}
	r.logs = append(r.logs, e)
	if res := r.f.Apply(e).([]*Result); !errors.Is(res[0].Err, ErrStaleLeaseCommand) {
		t.Fatalf("coalesced expiry of term 2 in an entry of term 3: %+v", res[0])
	}
	if d := diffKVs(before, rawDump(t, r.f)); d != "" {
		t.Fatalf("stale lease commands wrote: %s", d)
	}
	if !hasKV(t, r.f, "alice", "a") {
		t.Fatal("a stale expiry deleted the key")
	}
	if res := at(3, expireCmd(3, l)); res.Err != nil || res.Removed != 1 || hasKV(t, r.f, "alice", "a") {
		t.Fatalf("expiry of its own term: %+v", res)
	}
}

func TestLeaseCheckpoint(t *testing.T) {
	r := newReplica(t, 1, nil)
	l1 := r.must(grantCmd("alice", 5000)).LeaseID
	l2 := r.must(grantCmd("alice", 9000)).LeaseID
	absent := keys.LeaseIDOf(keys.LeaseSlot(l1), 50)
	r.must(checkpointCmd(1, LeaseCheckpoint{ID: l1, RemainingMs: 1234}, LeaseCheckpoint{ID: l2, RemainingMs: 99}, LeaseCheckpoint{ID: absent, RemainingMs: 5}))
	for id, want := range map[uint64]int64{l1: 1234, l2: 99} {
		if rec, err := r.f.Lease(id); err != nil || rec.RemainingMs != want {
			t.Fatalf("lease %016x: %+v %v, want remaining %d", id, rec, err, want)
		}
	}
	if _, err := r.f.Lease(absent); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatal("a checkpoint created a lease")
	}
	r.must(checkpointCmd(1, LeaseCheckpoint{ID: l1}))
	if rec, _ := r.f.Lease(l1); rec.RemainingMs != 0 || rec.TTLMs != 5000 {
		t.Fatalf("cleared: %+v", rec)
	}
	for _, c := range []*Command{
		checkpointCmd(1, LeaseCheckpoint{ID: l2}, LeaseCheckpoint{ID: l1}),
		checkpointCmd(0, LeaseCheckpoint{ID: l1}),
		checkpointCmd(1, LeaseCheckpoint{ID: l1, RemainingMs: -1}),
		expireCmd(1, l2, l1),
		expireCmd(1),
		{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: keys.LeaseIDOf(3, 0)}, Time: 1},
		{Op: OpLeaseRevoke, Lease: &LeaseArgs{ID: l1, Term: 1}, Time: 1},
	} {
		if err := c.Validate(Limits{}); !errors.Is(err, ErrInvalidCommand) {
			t.Fatalf("%s %+v: %v", c.Op, c.Lease, err)
		}
	}
}

func TestLeaseRunnersAndAgents(t *testing.T) {
	r := newReplica(t, 1, nil)
	pools := r.must(grantCmd(keys.PoolsRoutingKey, 5000)).LeaseID
	u := uid(1)
	agentLease := r.must(&Command{Op: OpLeaseGrant, Lease: &LeaseArgs{RoutingKey: u[:], TTLMs: 5000}, Time: 1}).LeaseID
	// Runners: one attached, one detached by a heartbeat without a lease.
	r.must(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r1", LastSeen: 5}, LeaseID: pools})
	r.must(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r2", LastSeen: 5}, LeaseID: pools})
	r.must(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r2", LastSeen: 6}})
	// Agents: running, provisioning and stopped ones attached; one
	// deleted after attaching.
	for a, st := range map[int]records.AgentState{1: records.AgentRunning, 2: records.AgentProvisioning, 3: records.AgentStopped, 4: records.AgentRunning} {
		r.must(putAgentCmd(agentRec(1, a, st)))
		r.must(&Command{Op: OpAgentHeartbeat, UserID: &u, AgentID: ptr(aid(a)), Time: 50, LeaseID: agentLease})
	}
	r.must(&Command{Op: OpDeleteAgent, UserID: &u, AgentID: ptr(aid(4))})
	if rec := getAgent(t, r.f, 1, 1); rec.LastHeartbeatAt == nil || *rec.LastHeartbeatAt != 50 || rec.UpdatedAt != 10 {
		t.Fatalf("heartbeat: %+v", rec)
	}
	checkLeaseTables(t, r.f)
	if res := r.apply(&Command{Op: OpAgentHeartbeat, UserID: &u, AgentID: ptr(aid(9)), Time: 50}); !errors.Is(res.Err, ErrNotFound) {
		t.Fatalf("heartbeat of an absent agent: %v", res.Err)
	}
	for _, c := range []*Command{
		{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r3"}, LeaseID: agentLease}, // a lease of another slot
		{Op: OpAgentHeartbeat, UserID: &u, AgentID: ptr(aid(1)), Time: 50, LeaseID: pools},
	} {
		if res := r.apply(c); !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("%s with a lease of another slot: %v", c.Op, res.Err)
		}
	}
	gone := keys.LeaseIDOf(keys.LeaseSlot(pools), 99)
	if res := r.apply(&Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: "r3"}, LeaseID: gone}); !errors.Is(res.Err, ErrLeaseNotFound) {
		t.Fatalf("runner with an absent lease: %v", res.Err)
	}

	res := r.must(expireCmd(1, pools, agentLease))
	if res.Removed != 2 || res.Deleted != 1 {
		t.Fatalf("expire: %+v", res)
	}
	if _, err := r.f.Get(keys.Runner("r1")); !errors.Is(err, ErrNotFound) {
		t.Fatal("runner r1 outlived its lease")
	}
	if _, err := r.f.Get(keys.Runner("r2")); err != nil {
		t.Fatal("detached runner r2 deleted")
	}
	for a, want := range map[int]records.AgentState{1: records.AgentFailed, 2: records.AgentFailed, 3: records.AgentStopped} {
		rec := getAgent(t, r.f, 1, a)
		if rec.Status != want {
			t.Fatalf("agent %d: %s, want %s", a, rec.Status, want)
		}
		if want == records.AgentFailed && rec.UpdatedAt != 300 {
			t.Fatalf("agent %d: updated_at %d, want the expiry's time 300", a, rec.UpdatedAt)
		}
	}
	// The status index moved with it.
	idx := func(st records.AgentState, a int) bool {
		_, err := r.f.Get(keys.AgentByStatus(byte(st), u, aid(a)))
		return err == nil
	}
	if !idx(records.AgentFailed, 1) || idx(records.AgentRunning, 1) || !idx(records.AgentFailed, 2) || idx(records.AgentProvisioning, 2) || !idx(records.AgentStopped, 3) {
		t.Fatal("status index not moved")
	}
	checkLeaseTables(t, r.f)
}

func getAgent(t testing.TB, f *FSM, u, a int) *records.AgentRecord {
	t.Helper()
	v, err := f.Get(keys.Agent(uid(u), aid(a)))
	if err != nil {
		t.Fatal(err)
	}
	var rec records.AgentRecord
	if err := records.Decode(v, &rec); err != nil {
		t.Fatal(err)
	}
	return &rec
}

// genLeaseLog returns a seeded random log of lease commands, kv writes
// with and without leases, runner heartbeats and slot-less noise over a
// few routing keys. Lease ids are predicted: each routing key's slot
// numbers its grants from 1.
func genLeaseLog(rng *rand.Rand, n int) []*raft.Log {
	rks := []string{"alice", "bob", "carol", keys.PoolsRoutingKey}
	granted := map[string][]uint64{}
	seq := map[byte]uint64{}
	lease := func(rk string) uint64 {
		ids := granted[rk]
		if len(ids) == 0 || rng.IntN(8) == 0 {
			slot := byte(shard.SlotOf([]byte(rk)))
			return keys.LeaseIDOf(slot, seq[slot]+1+uint64(rng.IntN(2))) // sometimes not granted yet
		}
		return ids[rng.IntN(len(ids))]
	}
	logs := make([]*raft.Log, 0, n)
	for i := 1; i <= n; i++ {
		term := 1 + uint64(i/50)
		rk := rks[rng.IntN(len(rks))]
		var c *Command
		switch r := rng.IntN(100); {
		case r < 15:
			c = grantCmd(rk, 2000+int64(rng.IntN(5000)))
			slot := byte(shard.SlotOf([]byte(rk)))
			seq[slot]++
			granted[rk] = append(granted[rk], keys.LeaseIDOf(slot, seq[slot]))
		case r < 20:
			c = revokeCmd(lease(rk))
		case r < 28:
			c = expireCmd(term-uint64(rng.IntN(2)), lease(rk))
		case r < 33:
			c = checkpointCmd(term, LeaseCheckpoint{ID: lease(rk), RemainingMs: int64(rng.IntN(3000))})
		case r < 40 && rk == keys.PoolsRoutingKey:
			var id uint64
			if rng.IntN(2) == 0 {
				id = lease(rk)
			}
			c = &Command{Op: OpRunnerHeartbeat, Runner: &records.Runner{RunnerID: fmt.Sprintf("r%d", rng.IntN(4)), LastSeen: int64(i)}, LeaseID: id}
		default:
			var muts []Mutation
			for range 1 + rng.IntN(3) {
				k := fmt.Sprintf("k%d", rng.IntN(6))
				if rng.IntN(4) == 0 {
					muts = append(muts, kvDel(rk, k))
					continue
				}
				var id uint64
				if rng.IntN(2) == 0 {
					id = lease(rk)
				}
				muts = append(muts, kvPut(rk, k, fmt.Sprint(i), id))
			}
			c = batchCmd(nil, muts...)
		}
		data, err := EncodeCommand(c)
		if err != nil {
			panic(err)
		}
		if rng.IntN(10) == 0 { // coalesced with a plain put
			p, _ := EncodeCommand(batchCmd(nil, kvPut(rk, "plain", "x", 0)))
			data, _ = EncodeCommand(&Command{Op: OpMulti, Multi: [][]byte{data, p}})
		}
		logs = append(logs, &raft.Log{Index: uint64(i), Term: term, Type: raft.LogCommand, Data: data})
	}
	return logs
}

// TestLeaseDeterminism: the same lease log applied in different runs, in
// one go or across a restart, and from a snapshot, gives the same state;
// the lease tables' invariants hold throughout; and a replica restarted
// with attachments in its DB (the attached flag read from disk) applies
// the rest of the log as the one that never stopped.
func TestLeaseDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 25))
			logs := genLeaseLog(rng, 600)
			a := newReplica(t, 1, nil)
			for i, l := range logs {
				a.f.Apply(l)
				if i%100 == 99 {
					checkLeaseTables(t, a.f)
				}
			}
			want := rawDump(t, a.f)
			leases := 0
			for _, kv := range want {
				if kv.Key[0] == keys.TableLeaseKeys {
					leases++
				}
			}
			if leases == 0 {
				t.Fatal("degenerate log: no attachment left")
			}
			b := newReplica(t, 1, nil)
			applyRuns(t, b.f, logs, rng)
			if d := diffKVs(rawDump(t, b.f), want); d != "" {
				t.Fatalf("runs differ: %s", d)
			}
			// Restart half way, then the rest.
			c := newReplica(t, 1, nil)
			applyRuns(t, c.f, logs[:300], rng)
			if err := c.f.Close(); err != nil {
				t.Fatal(err)
			}
			cf := mustOpen(t, testConfig(1, c.dir), nil)
			applyRuns(t, cf, logs, rng) // the replayed prefix is skipped
			if d := diffKVs(rawDump(t, cf), want); d != "" {
				t.Fatalf("after a restart: %s", d)
			}
			// A snapshot half way, restored, then the rest.
			d := newReplica(t, 1, nil)
			applyRuns(t, d.f, logs[:300], rng)
			e := newReplica(t, 1, nil)
			if err := e.f.Restore(reader(snapshotBytes(t, d.f))); err != nil {
				t.Fatal(err)
			}
			applyRuns(t, e.f, logs, rng)
			if diff := diffKVs(rawDump(t, e.f), want); diff != "" {
				t.Fatalf("from a snapshot: %s", diff)
			}
		})
	}
}

// TestLeaseNotices: OnLeases hears of every lease an applied run changed,
// and of slot moves and restores (Resync).
func TestLeaseNotices(t *testing.T) {
	var got []LeaseChanges
	cfg := testConfig(1, t.TempDir())
	cfg.OnLeases = func(c LeaseChanges) { got = append(got, c) }
	f := mustOpen(t, cfg, nil)
	r := &replica{t: t, f: f}
	l := r.must(grantCmd("alice", 5000)).LeaseID
	r.must(batchCmd(nil, kvPut("alice", "a", "1", l))) // no news
	r.must(checkpointCmd(1, LeaseCheckpoint{ID: l, RemainingMs: 3}))
	r.must(revokeCmd(l))
	r.must(restrictCmd(shard.AllSlots().Minus(shard.SlotSetOf(0))))
	cfg2 := testConfig(1, t.TempDir())
	cfg2.OnLeases = func(c LeaseChanges) { got = append(got, c) }
	g := mustOpen(t, cfg2, nil)
	if err := g.Restore(reader(snapshotBytes(t, f))); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, c := range got {
		seen = append(seen, fmt.Sprint(len(c.IDs), c.Resync))
	}
	want := "[1 false 1 false 1 false 0 true 0 true]"
	if fmt.Sprint(seen) != want || got[0].IDs[0] != l || got[2].IDs[0] != l {
		t.Fatalf("notices %v (%+v), want %s", seen, got, want)
	}
}

// BenchmarkApplyLeasePuts: kv puts in runs of 64 in a shard without an
// attachment (no lookup), with attachments in another slot only (no
// lookup), with one in the puts' slot (each put looks its key's
// attachment up), and puts that each attach their key to a lease.
func BenchmarkApplyLeasePuts(b *testing.B) {
	value := bytes.Repeat([]byte{0xab}, 256)
	for _, mode := range []string{"none", "other-slot", "same-slot", "each"} {
		b.Run("attached="+mode, func(b *testing.B) {
			r := newReplica(b, 1, nil)
			var lease uint64
			if rk := map[string]string{"other-slot": "elsewhere", "same-slot": "rk", "each": "rk"}[mode]; rk != "" {
				lease = r.must(grantCmd(rk, 60000)).LeaseID
				r.must(batchCmd(nil, kvPut(rk, "other", "v", lease)))
			}
			if mode != "each" {
				lease = 0
			}
			const run = 64
			data := make([][]byte, 4096)
			for i := range data {
				data[i] = mustEncode(b, batchCmd(nil, Mutation{Kind: MutPut, Key: keys.KV([]byte("rk"), []byte(fmt.Sprintf("k%04d", i))), Value: value, Lease: lease}))
			}
			logs := make([]*raft.Log, run)
			for i := range logs {
				logs[i] = &raft.Log{Type: raft.LogCommand}
			}
			index := uint64(len(r.logs))
			b.ReportAllocs()
			b.SetBytes(run * 256)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, l := range logs {
					index++
					l.Index = index
					l.Data = data[(i*run+j)%len(data)]
				}
				for _, res := range r.f.ApplyBatch(logs) {
					if !res.(*Result).Succeeded {
						b.Fatal(res)
					}
				}
			}
		})
	}
}

// TestCommandSince: the lease ops, the agent heartbeat, and a runner
// heartbeat or batch that attaches a lease need VersionLeases; the same
// commands without a lease, and every older op, version 1.
func TestCommandSince(t *testing.T) {
	lease := keys.LeaseIDOf(byte(shard.SlotOf([]byte("rk"))), 1)
	runner := &records.Runner{RunnerID: "r1"}
	leasedPut := batchCmd(nil, kvPut("rk", "k", "v", lease))
	for _, tc := range []struct {
		c    *Command
		want int
	}{
		{grantCmd("rk", 5000), VersionLeases},
		{revokeCmd(lease), VersionLeases},
		{expireCmd(1, lease), VersionLeases},
		{checkpointCmd(1, LeaseCheckpoint{ID: lease}), VersionLeases},
		{&Command{Op: OpAgentHeartbeat, UserID: ptr(uid(1)), AgentID: ptr(aid(1)), Time: 1}, VersionLeases},
		{&Command{Op: OpRunnerHeartbeat, Runner: runner, LeaseID: lease}, VersionLeases},
		{&Command{Op: OpRunnerHeartbeat, Runner: runner}, 1},
		{leasedPut, VersionLeases},
		{batchCmd(nil, kvPut("rk", "k", "v", 0)), 1},
		{multiCmd(batchCmd(nil, kvPut("rk", "k", "v", 0)), leasedPut), VersionLeases},
		{multiCmd(batchCmd(nil, kvPut("rk", "k", "v", 0))), 1},
		{putAgentCmd(agentRec(1, 1, records.AgentRunning)), 1},
		{&Command{Op: OpNoop}, 1},
		{&Command{Op: OpCompactHistory, Time: 1, History: &HistoryRetention{MaxRevisions: 1}}, VersionLeases},
	} {
		if got := tc.c.Since(); got != tc.want {
			t.Errorf("%s: Since %d, want %d", tc.c.Op, got, tc.want)
		}
	}
}
