package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// The lessor: a shard replica's memory of when its leases expire, kept
// while the replica leads (docs/architecture.md, "Leases"). The state
// machine records leases but reads no clock, so the leader decides:
//
//   - keep-alives are answered from memory after a read barrier (the
//     leader confirms its leadership, so no other leader gives the lease
//     less than what it promises): the lease then expires TTL after the
//     renewal. One case needs a commit: a lease whose remaining TTL was
//     checkpointed is renewed only once a checkpoint that clears it
//     commits, so that no later leader gives it the stale remainder;
//   - a new leader (once its leadership no-op is applied: every entry of
//     earlier terms is in its state) gives each lease its checkpointed
//     remaining TTL, or else a full TTL, from its election; so does a
//     leader adopting a slot's leases (a split or merge);
//   - every CheckpointInterval, while it holds leases, it checkpoints the
//     remaining TTL of the leases not kept alive (none from this leader, or none within
//     max(CheckpointInterval, TTL/2)) whose remaining TTL fell at least
//     max(CheckpointInterval, TTL/10) below what a new leader would give,
//     so repeated elections cannot extend an abandoned lease forever;
//   - when the earliest lease runs out it proposes the expiry of the
//     leases whose time ran out (OpLeaseExpire, which carries the term it
//     was decided in), at most once every TickInterval.
//
// The loop sleeps on one timer armed at the next of these (schedule); a
// replica that does not lead, or leads with no leases, arms none and does
// nothing until a promotion or news wakes it: an idle group's lessor
// costs no wakeups. A grant or lookup that adds a lease expiring before
// the armed time wakes the loop to re-arm (addLocked).
//
// Threads: the lessor's loop (promotion, the state machine's news, its
// timer and the proposals they make, one at a time) is joined by the
// replica's Close; keep-alives and grants run on their callers' goroutines
// under mu.

// LeaseConfig configures a shard replica's lessor; zero fields take their
// defaults.
type LeaseConfig struct {
	// MaxLeases is the most leases the shard may hold; a grant over it is
	// refused (ErrLeaseLimit). Default 100000.
	MaxLeases int
	// MaxKeysPerLease is the most keys a lease granted here may hold (kv
	// keys, runners and agents): it is recorded with the lease
	// (fsm.LeaseArgs.MaxKeys, once the cluster runs
	// fsm.VersionHardening), and an attachment over it is refused
	// (fsm.ErrLeaseFull). Default 10000; at most fsm.MaxLeaseKeysBound.
	MaxKeysPerLease int
	// CheckpointInterval is how often the leader, while it holds leases,
	// checkpoints the remaining TTLs of leases not kept alive. Default 1s.
	CheckpointInterval time.Duration
	// TickInterval is the least time between two of the leader's passes
	// over its leases: an expired lease's expiry is proposed when it runs
	// out, or TickInterval after the previous pass if that is later (a
	// failed expiry is retried then). Default 100ms.
	TickInterval time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c LeaseConfig) WithDefaults() LeaseConfig {
	if c.MaxLeases <= 0 {
		c.MaxLeases = 100000
	}
	if c.MaxKeysPerLease <= 0 {
		c.MaxKeysPerLease = DefaultMaxKeysPerLease
	}
	c.MaxKeysPerLease = min(c.MaxKeysPerLease, fsm.MaxLeaseKeysBound)
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	return c
}

// DefaultMaxKeysPerLease is LeaseConfig.MaxKeysPerLease's default.
const DefaultMaxKeysPerLease = 10000

// ErrLeaseLimit: the shard holds as many leases as it may
// (LeaseConfig.MaxLeases); nothing was granted.
var ErrLeaseLimit = errors.New("cluster: lease limit reached")

// lessorOpTimeout bounds each proposal the lessor makes on its own.
const lessorOpTimeout = 5 * time.Second

