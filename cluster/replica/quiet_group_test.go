package replica

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

func TestDecideQuiet(t *testing.T) {
	now := time.Unix(1000, 0)
	const after = 10 * time.Second
	idle, busy := now.Add(-after), now.Add(-after+time.Millisecond)
	for _, c := range []struct {
		name string
		in   quietInput
		want quietAction
	}{
		{"off, awake", quietInput{Now: now, LastActivity: idle, Leader: true}, quietStay},
		{"off, quiet", quietInput{Now: now, LastActivity: idle, Leader: true, Quiet: true}, quietWake},
		{"meta, idle leader", quietInput{Now: now, LastActivity: idle, After: after, Leader: true, Meta: true, FollowersQuiet: true}, quietStay},
		{"meta, quiet", quietInput{Now: now, LastActivity: idle, After: after, Leader: true, Meta: true, Quiet: true}, quietWake},
		{"busy leader", quietInput{Now: now, LastActivity: busy, After: after, Leader: true}, quietStay},
		{"busy quiet leader", quietInput{Now: now, LastActivity: busy, After: after, Leader: true, Quiet: true}, quietWake},
		{"idle leader: ask", quietInput{Now: now, LastActivity: idle, After: after, Leader: true}, quietAsk},
		{"idle leader, followers quiet: go", quietInput{Now: now, LastActivity: idle, After: after, Leader: true, FollowersQuiet: true}, quietGo},
		{"idle leader with a lease", quietInput{Now: now, LastActivity: idle, After: after, Leader: true, Leases: 1, FollowersQuiet: true}, quietStay},
		{"quiet leader, lease granted", quietInput{Now: now, LastActivity: idle, After: after, Leader: true, Leases: 1, Quiet: true}, quietWake},
		{"quiet idle leader", quietInput{Now: now, LastActivity: idle, After: after, Leader: true, Quiet: true}, quietStay},
		{"idle follower", quietInput{Now: now, LastActivity: idle, After: after}, quietStay},
		{"quiet follower", quietInput{Now: now, LastActivity: idle, After: after, Quiet: true}, quietStay},
		{"quiet follower, recent activity (led by notices)", quietInput{Now: now, LastActivity: busy, After: after, Quiet: true}, quietStay},
		{"quiet follower, meta", quietInput{Now: now, LastActivity: idle, After: after, Quiet: true, Meta: true}, quietWake},
	} {
		if got := decideQuiet(c.in); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// noticeGroup as the node uses it (cluster.NoticeGroup).
const noticeGroup uint32 = 0xFFFFFFFD

// Normal rows of the quiet tests' groups: the cluster's defaults
// (normalDefaults), and scaled down 5x (normalFast) where the test
// measures an election.
var normalDefaults = RaftSettings{
	HeartbeatTimeout:   time.Second,
	ElectionTimeout:    time.Second,
	LeaderLeaseTimeout: 500 * time.Millisecond,
	CommitTimeout:      50 * time.Millisecond,
	SnapshotThreshold:  8192,
	SnapshotInterval:   time.Minute,
	TrailingLogs:       1024,
}

var normalFast = RaftSettings{
	HeartbeatTimeout:   200 * time.Millisecond,
	ElectionTimeout:    200 * time.Millisecond,
	LeaderLeaseTimeout: 100 * time.Millisecond,
	CommitTimeout:      20 * time.Millisecond,
	SnapshotThreshold:  8192,
	SnapshotInterval:   time.Minute,
	TrailingLogs:       1024,
}

// quietNode is one node of a quietCluster: a Mux, a Noticer and a
// replica of each group.
type quietNode struct {
	id      string
	mux     *transport.Mux
	noticer *transport.Noticer
	mu      sync.Mutex
	reps    map[uint32]*Replica
	closed  bool
}

func (n *quietNode) rep(g uint32) *Replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reps[g]
}

// kill stops the node abruptly: its replicas, noticer and mux close
// without telling anyone.
func (n *quietNode) kill(t *testing.T) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	reps := n.reps
	n.mu.Unlock()
	for _, r := range reps {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}
	n.noticer.Close()
	n.mux.Close()
}

