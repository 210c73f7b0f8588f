package replica

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/raftlog"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// tcpLayer is a raft.StreamLayer on a plain TCP listener (the node uses
// its transport.Mux).
type tcpLayer struct{ net.Listener }

func (tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// openSingle opens a bootstrapped one-voter replica in dir (log store
// shared when ls is not nil) and waits until it is a ready leader.
func openSingle(t *testing.T, dir string, ls *raftlog.Store, opts ...func(*Config)) *Replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := openWith(singleConfig(dir, ls, ln), opts...)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); r.ReadyTerm() == 0 || r.ReadyTerm() != r.Raft().CurrentTerm(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.Close()
			t.Fatal("no ready leader")
		}
	}
	return r
}

// singleConfig is the Config of a one-voter group of node n1 listening on
// ln, bootstrapped.
func singleConfig(dir string, ls *raftlog.Store, ln net.Listener) Config {
	return Config{
		ID:       3,
		Dir:      dir,
		LocalID:  "n1",
		Layer:    tcpLayer{ln},
		LogStore: ls,
		Raft: RaftSettings{
			HeartbeatTimeout:   100 * time.Millisecond,
			ElectionTimeout:    100 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
			CommitTimeout:      10 * time.Millisecond,
			SnapshotThreshold:  8192,
			SnapshotInterval:   time.Minute,
			TrailingLogs:       1024,
		},
		MemTableSize: 256 << 10,
		Limits:       fsm.Limits{}.WithDefaults(),
		Voters:       []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: raft.ServerAddress(ln.Addr().String())}},
		Bootstrap:    true,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func openWith(c Config, opts ...func(*Config)) (*Replica, error) {
	for _, o := range opts {
		o(&c)
	}
	return Open(c)
}

// TestDefaultPoolNotOwned: the leader of a shard that does not own the
// pools slot (a split's new group starts owning none) stops ensuring the
// default pool at the state machine's MovedError instead of retrying, and
// writes nothing.
func TestDefaultPoolNotOwned(t *testing.T) {
	done := make(chan struct{})
	r := openSingle(t, t.TempDir(), nil, func(c *Config) {
		c.InitialSlots = &shard.SlotSet{}
		c.OnReady = func(r *Replica) { EnsureDefaultPool(r); close(done) }
	})
	defer r.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("EnsureDefaultPool still running on a shard without the pools slot")
	}
	if _, err := r.FSM().Get(keys.Pool(records.DefaultPoolID)); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("default pool on a shard without the pools slot: %v", err)
	}
	if !r.FSM().Owned().IsEmpty() {
		t.Fatalf("owned %v, want none", r.FSM().Owned())
	}
}

// TestReplicaSingleVoter: a one-voter group, with either log store,
// proposes (coalesced and not), serves a linearizable read, reports its
// status, snapshots, and keeps its state across a reopen; every waiter
// returns ErrClosed once it closes.
func TestReplicaSingleVoter(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "bolt"
		if shared {
			name = "shared"
		}
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			var ls *raftlog.Store
			if shared {
				var err error
				if ls, err = raftlog.Open(raftlog.Options{Dir: filepath.Join(base, "raftlog")}); err != nil {
					t.Fatal(err)
				}
				defer ls.Close()
			}
			dir := filepath.Join(base, "shard")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := keys.KV([]byte("rk"), []byte("k"))
			put := &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: key, Value: []byte("v")}}}}

			r := openSingle(t, dir, ls)
			if !r.IsLeader() || r.Leader() != "n1" || r.ID() != 3 {
				t.Fatalf("leader %v, %q, id %d", r.IsLeader(), r.Leader(), r.ID())
			}
			before, ownBefore := r.Stats(), r.FSM().Own().Applied()
			if _, err := r.Propose(ctx, put); err != nil {
				t.Fatal(err)
			}
			if st := r.Stats(); st.Entries != before.Entries+1 || st.Commands != before.Commands+1 {
				t.Errorf("stats %+v after one coalesced proposal, before %+v", st, before)
			}
			// The leader applied its own entry from the command (fsm.Own)
			// and holds nothing once the proposal is answered.
			if own := r.FSM().Own(); own.Applied() != ownBefore+1 || own.Len() != 0 {
				t.Errorf("own proposals: %d applied without decoding, %d held; want 1, 0", own.Applied()-ownBefore, own.Len())
			}
			if _, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpBatch, Batch: &fsm.Batch{Mutations: []fsm.Mutation{{Kind: fsm.MutPut, Key: make([]byte, 1<<20), Value: []byte("v")}}}}); err == nil {
				t.Error("a command over the apply-time limits was proposed")
			}
			if err := r.ReadBarrier(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := r.FSM().Get(key); err != nil || string(v) != "v" {
				t.Fatalf("Get = %q, %v", v, err)
			}
			if st := r.Stats(); st.Reads == 0 || st.ReadsVerified == 0 {
				t.Errorf("stats %+v after a read without a checker", st)
			}
			st := r.Status("n1")
			if !st.Ready || st.LeaderId != "n1" || st.AppliedIndex == 0 || len(st.Servers) != 1 {
				t.Errorf("status %+v", st)
			}
			idx, err := r.Snapshot(ctx)
			if err != nil || idx == 0 {
				t.Fatalf("Snapshot = %d, %v", idx, err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Propose(ctx, put); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotLeader) {
				t.Errorf("Propose after Close: %v", err)
			}

			r = openSingle(t, dir, ls)
			defer r.Close()
			if err := r.ReadBarrier(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := r.FSM().Get(key); err != nil || string(v) != "v" {
				t.Fatalf("Get after reopen = %q, %v", v, err)
			}
		})
	}
}