// lease is the lessor's memory of one lease.
type lease struct {
	id  uint64
	ttl time.Duration
	// expiry is when the lease ends unless kept alive (monotonic clock).
	expiry time.Time
	// lastKeepAlive is the last keep-alive this leader answered (or the
	// grant); zero when none.
	lastKeepAlive time.Time
	// cpRemaining is the remaining TTL the state machine holds for the
	// lease (0: none); cpUnknown is set while a checkpoint proposed for it
	// may have applied: the lease counts as checkpointed.
	cpRemaining time.Duration
	cpUnknown   bool
	// cpWait is closed when the checkpoint in flight for the lease is
	// answered (nil: none).
	cpWait chan struct{}
	// expiring is set while an expiry of the lease is in flight.
	expiring bool
}

// checkpointed reports whether a keep-alive must first clear the lease's
// checkpoint.
func (le *lease) checkpointed() bool { return le.cpRemaining > 0 || le.cpUnknown }

// Lessor keeps a shard replica's leases while it leads (see above).
type Lessor struct {
	r   *Replica
	cfg LeaseConfig
	log *slog.Logger

	mu struct {
		sync.Mutex
		// term is the term the lessor is primed in, 0 when it is not (a
		// follower, or a leader still priming).
		term     uint64
		leases   map[uint64]*lease
		granting int       // grants in flight (MaxLeases)
		next     time.Time // no lease expires before it (zero: unknown)
		// armed is when the loop's timer fires next (zero: not armed).
		armed time.Time
	}
	news struct {
		sync.Mutex
		ids     []uint64
		resync  bool
		promote uint64 // a term to prime in (0: none)
	}
	signal chan struct{} // cap 1: news, a promotion or an earlier lease waits
	// passes counts the loop's timed passes (expiries and checkpoints);
	// tests read it.
	passes atomic.Uint64
}

func newLessor(r *Replica, cfg LeaseConfig) *Lessor {
	l := &Lessor{r: r, cfg: cfg.WithDefaults(), log: r.log.With("component", "lessor"), signal: make(chan struct{}, 1)}
	l.mu.leases = map[uint64]*lease{}
	return l
}

// Leases is r's lessor, nil for a replica without one (the meta group).
func (r *Replica) Leases() *Lessor { return r.lessor }

func (l *Lessor) wake() {
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

// onNews is the state machine's OnLeases hook (on the apply goroutine).
func (l *Lessor) onNews(c fsm.LeaseChanges) {
	l.news.Lock()
	l.news.ids = append(l.news.ids, c.IDs...)
	l.news.resync = l.news.resync || c.Resync
	l.news.Unlock()
	l.wake()
}

// promote asks the loop to prime the lessor in term (the replica's
// leadership no-op of term is applied).
func (l *Lessor) promote(term uint64) {
	l.news.Lock()
	l.news.promote = term
	l.news.Unlock()
	l.wake()
}

// demote forgets every lease: the replica no longer leads.
func (l *Lessor) demote() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.term != 0 {
		l.log.Info("lessor stops", "term", l.mu.term, "leases", len(l.mu.leases))
	}
	l.mu.term = 0
	l.mu.leases = map[uint64]*lease{}
}

func (l *Lessor) now() time.Time { return time.Now() }

// run is the lessor's loop; it returns when the replica closes.
func (l *Lessor) run() {
	defer l.r.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var lastPass, lastCheckpoint time.Time
	for {
		if at := l.schedule(lastPass, lastCheckpoint); at.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(max(at.Sub(l.now()), 0))
		}
		select {
		case <-l.r.done:
			return
		case <-l.signal:
			l.handleNews()
		case <-timer.C:
			l.passes.Add(1)
			now := l.now()
			lastPass = now
			l.expireDue()
			if now.Sub(lastCheckpoint) >= l.cfg.CheckpointInterval {
				lastCheckpoint = now
				l.checkpoint()
			}
		}
	}
}

// schedule returns when the loop's next pass is due, given its previous
// pass and checkpoint, and records it as armed; zero when none is (not
// leading, or no leases). A pass is due at the earliest expiry (now when
// unknown) or at the next checkpoint, and never sooner than TickInterval
// after the previous pass.
func (l *Lessor) schedule(lastPass, lastCheckpoint time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.term == 0 || len(l.mu.leases) == 0 {
		l.mu.armed = time.Time{}
		return l.mu.armed
	}
	now := l.now()
	at := l.mu.next
	if at.IsZero() {
		at = now
	}
	if cp := lastCheckpoint.Add(l.cfg.CheckpointInterval); cp.Before(at) {
		at = cp
	}
	if soonest := lastPass.Add(l.cfg.TickInterval); at.Before(soonest) {
		at = soonest
	}
	l.mu.armed = at
	return at
}

