package jepsen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

// DefaultLeaseBound is the lease workload's default time, past a lease's
// TTL, within which a lease no longer kept alive must be gone once the
// cluster is healed. docs/architecture.md ("Leases", Liveness) states the
// bound: without leader changes a lease not kept alive expires at most
// TTL + 100 ms + one commit after its last acknowledged keep-alive, and
// each leader change can extend that by max(1 s, TTL/10) + 1 s plus the
// new leader's election and priming. The default allows for one leader
// change after the healing: 100 ms + 900 ms for the commit, 2 s for the
// change (TTL <= 10 s) and 1 s for the election.
const DefaultLeaseBound = 4 * time.Second

// Lease is the lease workload. Each worker keeps leasesPerWorker leases
// alive at a time: it grants a lease of TTL for a routing key of its own,
// attaches two keys to it (kv puts with the lease), renews it every third
// of its TTL with a keep-alive (recording when each was invoked and the
// TTL it acknowledged), and abandons it at random (a third at once,
// then one in twelve after each keep-alive; Final abandons the rest);
// between keep-alives it reads (linearizable Get) the keys of its leases,
// kept or abandoned. Final reads each key until it is gone, or until its
// lease's deadline has passed. The checker proves:
//
//   - safety: no attached key is read absent, and no keep-alive answers
//     "not found", at a time a grant or an acknowledged keep-alive covers:
//     one invoked at t that answered TTL d covers the lease until t + d
//     (the server renewed it at some moment after t, and a lease lives at
//     least its TTL after its last renewal); a read counts only if it
//     began after its key's attach was acknowledged, and is a violation
//     only if it completed before the cover ended;
//   - liveness: every lease's keys are gone by TTL + Bound after the later
//     of its last renewal (the completion of its last grant or keep-alive
//     that may have renewed it) and the start of Final (the cluster
//     healed): a final read begun after that which still finds a key is
//     an anomaly.
type Lease struct {
	runID string
	ttl   time.Duration
	bound time.Duration
	next  atomic.Int64 // last lease number or value

	mu     sync.Mutex
	leases []*leaseState // every lease granted with an acknowledgement
}

// leasesPerWorker is how many leases a worker keeps alive at once.
const leasesPerWorker = 2

type leaseState struct {
	n        int
	id       client.LeaseID
	rk       []byte
	keys     []string // attached with an acknowledgement or indeterminately
	kept     bool
	lastSent time.Time // the last keep-alive (or the grant) was invoked
}

// LeaseIn is a lease operation's input: lease number Lease (the
// workload's; ID is swarmkv's once granted), and for attach and the reads
// a Key under the lease's routing key.
type LeaseIn struct {
	Lease int    `json:"lease"`
	ID    string `json:"id,omitempty"`
	TTLms int64  `json:"ttl_ms,omitempty"`
	Key   string `json:"key,omitempty"`
}

// LeaseOut is a lease operation's output.
type LeaseOut struct {
	ID       uint64 `json:"id,omitempty"`     // grant
	TTLms    int64  `json:"ttl_ms,omitempty"` // keep-alive: the TTL acknowledged
	NotFound bool   `json:"not_found,omitempty"`
	Present  bool   `json:"present,omitempty"` // reads
}

// NewLease returns the workload with leases of opts.LeaseTTL and the
// liveness bound opts.LeaseBound.
func NewLease(runID string, opts WorkloadOptions) *Lease {
	o := opts.withDefaults()
	return &Lease{runID: runID, ttl: o.LeaseTTL, bound: o.LeaseBound}
}

func (wl *Lease) Name() string { return "lease" }

func (wl *Lease) Setup(context.Context, DB) error { return nil }

