package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/raftlog"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// Errors a replica returns; the gRPC layer maps them to status codes.
var (
	// ErrNotLeader: this replica is not the shard leader.
	ErrNotLeader = errors.New("cluster: not leader")
	// ErrLeaderNotReady: this replica just became leader and has not yet
	// committed an entry of its term; linearizable reads must wait.
	ErrLeaderNotReady = errors.New("cluster: leader not ready")
	// ErrOutcomeUnknown: a proposal was handed to Raft but leadership was
	// lost before it committed; it may or may not be applied.
	ErrOutcomeUnknown = errors.New("cluster: leadership lost, outcome unknown")
	// ErrClosed: the node is shutting down.
	ErrClosed = errors.New("cluster: node closed")
)

// replica is one local member of a shard's Raft group: its Raft instance,
// log and stable store (a group of the node's shared raftlog.Store, or its
// own raft-boltdb file), snapshot store and Pebble state machine.
//
// Threads: raft runs its own goroutines; the replica adds a leadership
// watcher (consumes NotifyCh, runs a barrier on each new leadership), a
// read loop (batches linearizable reads under one leadership check: the
// node's transport.LeaderChecker, or VerifyLeader) and a
// proposal loop (coalesces concurrent proposals into one Raft entry). All
// three are joined by close. Each Raft future is waited on by a goroutine
// of its own, which close does not join (see apply).
type Replica struct {
	id     shard.ID
	log    *slog.Logger
	fsm    *fsm.FSM
	raft   *raft.Raft
	trans  *raft.NetworkTransport
	bolt   *raftboltdb.BoltStore // LogStore "bolt" only; closed by close
	notify chan bool

	// readyTerm is the term in which this replica, as leader, has applied
	// a barrier: from then on its commit index covers every entry
	// committed by earlier leaders. 0 when not ready.
	readyTerm atomic.Uint64

	readMu      sync.Mutex
	readPending []chan readResult
	readSignal  chan struct{}
	// checker, if set, confirms read rounds for all of the node's groups
	// at once (transport/readcheck.go); VerifyLeader is the fallback.
	checker   *transport.LeaderChecker
	readStats readStats

	onReady func(*Replica) // replicaConfig.onReady

	// Proposal coalescing (see proposeCoalesced): proposals queue in
	// props.queue; proposeLoop takes them into one Raft entry each round.
	props struct {
		sync.Mutex
		queue []*proposal
	}
	propSignal chan struct{} // cap 1: the queue is not empty
	inflight   chan struct{} // cap maxEntriesInFlight: a token per coalesced entry in Raft
	// propEntries and propCmds count the coalescer's entries and the
	// commands they carried (metrics).
	propEntries, propCmds atomic.Uint64

	done chan struct{}
	// wg joins every goroutine of the replica: its loops and the waiters
	// of Raft futures (waitFuture). waitMu orders a waiter's wg.Add before
	// close's wg.Wait: none is added once waitClosed is set.
	wg         sync.WaitGroup
	waitMu     sync.Mutex
	waitClosed bool
	closeOnce  sync.Once
	closeErr   error
}

type readResult struct {
	index uint64
	err   error
}

type replicaConfig struct {
	id        shard.ID
	dir       string // the replica's folder: snapshots/, pebble/ (and raft.db with LogStore "bolt")
	localID   string
	layer     raft.StreamLayer
	cache     *pebble.Cache
	node      Config
	voters    []raft.Server // bootstrap configuration when bootstrap is true
	bootstrap bool          // bootstrap if the replica has no Raft state
	// onReady, if set, runs after each new leadership's no-op is applied
	// (readyTerm set), on the watcher's per-leadership goroutine, which
	// close joins. It must return when the replica closes (r.done) and
	// should stop once readyTerm changes. The node sets it on the pools
	// shard to ensure the default pool.
	onReady func(*Replica)
	// checker: the node's batched leadership check (nil: VerifyLeader).
	checker *transport.LeaderChecker
}

