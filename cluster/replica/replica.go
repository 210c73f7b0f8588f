package replica

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/fsutil"
	"github.com/swarmkv/swarmkv/internal/linelog"
	"github.com/swarmkv/swarmkv/raftlog"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// Errors a replica returns; the gRPC layer maps them to status codes
// (cluster/errors.go, where package cluster names them by alias). Their
// text keeps the "cluster:" prefix they had when the replica lived there.
var (
	// ErrNotLeader: this replica is not the shard leader.
	ErrNotLeader = errors.New("cluster: not leader")
	// ErrLeaderNotReady: this replica just became leader and has not yet
	// committed an entry of its term; linearizable reads must wait.
	ErrLeaderNotReady = errors.New("cluster: leader not ready")
	// ErrOutcomeUnknown: a proposal was handed to Raft but leadership was
	// lost before it committed; it may or may not be applied.
	ErrOutcomeUnknown = errors.New("cluster: leadership lost, outcome unknown")
	// ErrClosed: the replica is closed (the node is shutting down, or the
	// replica moved away).
	ErrClosed = errors.New("cluster: node closed")
	// ErrInvalidArgument is wrapped by every request validation error (the
	// core's and package api's; cluster.ErrInvalidArgument is this error).
	ErrInvalidArgument = errors.New("invalid argument")
)

// Replica is one local member of a Raft group (a shard's, or the meta
// group's): its Raft instance, log and stable store (a group of the node's
// shared raftlog.Store, or its own raft-boltdb file), snapshot store and
// Pebble state machine.
//
// Threads: raft runs its own goroutines; the replica adds a leadership
// watcher (consumes NotifyCh, runs a barrier on each new leadership), a
// read loop (batches linearizable reads under one leadership check: the
// node's transport.LeaderChecker, or VerifyLeader), a
// proposal loop (coalesces concurrent proposals into one Raft entry) and,
// with a lessor, the lessor's loop (lease.go). All are joined by Close. Each Raft future is waited on by a goroutine
// of its own (waitFuture), which Close joins too.
type Replica struct {
	id          shard.ID
	incarnation uint64
	log         *slog.Logger
	fsm         *fsm.FSM
	raft        *raft.Raft
	trans       *raft.NetworkTransport
	bolt        *raftboltdb.BoltStore // without a shared log store only; closed by Close
	notify      chan bool
	limits      fsm.Limits               // Config.Limits: what propose validates against
	admit       func(*fsm.Command) error // Config.Admit

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

	onReady  func(*Replica)                   // Config.OnReady
	onLeader func(leader string, term uint64) // Config.OnLeader
	lessor   *Lessor                          // Config.Leases; nil without
	// quiet is the quiet controller (quiet.go); nil without Config.Quiet.
	quiet   *quietCtl
	localID raft.ServerID
	// leaderChanges counts the leaders the replica learned of (metrics).
	leaderChanges atomic.Uint64

	// Proposal coalescing (see proposeCoalesced): proposals queue in
	// props.queue; proposeLoop takes them into one Raft entry each round.
	props struct {
		sync.Mutex
		queue []*proposal
	}
	propSignal chan struct{} // cap 1: the queue is not empty
	// histSignal (cap 1) wakes historyLoop on a new leadership;
	// histPasses counts its timed passes (tests read it).
	histSignal chan struct{}
	histPasses atomic.Uint64
	inflight   chan struct{} // cap maxEntriesInFlight: a token per coalesced entry in Raft
	// propEntries and propCmds count the coalescer's entries and the
	// commands they carried (metrics).
	propEntries, propCmds atomic.Uint64
	// load measures propCmds' rate (Load).
	load loadMeter

	done chan struct{}
	// wg joins every goroutine of the replica: its loops and the waiters
	// of Raft futures (waitFuture). waitMu orders a waiter's wg.Add before
	// Close's wg.Wait: none is added once waitClosed is set.
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

// Config is what Open needs: package cluster fills it from its own Config
// and the node's shared resources.
type Config struct {
	ID      shard.ID // the group: a shard, or the meta group
	Dir     string   // the replica's folder: snapshots/, pebble/ (and raft.db without LogStore)
	LocalID string   // this node's Raft server id
	// Layer carries the group's Raft connections (the node's transport.Mux).
	Layer raft.StreamLayer
	// Cache is the node's Pebble block cache, shared by every store.
	Cache *pebble.Cache
	// LogStore is the node's shared Raft log and stable store, of which the
	// replica uses group ID; nil: a raft-boltdb file of its own, Dir/raft.db.
	// The replica does not close it.
	LogStore *raftlog.Store
	// Raft is the group's Raft timing and snapshot settings.
	Raft RaftSettings
	// MemTableSize is the state machine's Pebble memtable size.
	MemTableSize uint64
	// History is the watch history's retention the replica proposes, as
	// leader, every HistoryEvery (history.go); zero: no compaction.
	History      fsm.HistoryRetention
	HistoryEvery time.Duration
	// Admit, if set, is asked about every command Propose is given, after
	// its validation and before it is proposed: an error refuses it,
	// nothing proposed. The node sets it to its protocol version gate
	// (cluster.Node.CheckCommand), so no command a binary of the active
	// version would not know reaches the log, whoever proposes it.
	Admit func(*fsm.Command) error
	// Limits are the state machine's apply-time limits, the same on every
	// node; Propose validates commands against them before proposing.
	Limits fsm.Limits
	// Reply bounds the state machine's Redis replies that list keys.
	Reply fsm.ReplyLimits
	// Voters is the bootstrap configuration when Bootstrap is true.
	Voters []raft.Server
	// Bootstrap: bootstrap the group with Voters if the replica has no Raft
	// state yet.
	Bootstrap bool
	// InitialSlots is the state machine's ownership while its DB records
	// none (fsm.Config.InitialSlots): nil, every slot, for the groups made
	// at bootstrap; the empty set for a group a split made. It must be the
	// same on every replica of the group, for its whole life.
	InitialSlots *shard.SlotSet
	// Incarnation is the group's (placement.Placement.Incarnation: 0 for
	// a group made at bootstrap, else the move that created it). The
	// replica records it in Dir/incarnation; a folder that records an
	// older one (none counts as 0) holds a replica of a dead group that
	// had the same id: Open deletes it, with its log, and starts afresh.
	// A newer one is refused (the caller's cluster state is stale).
	Incarnation uint64
	// Leases, if set, gives the replica a lessor (a shard's replicas; not
	// the meta group's): Leases() then keeps the shard's leases while it
	// leads.
	Leases *LeaseConfig
	// OnReady, if set, runs after each new leadership's no-op is applied
	// (ReadyTerm set), on the watcher's per-leadership goroutine, which
	// Close joins. It must return when the replica closes and should stop
	// once ReadyTerm changes. The node sets it on the meta group (to commit
	// the bootstrap state) and on the pools shard (EnsureDefaultPool).
	OnReady func(*Replica)
	// OnLeader, if set, runs each time the replica learns of a new leader
	// of its group (itself included), with the leader's id and the term:
	// on Raft's own goroutine, so it must return at once (the node
	// records an event). A leader lost without a successor (an election
	// under way) is not reported.
	OnLeader func(leader string, term uint64)
	// Checker is the node's batched leadership check (nil: every read
	// round runs VerifyLeader).
	Checker *transport.LeaderChecker
	// Quiet, if set, lets the group go quiet when idle (quiet.go).
	Quiet *QuietConfig
	// Logger is the node's (required); the replica's messages carry the
	// group's "shard" attribute.
	Logger *slog.Logger
}

// RaftSettings are the hashicorp/raft settings of a group (see
// cluster.Config's fields of the same names).
type RaftSettings struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
}