func (wl *Lease) Run(ctx context.Context, w *Worker) {
	var mine []*leaseState
	pause := wl.ttl / 40
	for ctx.Err() == nil {
		kept := 0
		for _, l := range mine {
			if l.kept {
				kept++
			}
		}
		if kept < leasesPerWorker {
			if l := wl.grant(ctx, w); l != nil {
				mine = append(mine, l)
			}
			sleepCtx(ctx, pause)
			continue
		}
		for _, l := range mine {
			if l.kept && time.Since(l.lastSent) >= wl.ttl/3 {
				wl.keepAlive(ctx, w, l)
				if l.kept && w.Rng.IntN(12) == 0 {
					l.kept = false // abandoned
				}
			}
		}
		// Forget the leases abandoned long ago (Final reads them).
		live := mine[:0]
		for _, l := range mine {
			if l.kept || time.Since(l.lastSent) < 2*wl.ttl+wl.bound {
				live = append(live, l)
			}
		}
		mine = live
		if l := mine[w.Rng.IntN(len(mine))]; len(l.keys) > 0 {
			wl.read(ctx, w, "read", l, l.keys[w.Rng.IntN(len(l.keys))])
		}
		sleepCtx(ctx, pause)
	}
}

// grant grants a lease and attaches two keys to it; nil if the grant was
// not acknowledged.
func (wl *Lease) grant(ctx context.Context, w *Worker) *leaseState {
	n := int(wl.next.Add(1))
	l := &leaseState{n: n, rk: []byte(fmt.Sprintf("jl-%s-%d", wl.runID, n)), lastSent: time.Now()}
	op := w.Do(ctx, "lease", "grant", LeaseIn{Lease: n, TTLms: wl.ttl.Milliseconds()}, func(ctx context.Context) (Outcome, any, error) {
		id, err := w.DB.Grant(ctx, l.rk, wl.ttl)
		if err != nil {
			return writeOutcome(err), nil, err
		}
		return OK, LeaseOut{ID: uint64(id)}, nil
	})
	if op.Outcome != OK {
		return nil
	}
	l.id = client.LeaseID(op.Output.(LeaseOut).ID)
	l.kept = w.Rng.IntN(3) != 0
	for k := range 2 {
		key := fmt.Sprintf("a%d", k)
		value := strconv.FormatInt(wl.next.Add(1), 10)
		op := w.Do(ctx, "lease", "attach", LeaseIn{Lease: n, ID: l.id.String(), Key: key}, func(ctx context.Context) (Outcome, any, error) {
			err := w.DB.PutLeased(ctx, l.rk, []byte(key), []byte(value), l.id)
			if errors.Is(err, client.ErrLeaseNotFound) {
				return Fail, LeaseOut{NotFound: true}, err
			}
			return writeOutcome(err), nil, err
		})
		if op.Outcome != Fail {
			l.keys = append(l.keys, key)
		}
	}
	wl.mu.Lock()
	wl.leases = append(wl.leases, l)
	wl.mu.Unlock()
	return l
}

func (wl *Lease) keepAlive(ctx context.Context, w *Worker, l *leaseState) {
	l.lastSent = time.Now()
	op := w.Do(ctx, "lease", "keepalive", LeaseIn{Lease: l.n, ID: l.id.String()}, func(ctx context.Context) (Outcome, any, error) {
		ttl, err := w.DB.KeepAliveOnce(ctx, l.id)
		if errors.Is(err, client.ErrLeaseNotFound) {
			return Fail, LeaseOut{NotFound: true}, err
		}
		if err != nil {
			return writeOutcome(err), nil, err
		}
		return OK, LeaseOut{TTLms: ttl.Milliseconds()}, nil
	})
	if out, ok := op.Output.(LeaseOut); ok && out.NotFound {
		l.kept = false // lost: expired (or a bug)
	}
}

// read reads key of lease l (a linearizable Get) as op f.
func (wl *Lease) read(ctx context.Context, w *Worker, f string, l *leaseState, key string) Op {
	return w.Do(ctx, "lease", f, LeaseIn{Lease: l.n, ID: l.id.String(), Key: key}, func(ctx context.Context) (Outcome, any, error) {
		_, err := w.DB.Get(ctx, l.rk, []byte(key))
		if errors.Is(err, client.ErrNotFound) {
			return OK, LeaseOut{}, nil
		}
		if err != nil {
			return readOutcome(err), nil, err
		}
		return OK, LeaseOut{Present: true}, nil
	})
}