func openReplica(rc replicaConfig) (_ *Replica, err error) {
	log := rc.node.Logger.With("shard", uint32(rc.id))
	_, statErr := os.Stat(rc.dir)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	if err := privateDir(rc.dir); err != nil {
		return nil, err
	}
	r := &Replica{
		id:         rc.id,
		log:        log,
		notify:     make(chan bool, 16),
		readSignal: make(chan struct{}, 1),
		propSignal: make(chan struct{}, 1),
		inflight:   make(chan struct{}, maxEntriesInFlight),
		done:       make(chan struct{}),
		onReady:    rc.onReady,
		checker:    rc.checker,
	}
	defer func() {
		if err != nil {
			r.closeStores()
		}
	}()
	r.fsm, err = fsm.Open(fsm.Config{
		Shard:        uint32(rc.id),
		Dir:          filepath.Join(rc.dir, "pebble"),
		Cache:        rc.cache,
		MemTableSize: rc.node.MemTableSize,
		Limits:       applyLimits,
		Reply:        rc.node.ReplyLimits(),
		Logger:       rc.node.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("shard %d: state machine: %w", rc.id, err)
	}
	var store raft.LogStore
	var stable raft.StableStore
	if shared := rc.node.logStore; shared != nil {
		g, err := openGroupLog(shared, rc.id, rc.dir, fresh)
		if err != nil {
			return nil, err
		}
		store, stable = g, g
	} else {
		r.bolt, err = raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(rc.dir, "raft.db"),
			BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
		})
		if err != nil {
			return nil, fmt.Errorf("shard %d: raft log %s: %w (is another swarmnode using this data dir?)", rc.id, filepath.Join(rc.dir, "raft.db"), err)
		}
		store, stable = r.bolt, r.bolt
	}
	logs, err := raftlog.NewCache(store, logCacheEntries, logCacheBytes)
	if err != nil {
		return nil, err
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:        "raft",
		Level:       hclog.Info,
		Output:      logWriter{logger: log},
		DisableTime: true,
	})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(rc.dir, 2, hlog)
	if err != nil {
		return nil, fmt.Errorf("shard %d: snapshot store: %w", rc.id, err)
	}
	r.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  rc.layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hlog,
	})

	c := rc.node.raftConfig(rc.id, rc.localID)
	c.NotifyCh = r.notify
	c.Logger = hlog
	if err := raft.ValidateConfig(c); err != nil {
		r.trans.Close()
		return nil, fmt.Errorf("shard %d: %w", rc.id, err)
	}

	if rc.bootstrap {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			r.trans.Close()
			return nil, err
		}
		if !has {
			log.Info("bootstrapping shard", "voters", len(rc.voters))
			if err := raft.BootstrapCluster(c, logs, stable, snaps, r.trans, raft.Configuration{Servers: rc.voters}); err != nil {
				r.trans.Close()
				return nil, fmt.Errorf("shard %d: bootstrap: %w", rc.id, err)
			}
		}
	}
	r.raft, err = raft.NewRaft(c, r.fsm, logs, stable, snaps, r.trans)
	if err != nil {
		r.trans.Close()
		return nil, fmt.Errorf("shard %d: %w", rc.id, err)
	}
	r.wg.Add(3)
	go r.watchLeadership()
	go r.readLoop()
	go r.proposeLoop()
	return r, nil
}

// openLogStore opens the node's shared Raft log store in
// <data-dir>/raftlog when c.LogStore is "pebble" (nil, nil with "bolt"). A
// data dir written with the other store is refused: a replica that came up
// with an empty log would have lost the entries it acknowledged.
func openLogStore(c Config, cache *pebble.Cache) (*raftlog.Store, error) {
	dir := filepath.Join(c.DataDir, "raftlog")
	if c.LogStore == LogStoreBolt {
		if _, err := os.Stat(dir); err == nil {
			return nil, fmt.Errorf("cluster: %s holds a pebble Raft log store; start with log store %q", dir, LogStorePebble)
		}
		return nil, nil
	}
	if err := privateDir(dir); err != nil {
		return nil, fmt.Errorf("cluster: raft log store: %w", err)
	}
	s, err := raftlog.Open(raftlog.Options{Dir: dir, Cache: cache, Logger: c.Logger, MinSyncInterval: c.WALMinSyncInterval})
	if err != nil {
		return nil, fmt.Errorf("cluster: raft log store: %w (is another swarmnode using this data dir?)", err)
	}
	return s, nil
}

