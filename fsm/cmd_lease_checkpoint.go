package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
)

// OpLeaseCheckpoint records leases' remaining TTLs as the leader computed
// them (see its doc in lease.go).
func init() {
	commands.register(OpLeaseCheckpoint, &commandSpec{
		name:     "lease_checkpoint",
		fields:   fLease,
		since:    VersionLeases,
		validate: validateLeaseCheckpoint,
		apply: func(a *applier, c *Command, _ uint64, res *Result) error {
			return a.applyLease(c, res, runLeaseCheckpoint)
		},
	})
}

func validateLeaseCheckpoint(c *Command, _ Limits) error {
	a := c.Lease
	if err := a.validate(OpLeaseCheckpoint, leaseArgs{cps: true, term: true, want: "checkpoints and term"}); err != nil {
		return err
	}
	if len(a.Checkpoints) > MaxLeaseBatch {
		return leaseBad(OpLeaseCheckpoint, "%d checkpoints, limit %d", len(a.Checkpoints), MaxLeaseBatch)
	}
	for i, cp := range a.Checkpoints {
		switch {
		case !keys.ValidLeaseID(cp.ID):
			return leaseBad(OpLeaseCheckpoint, "checkpoint %d: lease id %016x has sequence 0", i, cp.ID)
		case cp.RemainingMs < 0 || cp.RemainingMs > MaxLeaseTTL.Milliseconds():
			return leaseBad(OpLeaseCheckpoint, "checkpoint %d: remaining %d ms, want 0..%d", i, cp.RemainingMs, MaxLeaseTTL.Milliseconds())
		case i > 0 && a.Checkpoints[i-1].ID >= cp.ID:
			return leaseBad(OpLeaseCheckpoint, "checkpoints not in strictly ascending id order")
		}
	}
	return nil
}

func runLeaseCheckpoint(ch *change, c *Command, _ *Result) error {
	if err := ch.inTerm(c); err != nil {
		return err
	}
	return ch.checkpoint(c.Lease.Checkpoints)
}

func (ch *change) checkpoint(cps []LeaseCheckpoint) error {
	for _, cp := range cps {
		if ch.ownsLease(cp.ID) != nil {
			continue
		}
		r, err := ch.getLease(cp.ID)
		if err != nil {
			return err
		}
		if r == nil || r.RemainingMs == cp.RemainingMs {
			continue
		}
		r.RemainingMs = cp.RemainingMs
		ch.set(keys.Lease(cp.ID), encodeLease(r))
		ch.leases.noteLease(cp.ID)
	}
	return nil
}