// handleNews primes the lessor when a promotion waits, then applies the
// state machine's news.
func (l *Lessor) handleNews() {
	l.news.Lock()
	term := l.news.promote
	l.news.promote = 0
	if term != 0 {
		// The state read below covers every run committed before now:
		// their news is dropped.
		l.news.ids, l.news.resync = nil, false
	}
	ids, resync := l.news.ids, l.news.resync
	l.news.ids, l.news.resync = nil, false
	l.news.Unlock()
	if term != 0 {
		l.prime(term)
		return
	}
	if resync {
		l.resync()
		return
	}
	if len(ids) > 0 {
		l.refresh(ids)
	}
}

// prime loads every lease of the owned slots, each given its
// checkpointed remaining TTL or a full TTL from now.
func (l *Lessor) prime(term uint64) {
	recs, err := l.r.fsm.Leases(0, 0, nil)
	if err != nil {
		l.log.Error("lessor: cannot read the leases; not serving them in this term", "term", term, "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.r.readyTerm.Load() != term {
		return // leadership moved on meanwhile
	}
	now := l.now()
	l.mu.term = term
	l.mu.leases = make(map[uint64]*lease, len(recs))
	for _, rec := range recs {
		l.addLocked(rec, now)
	}
	l.mu.next = time.Time{}
	l.log.Info("lessor primed", "term", term, "leases", len(recs))
}

// addLocked adds rec to memory, expiring its remaining TTL (or its TTL)
// after now.
func (l *Lessor) addLocked(rec *fsm.LeaseRecord, now time.Time) *lease {
	left := rec.TTL()
	if rec.RemainingMs > 0 {
		left = rec.Remaining()
	}
	le := &lease{id: rec.ID, ttl: rec.TTL(), expiry: now.Add(left), cpRemaining: rec.Remaining()}
	l.mu.leases[rec.ID] = le
	if l.mu.next.IsZero() || le.expiry.Before(l.mu.next) {
		l.mu.next = le.expiry
	}
	if l.mu.armed.IsZero() || le.expiry.Before(l.mu.armed) {
		l.wake() // the loop's timer is not armed early enough
	}
	return le
}

// resync makes memory agree with the state machine's leases (after a
// slot move op or a restore): leases it lacks are added, leases gone or
// of slots no longer owned are dropped.
func (l *Lessor) resync() {
	recs, err := l.r.fsm.Leases(0, 0, nil)
	if err != nil {
		l.log.Error("lessor: cannot read the leases", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.term == 0 {
		return
	}
	now := l.now()
	have := make(map[uint64]bool, len(recs))
	added := 0
	for _, rec := range recs {
		have[rec.ID] = true
		if le := l.mu.leases[rec.ID]; le != nil {
			le.cpRemaining = rec.Remaining()
			continue
		}
		l.addLocked(rec, now)
		added++
	}
	removed := 0
	for id := range l.mu.leases {
		if !have[id] {
			delete(l.mu.leases, id)
			removed++
		}
	}
	if added > 0 || removed > 0 {
		l.log.Info("lessor resynced with the state machine", "added", added, "removed", removed, "leases", len(l.mu.leases))
	}
}

// refresh re-reads the leases ids from the state machine.
func (l *Lessor) refresh(ids []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.term == 0 {
		return
	}
	now := l.now()
	for _, id := range ids {
		rec, err := l.r.fsm.Lease(id)
		if err != nil {
			delete(l.mu.leases, id) // ended, moved, or unreadable
			continue
		}
		if le := l.mu.leases[id]; le != nil {
			le.cpRemaining = rec.Remaining()
			continue
		}
		l.addLocked(rec, now)
	}
}

// ready returns the term the lessor serves in, or why it does not.
func (l *Lessor) ready() (uint64, error) {
	l.mu.Lock()
	term := l.mu.term
	l.mu.Unlock()
	if term != 0 && l.r.raft.CurrentTerm() == term {
		return term, nil
	}
	if !l.r.IsLeader() {
		return 0, ErrNotLeader
	}
	return 0, ErrLeaderNotReady
}

// lookupLocked returns the lease id in memory, or adds it from the state
// machine (granted or adopted, its news not handled yet); nil when the
// state machine has none.
func (l *Lessor) lookupLocked(id uint64, now time.Time) (*lease, error) {
	if le := l.mu.leases[id]; le != nil {
		return le, nil
	}
	rec, err := l.r.fsm.Lease(id)
	if err != nil {
		return nil, err
	}
	return l.addLocked(rec, now), nil
}

func errExpired(id uint64) error {
	return fmt.Errorf("%w: %016x expired", fsm.ErrLeaseNotFound, id)
}

// slotOf is the slot of lease id.
func slotOf(id uint64) shard.Slot { return shard.Slot(keys.LeaseSlot(id)) }

// Grant proposes a new lease of ttl in routingKey's slot and returns its
// id. ErrLeaseLimit when the shard holds LeaseConfig.MaxLeases leases.
// It is GrantOwned without an owner.
func (l *Lessor) Grant(ctx context.Context, routingKey []byte, ttl time.Duration) (uint64, error) {
	return l.GrantOwned(ctx, routingKey, ttl, "")
}

// GrantOwned is Grant of a lease that owner ("": none) holds. Once the
// cluster runs fsm.VersionHardening the grant records owner and the key
// bound (LeaseConfig.MaxKeysPerLease) and its id takes 56 random bits;
// before, it is a grant of the earlier versions (no owner, no bound, the
// slot's next sequence number), which every replica applies alike.
func (l *Lessor) GrantOwned(ctx context.Context, routingKey []byte, ttl time.Duration, owner string) (uint64, error) {
	term, err := l.ready()
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	if n := len(l.mu.leases) + l.mu.granting; n >= l.cfg.MaxLeases {
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: shard %d holds %d leases, the most it may (--max-leases-per-shard)", ErrLeaseLimit, l.r.id, n)
	}
	l.mu.granting++
	l.mu.Unlock()
	res, err := l.proposeGrant(ctx, routingKey, ttl, owner)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.granting--
	if err != nil {
		return 0, err
	}
	if l.mu.term == term {
		// The grant counts as a keep-alive (the state machine's news may
		// have added the lease already).
		now := l.now()
		le := l.mu.leases[res.LeaseID]
		if le == nil {
			le = l.addLocked(&fsm.LeaseRecord{ID: res.LeaseID, TTLMs: ttl.Milliseconds()}, now)
		}
		if !le.expiring && le.cpWait == nil && !le.checkpointed() {
			le.expiry, le.lastKeepAlive = now.Add(le.ttl), now
		}
	}
	return res.LeaseID, nil
}

// proposeGrant proposes a grant (GrantOwned), with a fresh random id if
// the one drawn is taken (fsm.ErrLeaseIDTaken, a chance of n in 2^56 in
// a slot of n leases).
func (l *Lessor) proposeGrant(ctx context.Context, routingKey []byte, ttl time.Duration, owner string) (*fsm.Result, error) {
	for try := 0; ; try++ {
		args := &fsm.LeaseArgs{RoutingKey: routingKey, TTLMs: ttl.Milliseconds(), Owner: owner,
			Nonce: randomNonce(), MaxKeys: int64(l.cfg.MaxKeysPerLease)}
		cmd := &fsm.Command{Op: fsm.OpLeaseGrant, Time: time.Now().UnixMilli(), Lease: args}
		if l.r.admit != nil && l.r.admit(cmd) != nil {
			// The cluster does not run VersionHardening yet: a grant
			// of the earlier versions.
			args.Owner, args.Nonce, args.MaxKeys = "", 0, 0
		}
		res, err := l.r.Propose(ctx, cmd)
		if errors.Is(err, fsm.ErrLeaseIDTaken) && try < 3 {
			continue
		}
		return res, err
	}
}

// randomNonce returns 56 random bits, not all zero (fsm.LeaseArgs.Nonce).
func randomNonce() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		if n := binary.BigEndian.Uint64(b[:]) & keys.MaxLeaseSeq; n != 0 {
			return n
		}
	}
}

// Revoke ends lease id now: its keys are deleted (and its agents failed)
// in the same command. It returns the number of keys deleted. It is
// RevokeDenying denying nothing.
func (l *Lessor) Revoke(ctx context.Context, id uint64) (int, error) {
	return l.RevokeDenying(ctx, id, 0)
}

// RevokeDenying is Revoke refused (fsm.ErrLeaseDenied, nothing changed)
// when the lease holds a key of a kind in deny (fsm.LeaseKindKV...), as
// the state machine finds it when the revoke applies. Before the cluster
// runs fsm.VersionHardening the state machine cannot check it: the caller
// checks it before (package api).
func (l *Lessor) RevokeDenying(ctx context.Context, id uint64, deny uint8) (int, error) {
	cmd := &fsm.Command{Op: fsm.OpLeaseRevoke, Lease: &fsm.LeaseArgs{ID: id, Deny: deny}, Time: time.Now().UnixMilli()}
	if deny != 0 && l.r.admit != nil && l.r.admit(cmd) != nil {
		cmd.Lease.Deny = 0
	}
	res, err := l.r.Propose(ctx, cmd)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	delete(l.mu.leases, id)
	l.mu.Unlock()
	return res.Deleted, nil
}

// KeepAlive renews lease id: it will not expire before its TTL from now
// (the returned TTL). fsm.ErrLeaseNotFound when it does not exist or has
// expired; a *fsm.MovedError when its slot is not this shard's.
func (l *Lessor) KeepAlive(ctx context.Context, id uint64) (time.Duration, error) {
	term, err := l.ready()
	if err != nil {
		return 0, err
	}
	if err := l.r.ReadBarrier(ctx); err != nil {
		return 0, err
	}
	if err := l.r.fsm.CheckSlot(slotOf(id)); err != nil {
		return 0, err
	}
	for {
		l.mu.Lock()
		if l.mu.term != term {
			l.mu.Unlock()
			return 0, ErrNotLeader
		}
		now := l.now()
		le, err := l.lookupLocked(id, now)
		switch {
		case err != nil:
			l.mu.Unlock()
			return 0, err
		case le.expiring || !now.Before(le.expiry):
			l.mu.Unlock()
			return 0, errExpired(id)
		case le.cpWait != nil: // a checkpoint in flight: wait for it
			wait := le.cpWait
			l.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			continue
		case le.checkpointed():
			// Clear the checkpoint first, so that no later leader gives
			// the lease the stale remainder.
			wait := make(chan struct{})
			le.cpWait = wait
			l.mu.Unlock()
			err := l.proposeCheckpoints(ctx, term, []fsm.LeaseCheckpoint{{ID: id}})
			l.mu.Lock()
			le.cpWait = nil
			close(wait)
			if err == nil {
				le.cpRemaining, le.cpUnknown = 0, false
			}
			l.mu.Unlock()
			if err != nil {
				return 0, err
			}
			continue
		}
		le.expiry, le.lastKeepAlive = now.Add(le.ttl), now
		ttl := le.ttl
		l.mu.Unlock()
		// The slot may have been frozen while renewing: the answer is
		// then the new owner's to give.
		if err := l.r.fsm.CheckSlot(slotOf(id)); err != nil {
			return 0, err
		}
		return ttl, nil
	}
}

// LeaseStatus is what TimeToLive answers.
type LeaseStatus struct {
	Record *fsm.LeaseRecord
	// Remaining is the time left before the lease expires unless kept
	// alive, as this leader counts it.
	Remaining time.Duration
}

// TimeToLive returns lease id's record and remaining time, after a read
// barrier. fsm.ErrLeaseNotFound when it does not exist or has expired.
func (l *Lessor) TimeToLive(ctx context.Context, id uint64) (*LeaseStatus, error) {
	var rec *fsm.LeaseRecord
	var st *LeaseStatus
	err := l.leaderRead(ctx, func() (err error) {
		rec, err = l.r.fsm.Lease(id)
		return err
	}, func(now time.Time) error {
		le, err := l.lookupLocked(id, now)
		if err != nil {
			return err
		}
		left := le.expiry.Sub(now)
		if left <= 0 || le.expiring {
			return errExpired(id)
		}
		st = &LeaseStatus{Record: rec, Remaining: left}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// List returns up to limit leases of the shard with ids above after, in
// id order, each with its remaining time, after a read barrier.
// keep (nil: any) chooses the leases listed (package api: the caller's).
func (l *Lessor) List(ctx context.Context, after uint64, limit int, keep func(*fsm.LeaseRecord) bool) ([]LeaseStatus, error) {
	var recs []*fsm.LeaseRecord
	var out []LeaseStatus
	err := l.leaderRead(ctx, func() (err error) {
		recs, err = l.r.fsm.Leases(after, limit, keep)
		return err
	}, func(now time.Time) error {
		out = make([]LeaseStatus, 0, len(recs))
		for _, rec := range recs {
			st := LeaseStatus{Record: rec, Remaining: rec.TTL()}
			if le := l.mu.leases[rec.ID]; le != nil {
				st.Remaining = max(le.expiry.Sub(now), 0)
			}
			out = append(out, st)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// leaderRead is a read of the leases as this leader knows them: after a
// read barrier it runs read (the state machine's part), then fn with l.mu
// held and the lessor's clock, unless the leadership it began in ended
// meanwhile (ErrNotLeader). Each step's error ends it.
func (l *Lessor) leaderRead(ctx context.Context, read func() error, fn func(now time.Time) error) error {
	term, err := l.ready()
	if err != nil {
		return err
	}
	if err := l.r.ReadBarrier(ctx); err != nil {
		return err
	}
	if err := read(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.term != term {
		return ErrNotLeader
	}
	return fn(l.now())
}

// Count is the number of leases the lessor holds in memory (0 when not
// leading, or without a lessor).
func (l *Lessor) Count() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.leases)
}

// proposeCheckpoints proposes the checkpoints cps (in id order) decided in
// term. A checkpoint applied in an entry of another term is refused by the
// state machine: ErrNotLeader then (this leadership is over).
func (l *Lessor) proposeCheckpoints(ctx context.Context, term uint64, cps []fsm.LeaseCheckpoint) error {
	_, err := l.r.Propose(ctx, &fsm.Command{Op: fsm.OpLeaseCheckpoint, Lease: &fsm.LeaseArgs{Checkpoints: cps, Term: term}})
	if errors.Is(err, fsm.ErrStaleLeaseCommand) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// opContext is the context of a proposal the lessor makes on its own (a
// proposal also returns when the replica closes).
func (l *Lessor) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), lessorOpTimeout)
}

// expireDue proposes the expiry of every lease whose time ran out.
func (l *Lessor) expireDue() {
	l.mu.Lock()
	term := l.mu.term
	now := l.now()
	if term == 0 || (!l.mu.next.IsZero() && now.Before(l.mu.next)) {
		l.mu.Unlock()
		return
	}
	var due []uint64
	var next time.Time
	for id, le := range l.mu.leases {
		if le.expiring {
			continue
		}
		if !now.Before(le.expiry) {
			le.expiring = true
			due = append(due, id)
		} else if next.IsZero() || le.expiry.Before(next) {
			next = le.expiry
		}
	}
	l.mu.next = next
	l.mu.Unlock()
	if len(due) == 0 {
		return
	}
	slices.Sort(due)
	for len(due) > 0 {
		n := l.expiryBatch(due)
		ids := due[:n]
		due = due[n:]
		ctx, cancel := l.opContext()
		res, err := l.r.Propose(ctx, &fsm.Command{Op: fsm.OpLeaseExpire, Time: time.Now().UnixMilli(),
			Lease: &fsm.LeaseArgs{IDs: ids, Term: term}})
		cancel()
		l.mu.Lock()
		for _, id := range ids {
			le := l.mu.leases[id]
			if le == nil {
				continue
			}
			if err == nil {
				delete(l.mu.leases, id)
				continue
			}
			le.expiring = false // the next tick proposes it again
			l.mu.next = time.Time{}
		}
		l.mu.Unlock()
		if err != nil {
			if l.r.IsLeader() {
				l.log.Warn("lessor: expiry not applied; retrying", "leases", len(ids), "err", err)
			}
			return
		}
		l.log.Debug("leases expired", "leases", res.Removed, "keys_deleted", res.Deleted)
	}
}

// maxExpiryKeys bounds the attached keys one OpLeaseExpire ends (their
// sum over its leases, as the records count them), so one expiry entry is
// a bounded apply whatever the leases hold: up to fsm.MaxLeaseBatch
// leases of few keys, or fewer leases of many (down to one lease, whose
// own bound is --max-keys-per-lease).
const maxExpiryKeys = 10000

// expiryBatch returns how many of due (sorted ids) the next OpLeaseExpire
// carries: at most fsm.MaxLeaseBatch, and no more keys than maxExpiryKeys
// once it holds one lease. A lease granted before its keys were counted
// (MaxKeys 0: no bound, no count) goes alone, as does any lease whose
// record cannot be read here (the apply decides).
func (l *Lessor) expiryBatch(due []uint64) int {
	n, keys := 0, int64(0)
	for n < len(due) && n < fsm.MaxLeaseBatch {
		k := int64(maxExpiryKeys) // unknown: a batch of its own
		if rec, err := l.r.fsm.Lease(due[n]); err == nil && rec != nil && rec.MaxKeys > 0 {
			k = rec.Keys
		}
		if n > 0 && keys+k > maxExpiryKeys {
			break
		}
		keys += k
		n++
	}
	return max(n, 1)
}

// checkpoint proposes the remaining TTLs of the leases not kept alive.
func (l *Lessor) checkpoint() {
	l.mu.Lock()
	term := l.mu.term
	if term == 0 {
		l.mu.Unlock()
		return
	}
	now := l.now()
	wait := make(chan struct{})
	var cps []fsm.LeaseCheckpoint
	var les []*lease
	for id, le := range l.mu.leases {
		if le.expiring || le.cpWait != nil {
			continue
		}
		if !le.lastKeepAlive.IsZero() && now.Sub(le.lastKeepAlive) < max(l.cfg.CheckpointInterval, le.ttl/2) {
			continue // kept alive
		}
		left := le.expiry.Sub(now)
		if left <= 0 {
			continue
		}
		given := le.ttl // what a new leader would give it
		if le.cpRemaining > 0 {
			given = le.cpRemaining
		}
		if given-left < max(l.cfg.CheckpointInterval, le.ttl/10) {
			continue
		}
		// Rounded up: a new leader never gives less than what is left.
		ms := (left + time.Millisecond - 1) / time.Millisecond
		cps = append(cps, fsm.LeaseCheckpoint{ID: id, RemainingMs: int64(ms)})
		le.cpWait, le.cpUnknown = wait, true
		les = append(les, le)
	}
	l.mu.Unlock()
	if len(cps) == 0 {
		return
	}
	slices.SortFunc(cps, func(a, b fsm.LeaseCheckpoint) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	applied := map[uint64]time.Duration{}
	for rest := cps; len(rest) > 0; {
		n := min(len(rest), fsm.MaxLeaseBatch)
		ctx, cancel := l.opContext()
		err := l.proposeCheckpoints(ctx, term, rest[:n])
		cancel()
		if err != nil {
			if l.r.IsLeader() {
				l.log.Warn("lessor: checkpoint not applied", "leases", n, "err", err)
			}
			break
		}
		for _, cp := range rest[:n] {
			applied[cp.ID] = time.Duration(cp.RemainingMs) * time.Millisecond
		}
		rest = rest[n:]
	}
	l.mu.Lock()
	for _, le := range les {
		le.cpWait = nil
		if rem, ok := applied[le.id]; ok {
			le.cpRemaining, le.cpUnknown = rem, false
		}
		// Not applied (or unknown): cpUnknown stays, so a keep-alive
		// clears the checkpoint first.
	}
	l.mu.Unlock()
	close(wait)
}
