package fsm

import (
	"fmt"
	"sync"

	"github.com/swarmkv/swarmkv/keys"
)

// Watching an etcd namespace (the etcd front's Watch service).
//
// The front learns of a namespace's new revisions from the state machine,
// not by polling: EtcdChanged(ns) returns a channel that is closed after
// the next commit of a run of entries that gave ns a new revision (an
// OpEtcdTxn that wrote), and also after a commit that changed the shard's
// slot ownership (a freeze, an adoption: the namespace may have moved),
// after a Restore, and at Close. A watcher takes the channel BEFORE it
// reads (View.EtcdHistory), so a revision committed after its read always
// closes a channel it holds; spurious wakes are possible and harmless.
// Only namespaces with a waiter have an entry: a namespace nobody watches
// costs one map look-up per write run.

// EtcdEvent is one event of an etcd namespace's history (etcd's
// mvccpb.Event): a put of KV (the record it wrote) or a delete (KV holds
// the key and ModRevision, the delete's revision); Prev is the record
// before the write, nil when the key did not exist.
type EtcdEvent struct {
	Delete bool
	KV     EtcdKV
	Prev   *EtcdKV
}

// Revision is the revision of the write.
func (e *EtcdEvent) Revision() int64 { return e.KV.ModRevision }

// Size is about the bytes the event holds (keys and values, a fixed
// overhead for the numbers).
func (e *EtcdEvent) Size() int {
	n := 64 + len(e.KV.Key) + len(e.KV.Value)
	if e.Prev != nil {
		n += 48 + len(e.Prev.Key) + len(e.Prev.Value)
	}
	return n
}

// EtcdHistoryPage is what View.EtcdHistory read.
type EtcdHistoryPage struct {
	// Events are every event of the revisions [from, Next), in revision
	// order and, within a revision, in the order the txn wrote them.
	Events []EtcdEvent
	// Next is the first revision not read: Current+1 when the page reached
	// the end of the history.
	Next int64
	// Current and Compacted are the namespace's revisions as of the read.
	Current, Compacted int64
}

// EtcdHistory reads namespace ns's events of revisions from on, in
// order, whole revisions of them until about maxBytes (EtcdEvent.Size) are
// read (one revision larger than that is read whole). A from at or below
// the compacted revision reads nothing and returns the page's revisions
// with ErrEtcdCompacted (its events are gone: the earliest revision a
// watch may start from is Compacted+1); a from above the current revision
// reads nothing (Next = from). The front reads through FSM.Read with
// keys.EtcdRoutingKey(ns), which fences the slot.
func (v View) EtcdHistory(ns string, from int64, maxBytes int) (*EtcdHistoryPage, error) {
	if err := keys.ValidateEtcdNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	if from < 1 {
		return nil, fmt.Errorf("%w: etcd history from revision %d, want >= 1", ErrInvalidCommand, from)
	}
	r := viewReader{v}
	rk := keys.EtcdRoutingKey(ns)
	revs, err := readEtcdRevs(r, rk)
	if err != nil {
		return nil, err
	}
	p := &EtcdHistoryPage{Current: int64(revs.current), Compacted: int64(revs.compacted), Next: from}
	if revs.compacted > 0 && uint64(from) <= revs.compacted {
		return p, fmt.Errorf("%w: revision %d, compacted %d", ErrEtcdCompacted, from, revs.compacted)
	}
	if uint64(from) > revs.current {
		return p, nil
	}
	p.Next = int64(revs.current) + 1
	size := 0
	last := uint64(0)
	err = r.scan(keys.EtcdHistoryFrom(rk, uint64(from)), keys.EtcdHistoryFrom(rk, revs.current+1), func(k, val []byte) error {
		_, rev, _, err := keys.DecodeEtcdHistory(k)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorruptRecord, err)
		}
		if rev != last && size >= maxBytes {
			p.Next = int64(rev)
			return errStopScan
		}
		last = rev
		ev, err := decodeWatchEvent(rev, val)
		if err != nil {
			return err
		}
		size += ev.Size()
		p.Events = append(p.Events, ev)
		return nil
	})
	if err == errStopScan {
		err = nil
	}
	return p, err
}

var errStopScan = fmt.Errorf("fsm: stop scan")

// decodeWatchEvent decodes the stored event of revision rev (copying).
func decodeWatchEvent(rev uint64, v []byte) (EtcdEvent, error) {
	e, err := decodeEtcdEvent(v)
	if err != nil {
		return EtcdEvent{}, err
	}
	var out EtcdEvent
	if e.kind == etcdEventPut {
		if out.KV, err = decodeEtcdRecord(e.key, e.after); err != nil {
			return EtcdEvent{}, err
		}
	} else {
		out.Delete = true
		out.KV = EtcdKV{Key: append([]byte{}, e.key...), ModRevision: int64(rev)}
	}
	if e.prevExisting {
		p, err := decodeEtcdRecord(e.key, e.prev)
		if err != nil {
			return EtcdEvent{}, err
		}
		out.Prev = &p
	}
	return out, nil
}

// etcdWake holds the channels EtcdChanged hands out.
type etcdWake struct {
	sync.Mutex
	chs    map[string]chan struct{}
	closed bool
}

// EtcdChanged returns a channel closed after the next commit that gives
// namespace ns a new revision, changes the shard's slot ownership, or
// restores a snapshot, and at Close (see the comment at the top of
// etcd_watch.go). Take it before reading, wait on it after.
func (f *FSM) EtcdChanged(ns string) <-chan struct{} {
	f.etcdWake.Lock()
	defer f.etcdWake.Unlock()
	if f.etcdWake.closed {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.etcdWake.chs == nil {
		f.etcdWake.chs = make(map[string]chan struct{})
	}
	c := f.etcdWake.chs[ns]
	if c == nil {
		c = make(chan struct{})
		f.etcdWake.chs[ns] = c
	}
	return c
}

// etcdWrote records that the run's batch gave namespace ns a new
// revision (its waiters are woken after the batch commits).
func (a *applier) etcdWrote(ns string) {
	for _, n := range a.etcdNS {
		if n == ns {
			return
		}
	}
	a.etcdNS = append(a.etcdNS, ns)
}

// wakeEtcd wakes the waiters of the namespaces the committed batch wrote.
func (f *FSM) wakeEtcd(nss []string) {
	if len(nss) == 0 {
		return
	}
	f.etcdWake.Lock()
	defer f.etcdWake.Unlock()
	for _, ns := range nss {
		if c := f.etcdWake.chs[ns]; c != nil {
			close(c)
			delete(f.etcdWake.chs, ns)
		}
	}
}

// wakeAllEtcd wakes every waiter (ownership changed, a Restore; closing:
// and every later EtcdChanged returns a closed channel).
func (f *FSM) wakeAllEtcd(closing bool) {
	f.etcdWake.Lock()
	defer f.etcdWake.Unlock()
	for ns, c := range f.etcdWake.chs {
		close(c)
		delete(f.etcdWake.chs, ns)
	}
	if closing {
		f.etcdWake.closed = true
	}
}