// quietCluster is three nodes holding groups 1..groups, each group on
// all three, with quiet groups on (T = timeout).
type quietCluster struct {
	nodes  []*quietNode
	normal RaftSettings
	// drop, if set, is asked about every notice a replica sends: true
	// drops it (the sender sees an error).
	drop    atomic.Pointer[func(from string, to raft.Server, n transport.Notice) bool]
	servers []raft.Server
}

func newQuietCluster(t *testing.T, groups int, normal RaftSettings, after, timeout time.Duration) *quietCluster {
	t.Helper()
	c := &quietCluster{normal: normal}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 1; i <= 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m, err := transport.NewMux(transport.MuxConfig{Listener: ln})
		if err != nil {
			t.Fatal(err)
		}
		n := &quietNode{id: fmt.Sprint("n", i), mux: m, reps: map[uint32]*Replica{}}
		nl, err := m.Layer(noticeGroup, 0)
		if err != nil {
			t.Fatal(err)
		}
		n.noticer = transport.NewNoticer(nl, n.id, func(no transport.Notice) transport.NoticeReply {
			if r := n.rep(no.Group); r != nil {
				return r.Notice(no)
			}
			return transport.NoticeReply{}
		}, log)
		c.nodes = append(c.nodes, n)
		c.servers = append(c.servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(m.Addr().String())})
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill(t)
		}
	})
	base := t.TempDir()
	for _, n := range c.nodes {
		for g := uint32(1); g <= uint32(groups); g++ {
			layer, err := n.mux.Layer(g, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := n
			r, err := Open(Config{
				ID:           shard.ID(g),
				Dir:          filepath.Join(base, n.id, fmt.Sprint(g)),
				LocalID:      n.id,
				Layer:        layer,
				Raft:         normal,
				MemTableSize: 256 << 10,
				Limits:       fsm.Limits{}.WithDefaults(),
				Voters:       c.servers,
				Bootstrap:    true,
				Logger:       log,
				Quiet: &QuietConfig{After: after, Timeout: timeout,
					Notify: func(ctx context.Context, to raft.Server, no transport.Notice) (transport.NoticeReply, error) {
						if f := c.drop.Load(); f != nil && (*f)(n.id, to, no) {
							return transport.NoticeReply{}, fmt.Errorf("test: notice %d to %s dropped", no.Kind, to.ID)
						}
						return n.noticer.Notify(ctx, to, no)
					}},
			})
			if err != nil {
				t.Fatal(err)
			}
			n.mu.Lock()
			n.reps[g] = r
			n.mu.Unlock()
		}
	}
	return c
}

// leader waits for a ready leader of group g among the live nodes.
func (c *quietCluster) leader(t *testing.T, g uint32, timeout time.Duration) (*quietNode, *Replica) {
	t.Helper()
	var ln *quietNode
	var lr *Replica
	waitFor(t, timeout, fmt.Sprintf("a ready leader of group %d", g), func() bool {
		for _, n := range c.nodes {
			n.mu.Lock()
			r, closed := n.reps[g], n.closed
			n.mu.Unlock()
			if !closed && r.IsLeader() && r.ReadyTerm() != 0 && r.ReadyTerm() == r.Raft().CurrentTerm() {
				ln, lr = n, r
				return true
			}
		}
		return false
	})
	return ln, lr
}

// rows reports whether every live replica of group g runs the quiet row
// (quiet) or the normal row (!quiet), by Raft's own configuration.
func (c *quietCluster) rows(g uint32, quiet bool, timeout time.Duration) bool {
	for _, n := range c.nodes {
		n.mu.Lock()
		r, closed := n.reps[g], n.closed
		n.mu.Unlock()
		if closed {
			continue
		}
		rc := r.Raft().ReloadableConfig()
		want := c.normal
		if quiet {
			want = RaftSettings{HeartbeatTimeout: timeout, ElectionTimeout: timeout, LeaderLeaseTimeout: timeout / 2, CommitTimeout: timeout}
		}
		if rc.HeartbeatTimeout != want.HeartbeatTimeout || rc.ElectionTimeout != want.ElectionTimeout ||
			rc.LeaderLeaseTimeout != want.LeaderLeaseTimeout || rc.CommitTimeout != want.CommitTimeout || r.Quiet().Quiet != quiet {
			return false
		}
	}
	return true
}