// openGroupLog returns shard id's group of the shared log store. A replica
// folder that did not exist (fresh) means the replica is new on this node,
// or was deleted when it moved away: any log state left in the shared
// store under its id is stale (its snapshots and state machine are gone)
// and is dropped first. A folder with a raft-boltdb log is refused.
func openGroupLog(s *raftlog.Store, id shard.ID, dir string, fresh bool) (*raftlog.Group, error) {
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		return nil, fmt.Errorf("shard %d: %s holds a raft-boltdb log; start with log store %q", id, dir, LogStoreBolt)
	}
	if fresh {
		if err := s.DropGroup(uint32(id)); err != nil {
			return nil, fmt.Errorf("shard %d: %w", id, err)
		}
	}
	g, err := s.Group(uint32(id))
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", id, err)
	}
	return g, nil
}

// dropReplicaLog deletes the Raft log and stable state of shard id's
// replica from the node's shared log store (nothing with LogStore "bolt",
// whose raft.db lives in the replica's folder). The sync loop calls it
// when a replica moves off this node, after closing the replica and
// deleting its folder (a folder missing at open drops the group's stale
// state, so a crash between the two steps is safe).
func (n *Node) dropReplicaLog(id shard.ID) error {
	if n.cfg.logStore == nil {
		return nil
	}
	return n.cfg.logStore.DropGroup(uint32(id))
}

// raftConfig is the hashicorp/raft configuration of this node's replica
// of group id (a shard, or metaShardID).
func (c Config) raftConfig(id shard.ID, localID string) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(localID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	if id == metaShardID {
		rc.CommitTimeout = min(rc.CommitTimeout, metaCommitTimeout)
	}
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	// Group commit: the leader takes every queued proposal (up to
	// MaxAppendEntries) into one log append and one fsync.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	return rc
}

// applyLimits are the state machine's apply-time limits. They are the same
// on every node, whatever its configuration (a command accepted by one
// replica and rejected by another would make replicas diverge), and at or
// above anything the API edge accepts (Config.Validate keeps the
// configurable request limits below them).
// ApplyLimits are the state machine's apply-time limits (applyLimits):
// every command a validated request becomes passes them.
func ApplyLimits() fsm.Limits { return applyLimits }

var applyLimits = fsm.Limits{
	MaxKeySize:   3 + keys.MaxRoutingKeyLen + maxKeySizeLimit,
	MaxValueSize: maxValueSizeLimit,
	MaxBatchOps:  maxBatchOpsLimit,
}

var noopCommand = func() []byte {
	b, err := fsm.EncodeCommand(&fsm.Command{Op: fsm.OpNoop})
	if err != nil {
		panic(err) // a constant command: cannot fail
	}
	return b
}()

// watchLeadership consumes raft's NotifyCh. On each new leadership it
// proposes a no-op command; once that is applied in the same term, the
// replica is ready to serve linearizable reads: its commit index covers
// every entry committed by earlier leaders, and every entry after the no-op
// is one the state machine sees (hashicorp/raft hides its own no-op and
// barrier entries from the FSM, so a raft.Barrier would not do: the FSM's
// applied index could stay below the commit index).
func (r *Replica) watchLeadership() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case leader := <-r.notify:
			r.readyTerm.Store(0)
			if !leader {
				r.log.Info("lost leadership")
				continue
			}
			term := r.raft.CurrentTerm()
			r.log.Info("became leader", "term", term)
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				if err := r.await(context.Background(), r.raft.Apply(noopCommand, 0)); err != nil {
					r.log.Debug("leader no-op failed", "err", err)
					return
				}
				if r.raft.State() == raft.Leader && r.raft.CurrentTerm() == term {
					r.readyTerm.Store(term)
					if r.onReady != nil {
						r.onReady(r)
					}
				}
			}()
		}
	}
}

// readLoop serves linearizable reads in batches: every read waiting when a
// round starts shares one commit-index capture and one leadership check
// (the node's transport.LeaderChecker, which asks the peers about all of
// the node's groups in one frame; VerifyLeader when that does not
// confirm).
func (r *Replica) readLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			r.failReads(ErrClosed)
			return
		case <-r.readSignal:
		}
		r.readMu.Lock()
		batch := r.readPending
		r.readPending = nil
		r.readMu.Unlock()
		if len(batch) == 0 {
			continue
		}
		res := r.readRound()
		r.readStats.reads.Add(uint64(len(batch)))
		for _, ch := range batch {
			ch <- res
		}
	}
}

