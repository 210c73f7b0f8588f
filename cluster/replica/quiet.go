package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/transport"
)

// Quiet groups (docs/architecture.md, "Quiet groups"; docs/scale.md). A
// group with no work for QuietConfig.After moves, on every replica, from
// its normal Raft timeouts to the quiet row:
//
//	|        | heartbeat, election | leader lease | commit timeout |
//	| normal | Config.Raft         | Config.Raft  | Config.Raft    |
//	| quiet  | T                   | T/2          | T              |
//
// (T = QuietConfig.Timeout), with ReloadConfig (the fork's patches 0001
// and 0002 make the lease and the commit timeout reloadable). The leader
// decides both ways: it asks each follower to go quiet (a notice,
// transport.Noticer), and goes quiet itself last, once every follower
// answered with the leader's own last index; on the first request it
// reloads itself to the normal row within the request path (touch), then
// tells the followers, retrying each QuietConfig.WakeRetry until they
// answer. A Raft observer wakes a replica on any vote request, state
// change or new leader, so that an election after a real failure runs at
// the normal timeouts once it started. The meta group is never quiet.

// QuietConfig turns quiet groups on for a replica (Config.Quiet; nil: off).
type QuietConfig struct {
	// After is how long a group's leader waits without activity (a
	// proposal, read barrier, configuration change, leadership transfer,
	// or a live lease) before it asks the group to go quiet. Required.
	After time.Duration
	// Timeout is T, the quiet row's heartbeat and election timeout (lease
	// T/2, commit timeout T). Required; at least the normal heartbeat and
	// election timeouts.
	Timeout time.Duration
	// Meta marks the meta group, which is never quiet.
	Meta bool
	// Notify sends a notice to a peer (the node's transport.Noticer).
	// Required.
	Notify func(ctx context.Context, to raft.Server, n transport.Notice) (transport.NoticeReply, error)
	// WakeRetry is how often the leader retries telling a follower that
	// the group woke. Default 1s.
	WakeRetry time.Duration
}

// validateQuiet checks c.Quiet against c.Raft.
func (c Config) validateQuiet() error {
	q := c.Quiet
	switch {
	case q.After <= 0:
		return fmt.Errorf("quiet: After %v is not positive", q.After)
	case q.Timeout < c.Raft.HeartbeatTimeout || q.Timeout < c.Raft.ElectionTimeout:
		return fmt.Errorf("quiet: Timeout %v is below the heartbeat (%v) or election (%v) timeout", q.Timeout, c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout)
	case q.Notify == nil:
		return errors.New("quiet: no Notify")
	}
	return nil
}

// quietAction is decideQuiet's answer.
type quietAction uint8

const (
	// quietStay: nothing to do.
	quietStay quietAction = iota
	// quietAsk: an idle leader asks its followers to go quiet.
	quietAsk
	// quietGo: every follower is quiet at the leader's last index; the
	// leader goes quiet.
	quietGo
	// quietWake: the replica runs the quiet row and must not.
	quietWake
)

func (a quietAction) String() string {
	return [...]string{"stay", "ask", "go", "wake"}[a]
}

// quietInput is what decideQuiet looks at.
type quietInput struct {
	Now, LastActivity time.Time
	// After is QuietConfig.After (0: quiet groups off).
	After time.Duration
	// Leases is the number of live leases the replica keeps (work).
	Leases int
	// Leader: the replica leads its group.
	Leader bool
	// Quiet: the replica runs the quiet row.
	Quiet bool
	// FollowersQuiet: every follower answered a quiet notice with the
	// leader's last index, and nothing happened since.
	FollowersQuiet bool
	// Meta: the meta group, never quiet.
	Meta bool
}

// decideQuiet is the quiet controller's pure decision.
func decideQuiet(in quietInput) quietAction {
	off := in.Meta || in.After <= 0
	if off || in.Leader && (in.Leases > 0 || in.Now.Sub(in.LastActivity) < in.After) {
		if in.Quiet {
			return quietWake
		}
		return quietStay
	}
	switch {
	case !in.Leader, in.Quiet:
		// A follower follows its leader's notices (and the observer);
		// a quiet leader stays so until activity.
		return quietStay
	case in.FollowersQuiet:
		return quietGo
	default:
		return quietAsk
	}
}

// quietCtl is a replica's quiet controller (nil without Config.Quiet).
type quietCtl struct {
	cfg QuietConfig
	// normal is the replica's normal row.
	normal RaftSettings
	// activity is when touch last ran (unix ns); seq counts touches.
	activity atomic.Int64
	seq      atomic.Uint64
	// quiet: the local Raft runs the quiet row.
	quiet  atomic.Bool
	signal chan struct{} // cap 1: wakes quietLoop
	// rows counts the reloads to each row (tests, metrics).
	toQuiet, toNormal atomic.Uint64

	// mu orders the reloads; nothing under it waits on Raft's main loop
	// (the observer takes it on Raft's goroutine).
	mu struct {
		sync.Mutex
		// asked are the followers this replica, as leader, told to go
		// quiet since it last woke them.
		asked map[raft.ServerID]raft.Server
		// wake are the followers still to be told the group woke.
		wake map[raft.ServerID]raft.Server
	}
}

