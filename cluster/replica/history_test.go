package replica

import (
	"net"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
)

// withHistory makes the replica compact its watch history every every.
func withHistory(every time.Duration) func(*Config) {
	return func(c *Config) {
		c.History, c.HistoryEvery = fsm.HistoryRetention{MaxRevisions: 100}, every
	}
}

// TestHistoryLoopIdleOffLeader: the history loop of a replica that does
// not lead makes no timed pass (it had a ticker on every replica of every
// group); a ready leader's loop runs.
func TestHistoryLoopIdleOffLeader(t *testing.T) {
	every := 10 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := singleConfig(t.TempDir(), nil, ln)
	c.Bootstrap = false // no configuration: it never leads
	r, err := openWith(c, withHistory(every))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	defer r.Close()
	time.Sleep(20 * every) // a window in which nothing may happen
	if n := r.histPasses.Load(); n != 0 {
		t.Fatalf("%d history passes off the leader in 20 periods, want 0", n)
	}

	l := openSingle(t, t.TempDir(), nil, withHistory(every))
	defer l.Close()
	waitUntil(t, 5*time.Second, "a leader's history pass", func() bool { return l.histPasses.Load() > 0 })
}
