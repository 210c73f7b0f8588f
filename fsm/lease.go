package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// Leases (docs/architecture.md, "Leases"). A lease lives in the slot of
// the routing key it was granted for: its id is slot<<56 | the slot's
// next sequence number (keys.LeaseIDOf), and its record, the keys attached
// to it and the slot's sequence are keys of that slot, so a split or merge
// moves them with the slot's data. The state machine never reads a clock:
// when a lease ends is decided by the shard leader (its lessor, package
// cluster/replica), which proposes OpLeaseExpire; the state machine only
// records leases, their attachments and the remaining TTLs the leader
// checkpoints.
//
// Attachments: a kv put (OpBatch Mutation.Lease), a runner heartbeat and
// an agent heartbeat (Command.LeaseID) attach their key to a lease in the
// key's slot. A key has at most one lease; a kv put without a lease, a
// runner heartbeat without one, a kv delete and an agent delete detach it.
// When a lease ends (OpLeaseRevoke, OpLeaseExpire), in the same command:
// its kv keys and runners are deleted, its running or provisioning agents
// become failed (updated_at = the command's Time, the status index moved),
// and its record and attachments are deleted.
//
// Owners and bounds (protocol version 4, VersionHardening; docs/security.md,
// "Lease owners"): a grant may carry the granting identity (Owner, kept in
// the record: package api refuses another identity's revoke, keep-alive and
// time-to-live), a random Nonce (the id is then slot<<56 | the nonce's low
// 56 bits, not the slot's next sequence number, so ids cannot be guessed)
// and MaxKeys, the most keys the lease may hold (the record then counts
// them: Keys; an attachment over it is refused with ErrLeaseFull). A revoke
// may carry Deny, the kinds of attached keys its caller may not end
// (LeaseKindKV...): a lease holding any of them is not revoked
// (ErrLeaseDenied). Leases granted before (no owner, no bound) keep
// working as they did.
const (
	// OpLeaseGrant (Lease: RoutingKey, TTLMs; Time) creates a lease in the
	// routing key's slot; Result.LeaseID is its id. TTLMs is within
	// MinLeaseTTL..MaxLeaseTTL.
	OpLeaseGrant Op = 60
	// OpLeaseRevoke (Lease: ID; Time) ends a lease now. ErrLeaseNotFound
	// when absent; *MovedError when its slot is not owned.
	OpLeaseRevoke Op = 61
	// OpLeaseExpire (Lease: IDs, Term; Time) ends the leases the leader
	// found expired in term Term. It applies only in an entry of that term
	// (else ErrStaleLeaseCommand, nothing changed): a lessor that decided
	// in an earlier term, and leads again, must not expire a lease its new
	// term renewed. Ids that are absent or of slots not owned are skipped.
	// Result.Removed counts the leases ended, Result.Deleted the keys
	// deleted.
	OpLeaseExpire Op = 62
	// OpLeaseCheckpoint (Lease: Checkpoints, Term) records each lease's
	// remaining TTL as the leader computed it in term Term (RemainingMs 0
	// clears it); a new leader gives a lease its checkpointed remaining
	// TTL instead of a full TTL. Like OpLeaseExpire it applies only in an
	// entry of its term and skips absent and not-owned ids.
	OpLeaseCheckpoint Op = 63
)

// Lease bounds, the same on every replica.
const (
	// MinLeaseTTL and MaxLeaseTTL bound a lease's TTL.
	MinLeaseTTL = 2 * time.Second
	MaxLeaseTTL = 24 * time.Hour
	// MaxLeaseBatch is the most ids an OpLeaseExpire, and the most
	// checkpoints an OpLeaseCheckpoint, may carry.
	MaxLeaseBatch = 1024
	// MaxLeaseKeysBound is the highest LeaseArgs.MaxKeys a grant may carry.
	MaxLeaseKeysBound = 1_000_000
	// MaxLeaseOwner is the longest LeaseArgs.Owner, in bytes.
	MaxLeaseOwner = 256
)