// Open opens (or creates) the replica in c.Dir and starts its Raft
// instance and loops; Close stops them.
func Open(c Config) (_ *Replica, err error) {
	log := c.Logger.With("shard", uint32(c.ID))
	_, statErr := os.Stat(c.Dir)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	recorded := false
	if !fresh {
		inc, found, err := ReadIncarnation(c.Dir)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", c.ID, err)
		}
		recorded = found
		if inc > c.Incarnation {
			return nil, fmt.Errorf("shard %d: %s holds incarnation %d of the shard, newer than %d: the cluster state it was opened with is stale",
				c.ID, c.Dir, inc, c.Incarnation)
		}
		if inc < c.Incarnation {
			// A replica of a dead group with this id (removed while this
			// node was down, the id reused since): its log must never
			// take part in the new group. The folder goes first, so a
			// crash before the log is dropped below finds it missing.
			log.Warn("replica folder of another incarnation of the shard: deleting it and its log",
				"found", inc, "recorded", found, "incarnation", c.Incarnation)
			if err := os.RemoveAll(c.Dir); err != nil {
				return nil, fmt.Errorf("shard %d: delete the stale replica: %w", c.ID, err)
			}
			fresh, recorded = true, false
		}
	}
	if err := fsutil.PrivateDir(c.Dir); err != nil {
		return nil, err
	}
	r := &Replica{
		id:         c.ID,
		log:        log,
		limits:     c.Limits,
		admit:      c.Admit,
		notify:     make(chan bool, 16),
		readSignal: make(chan struct{}, 1),
		propSignal: make(chan struct{}, 1),
		histSignal: make(chan struct{}, 1),
		inflight:   make(chan struct{}, maxEntriesInFlight),
		done:       make(chan struct{}),
		onReady:    c.OnReady,
		onLeader:   c.OnLeader,
		checker:    c.Checker,
		localID:    raft.ServerID(c.LocalID),
	}
	if q := c.Quiet; q != nil {
		if err := c.validateQuiet(); err != nil {
			return nil, fmt.Errorf("shard %d: %w", c.ID, err)
		}
		r.quiet = newQuietCtl(*q, c.Raft)
	}
	defer func() {
		if err != nil {
			r.closeStores()
		}
	}()
	var onLeases func(fsm.LeaseChanges)
	if c.Leases != nil {
		r.lessor = newLessor(r, *c.Leases)
		onLeases = r.lessor.onNews
	}
	r.fsm, err = fsm.Open(fsm.Config{
		Shard:        uint32(c.ID),
		Dir:          filepath.Join(c.Dir, "pebble"),
		Cache:        c.Cache,
		MemTableSize: c.MemTableSize,
		Limits:       c.Limits,
		Reply:        c.Reply,
		Logger:       c.Logger,
		InitialSlots: c.InitialSlots,
		OnLeases:     onLeases,
	})
	if err != nil {
		return nil, fmt.Errorf("shard %d: state machine: %w", c.ID, err)
	}
	var store raft.LogStore
	var stable raft.StableStore
	if shared := c.LogStore; shared != nil {
		g, err := openGroupLog(shared, c.ID, c.Dir, fresh)
		if err != nil {
			return nil, err
		}
		store, stable = g, g
	} else {
		r.bolt, err = raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(c.Dir, "raft.db"),
			BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
		})
		if err != nil {
			return nil, fmt.Errorf("shard %d: raft log %s: %w (is another swarmnode using this data dir?)", c.ID, filepath.Join(c.Dir, "raft.db"), err)
		}
		store, stable = r.bolt, r.bolt
	}
	if !recorded {
		// After a fresh folder's stale log state is dropped: a folder
		// that records the incarnation has no log state of another one.
		if err := fsutil.WriteFileDurable(c.Dir, incarnationFile, []byte(strconv.FormatUint(c.Incarnation, 10)+"\n")); err != nil {
			return nil, fmt.Errorf("shard %d: record the incarnation: %w", c.ID, err)
		}
	}
	r.incarnation = c.Incarnation
	logs, err := raftlog.NewCache(store, logCacheEntries, logCacheBytes)
	if err != nil {
		return nil, err
	}
	hlog := hclog.New(&hclog.LoggerOptions{
		Name:        "raft",
		Level:       hclog.Info,
		Output:      linelog.Writer{Logger: log},
		DisableTime: true,
	})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.Dir, 2, hlog)
	if err != nil {
		return nil, fmt.Errorf("shard %d: snapshot store: %w", c.ID, err)
	}
	r.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  c.Layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hlog,
	})

	rc := c.raftConfig()
	rc.NotifyCh = r.notify
	rc.Logger = hlog
	if err := raft.ValidateConfig(rc); err != nil {
		r.trans.Close()
		return nil, fmt.Errorf("shard %d: %w", c.ID, err)
	}

	if c.Bootstrap {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			r.trans.Close()
			return nil, err
		}
		if !has {
			log.Info("bootstrapping shard", "voters", len(c.Voters))
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, r.trans, raft.Configuration{Servers: c.Voters}); err != nil {
				r.trans.Close()
				return nil, fmt.Errorf("shard %d: bootstrap: %w", c.ID, err)
			}
		}
	}
	r.raft, err = raft.NewRaft(rc, r.fsm, logs, stable, snaps, r.trans)
	if err != nil {
		r.trans.Close()
		return nil, fmt.Errorf("shard %d: %w", c.ID, err)
	}
	// No channel: the filter itself counts and reports each new leader,
	// on Raft's goroutine (no goroutine of ours to drain observations).
	r.raft.RegisterObserver(raft.NewObserver(nil, false, r.observeLeader))
	r.wg.Add(4)
	go r.watchLeadership()
	go r.readLoop()
	go r.proposeLoop()
	go r.historyLoop(c.History, c.HistoryEvery)
	if r.lessor != nil {
		r.wg.Add(1)
		go r.lessor.run()
	}
	if r.quiet != nil {
		r.raft.RegisterObserver(raft.NewObserver(nil, false, r.observeQuiet))
		r.wg.Add(1)
		go r.quietLoop()
	}
	return r, nil
}