func (r *Replica) readRound() readResult {
	term := r.readyTerm.Load()
	if term == 0 || r.raft.CurrentTerm() != term {
		if r.raft.State() != raft.Leader {
			return readResult{err: ErrNotLeader}
		}
		return readResult{err: ErrLeaderNotReady}
	}
	index := r.raft.CommitIndex()
	if r.checker != nil && r.checker.Confirm(uint32(r.id), term, r.raft.GetConfiguration().Configuration()) {
		r.readStats.checked.Add(1)
	} else {
		r.readStats.verified.Add(1)
		if err := r.raft.VerifyLeader().Error(); err != nil {
			return readResult{err: ErrNotLeader}
		}
	}
	if r.raft.CurrentTerm() != term {
		return readResult{err: ErrNotLeader}
	}
	return readResult{index: index}
}

func (r *Replica) failReads(err error) {
	r.readMu.Lock()
	batch := r.readPending
	r.readPending = nil
	r.readMu.Unlock()
	for _, ch := range batch {
		ch <- readResult{err: err}
	}
}

// readBarrier returns once a linearizable read may be served from the local
// state machine: this replica is the leader and has applied every entry
// committed before the call.
func (r *Replica) readBarrier(ctx context.Context) error {
	if r.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	ch := make(chan readResult, 1)
	r.readMu.Lock()
	r.readPending = append(r.readPending, ch)
	r.readMu.Unlock()
	select {
	case r.readSignal <- struct{}{}:
	default:
	}
	var res readResult
	select {
	case res = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrClosed
	}
	if res.err != nil {
		return res.err
	}
	return r.fsm.WaitApplied(ctx, res.index)
}

// apply proposes cmd and waits for its result. It returns ErrNotLeader when
// the replica is not leader (nothing proposed), ErrOutcomeUnknown when
// leadership was lost after proposing, or the context's error if it ends
// before the proposal is handed to Raft.
//
// Once handed to Raft, a proposal cannot be withdrawn; apply waits (await)
// for its outcome, the context, or the replica's close.
func (r *Replica) apply(ctx context.Context, data []byte) (*fsm.Result, error) {
	if r.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	f := r.raft.Apply(data, timeout)
	if err := r.await(ctx, f); err != nil {
		return nil, err
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok || res == nil {
		return nil, fmt.Errorf("cluster: shard %d: unexpected apply response %T", r.id, f.Response())
	}
	return res, nil
}

// await waits for a Raft future, the context or the replica's close, and
// maps Raft's errors to this package's. The future is waited on by a
// goroutine of its own (waitFuture), so that the context can end the wait.
func (r *Replica) await(ctx context.Context, f raft.Future) error {
	errc := make(chan error, 1)
	r.waitFuture(f, func(err error) { errc <- err })
	select {
	case err := <-errc:
		return applyError(err)
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrClosed
	}
}

// waitFuture runs then(f.Error()) on a goroutine that close joins.
//
// Raft does not answer every future it hands out: with BatchApplyCh a
// future still in its buffered apply channel when it shuts down, or a
// committed batch still queued for the state machine, is never resolved
// (hashicorp/raft#498), and a goroutine blocked in its Error() could not be
// joined. Raft's futures have an exported ShutdownCh that Error() honours
// but that Raft sets only on a few of them; bindShutdown sets it to r.done,
// so every waiter returns (raft.ErrRaftShutdown) once the replica closes.
// A future that cannot be bound is an errorFuture, answered already, or
// one of a raft version whose futures changed (TestBindShutdown fails
// then); its waiter is not joined.
func (r *Replica) waitFuture(f raft.Future, then func(error)) {
	if !bindShutdown(f, r.done) {
		go func() { then(f.Error()) }()
		return
	}
	r.waitMu.Lock()
	closed := r.waitClosed
	if !closed {
		r.wg.Add(1)
	}
	r.waitMu.Unlock()
	if closed {
		then(f.Error()) // r.done is closed: Error returns at once
		return
	}
	go func() {
		defer r.wg.Done()
		then(f.Error())
	}()
}

// bindShutdown makes f.Error() return raft.ErrRaftShutdown once done is
// closed, by setting the ShutdownCh field of the deferError that
// hashicorp/raft's futures embed. Only the goroutine that calls Error()
// reads that field, after this returns. It reports false when f has no
// such field.
func bindShutdown(f raft.Future, done chan struct{}) bool {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	ch := v.Elem().FieldByName("ShutdownCh")
	if !ch.IsValid() || !ch.CanSet() || ch.Type() != reflect.TypeOf(done) {
		return false
	}
	ch.Set(reflect.ValueOf(done))
	return true
}

// applyError maps the error of a Raft future to the replica's.
func applyError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it was appended: nothing applied, safe to retry.
		return ErrLeaderNotReady
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrOutcomeUnknown
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return context.DeadlineExceeded
	default:
		return err
	}
}