// Kinds of keys attached to a lease (LeaseArgs.Deny, FSM.LeaseKinds).
const (
	LeaseKindKV     uint8 = 1 << iota // kv keys (keyspace kv)
	LeaseKindRunner                   // pool runners (keyspace pools)
	LeaseKindAgent                    // registry agents (keyspace registry)

	leaseKindsAll = LeaseKindKV | LeaseKindRunner | LeaseKindAgent
)

// LeaseKindOf is the kind of an attached key of table t (0: none).
func LeaseKindOf(t byte) uint8 {
	switch t {
	case keys.TableKV:
		return LeaseKindKV
	case keys.TableRunners:
		return LeaseKindRunner
	case keys.TableAgents:
		return LeaseKindAgent
	}
	return 0
}

var (
	// ErrLeaseNotFound is the Result.Err of a revoke of an absent lease and
	// of an attachment to one.
	ErrLeaseNotFound = errors.New("fsm: lease not found")
	// ErrLeaseFull is the Result.Err of an attachment to a lease that
	// holds LeaseRecord.MaxKeys keys already. Nothing was written.
	ErrLeaseFull = errors.New("fsm: lease holds the most keys it may")
	// ErrLeaseDenied (it wraps ErrPermissionDenied) is the Result.Err of a
	// revoke whose Deny names the kind of a key the lease holds. Nothing
	// was written.
	ErrLeaseDenied = fmt.Errorf("%w: lease", ErrPermissionDenied)
	// ErrLeaseIDTaken is the Result.Err of a grant whose Nonce makes the id
	// of a lease that exists: the proposer grants again with another one.
	ErrLeaseIDTaken = errors.New("fsm: lease id taken")
	// ErrStaleLeaseCommand is the Result.Err of an OpLeaseExpire or
	// OpLeaseCheckpoint applied in an entry of another term than the one
	// it was decided in. Nothing was written.
	ErrStaleLeaseCommand = errors.New("fsm: stale lease command")
)

// LeaseArgs is the argument of the lease ops; each op takes the fields its
// doc names.
type LeaseArgs struct {
	ID          uint64            `cbor:"id,omitempty"`
	RoutingKey  []byte            `cbor:"rk,omitempty"`
	TTLMs       int64             `cbor:"ttl_ms,omitempty"`
	IDs         []uint64          `cbor:"ids,omitempty"`
	Checkpoints []LeaseCheckpoint `cbor:"cps,omitempty"`
	Term        uint64            `cbor:"term,omitempty"`
	// Since VersionHardening. Grant: Owner, the granting identity ("":
	// none); Nonce, the random low bits of the id (0: the slot's next
	// sequence number); MaxKeys, the most keys the lease may hold (0: no
	// bound). Revoke: Deny, the kinds (LeaseKind...) the caller may not
	// end.
	Owner   string `cbor:"owner,omitempty"`
	Nonce   uint64 `cbor:"nonce,omitempty"`
	MaxKeys int64  `cbor:"max_keys,omitempty"`
	Deny    uint8  `cbor:"deny,omitempty"`
}

// hardening reports whether a carries a field of VersionHardening.
func (a *LeaseArgs) hardening() bool {
	return a != nil && (a.Owner != "" || a.Nonce != 0 || a.MaxKeys != 0 || a.Deny != 0)
}

// LeaseCheckpoint is one lease's remaining TTL in an OpLeaseCheckpoint.
type LeaseCheckpoint struct {
	ID          uint64 `cbor:"id"`
	RemainingMs int64  `cbor:"rem,omitempty"`
}

// LeaseRecord is a lease as stored under keys.Lease(ID) (CBOR).
type LeaseRecord struct {
	ID         uint64 `cbor:"id"`
	RoutingKey []byte `cbor:"rk"`
	TTLMs      int64  `cbor:"ttl_ms"`
	// GrantedAt is the proposer's clock at the grant, Unix ms.
	GrantedAt int64 `cbor:"granted_at"`
	// RemainingMs is the last checkpointed remaining TTL, 0 when none.
	RemainingMs int64 `cbor:"rem,omitempty"`
	// Owner is the identity that granted the lease ("": none, a lease
	// granted without authentication or before VersionHardening).
	Owner string `cbor:"owner,omitempty"`
	// MaxKeys is the most keys the lease may hold (0: no bound, a lease
	// granted before VersionHardening); Keys counts those it holds, kept
	// only when MaxKeys is set.
	MaxKeys int64 `cbor:"max_keys,omitempty"`
	Keys    int64 `cbor:"keys,omitempty"`
}