// incarnationFile, in a replica's folder, records its group's
// incarnation (Config.Incarnation) in decimal.
const incarnationFile = "incarnation"

// ReadIncarnation returns the incarnation recorded in replica folder dir;
// found is false when none is (a folder written before incarnations:
// incarnation 0). A record that does not parse is an error (the folder
// is left alone).
func ReadIncarnation(dir string) (inc uint64, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, incarnationFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	inc, err = strconv.ParseUint(strings.TrimSuffix(string(b), "\n"), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: bad incarnation record %q", filepath.Join(dir, incarnationFile), b)
	}
	return inc, true, nil
}

// maxApplyQueueBytes bounds the committed entries Raft has handed to the
// state machine and it has not applied yet (the fork's patch 0003,
// third_party/hashicorp-raft). Without it the bound is 128 batches of
// MaxAppendEntries entries, 2 GiB of 64 KiB values: a new replica
// replaying a large shard's log read it far ahead of its state machine
// (docs/scale.md, "Large shards"). 32 MiB is two of fsm's 16 MiB Pebble
// runs: one being applied and the next waiting, while Raft's loop reads
// and decodes the batch after it, so the state machine need not wait for
// the loop. Raft cuts a batch at the bound too, so a replica holds
// at most twice this in queued entries (plus one entry). A lagging leader
// waits the same way, which holds back new proposals, as the full queue
// did before.
const maxApplyQueueBytes = 32 << 20