// propose validates cmd (so bad input costs no Raft round), encodes it and
// applies it, coalesced with concurrent proposals when its op allows
// (fsm.Op.Coalescable); a deterministic rejection by the state machine
// (Result.Err) is returned as the error.
func (r *Replica) propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if err := cmd.Validate(applyLimits); err != nil {
		return nil, err
	}
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	var res *fsm.Result
	if cmd.Op.Coalescable() {
		res, err = r.proposeCoalesced(ctx, data)
	} else {
		res, err = r.apply(ctx, data)
	}
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res, nil
}

// Proposal coalescing. Every Raft entry costs encoding, a transport send
// to each follower, a future and an FSM apply step, so concurrent
// proposals of one replica are carried by one entry (fsm.OpMulti) instead
// of one entry each.
const (
	// maxCoalesceCmds and maxCoalesceBytes bound one coalesced entry (the
	// state machine's own bounds, fsm.MaxMultiCmds and MaxMultiBytes, are
	// higher). A single larger command is proposed alone.
	maxCoalesceCmds  = 256
	maxCoalesceBytes = 256 << 10
	// maxEntriesInFlight is how many entries of the coalescer may wait for
	// commit at once. While they do, new proposals queue, and the next
	// entry takes them all. 1 gave larger entries (5.5 commands per entry
	// at 100 clients on 8 shards, vs 3.6 with 2) and less CPU per write
	// (docs/performance.md, round 3); a lone proposal still waits for
	// nothing.
	maxEntriesInFlight = 1
)

// The in-memory cache of each replica's most recent log entries, which
// Raft reads back to replicate them (raftlog.Cache): at most this many
// entries and this many bytes of entry data. With coalesced entries the
// byte bound is the one that holds: 1024 entries of hashicorp/raft's
// LogCache held 60-90 MiB per node after a 1000-client put load.
const (
	logCacheEntries = 1024
	logCacheBytes   = 8 << 20
)

// proposal is one command waiting in the coalescing queue.
type proposal struct {
	ctx  context.Context
	data []byte               // fsm.EncodeCommand's bytes
	out  chan proposalOutcome // cap 1; receives exactly one outcome
}

type proposalOutcome struct {
	res *fsm.Result
	err error
}

// proposeCoalesced queues data (an encoded, validated, coalescable
// command) for proposeLoop and waits for its result, the context or the
// replica's close, with apply's contract: ErrNotLeader when nothing was
// proposed because the replica is not leader, ErrOutcomeUnknown when
// leadership was lost after proposing. A proposal whose context ends while
// it still queues is dropped, never proposed.
func (r *Replica) proposeCoalesced(ctx context.Context, data []byte) (*fsm.Result, error) {
	if r.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &proposal{ctx: ctx, data: data, out: make(chan proposalOutcome, 1)}
	r.props.Lock()
	r.props.queue = append(r.props.queue, p)
	r.props.Unlock()
	select {
	case r.propSignal <- struct{}{}:
	default:
	}
	select {
	case o := <-p.out:
		return o.res, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return nil, ErrClosed
	}
}

// proposeLoop hands queued proposals to Raft: whenever fewer than
// maxEntriesInFlight of its entries wait for commit, it takes what is
// queued (up to maxCoalesceCmds commands and maxCoalesceBytes) and
// proposes it as one entry: the command itself when it is alone, else an
// fsm.OpMulti. So under load each entry carries every proposal that
// arrived while the previous ones were in flight, and a lone proposal
// waits for nothing.
func (r *Replica) proposeLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case <-r.propSignal:
		}
		for {
			select {
			case r.inflight <- struct{}{}:
			case <-r.done:
				return
			}
			batch := r.takeProposals()
			if len(batch) == 0 {
				<-r.inflight
				break
			}
			r.submit(batch)
		}
	}
}