// TTL is the lease's granted TTL.
func (r *LeaseRecord) TTL() time.Duration { return time.Duration(r.TTLMs) * time.Millisecond }

// Remaining is the checkpointed remaining TTL, 0 when none.
func (r *LeaseRecord) Remaining() time.Duration {
	return time.Duration(r.RemainingMs) * time.Millisecond
}

// validateTTL checks a lease TTL in ms.
func validateTTL(ms int64) error {
	if ms < MinLeaseTTL.Milliseconds() || ms > MaxLeaseTTL.Milliseconds() {
		return fmt.Errorf("ttl %v: want %v..%v", time.Duration(ms)*time.Millisecond, MinLeaseTTL, MaxLeaseTTL)
	}
	return nil
}

// leaseArgs is the shape of an op's LeaseArgs: the fields it takes.
type leaseArgs struct {
	id, rk, ttl, ids, cps, term bool
	// grant: Owner, Nonce and MaxKeys may be set; revoke: Deny may be.
	grant, revoke bool
	// want names the required fields in the rejection.
	want string
}

// leaseBad is the rejection of LeaseArgs that break a rule of op.
func leaseBad(op Op, format string, args ...any) error {
	return fmt.Errorf("%w: op %s: %s", ErrInvalidCommand, op, fmt.Sprintf(format, args...))
}

// validate checks the fields a carries against op's shape want, and the
// fields every op checks alike (called by the op's spec's validate, which
// then checks the op's own rules).
func (a *LeaseArgs) validate(op Op, want leaseArgs) error {
	bad := func(format string, args ...any) error { return leaseBad(op, format, args...) }
	switch {
	case (a.Owner != "" || a.Nonce != 0 || a.MaxKeys != 0) && !want.grant:
		return bad("owner, nonce and max_keys are arguments of a grant")
	case a.Deny != 0 && !want.revoke:
		return bad("deny is an argument of a revoke")
	case len(a.Owner) > MaxLeaseOwner:
		return bad("owner of %d bytes, limit %d", len(a.Owner), MaxLeaseOwner)
	case !utf8.ValidString(a.Owner):
		return bad("owner is not valid UTF-8") // CBOR text: DecodeCommand would refuse it
	case a.Nonce != 0 && !keys.ValidLeaseID(a.Nonce):
		return bad("nonce %016x has no low 56 bits", a.Nonce)
	case a.MaxKeys < 0 || a.MaxKeys > MaxLeaseKeysBound:
		return bad("max_keys %d: want 0..%d", a.MaxKeys, MaxLeaseKeysBound)
	case a.Deny&^leaseKindsAll != 0:
		return bad("deny %#x: unknown kinds", a.Deny)
	}
	if a.ID != 0 != want.id || len(a.RoutingKey) > 0 != want.rk || a.TTLMs != 0 != want.ttl ||
		len(a.IDs) > 0 != want.ids || len(a.Checkpoints) > 0 != want.cps || a.Term != 0 != want.term {
		return bad("lease arguments: want %s", want.want)
	}
	return nil
}

// validateAttach checks that lease may hold the stored key key: a valid
// id, a table that may be attached, and the key's slot.
func validateAttach(lease uint64, key []byte) error {
	if !keys.ValidLeaseID(lease) {
		return fmt.Errorf("lease id %016x has sequence 0", lease)
	}
	if len(key) == 0 || !keys.Attachable(key[0]) {
		return errors.New("only kv keys, runners and agents can be attached to a lease")
	}
	rk, route, err := keys.RoutingKeyOf(key)
	if err != nil || route != keys.RouteKey {
		return fmt.Errorf("key %x cannot be attached: %v", key, err)
	}
	if slot := shard.SlotOf(rk); byte(slot) != keys.LeaseSlot(lease) {
		return fmt.Errorf("lease %016x is in slot %d, the key in slot %d: a lease holds keys of its own routing key's slot", lease, keys.LeaseSlot(lease), slot)
	}
	return nil
}

