package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
)

// OpLeaseExpire ends the leases the leader found expired in its term (see
// its doc in lease.go).
func init() {
	commands.register(OpLeaseExpire, &commandSpec{
		name:     "lease_expire",
		fields:   fLease | fTime,
		since:    VersionLeases,
		validate: validateLeaseExpire,
		apply: func(a *applier, c *Command, _ uint64, res *Result) error {
			return a.applyLease(c, res, runLeaseExpire)
		},
	})
}

func validateLeaseExpire(c *Command, _ Limits) error {
	a := c.Lease
	if err := a.validate(OpLeaseExpire, leaseArgs{ids: true, term: true, want: "ids and term"}); err != nil {
		return err
	}
	if len(a.IDs) > MaxLeaseBatch {
		return leaseBad(OpLeaseExpire, "%d ids, limit %d", len(a.IDs), MaxLeaseBatch)
	}
	for i, id := range a.IDs {
		if !keys.ValidLeaseID(id) {
			return leaseBad(OpLeaseExpire, "id %d: lease id %016x has sequence 0", i, id)
		}
		if i > 0 && a.IDs[i-1] >= id {
			return leaseBad(OpLeaseExpire, "ids not in strictly ascending order")
		}
	}
	return nil
}

func runLeaseExpire(ch *change, c *Command, res *Result) error {
	if err := ch.inTerm(c); err != nil {
		return err
	}
	return ch.expire(c.Lease.IDs, c.Time, res)
}

func (ch *change) expire(ids []uint64, now int64, res *Result) error {
	for _, id := range ids {
		if ch.ownsLease(id) != nil {
			continue // another shard's now (or frozen): not this one's to end
		}
		r, err := ch.getLease(id)
		if err != nil {
			return err
		}
		if r == nil {
			continue // revoked or expired already
		}
		if err := ch.endLease(id, now, res); err != nil {
			return err
		}
	}
	return nil
}