// Final reads every key of every lease (all abandoned now) until it is
// gone or its lease's deadline (leaseDeadlines) has passed.
func (wl *Lease) Final(ctx context.Context, w *Worker) error {
	wl.mu.Lock()
	leases := append([]*leaseState(nil), wl.leases...)
	wl.mu.Unlock()
	type pending struct {
		l   *leaseState
		key string
	}
	var left []pending
	for _, l := range leases {
		for _, k := range l.keys {
			left = append(left, pending{l, k})
		}
	}
	var deadlines map[int]int64
	for len(left) > 0 {
		next := left[:0]
		for _, p := range left {
			op := wl.read(ctx, w, "final-read", p.l, p.key)
			if deadlines == nil {
				// The first final read starts the clock.
				deadlines = leaseDeadlines(w.Rec.History().Of("lease"), wl.bound)
			}
			out, _ := op.Output.(LeaseOut)
			switch {
			case op.Outcome == OK && !out.Present:
			case op.Outcome == OK && op.Invoke > deadlines[p.l.n]:
				// Still there past its deadline: the checker reports it.
			default:
				next = append(next, p)
			}
		}
		left = next
		if len(left) > 0 {
			if ctx.Err() != nil {
				return fmt.Errorf("%d keys of abandoned leases neither gone nor past their deadline: %w", len(left), ctx.Err())
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

// leaseFacts is what the history says of one lease.
type leaseFacts struct {
	ttl time.Duration
	// cover is when the latest cover ends (a grant's or acknowledged
	// keep-alive's invocation plus its TTL), by: the op that gives it.
	cover   int64
	coverBy Op
	// renewed is the latest completion of a grant or keep-alive that may
	// have renewed it (acknowledged or indeterminate).
	renewed int64
	attach  map[string]Op // key -> its acknowledged attach
	granted bool
}

// leaseHistory gathers the facts of each lease of h (the lease ops), and
// the start of Final (the first final read's invocation; -1 if none).
func leaseHistory(h History) (map[int]*leaseFacts, int64) {
	facts := map[int]*leaseFacts{}
	get := func(n int) *leaseFacts {
		if facts[n] == nil {
			facts[n] = &leaseFacts{attach: map[string]Op{}}
		}
		return facts[n]
	}
	final := int64(-1)
	for _, op := range h {
		in, ok := op.Input.(LeaseIn)
		if !ok {
			continue
		}
		out, _ := op.Output.(LeaseOut)
		f := get(in.Lease)
		switch op.F {
		case "grant":
			if op.Outcome == OK {
				f.granted, f.ttl = true, time.Duration(in.TTLms)*time.Millisecond
				f.renew(op, f.ttl)
			}
		case "keepalive":
			switch op.Outcome {
			case OK:
				f.renew(op, time.Duration(out.TTLms)*time.Millisecond)
			case Info:
				f.renewed = max(f.renewed, op.Complete)
			}
		case "attach":
			if op.Outcome == OK {
				f.attach[in.Key] = op
			}
		case "final-read":
			if final < 0 || op.Invoke < final {
				final = op.Invoke
			}
		}
	}
	return facts, final
}

func (f *leaseFacts) renew(op Op, ttl time.Duration) {
	f.renewed = max(f.renewed, op.Complete)
	if c := op.Invoke + int64(ttl); c > f.cover {
		f.cover, f.coverBy = c, op
	}
}

// leaseDeadlines returns, per lease, when its keys must be gone: TTL +
// bound after the later of its last renewal and the start of Final.
func leaseDeadlines(h History, bound time.Duration) map[int]int64 {
	facts, final := leaseHistory(h)
	out := map[int]int64{}
	for n, f := range facts {
		out[n] = max(f.renewed, final) + int64(f.ttl+bound)
	}
	return out
}

// Check judges the lease ops of h.
func (wl *Lease) Check(h History, _ string) Verdict {
	return CheckLease(h.Of("lease"), wl.bound)
}

// CheckLease judges lease ops (Lease's doc lists what it proves) with the
// liveness bound.
func CheckLease(h History, bound time.Duration) Verdict {
	v := Verdict{Checker: "lease", Valid: true}
	facts, final := leaseHistory(h)
	deadlines := leaseDeadlines(h, bound)
	type keyID struct {
		lease int
		key   string
	}
	gone := map[keyID]bool{}       // a final read found it absent
	late := map[keyID]bool{}       // a final read past the deadline found it
	firstPresent := map[int]bool{} // lease -> its first final read found a key
	for _, op := range h {
		in, ok := op.Input.(LeaseIn)
		if !ok {
			v.anomaly("op %d: input %T", op.Index, op.Input)
			continue
		}
		out, _ := op.Output.(LeaseOut)
		f := facts[in.Lease]
		switch op.F {
		case "grant":
			if op.Outcome == OK {
				v.count("leases", 1)
			}
		case "keepalive":
			switch {
			case op.Outcome == OK:
				v.count("keepalives-acked", 1)
			case out.NotFound:
				v.count("keepalives-not-found", 1)
				if op.Complete < f.cover {
					v.anomaly("early expiry: lease %d (%s) answered not found to a keep-alive at %s..%s, but %s covers it until %s",
						in.Lease, in.ID, secs(op.Invoke), secs(op.Complete), coverDesc(f.coverBy), secs(f.cover))
				}
			}
		case "read", "final-read":
			if op.Outcome != OK {
				continue
			}
			v.count("reads", 1)
			id := keyID{in.Lease, in.Key}
			if op.F == "final-read" {
				if !out.Present {
					gone[id] = true
				} else if op.Invoke > deadlines[in.Lease] {
					late[id] = true
				}
				if _, ok := firstPresent[in.Lease]; !ok {
					firstPresent[in.Lease] = out.Present
				}
			}
			if out.Present {
				continue
			}
			v.count("reads-absent", 1)
			at, ok := f.attach[in.Key]
			if !ok || op.Invoke <= at.Complete {
				continue
			}
			if op.Complete < f.cover {
				v.anomaly("early expiry: key %s of lease %d (%s) read absent at %s..%s, but %s covers it until %s",
					in.Key, in.Lease, in.ID, secs(op.Invoke), secs(op.Complete), coverDesc(f.coverBy), secs(f.cover))
			}
		}
	}
	// Liveness: every key attached (or perhaps attached) must be gone.
	for _, op := range h {
		in, _ := op.Input.(LeaseIn)
		if op.F != "attach" || op.Outcome == Fail {
			continue
		}
		id := keyID{in.Lease, in.Key}
		f := facts[in.Lease]
		switch {
		case late[id]:
			v.anomaly("abandoned lease %d (%s): key %s still present after %s, TTL %v + %v after the later of its last renewal (%s) and the healed cluster (%s)",
				in.Lease, in.ID, in.Key, secs(deadlines[in.Lease]), f.ttl, bound, secs(f.renewed), secs(final))
		case !gone[id] && op.Outcome == OK:
			v.Unknown = true
			v.count("keys-undecided", 1)
		}
	}
	v.count("leases-present-at-final", countTrue(firstPresent))
	return v
}

func coverDesc(op Op) string {
	out, _ := op.Output.(LeaseOut)
	if op.F == "grant" {
		in, _ := op.Input.(LeaseIn)
		return fmt.Sprintf("its grant (op %d) invoked at %s with TTL %v", op.Index, secs(op.Invoke), time.Duration(in.TTLms)*time.Millisecond)
	}
	return fmt.Sprintf("a keep-alive (op %d) invoked at %s that acknowledged TTL %v", op.Index, secs(op.Invoke), time.Duration(out.TTLms)*time.Millisecond)
}

func countTrue(m map[int]bool) int {
	n := 0
	for _, b := range m {
		if b {
			n++
		}
	}
	return n
}