// maxAppendEntriesBytes bounds the entries of one AppendEntries request
// (the fork's patch 0004). Raft bounds a request by count only
// (MaxAppendEntries, 256), and a proposal run of coalesced commands makes
// entries of up to about 1 MiB, so one request was up to 256 MiB, which a
// follower decodes whole, writes to its log in one Pebble batch and holds
// until applied: the largest part of a new replica's memory in the
// large-shard runs (docs/scale.md, "Large shards"). 8 MiB keeps requests
// of small entries cut by count, as before, and a cut request is followed
// by the rest at once.
const maxAppendEntriesBytes = 8 << 20

// raftConfig is the hashicorp/raft configuration of the replica (without
// its NotifyCh and Logger, which Open sets).
func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.LocalID)
	rc.HeartbeatTimeout = c.Raft.HeartbeatTimeout
	rc.ElectionTimeout = c.Raft.ElectionTimeout
	rc.LeaderLeaseTimeout = c.Raft.LeaderLeaseTimeout
	rc.CommitTimeout = c.Raft.CommitTimeout
	rc.SnapshotThreshold = c.Raft.SnapshotThreshold
	rc.SnapshotInterval = c.Raft.SnapshotInterval
	rc.TrailingLogs = c.Raft.TrailingLogs
	// Group commit: the leader takes every queued proposal (up to
	// MaxAppendEntries) into one log append and one fsync.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.MaxApplyQueueBytes = maxApplyQueueBytes
	rc.MaxAppendEntriesBytes = maxAppendEntriesBytes
	return rc
}

// ValidateRaft returns hashicorp/raft's objection to c's Raft settings
// (Open would refuse them), or nil.
func (c Config) ValidateRaft() error { return raft.ValidateConfig(c.raftConfig()) }

// openGroupLog returns shard id's group of the shared log store. A replica
// folder that did not exist (fresh) means the replica is new on this node,
// or was deleted when it moved away: any log state left in the shared
// store under its id is stale (its snapshots and state machine are gone)
// and is dropped first. A folder with a raft-boltdb log is refused.
func openGroupLog(s *raftlog.Store, id shard.ID, dir string, fresh bool) (*raftlog.Group, error) {
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		return nil, fmt.Errorf("shard %d: %s holds a raft-boltdb log; start with log store %q", id, dir, "bolt")
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

// The in-memory cache of each replica's most recent log entries, which
// Raft reads back to replicate them (raftlog.Cache): at most this many
// entries and this many bytes of entry data. With coalesced entries the
// byte bound is the one that holds: 1024 entries of hashicorp/raft's
// LogCache held 60-90 MiB per node after a 1000-client put load.
const (
	logCacheEntries = 1024
	logCacheBytes   = 8 << 20
)

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
			if r.lessor != nil {
				r.lessor.demote()
			}
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
					select {
					case r.histSignal <- struct{}{}:
					default:
					}
					if r.lessor != nil {
						r.lessor.promote(term)
					}
					if r.onReady != nil {
						r.onReady(r)
					}
				}
			}()
		}
	}
}