// takeProposals removes from the queue the proposals of the next entry,
// dropping those whose context has ended.
func (r *Replica) takeProposals() []*proposal {
	r.props.Lock()
	defer r.props.Unlock()
	q := r.props.queue
	var batch []*proposal
	size, i := 0, 0
	for ; i < len(q) && len(batch) < maxCoalesceCmds; i++ {
		p := q[i]
		if p.ctx.Err() != nil {
			continue // its caller has returned
		}
		if len(batch) > 0 && size+len(p.data) > maxCoalesceBytes {
			break
		}
		batch = append(batch, p)
		size += len(p.data)
	}
	rest := q[i:]
	clear(q[:i])
	if len(rest) == 0 {
		r.props.queue = q[:0]
	} else {
		r.props.queue = append(q[:0], rest...)
	}
	return batch
}

// submit proposes batch as one entry and answers every proposal of it from
// a goroutine (waitFuture) that waits for the entry's future and then
// frees the in-flight slot proposeLoop took.
func (r *Replica) submit(batch []*proposal) {
	data := batch[0].data
	if len(batch) > 1 {
		multi := &fsm.Command{Op: fsm.OpMulti, Multi: make([][]byte, len(batch))}
		for i, p := range batch {
			multi.Multi[i] = p.data
		}
		var err error
		if data, err = fsm.EncodeCommand(multi); err != nil {
			<-r.inflight
			answerAll(batch, nil, err)
			return
		}
	}
	timeout := 10 * time.Second
	for _, p := range batch {
		if dl, ok := p.ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(dl))
		}
	}
	f := r.raft.Apply(data, max(timeout, time.Millisecond))
	r.propEntries.Add(1)
	r.propCmds.Add(uint64(len(batch)))
	r.waitFuture(f, func(err error) {
		<-r.inflight
		if err != nil {
			answerAll(batch, nil, applyError(err))
			return
		}
		switch resp := f.Response().(type) {
		case []*fsm.Result:
			if len(resp) != len(batch) {
				answerAll(batch, nil, fmt.Errorf("cluster: shard %d: %d results for %d coalesced commands", r.id, len(resp), len(batch)))
				return
			}
			for i, p := range batch {
				p.out <- proposalOutcome{res: resp[i]}
			}
		case *fsm.Result:
			if resp == nil {
				answerAll(batch, nil, fmt.Errorf("cluster: shard %d: nil apply response", r.id))
				return
			}
			// The lone command's result, or the whole OpMulti's rejection
			// (a storage error): every command gets it.
			answerAll(batch, resp, nil)
		default:
			answerAll(batch, nil, fmt.Errorf("cluster: shard %d: unexpected apply response %T", r.id, resp))
		}
	})
}

func answerAll(batch []*proposal, res *fsm.Result, err error) {
	for _, p := range batch {
		p.out <- proposalOutcome{res: res, err: err}
	}
}

// leader returns the current leader's id ("" if unknown).
func (r *Replica) leader() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

func (r *Replica) close() error {
	r.closeOnce.Do(func() {
		close(r.done) // every waiter of a Raft future returns (waitFuture)
		r.waitMu.Lock()
		r.waitClosed = true
		r.waitMu.Unlock()
		if r.raft != nil {
			if err := r.raft.Shutdown().Error(); err != nil {
				r.closeErr = err
			}
		}
		r.wg.Wait()
		r.closeStores()
	})
	return r.closeErr
}

func (r *Replica) closeStores() {
	if r.trans != nil {
		r.trans.Close()
	}
	if r.bolt != nil {
		if err := r.bolt.Close(); err != nil && r.closeErr == nil {
			r.closeErr = err
		}
	}
	if r.fsm != nil {
		if err := r.fsm.Close(); err != nil && r.closeErr == nil {
			r.closeErr = err
		}
	}
}

// readStats counts a replica's linearizable read rounds (metrics).
type readStats struct {
	checked, verified, reads atomic.Uint64
}
