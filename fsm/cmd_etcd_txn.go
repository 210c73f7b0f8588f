package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// OpEtcdTxn (Etcd) runs an etcd txn on one namespace (etcd.go): its
// compares against the state before it, then the ops of the branch they
// choose, in order, each seeing the earlier ones. If the branch puts or
// deletes a key, the txn takes the namespace's next revision (every key it
// writes gets it, one event each); a txn that writes nothing leaves the
// revision as it is. Result.Etcd is the answer. Rejections (nothing
// written): ErrEtcdKeyNotFound (a put with ignore_value or ignore_lease of
// an absent key), ErrEtcdLeaseNotFound (a put with a lease), ErrEtcdCompacted
// and ErrEtcdFutureRev (a range of the branch at such a revision),
// *MovedError. Solo: a txn is an entry of its own (revisions are per
// namespace, but a run of txns of one namespace in one OpMulti would gain
// nothing the batch does not already give). From VersionEtcd.
func init() {
	commands.register(OpEtcdTxn, &commandSpec{
		name:   "etcd_txn",
		fields: fEtcd,
		since:  VersionEtcd,
		solo:   true,
		validate: func(c *Command, l Limits) error {
			return c.Etcd.validate(l.WithDefaults())
		},
		routingKey: func(c *Command) []byte { return keys.EtcdRoutingKey(c.Etcd.NS) },
		apply:      applyEtcdTxn,
		history:    noHistory, // the namespace keeps its own (etcd_history)
	})
}

func applyEtcdTxn(a *applier, c *Command, _ uint64, res *Result) error {
	t := c.Etcd
	rk := keys.EtcdRoutingKey(t.NS)
	if !a.owns(rk, res) {
		return nil
	}
	w := &etcdWriter{b: a.b, r: batchReader{a.b}, rk: rk}
	var err error
	if w.revs, err = readEtcdRevs(w.r, rk); err != nil {
		return err
	}
	w.rev = w.revs.current + 1
	ok := true
	for i := range t.Compare {
		if ok, err = w.compare(&t.Compare[i]); err != nil {
			return err
		}
		if !ok {
			break
		}
	}
	branch := t.Success
	if !ok {
		branch = t.Failure
	}
	// Every rejection is found before the first write.
	for i := range branch {
		op := &branch[i]
		switch op.Kind {
		case EtcdPut:
			if op.Lease != 0 {
				res.Err = fmt.Errorf("%w: lease %d", ErrEtcdLeaseNotFound, op.Lease)
				return nil
			}
			if op.IgnoreValue || op.IgnoreLease {
				if _, found, err := w.r.get(keys.EtcdKey(rk, op.Key)); err != nil {
					return err
				} else if !found {
					res.Err = fmt.Errorf("%w: %q", ErrEtcdKeyNotFound, op.Key)
					return nil
				}
			}
		case EtcdRangeK:
			if rev := uint64(op.Range.Revision); rev > w.revs.current {
				res.Err = fmt.Errorf("%w: revision %d, current %d", ErrEtcdFutureRev, rev, w.revs.current)
				return nil
			} else if rev != 0 && rev < w.revs.compacted {
				res.Err = fmt.Errorf("%w: revision %d, compacted %d", ErrEtcdCompacted, rev, w.revs.compacted)
				return nil
			}
		}
	}
	out := &EtcdResult{Succeeded: ok, Results: make([]EtcdOpResult, len(branch))}
	for i := range branch {
		op, r := &branch[i], &out.Results[i]
		r.Kind = op.Kind
		switch op.Kind {
		case EtcdPut:
			prev, err := w.put(op)
			if err != nil {
				return err
			}
			if op.PrevKV {
				r.PrevKV = prev
			}
		case EtcdDelete:
			if err := w.deleteRange(op, r); err != nil {
				return err
			}
		case EtcdRangeK:
			// A range after a write of the txn reads the txn's revision.
			revs := w.revs
			if w.sub > 0 {
				revs.current = w.rev
			}
			q := *op.Range
			if q.Revision == 0 && w.sub > 0 {
				q.Revision = int64(w.rev)
			}
			if r.Range, err = etcdRange(w.r, rk, revs, &q); err != nil {
				return err
			}
		}
	}
	out.Revision = int64(w.revs.current)
	if w.sub > 0 { // it wrote: the txn takes the revision
		w.revs.current = w.rev
		if err := a.b.Set(keys.EtcdRevs(rk), encodeEtcdRevs(w.revs), nil); err != nil {
			return err
		}
		out.Revision = int64(w.rev)
		a.etcdWrote(t.NS)
	}
	res.Etcd, res.Succeeded = out, true
	return nil
}

// owns reports whether the shard owns rk's slot; else it sets res.Err to
// the *MovedError.
func (a *applier) owns(rk []byte, res *Result) bool {
	if a.st.owned.IsFull() {
		return true
	}
	if err := a.st.check(shard.SlotOf(rk)); err != nil {
		res.Err = err
		return false
	}
	return true
}