func newQuietCtl(cfg QuietConfig, normal RaftSettings) *quietCtl {
	if cfg.WakeRetry <= 0 {
		cfg.WakeRetry = time.Second
	}
	q := &quietCtl{cfg: cfg, normal: normal, signal: make(chan struct{}, 1)}
	q.activity.Store(time.Now().UnixNano())
	q.mu.asked = map[raft.ServerID]raft.Server{}
	q.mu.wake = map[raft.ServerID]raft.Server{}
	return q
}

func (q *quietCtl) kick() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// touch records activity: a proposal, read barrier, configuration change
// or leadership transfer. A quiet leader wakes here, before the request
// goes on.
func (r *Replica) touch() {
	q := r.quiet
	if q == nil {
		return
	}
	q.seq.Add(1)
	q.activity.Store(time.Now().UnixNano())
	// Only a leader wakes itself: a follower's Raft wakes with its leader
	// (a lowered heartbeat timeout with a stale contact starts an
	// election), and the request fails there anyway.
	if q.quiet.Load() && r.raft.State() == raft.Leader {
		r.wake("request")
	}
}

// setRowLocked reloads Raft's timeouts to the quiet or the normal row.
func (r *Replica) setRowLocked(quiet bool) error {
	q := r.quiet
	rc := r.raft.ReloadableConfig()
	if quiet {
		t := q.cfg.Timeout
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout, rc.CommitTimeout = t, t, t/2, t
	} else {
		n := q.normal
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout, rc.CommitTimeout = n.HeartbeatTimeout, n.ElectionTimeout, n.LeaderLeaseTimeout, n.CommitTimeout
	}
	if err := r.raft.ReloadConfig(rc); err != nil {
		return err
	}
	q.quiet.Store(quiet)
	if quiet {
		q.toQuiet.Add(1)
	} else {
		q.toNormal.Add(1)
	}
	return nil
}

// wake reloads the normal row if the replica runs the quiet row; the
// followers it told to go quiet are told it woke (quietLoop).
func (r *Replica) wake(why string) {
	q := r.quiet
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.quiet.Load() {
		return
	}
	if err := r.setRowLocked(false); err != nil {
		r.log.Error("quiet: cannot wake", "why", why, "err", err)
		return
	}
	r.log.Debug("quiet: awake", "why", why)
	for id, s := range q.mu.asked {
		q.mu.wake[id] = s
	}
	clear(q.mu.asked)
	q.kick()
}

// observeQuiet is the filter of the replica's second Raft observer: any
// vote or pre-vote request, state change or new leader wakes the replica
// (an election runs at the normal timeouts), and lets the loop look again.
// It runs on Raft's goroutine and drops every observation.
func (r *Replica) observeQuiet(o *raft.Observation) bool {
	switch o.Data.(type) {
	case raft.RequestVoteRequest, raft.RequestPreVoteRequest, raft.RaftState, raft.LeaderObservation:
		r.wake("election")
		r.quiet.kick()
	}
	return false
}

// quietLoop runs the controller: it tells woken followers (retrying), and
// on the leader asks the followers to go quiet after QuietConfig.After
// without activity.
func (r *Replica) quietLoop() {
	defer r.wg.Done()
	q := r.quiet
	t := time.NewTimer(q.cfg.After)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-q.signal:
		case <-t.C:
		}
		left := r.sendWakes()
		act := r.quietStep()
		t.Stop()
		switch {
		case left > 0:
			t.Reset(q.cfg.WakeRetry)
		case r.IsLeader() && !q.quiet.Load():
			// Look again when the group has been idle for After; a
			// leader that is idle but stays awake (live leases, or a
			// follower that did not go quiet) looks again after After.
			next := time.Until(time.Unix(0, q.activity.Load()).Add(q.cfg.After))
			if next <= 0 || act == quietAsk {
				next = q.cfg.After
			}
			t.Reset(next)
		}
	}
}

// quietStep decides and acts once; it returns the decision.
func (r *Replica) quietStep() quietAction {
	act := decideQuiet(r.quietInput(false))
	switch act {
	case quietWake:
		r.wake("activity")
	case quietAsk:
		if r.goQuiet() {
			return quietGo
		}
	}
	return act
}

func (r *Replica) quietInput(followersQuiet bool) quietInput {
	q := r.quiet
	return quietInput{
		Now:            time.Now(),
		LastActivity:   time.Unix(0, q.activity.Load()),
		After:          q.cfg.After,
		Leases:         r.lessor.Count(),
		Leader:         r.IsLeader(),
		Quiet:          q.quiet.Load(),
		FollowersQuiet: followersQuiet,
		Meta:           q.cfg.Meta,
	}
}

