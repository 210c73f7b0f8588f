package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
)

// OpLeaseRevoke ends a lease now (see its doc in lease.go).
func init() {
	commands.register(OpLeaseRevoke, &commandSpec{
		name:     "lease_revoke",
		fields:   fLease | fTime,
		since:    VersionLeases,
		sinceOf:  leaseHardeningSince,
		validate: validateLeaseRevoke,
		apply: func(a *applier, c *Command, _ uint64, res *Result) error {
			return a.applyLease(c, res, runLeaseRevoke)
		},
	})
}

func validateLeaseRevoke(c *Command, _ Limits) error {
	a := c.Lease
	if err := a.validate(OpLeaseRevoke, leaseArgs{id: true, revoke: true, want: "id"}); err != nil {
		return err
	}
	if !keys.ValidLeaseID(a.ID) {
		return leaseBad(OpLeaseRevoke, "lease id %016x has sequence 0", a.ID)
	}
	return nil
}

func runLeaseRevoke(ch *change, c *Command, res *Result) error {
	return ch.revoke(c.Lease.ID, c.Lease.Deny, c.Time, res)
}

func (ch *change) revoke(id uint64, deny uint8, now int64, res *Result) error {
	if err := ch.ownsLease(id); err != nil {
		return reject(err)
	}
	r, err := ch.getLease(id)
	if err != nil {
		return err
	}
	if r == nil {
		return reject(fmt.Errorf("%w: %016x", ErrLeaseNotFound, id))
	}
	if deny != 0 {
		kinds, err := leaseKinds(ch.b, id)
		if err != nil {
			return err
		}
		if k := kinds & deny; k != 0 {
			return reject(fmt.Errorf("%w %016x holds %s the revoker may not delete", ErrLeaseDenied, id, LeaseKindNames(k)))
		}
	}
	return ch.endLease(id, now, res)
}
