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
// nothing the batch does not already give). From VersionEtcd; a txn with a
// nested txn from VersionEtcdNested (a binary before it does not decode
// one: it would refuse the entry its peers apply).
//
// Nested txns (etcd's server/etcdserver/txn/txn.go, followed step by
// step): every compare the run will use, the top txn's and those of each
// txn nested in a branch chosen, is evaluated first, against the state
// before the txn (compareToPath: a nested compare does not see the writes
// of the ops before it); the rejections are then checked along that path
// against the same state (checkTxn); then the ops run in order, a nested
// txn's in its place, each seeing the earlier ones, all at the one
// revision.
func init() {
	commands.register(OpEtcdTxn, &commandSpec{
		name:   "etcd_txn",
		fields: fEtcd,
		since:  VersionEtcd,
		sinceOf: func(c *Command) int {
			if c.Etcd != nil && c.Etcd.Nested() {
				return VersionEtcdNested
			}
			return VersionEtcd
		},
		solo: true,
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
	path, err := w.choose(t, nil)
	if err != nil {
		return err
	}
	// Every rejection is found before the first write.
	pos := 0
	if rej, err := w.check(t, path, &pos); err != nil || rej != nil {
		res.Err = rej
		return err
	}
	pos = 0
	out, err := w.run(t, path, &pos)
	if err != nil {
		return err
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
	setNestedRevision(out)
	res.Etcd, res.Succeeded = out, true
	return nil
}

// choose evaluates the compares of t, then of each txn nested in the
// branch they choose, depth first, against the state before the txn
// (nothing is written yet), and appends each txn's outcome to path:
// etcd's compareToPath.
func (w *etcdWriter) choose(t *EtcdTxn, path []bool) ([]bool, error) {
	ok := true
	for i := range t.Compare {
		var err error
		if ok, err = w.compare(&t.Compare[i]); err != nil {
			return nil, err
		}
		if !ok {
			break
		}
	}
	path = append(path, ok)
	for _, op := range t.branch(ok) {
		if op.Kind == EtcdTxnK {
			var err error
			if path, err = w.choose(op.Txn, path); err != nil {
				return nil, err
			}
		}
	}
	return path, nil
}

// check finds the first rejection of the ops path chooses, t's outcome
// being path[*pos], against the state before the txn (etcd's checkTxn):
// the rejection, or a storage error.
func (w *etcdWriter) check(t *EtcdTxn, path []bool, pos *int) (rej, err error) {
	branch := t.branch(path[*pos])
	*pos++
	for i := range branch {
		op := &branch[i]
		switch op.Kind {
		case EtcdPut:
			if op.Lease != 0 {
				return fmt.Errorf("%w: lease %d", ErrEtcdLeaseNotFound, op.Lease), nil
			}
			if op.IgnoreValue || op.IgnoreLease {
				if _, found, err := w.r.get(keys.EtcdKey(w.rk, op.Key)); err != nil {
					return nil, err
				} else if !found {
					return fmt.Errorf("%w: %q", ErrEtcdKeyNotFound, op.Key), nil
				}
			}
		case EtcdRangeK:
			if rev := uint64(op.Range.Revision); rev > w.revs.current {
				return fmt.Errorf("%w: revision %d, current %d", ErrEtcdFutureRev, rev, w.revs.current), nil
			} else if rev != 0 && rev < w.revs.compacted {
				return fmt.Errorf("%w: revision %d, compacted %d", ErrEtcdCompacted, rev, w.revs.compacted), nil
			}
		case EtcdTxnK:
			if rej, err := w.check(op.Txn, path, pos); err != nil || rej != nil {
				return rej, err
			}
		}
	}
	return nil, nil
}

// run runs the ops path chooses, t's outcome being path[*pos], in order
// (a nested txn's in its place), and returns t's answer (Revision unset).
func (w *etcdWriter) run(t *EtcdTxn, path []bool, pos *int) (*EtcdResult, error) {
	ok := path[*pos]
	*pos++
	branch := t.branch(ok)
	out := &EtcdResult{Succeeded: ok, Results: make([]EtcdOpResult, len(branch))}
	for i := range branch {
		op, r := &branch[i], &out.Results[i]
		r.Kind = op.Kind
		switch op.Kind {
		case EtcdPut:
			prev, err := w.put(op)
			if err != nil {
				return nil, err
			}
			if op.PrevKV {
				r.PrevKV = prev
			}
		case EtcdDelete:
			if err := w.deleteRange(op, r); err != nil {
				return nil, err
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
			var err error
			if r.Range, err = etcdRange(w.r, w.rk, revs, &q); err != nil {
				return nil, err
			}
		case EtcdTxnK:
			var err error
			if r.Txn, err = w.run(op.Txn, path, pos); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// setNestedRevision gives every nested txn's answer the txn's revision.
func setNestedRevision(out *EtcdResult) {
	for i := range out.Results {
		if n := out.Results[i].Txn; n != nil {
			n.Revision = out.Revision
			setNestedRevision(n)
		}
	}
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
