package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
)

// OpEtcdCompact (EtcdCompact) compacts an etcd namespace at a revision:
// it deletes the namespace's events at and below it (one range deletion),
// so a Range below it is ErrEtcdCompacted from then on; the revision
// itself stays readable. Rejections: ErrEtcdCompacted at or below the
// compacted revision, ErrEtcdFutureRev above the current one, *MovedError.
// It takes no revision. Result.Etcd.Revision is the current revision.
// From VersionEtcd.
func init() {
	commands.register(OpEtcdCompact, &commandSpec{
		name:   "etcd_compact",
		fields: fEtcdCompact,
		since:  VersionEtcd,
		solo:   true,
		validate: func(c *Command, _ Limits) error {
			if err := keys.ValidateEtcdNamespace(c.EtcdCompact.NS); err != nil {
				return fmt.Errorf("%w: op %s: %v", ErrInvalidCommand, c.Op, err)
			}
			if c.EtcdCompact.Revision <= 0 {
				return fmt.Errorf("%w: op %s: revision %d, want > 0", ErrInvalidCommand, c.Op, c.EtcdCompact.Revision)
			}
			return nil
		},
		routingKey: func(c *Command) []byte { return keys.EtcdRoutingKey(c.EtcdCompact.NS) },
		apply:      applyEtcdCompact,
		history:    noHistory,
	})
}

func applyEtcdCompact(a *applier, c *Command, _ uint64, res *Result) error {
	rk := keys.EtcdRoutingKey(c.EtcdCompact.NS)
	if !a.owns(rk, res) {
		return nil
	}
	revs, err := readEtcdRevs(batchReader{a.b}, rk)
	if err != nil {
		return err
	}
	rev := uint64(c.EtcdCompact.Revision)
	switch {
	case rev <= revs.compacted:
		res.Err = fmt.Errorf("%w: revision %d, compacted %d", ErrEtcdCompacted, rev, revs.compacted)
		return nil
	case rev > revs.current:
		res.Err = fmt.Errorf("%w: revision %d, current %d", ErrEtcdFutureRev, rev, revs.current)
		return nil
	}
	if err := a.b.DeleteRange(keys.EtcdHistoryPrefix(rk), keys.EtcdHistoryFrom(rk, rev+1), nil); err != nil {
		return err
	}
	revs.compacted = rev
	if err := a.b.Set(keys.EtcdRevs(rk), encodeEtcdRevs(revs), nil); err != nil {
		return err
	}
	res.Etcd, res.Succeeded = &EtcdResult{Succeeded: true, Revision: int64(revs.current)}, true
	return nil
}