// isLeaseTable reports whether t is a table only the lease ops write.
func isLeaseTable(t byte) bool { return t >= keys.TableLeases && t <= keys.TableLeaseSeq }

func encodeLease(r *LeaseRecord) []byte {
	b, err := encMode.Marshal(r)
	if err != nil { // a plain struct: never
		panic(fmt.Sprintf("fsm: encode lease record: %v", err))
	}
	return b
}

// decodeLease decodes a stored lease record.
func decodeLease(key, v []byte) (*LeaseRecord, error) {
	r := new(LeaseRecord)
	if err := decMode.Unmarshal(v, r); err != nil {
		return nil, corruptErr(key, err)
	}
	if id, err := keys.DecodeLease(key); err != nil || id != r.ID {
		return nil, corruptErr(key, fmt.Errorf("record of lease %016x", r.ID))
	}
	return r, nil
}

// leaseValue is the value of a key_lease key: the lease id.
func leaseValue(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// applyLease applies a validated lease op: run, its body, in a change,
// which it then flushes. A rejection goes to res.Err (and clears what run
// reported); the error is a storage error.
func (a *applier) applyLease(c *Command, res *Result, run func(ch *change, c *Command, res *Result) error) error {
	var st *slotState
	if !a.st.owned.IsFull() {
		st = a.st
	}
	ch := a.newChange(st, false)
	err := run(ch, c, res)
	if err == nil {
		err = ch.flush()
	}
	var rej *rejection
	if errors.As(err, &rej) {
		res.Err, res.LeaseID, res.Removed, res.Deleted = rej.err, 0, 0, 0
		return nil
	}
	if err != nil {
		return err
	}
	ch.commitAttach()
	res.Succeeded = true
	return nil
}

// inTerm is the rule of OpLeaseExpire and OpLeaseCheckpoint: they apply
// only in an entry of the term they were decided in.
func (ch *change) inTerm(c *Command) error {
	if term := ch.leases.term; c.Lease.Term != term {
		return reject(fmt.Errorf("%w: %s decided in term %d, applied in an entry of term %d", ErrStaleLeaseCommand, c.Op, c.Lease.Term, term))
	}
	return nil
}

// ownsLease returns nil when the shard owns the lease's slot, else the
// *MovedError.
func (ch *change) ownsLease(id uint64) error {
	if ch.st == nil {
		return nil
	}
	return ch.st.check(shard.Slot(keys.LeaseSlot(id)))
}

// pending reads key as the change's writes so far leave it.
func (ch *change) pending(key []byte) ([]byte, bool, error) {
	ch.reads++
	return ch.getPending(key, len(ch.writes))
}

// getLease reads a lease record; nil when absent.
func (ch *change) getLease(id uint64) (*LeaseRecord, error) {
	key := keys.Lease(id)
	v, found, err := ch.pending(key)
	if err != nil || !found {
		return nil, err
	}
	r, err := decodeLease(key, v)
	if err != nil {
		return nil, reject(err)
	}
	return r, nil
}

// LeaseKindNames names the kinds in k ("kv keys, agents").
func LeaseKindNames(k uint8) string {
	var names []string
	for _, n := range []struct {
		k    uint8
		name string
	}{{LeaseKindKV, "kv keys"}, {LeaseKindRunner, "runners"}, {LeaseKindAgent, "agents"}} {
		if k&n.k != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ", ")
}

// leaseKinds returns the kinds of the keys attached to lease id in r.
func leaseKinds(r pebble.Reader, id uint64) (uint8, error) {
	prefix := keys.LeaseKeysPrefix(id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	var kinds uint8
	for ok := it.First(); ok && kinds != leaseKindsAll; ok = it.Next() {
		if k := it.Key(); len(k) > len(prefix) {
			kinds |= LeaseKindOf(k[len(prefix)])
		}
	}
	return kinds, it.Close()
}

// endLease queues the end of lease id: every attached key's fate, the
// attachments and the record. res.Removed counts the lease, res.Deleted
// the keys deleted.
func (ch *change) endLease(id uint64, now int64, res *Result) error {
	prefix := keys.LeaseKeysPrefix(id)
	it, err := ch.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	var attached [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		attached = append(attached, bytes.Clone(it.Key()[len(prefix):]))
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range attached {
		ch.del(keys.LeaseKey(id, k))
		// Only a key still attached to this lease meets its end (the
		// reverse entry is the truth; a stale forward entry is dropped).
		v, found, err := ch.pending(keys.KeyLease(k))
		if err != nil {
			return err
		}
		if !found || !bytes.Equal(v, leaseValue(id)) {
			continue
		}
		ch.del(keys.KeyLease(k))
		ch.countAttach(k, -1)
		switch k[0] {
		case keys.TableKV, keys.TableRunners:
			if _, found, err := ch.pending(k); err != nil {
				return err
			} else if found {
				ch.del(k)
				res.Deleted++
			}
		case keys.TableAgents:
			if err := ch.failAgent(k, now); err != nil {
				return err
			}
		}
	}
	ch.del(keys.Lease(id))
	ch.leases.noteLease(id)
	res.Removed++
	return nil
}

// failAgent marks the agent stored under key failed when it is running or
// provisioning: its liveness lease ended. A record that does not decode is
// left as it is (the lease still ends).
func (ch *change) failAgent(key []byte, now int64) error {
	v, found, err := ch.pending(key)
	if err != nil || !found {
		return err
	}
	var rec records.AgentRecord
	if decodeStored(key, v, &rec) != nil {
		return nil
	}
	if rec.Status != records.AgentRunning && rec.Status != records.AgentProvisioning {
		return nil
	}
	ch.del(keys.AgentByStatus(byte(rec.Status), rec.UserID, rec.AgentID))
	rec.Status, rec.UpdatedAt = records.AgentFailed, now
	if err := putRecord(ch, key, &rec); err != nil {
		return err
	}
	ch.set(keys.AgentByStatus(byte(rec.Status), rec.UserID, rec.AgentID), nil)
	return nil
}

// setLease queues attaching the stored key key to lease (0: detaching it
// from any). Attaching needs the lease (ErrLeaseNotFound otherwise).
func (ch *change) setLease(key []byte, lease uint64) error {
	var r *LeaseRecord
	if lease != 0 {
		var err error
		if r, err = ch.getLease(lease); err != nil {
			return err
		}
		if r == nil {
			return reject(fmt.Errorf("%w: %016x", ErrLeaseNotFound, lease))
		}
	}
	old, err := ch.leaseOf(key)
	if err != nil || old == lease {
		return err
	}
	if r != nil && r.MaxKeys > 0 {
		if r.Keys >= r.MaxKeys {
			return reject(fmt.Errorf("%w: lease %016x holds %d keys, its bound", ErrLeaseFull, lease, r.Keys))
		}
		r.Keys++
		ch.set(keys.Lease(lease), encodeLease(r))
	}
	if old != 0 {
		ch.del(keys.LeaseKey(old, key))
		o, err := ch.getLease(old)
		if err != nil {
			return err
		}
		if o != nil && o.MaxKeys > 0 && o.Keys > 0 {
			o.Keys--
			ch.set(keys.Lease(old), encodeLease(o))
		}
	}
	if lease == 0 {
		ch.del(keys.KeyLease(key))
		ch.countAttach(key, -1)
		return nil
	}
	ch.set(keys.LeaseKey(lease, key), nil)
	ch.set(keys.KeyLease(key), leaseValue(lease))
	if old == 0 {
		ch.countAttach(key, +1)
	}
	return nil
}

// countAttach records that the change adds (+1) or deletes (-1) the
// key_lease entry of key; commitAttach counts them once the change's
// writes are in the batch.
func (ch *change) countAttach(key []byte, delta int32) {
	ch.attach = append(ch.attach, attachDelta{key: key, delta: delta})
}

type attachDelta struct {
	key   []byte
	delta int32
}

func (ch *change) commitAttach() {
	for _, d := range ch.attach {
		ch.leases.countAttached(d.key, d.delta)
	}
	ch.attach = nil
}

// leaseOf returns the lease the stored key key is attached to (0: none).
func (ch *change) leaseOf(key []byte) (uint64, error) {
	if !ch.leases.mayBeAttached(key) {
		return 0, nil
	}
	v, found, err := ch.pending(keys.KeyLease(key))
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, reject(corruptErr(keys.KeyLease(key), fmt.Errorf("%d bytes", len(v))))
	}
	return binary.BigEndian.Uint64(v), nil
}

// batchLeases is an OpBatch's part in the lease tables: check refuses a
// batch that attaches a lease that does not exist (before it writes
// anything), and after each mutation of an attachable key moves the key's
// attachment: a put attaches it to its lease (or detaches it), a delete
// detaches it.
type batchLeases struct {
	a *applier
}

// check returns the rejection of a batch whose mutations attach a lease
// that does not exist.
//
// It also refuses a batch that would attach more keys to a bounded lease
// than it may still hold (ErrLeaseFull): it counts, for each lease, the
// distinct keys its puts attach that are not attached to it before the
// batch (a detach in the same batch is not counted back: a batch near the
// bound may be refused that would fit).
func (bl batchLeases) check(bt *Batch) (rej, storage error) {
	type bounded struct {
		rec   *LeaseRecord
		added [][]byte
	}
	var checked []uint64
	var bounds map[uint64]*bounded
	for i := range bt.Mutations {
		m := &bt.Mutations[i]
		id := m.Lease
		if id == 0 {
			continue
		}
		if !slices.Contains(checked, id) {
			v, found, err := getView(bl.a.b, keys.Lease(id), true)
			if err != nil {
				return nil, err
			}
			if !found {
				return fmt.Errorf("%w: %016x (mutation %d)", ErrLeaseNotFound, id, i), nil
			}
			checked = append(checked, id)
			r, err := decodeLease(keys.Lease(id), v)
			if err != nil {
				return err, nil
			}
			if r.MaxKeys > 0 {
				if bounds == nil {
					bounds = make(map[uint64]*bounded)
				}
				bounds[id] = &bounded{rec: r}
			}
		}
		bd := bounds[id]
		if bd == nil || m.Kind == MutDelete || slices.ContainsFunc(bd.added, func(k []byte) bool { return bytes.Equal(k, m.Key) }) {
			continue
		}
		if bl.a.mayBeAttached(m.Key) {
			v, found, err := getView(bl.a.b, keys.KeyLease(m.Key), true)
			if err != nil {
				return nil, err
			}
			if found && bytes.Equal(v, leaseValue(id)) {
				continue
			}
		}
		bd.added = append(bd.added, m.Key)
		if bd.rec.Keys+int64(len(bd.added)) > bd.rec.MaxKeys {
			return fmt.Errorf("%w: lease %016x holds %d keys, its bound %d (mutation %d)", ErrLeaseFull, id, bd.rec.Keys, bd.rec.MaxKeys, i), nil
		}
	}
	return nil, nil
}

// after moves the attachment of m's key once m is written into the batch.
func (bl batchLeases) after(m *Mutation) error {
	if !keys.Attachable(m.Key[0]) || (m.Lease == 0 && !bl.a.mayBeAttached(m.Key)) {
		return nil
	}
	ch := &change{b: bl.a.b, leases: bl.a}
	lease := m.Lease
	if m.Kind == MutDelete {
		lease = 0
	}
	if err := ch.setLease(m.Key, lease); err != nil {
		var rej *rejection
		if errors.As(err, &rej) { // checked before: cannot happen
			return fmt.Errorf("fsm: batch lease: %w", rej.err)
		}
		return err
	}
	if err := ch.flush(); err != nil {
		return err
	}
	ch.commitAttach()
	return nil
}

// noteLease records that lease id changed in this run (Config.OnLeases).
func (a *applier) noteLease(id uint64) {
	if a != nil {
		a.leaseIDs = append(a.leaseIDs, id)
	}
}

// countAttached adds delta to the count of key_lease entries of the slot
// of the attached key key.
func (a *applier) countAttached(key []byte, delta int32) {
	if a == nil {
		return
	}
	if slot, ok := attachSlot(key); ok {
		a.f.attached.slots[slot] += delta
		a.f.attached.total += int64(delta)
	}
}

// mayBeAttached reports whether the stored key key may be attached to a
// lease: false means its slot has no key_lease entry, so no write of it
// needs to look its attachment up.
func (a *applier) mayBeAttached(key []byte) bool {
	if a == nil || a.f.attached.total == 0 {
		return false
	}
	slot, ok := attachSlot(key)
	return !ok || a.f.attached.slots[slot] > 0
}

// attachSlot is the slot of an attachable key (all route by their key).
func attachSlot(key []byte) (shard.Slot, bool) {
	rk, route, err := keys.RoutingKeyOf(key)
	if err != nil || route != keys.RouteKey {
		return 0, false
	}
	return shard.SlotOf(rk), true
}

// LeaseChanges tells Config.OnLeases what an applied run changed: the
// leases granted, ended or checkpointed, and whether the set of leases
// may have changed otherwise (a slot move op, a restore: Resync).
type LeaseChanges struct {
	IDs    []uint64
	Resync bool
}

// Lease returns the record of lease id (ErrLeaseNotFound when absent, or
// when its slot is not owned: another shard answers for it).
func (f *FSM) Lease(id uint64) (*LeaseRecord, error) {
	if err := f.CheckSlot(shard.Slot(keys.LeaseSlot(id))); err != nil {
		var me *MovedError
		if errors.As(err, &me) {
			return nil, fmt.Errorf("%w: %016x: %w", ErrLeaseNotFound, id, err)
		}
		return nil, err
	}
	key := keys.Lease(id)
	v, err := f.Get(key)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: %016x", ErrLeaseNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	return decodeLease(key, v)
}

// Leases returns up to limit (<= 0: all) lease records of owned slots
// with ids above after, in id order, that keep (nil: any) keeps.
func (f *FSM) Leases(after uint64, limit int, keep func(*LeaseRecord) bool) ([]*LeaseRecord, error) {
	start := keys.TablePrefix(keys.TableLeases)
	if after != 0 {
		start = append(keys.Lease(after), 0)
	}
	var out []*LeaseRecord
	owned := f.Owned()
	for {
		kvs, err := f.Scan(start, keys.PrefixEnd(keys.TablePrefix(keys.TableLeases)), 256)
		if err != nil || len(kvs) == 0 {
			return out, err
		}
		for _, kv := range kvs {
			r, err := decodeLease(kv.Key, kv.Value)
			if err != nil {
				return out, err
			}
			if !owned.Has(shard.Slot(keys.LeaseSlot(r.ID))) || (keep != nil && !keep(r)) {
				continue
			}
			out = append(out, r)
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		start = append(kvs[len(kvs)-1].Key, 0)
	}
}

// LeaseKeys returns up to limit (0: all; < 0: none) of the stored keys
// attached to lease id, in key order, and how many there are in all.
func (f *FSM) LeaseKeys(id uint64, limit int) ([][]byte, int, error) {
	prefix := keys.LeaseKeysPrefix(id)
	kvs, err := f.Scan(prefix, keys.PrefixEnd(prefix), 0)
	if err != nil {
		return nil, 0, err
	}
	var out [][]byte
	for _, kv := range kvs {
		if limit == 0 || len(out) < limit {
			out = append(out, kv.Key[len(prefix):])
		}
	}
	return out, len(kvs), nil
}

// LeaseKinds returns the kinds (LeaseKindKV...) of the keys attached to
// lease id.
func (f *FSM) LeaseKinds(id uint64) (uint8, error) {
	if err := f.rlock(); err != nil {
		return 0, err
	}
	defer f.mu.RUnlock()
	if f.restoring.Load() {
		return 0, ErrRestoring
	}
	return leaseKinds(f.db, id)
}

// initAttached counts each slot's key_lease entries in the DB (at open
// and restore).
func (f *FSM) initAttached(r pebble.Reader) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: keys.TablePrefix(keys.TableKeyLease), UpperBound: keys.PrefixEnd(keys.TablePrefix(keys.TableKeyLease))})
	if err != nil {
		return err
	}
	f.attached.slots, f.attached.total = [shard.NumSlots]int32{}, 0
	for ok := it.First(); ok; ok = it.Next() {
		k, err := keys.DecodeKeyLease(it.Key())
		if err != nil {
			continue // a malformed entry routes nowhere; it is never looked up
		}
		if slot, ok := attachSlot(k); ok {
			f.attached.slots[slot]++
			f.attached.total++
		}
	}
	return it.Close()
}