// TestRaftConfig: the replica's settings reach hashicorp/raft as given,
// with group commit on.
func TestRaftConfig(t *testing.T) {
	c := Config{LocalID: "n1", Raft: RaftSettings{
		HeartbeatTimeout: time.Second, ElectionTimeout: 2 * time.Second, LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout: 7 * time.Millisecond, SnapshotThreshold: 10, SnapshotInterval: time.Minute, TrailingLogs: 20,
	}}
	rc := c.raftConfig()
	if rc.LocalID != "n1" || rc.HeartbeatTimeout != time.Second || rc.ElectionTimeout != 2*time.Second ||
		rc.LeaderLeaseTimeout != 500*time.Millisecond || rc.CommitTimeout != 7*time.Millisecond ||
		rc.SnapshotThreshold != 10 || rc.SnapshotInterval != time.Minute || rc.TrailingLogs != 20 {
		t.Errorf("raft config %+v from %+v", rc, c.Raft)
	}
	if !rc.BatchApplyCh || rc.MaxAppendEntries != 256 {
		t.Errorf("group commit: BatchApplyCh %v, MaxAppendEntries %d", rc.BatchApplyCh, rc.MaxAppendEntries)
	}
	if rc.MaxApplyQueueBytes != maxApplyQueueBytes || rc.MaxAppendEntriesBytes != maxAppendEntriesBytes {
		t.Errorf("byte bounds: MaxApplyQueueBytes %d, MaxAppendEntriesBytes %d", rc.MaxApplyQueueBytes, rc.MaxAppendEntriesBytes)
	}
	if err := c.ValidateRaft(); err != nil {
		t.Error(err)
	}
	c.Raft.LeaderLeaseTimeout = 2 * time.Second // above the heartbeat timeout
	if err := c.ValidateRaft(); err == nil {
		t.Error("ValidateRaft accepted a leader lease above the heartbeat timeout")
	}
}

// TestLeaderObserved: a replica counts the leaders it learns of and hands
// each to Config.OnLeader with its term.
func TestLeaderObserved(t *testing.T) {
	type seen struct {
		leader string
		term   uint64
	}
	var mu sync.Mutex
	var got []seen
	r := openSingle(t, filepath.Join(t.TempDir(), "shard"), nil, func(c *Config) {
		c.OnLeader = func(leader string, term uint64) {
			mu.Lock()
			got = append(got, seen{leader, term})
			mu.Unlock()
		}
	})
	defer r.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].leader != "n1" || got[0].term != r.Raft().CurrentTerm() {
		t.Errorf("OnLeader calls %+v, want one for n1 in term %d", got, r.Raft().CurrentTerm())
	}
	if st := r.Stats(); st.LeaderChanges != 1 {
		t.Errorf("LeaderChanges = %d, want 1", st.LeaderChanges)
	}
}