// goQuiet asks every follower to go quiet at the leader's last index; when
// all answered with it and nothing happened meanwhile, the leader goes
// quiet. Followers that went quiet while the leader did not are woken.
func (r *Replica) goQuiet() bool {
	q := r.quiet
	seq := q.seq.Load()
	term, last := r.raft.CurrentTerm(), r.raft.LastIndex()
	cf := r.raft.GetConfiguration()
	bindShutdown(cf, r.done)
	if cf.Error() != nil {
		return false
	}
	all := true
	var quieted []raft.Server
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == string(r.localID) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.WakeRetry)
		reply, err := q.cfg.Notify(ctx, s, transport.Notice{Kind: transport.NoticeQuiet, Group: uint32(r.id), Term: term, Index: last, From: string(r.localID)})
		cancel()
		if err != nil && !errors.Is(err, transport.ErrNotQuietCapable) {
			r.log.Debug("quiet: notice", "peer", s.ID, "err", err)
		}
		if err == nil && reply.Done {
			quieted = append(quieted, s)
		}
		if err != nil || !reply.Done || reply.LastIndex != last {
			all = false
		}
	}
	ok := all && q.seq.Load() == seq && r.raft.CurrentTerm() == term && r.raft.LastIndex() == last
	act := decideQuiet(r.quietInput(ok))

	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range quieted {
		q.mu.asked[s.ID] = s
	}
	if act != quietGo {
		for id, s := range q.mu.asked {
			q.mu.wake[id] = s
		}
		clear(q.mu.asked)
		q.kick()
		return false
	}
	if err := r.setRowLocked(true); err != nil {
		r.log.Error("quiet: cannot go quiet", "err", err)
		return false
	}
	// A touch that ran before quiet was set is seen here; one after it
	// sees quiet and wakes the replica.
	if q.seq.Load() != seq || !r.IsLeader() {
		_ = r.setRowLocked(false)
		for id, s := range q.mu.asked {
			q.mu.wake[id] = s
		}
		clear(q.mu.asked)
		q.kick()
		return false
	}
	r.log.Debug("quiet: group quiet", "term", term, "index", last)
	return true
}

// sendWakes tells the followers in q.mu.wake that the group woke; it
// returns how many are still to be told.
func (r *Replica) sendWakes() int {
	q := r.quiet
	q.mu.Lock()
	pending := make([]raft.Server, 0, len(q.mu.wake))
	for _, s := range q.mu.wake {
		pending = append(pending, s)
	}
	q.mu.Unlock()
	left := 0
	for _, s := range pending {
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.WakeRetry)
		reply, err := q.cfg.Notify(ctx, s, transport.Notice{Kind: transport.NoticeWake, Group: uint32(r.id), Term: r.raft.CurrentTerm(), From: string(r.localID)})
		cancel()
		q.mu.Lock()
		if err == nil && reply.Done {
			delete(q.mu.wake, s.ID)
		} else if _, still := q.mu.wake[s.ID]; still {
			left++
		}
		q.mu.Unlock()
	}
	return left
}

// Notice answers a peer's notice about r's group (the node's
// transport.Noticer hands it here).
//
// NoticeQuiet is done only on a follower at the notice's term whose
// leader is the notice's sender: it reloads the quiet row. NoticeWake is
// done once r runs the normal row; a follower reloads it only after a
// fresh contact from its leader (else its heartbeat timer, lowered, would
// start an election), and says not done before, so the leader asks again.
func (r *Replica) Notice(n transport.Notice) transport.NoticeReply {
	q := r.quiet
	reply := transport.NoticeReply{LastIndex: r.raft.LastIndex()}
	if q == nil {
		return reply
	}
	switch n.Kind {
	case transport.NoticeQuiet:
		_, leader := r.raft.LeaderWithID()
		if q.cfg.Meta || q.cfg.After <= 0 || r.raft.State() != raft.Follower || r.raft.CurrentTerm() != n.Term || string(leader) != n.From {
			return reply
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if !q.quiet.Load() {
			if err := r.setRowLocked(true); err != nil {
				r.log.Error("quiet: cannot go quiet", "err", err)
				return reply
			}
		}
		reply.Done = true
	case transport.NoticeWake:
		if !q.quiet.Load() {
			reply.Done = true
			return reply
		}
		if r.raft.State() == raft.Follower && time.Since(r.raft.LastContact()) >= q.normal.HeartbeatTimeout/2 {
			return reply
		}
		r.wake("notice")
		reply.Done = !q.quiet.Load()
	}
	return reply
}

// QuietStats are the quiet controller's counters.
type QuietStats struct {
	// Quiet: the replica runs the quiet row now.
	Quiet bool
	// ToQuiet and ToNormal count the reloads to each row.
	ToQuiet, ToNormal uint64
}

// Quiet returns r's quiet state (zero without quiet groups).
func (r *Replica) Quiet() QuietStats {
	q := r.quiet
	if q == nil {
		return QuietStats{}
	}
	return QuietStats{Quiet: q.quiet.Load(), ToQuiet: q.toQuiet.Load(), ToNormal: q.toNormal.Load()}
}
