package replica

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// blockingFSM's Apply waits for release: the entry's future stays
// unresolved meanwhile, as one Raft never answers would.
type blockingFSM struct{ release chan struct{} }

func (f blockingFSM) Apply(*raft.Log) any               { <-f.release; return nil }
func (blockingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (blockingFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

// bindShutdown pins what waitFuture relies on: the futures of the raft
// version in go.mod have a settable ShutdownCh that Error() honours, so a
// waiter of a future Raft never answers returns when the replica closes.
func TestBindShutdown(t *testing.T) {
	c := raft.DefaultConfig()
	c.LocalID = "a"
	c.Logger = hclog.NewNullLogger()
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("")
	if err := raft.BootstrapCluster(c, store, store, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "a", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	fsm := blockingFSM{release: make(chan struct{})}
	r, err := raft.NewRaft(c, fsm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(fsm.release)
		if err := r.Shutdown().Error(); err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); r.State() != raft.Leader; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}

	done := make(chan struct{})
	f := r.Apply([]byte("x"), time.Second)
	if !bindShutdown(f, done) {
		t.Fatalf("bindShutdown(%T) = false: this raft version's futures have no ShutdownCh; waitFuture cannot join their waiters", f)
	}
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		t.Fatalf("Error() = %v while the state machine holds the entry", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(done)
	select {
	case err := <-errc:
		if !errors.Is(err, raft.ErrRaftShutdown) {
			t.Fatalf("Error() after close = %v, want ErrRaftShutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Error() still blocked after close: the waiter could not be joined")
	}
}
