package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// OpLeaseGrant creates a lease in its routing key's slot (see its doc in
// lease.go).
func init() {
	commands.register(OpLeaseGrant, &commandSpec{
		name:     "lease_grant",
		fields:   fLease | fTime,
		since:    VersionLeases,
		sinceOf:  leaseHardeningSince,
		validate: validateLeaseGrant,
		apply: func(a *applier, c *Command, _ uint64, res *Result) error {
			return a.applyLease(c, res, runLeaseGrant)
		},
	})
}

// leaseHardeningSince: an owner, nonce or key bound on a grant, a deny on
// a revoke, need VersionHardening.
func leaseHardeningSince(c *Command) int {
	if c.Lease.hardening() {
		return VersionHardening
	}
	return VersionLeases
}

func validateLeaseGrant(c *Command, _ Limits) error {
	a := c.Lease
	if err := a.validate(OpLeaseGrant, leaseArgs{rk: true, ttl: true, grant: true, want: "routing key and ttl"}); err != nil {
		return err
	}
	if err := keys.ValidateRoutingKey(a.RoutingKey); err != nil {
		return leaseBad(OpLeaseGrant, "%v", err)
	}
	if err := validateTTL(a.TTLMs); err != nil {
		return leaseBad(OpLeaseGrant, "%v", err)
	}
	return nil
}

func runLeaseGrant(ch *change, c *Command, res *Result) error {
	var err error
	res.LeaseID, err = ch.grant(c.Lease, c.Time)
	return err
}

func (ch *change) grant(a *LeaseArgs, now int64) (uint64, error) {
	slot := shard.SlotOf(a.RoutingKey)
	if ch.st != nil {
		if err := ch.st.check(slot); err != nil {
			return 0, reject(err)
		}
	}
	if a.Nonce != 0 {
		id := keys.LeaseIDOf(byte(slot), a.Nonce)
		if old, err := ch.getLease(id); err != nil {
			return 0, err
		} else if old != nil {
			return 0, reject(fmt.Errorf("%w: %016x", ErrLeaseIDTaken, id))
		}
		ch.set(keys.Lease(id), encodeLease(&LeaseRecord{ID: id, RoutingKey: bytes.Clone(a.RoutingKey), TTLMs: a.TTLMs, GrantedAt: now,
			Owner: a.Owner, MaxKeys: a.MaxKeys}))
		ch.leases.noteLease(id)
		return id, nil
	}
	seqKey := keys.LeaseSeq(byte(slot))
	var seq uint64
	v, found, err := ch.pending(seqKey)
	switch {
	case err != nil:
		return 0, err
	case found && len(v) != 8:
		return 0, reject(corruptErr(seqKey, fmt.Errorf("%d bytes", len(v))))
	case found:
		seq = binary.BigEndian.Uint64(v)
	}
	if seq >= keys.MaxLeaseSeq {
		return 0, reject(fmt.Errorf("%w: op %s: slot %d has used every lease id", ErrInvalidCommand, OpLeaseGrant, slot))
	}
	seq++
	id := keys.LeaseIDOf(byte(slot), seq)
	ch.set(seqKey, binary.BigEndian.AppendUint64(nil, seq))
	ch.set(keys.Lease(id), encodeLease(&LeaseRecord{ID: id, RoutingKey: bytes.Clone(a.RoutingKey), TTLMs: a.TTLMs, GrantedAt: now,
		Owner: a.Owner, MaxKeys: a.MaxKeys}))
	ch.leases.noteLease(id)
	return id, nil
}