// waitFor polls cond every 5 ms until it holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
	}
}

func putCmd(k, v string) *fsm.Command {
	return &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: keys.KV([]byte("rk"), []byte(k)), Value: []byte(v)}}}}
}

// TestQuietGroupWakes: an idle group goes quiet on all three replicas (the
// quiet row in Raft's own configuration), its first proposal succeeds, the
// leader runs the normal row again when the proposal returns, and the
// followers follow; a read barrier wakes it the same way.
func TestQuietGroupWakes(t *testing.T) {
	const after, timeout = 300 * time.Millisecond, 5 * time.Second
	c := newQuietCluster(t, 1, normalDefaults, after, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, lr := c.leader(t, 1, 10*time.Second)
	if _, err := lr.Propose(ctx, putCmd("a", "1")); err != nil {
		t.Fatal(err)
	}
	for i, wake := range []func() error{
		func() error { _, err := lr.Propose(ctx, putCmd("b", "2")); return err },
		func() error { return lr.ReadBarrier(ctx) },
	} {
		waitFor(t, 10*time.Second, "the group quiet on every replica", func() bool { return c.rows(1, true, timeout) })
		start := time.Now()
		if err := wake(); err != nil {
			t.Fatalf("wake %d: %v", i, err)
		}
		took := time.Since(start)
		if rc := lr.Raft().ReloadableConfig(); rc.HeartbeatTimeout != c.normal.HeartbeatTimeout || rc.CommitTimeout != c.normal.CommitTimeout || rc.LeaderLeaseTimeout != c.normal.LeaderLeaseTimeout {
			t.Fatalf("wake %d: the leader runs %+v after the request returned, want the normal row", i, rc)
		}
		waitFor(t, 3*time.Second, "every replica back to the normal row", func() bool { return c.rows(1, false, timeout) })
		t.Logf("wake %d: the request took %v on a quiet group", i, took)
	}
	// The followers applied the write that woke the group (its commit
	// index reached them at the normal commit timeout).
	for _, n := range c.nodes {
		r := n.rep(1)
		waitFor(t, 3*time.Second, n.id+" applied the waking write", func() bool {
			v, err := r.FSM().Get(keys.KV([]byte("rk"), []byte("b")))
			return err == nil && string(v) == "2"
		})
	}
	if st := lr.Quiet(); st.ToQuiet < 2 || st.ToNormal < 2 {
		t.Errorf("leader's quiet stats %+v, want two rounds", st)
	}
}

// TestQuietMissedNotice: a follower that misses the leader's wake notice
// still returns to the normal row while the group works: the leader
// retries each WakeRetry until it answers.
func TestQuietMissedNotice(t *testing.T) {
	const after, timeout = 300 * time.Millisecond, 5 * time.Second
	c := newQuietCluster(t, 1, normalDefaults, after, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, lr := c.leader(t, 1, 10*time.Second)
	waitFor(t, 10*time.Second, "the group quiet on every replica", func() bool { return c.rows(1, true, timeout) })

	// The first wake notice to one follower is lost.
	var victim raft.ServerID
	for _, s := range c.servers {
		if string(s.ID) != ln.id {
			victim = s.ID
			break
		}
	}
	var dropped atomic.Int32
	drop := func(from string, to raft.Server, n transport.Notice) bool {
		return n.Kind == transport.NoticeWake && to.ID == victim && dropped.CompareAndSwap(0, 1)
	}
	c.drop.Store(&drop)

	// The group works: a write every 100 ms keeps it awake.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			if _, err := lr.Propose(ctx, putCmd("k", fmt.Sprint(i))); err != nil {
				t.Errorf("propose %d: %v", i, err)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, 5*time.Second, "the wake notice to "+string(victim)+" dropped", func() bool { return dropped.Load() == 1 })
	waitFor(t, 5*time.Second, "every replica back to the normal row, "+string(victim)+" included", func() bool { return c.rows(1, false, timeout) })
}

// TestQuietFailover: four quiet groups whose leaders are all on one node
// (T = 1 s); the node is killed: every group elects a new leader within
// quietFailoverBound, and every write acknowledged before is there.
func TestQuietFailover(t *testing.T) {
	const after, timeout = 300 * time.Millisecond, time.Second
	const groups = 4
	c := newQuietCluster(t, groups, normalFast, after, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n1 := c.nodes[0]
	// leadOnN1 moves group g's leadership to n1 (the fast normal row of
	// this test can lose a leader on a loaded host: retried).
	leadOnN1 := func(g uint32) {
		waitFor(t, 20*time.Second, fmt.Sprintf("n1 ready leader of group %d", g), func() bool {
			r := n1.rep(g)
			if r.IsLeader() && r.ReadyTerm() == r.Raft().CurrentTerm() {
				return true
			}
			if _, lr := c.leader(t, g, 10*time.Second); lr != r {
				_ = lr.TransferLeadership(ctx, n1.id, string(c.servers[0].Address))
			}
			return false
		})
	}
	for g := uint32(1); g <= groups; g++ {
		for i := 0; i < 10; i++ {
			waitFor(t, 20*time.Second, fmt.Sprintf("group %d write %d acknowledged", g, i), func() bool {
				leadOnN1(g)
				_, err := n1.rep(g).Propose(ctx, putCmd(fmt.Sprint(i), fmt.Sprint(g)))
				return err == nil
			})
		}
	}
	for g := uint32(1); g <= groups; g++ {
		waitFor(t, 10*time.Second, fmt.Sprintf("group %d quiet on every replica", g), func() bool { return c.rows(g, true, timeout) })
		if !n1.rep(g).IsLeader() {
			t.Fatalf("group %d: n1 lost its quiet leadership", g)
		}
	}

	n1.kill(t)
	killed := time.Now()
	// The time each group first had a ready leader again.
	elected := map[uint32]time.Duration{}
	waitFor(t, 15*time.Second, "a ready leader of every group", func() bool {
		for g := uint32(1); g <= groups; g++ {
			if _, ok := elected[g]; ok {
				continue
			}
			for _, n := range c.nodes[1:] {
				if r := n.rep(g); r.IsLeader() && r.ReadyTerm() == r.Raft().CurrentTerm() {
					elected[g] = time.Since(killed)
				}
			}
		}
		return len(elected) == groups
	})
	var slowest time.Duration
	for g := uint32(1); g <= groups; g++ {
		slowest = max(slowest, elected[g])
		// Both survivors woke and may campaign: the first new leader can
		// be followed by another. Read from whichever leads now.
		_, lr := c.leader(t, g, 10*time.Second)
		waitFor(t, 10*time.Second, fmt.Sprintf("group %d: a read barrier on its leader", g), func() bool {
			if err := lr.ReadBarrier(ctx); err != nil {
				_, lr = c.leader(t, g, 10*time.Second)
				return false
			}
			return true
		})
		for i := 0; i < 10; i++ {
			v, err := lr.FSM().Get(keys.KV([]byte("rk"), []byte(fmt.Sprint(i))))
			if err != nil || string(v) != fmt.Sprint(g) {
				t.Errorf("group %d key %d after failover: %q, %v", g, i, v, err)
			}
		}
	}
	t.Logf("every quiet group had a new ready leader %v after the kill (T = %v; per group %v)", slowest.Round(time.Millisecond), timeout, elected)
	if slowest > quietFailoverBound {
		t.Errorf("failover of quiet groups took %v, bound %v", slowest, quietFailoverBound)
	}
}

// quietFailoverBound bounds TestQuietFailover's failover with T = 1 s: a
// follower notices the silence after T to 2T (hashicorp/raft's random
// heartbeat timer, from the last heartbeat of the quiet leader), its
// candidacy wakes the other (observeQuiet), and the election runs at the
// normal timeouts (200-400 ms a round; two survivors may split a vote).
// Measured on the shared 2-core host under -race: 1.8-2.7 s.
const quietFailoverBound = 3 * time.Second