// observeLeader is the filter of the replica's Raft observer: a
// LeaderObservation naming a leader is counted (Stats.LeaderChanges) and
// handed to Config.OnLeader. It drops every observation (the observer has
// no channel).
func (r *Replica) observeLeader(o *raft.Observation) bool {
	lo, ok := o.Data.(raft.LeaderObservation)
	if !ok || lo.LeaderID == "" {
		return false
	}
	r.leaderChanges.Add(1)
	if r.onLeader != nil {
		r.onLeader(string(lo.LeaderID), o.Raft.CurrentTerm())
	}
	return false
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
		// Bound to r.done: a verification that hashicorp/raft never
		// answers (seen once when a node closed under the race detector:
		// the read loop waited 12 minutes and Close with it) ends when
		// Close starts.
		vf := r.raft.VerifyLeader()
		bindShutdown(vf, r.done)
		if err := vf.Error(); err != nil {
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

// ReadBarrier returns once r, as its shard's leader, has confirmed its
// leadership and applied every entry committed before the call (a
// linearizable read may then read FSM); ErrNotLeader, ErrLeaderNotReady,
// ErrClosed or the context's error otherwise.
func (r *Replica) ReadBarrier(ctx context.Context) error {
	r.touch()
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

// waitFuture runs then(f.Error()) on a goroutine that Close joins.
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

// ID is the group r is a replica of (a shard, or the meta group).
func (r *Replica) ID() shard.ID { return r.id }

// Incarnation returns the group's incarnation the replica was opened with
// (Config.Incarnation).
func (r *Replica) Incarnation() uint64 { return r.incarnation }

// FSM is r's state machine. Read it after ReadBarrier for a linearizable
// read; without, the read is stale (what r has applied).
func (r *Replica) FSM() *fsm.FSM { return r.fsm }

// Raft is r's Raft instance, for the node (its batched leadership check
// reads the term, its metrics the state and indexes) and tests. Changes
// go through r's methods (Propose, ChangeConfig, ...), which map Raft's
// errors and wait on its futures as Close expects.
func (r *Replica) Raft() *raft.Raft { return r.raft }

// Leader is the id of the node r believes leads its group ("" unknown).
func (r *Replica) Leader() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

// IsLeader reports whether r is its group's leader right now.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// ReadyTerm is the term in which r, as leader, has applied its
// leadership's no-op: from then on its commit index covers every entry
// committed by earlier leaders, and linearizable reads may be served. 0
// when not ready (a follower, or a leader whose no-op is not applied yet);
// it is ready in the current term only if ReadyTerm equals Raft's
// CurrentTerm.
func (r *Replica) ReadyTerm() uint64 { return r.readyTerm.Load() }

// Stats are a replica's counters since it opened (the node's metrics).
type Stats struct {
	// Entries and Commands count the Raft entries of the proposal
	// coalescer and the commands they carried.
	Entries, Commands uint64
	// ReadsChecked and ReadsVerified count the read rounds confirmed by the
	// node's batched leadership check and by VerifyLeader; Reads the
	// linearizable reads they served.
	ReadsChecked, ReadsVerified, Reads uint64
	// LeaderChanges counts the leaders of the group the replica learned
	// of (each election it saw won, its own included).
	LeaderChanges uint64
	// Leases is the number of leases the replica's lessor keeps (0 when it
	// does not lead, and for the meta group).
	Leases int
	// Quiet: the replica runs the quiet row (quiet.go).
	Quiet bool
}

// Stats returns r's counters.
func (r *Replica) Stats() Stats {
	return Stats{
		Entries:       r.propEntries.Load(),
		Commands:      r.propCmds.Load(),
		ReadsChecked:  r.readStats.checked.Load(),
		ReadsVerified: r.readStats.verified.Load(),
		Reads:         r.readStats.reads.Load(),
		LeaderChanges: r.leaderChanges.Load(),
		Leases:        r.lessor.Count(),
		Quiet:         r.quiet != nil && r.quiet.quiet.Load(),
	}
}

// Close stops r: every waiter returns (ErrClosed), Raft shuts down, the
// replica's goroutines are joined and its stores closed (not the shared
// log store, Config.LogStore, which the node closes after every replica).
func (r *Replica) Close() error {
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

// readStats counts a replica's linearizable read rounds (Stats).
type readStats struct {
	checked, verified, reads atomic.Uint64
}
