package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/freeport"
	"github.com/swarmkv/swarmkv/internal/leakcheck"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/secrets"
	"github.com/swarmkv/swarmkv/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// startNode starts a one-node cluster with a bot-token key ring and
// returns a client of it.
func startNode(t *testing.T) *client.Client {
	t.Helper()
	addr := func() string {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ring, err := secrets.ParseRing("k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cluster.Config{
		ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), BootstrapExpect: 1, Shards: 1,
		RaftAddr: addr(), GRPCAddr: addr(), GossipAddr: addr(), HTTPAddr: "127.0.0.1:0",
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, GossipProfile: "local", TokenKeys: ring,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *client.Client
	for {
		if c == nil {
			c, err = client.New(ctx, client.Config{Endpoints: []string{s.Node().Addrs().GRPCAddr}})
		}
		if err == nil {
			if _, err = c.Pools().GetPool(ctx, "system", records.DefaultPoolID); err == nil {
				break // the pools shard has a leader, and the seed pool exists
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("node not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lineWaiter reads the controller's lines.
type lineWaiter struct {
	t     *testing.T
	lines chan string
	all   []string
}

// await returns the first line from now on that contains want.
func (w *lineWaiter) await(want string, timeout time.Duration) string {
	w.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-w.lines:
			w.all = append(w.all, l)
			if strings.Contains(l, want) {
				return l
			}
		case <-deadline:
			w.t.Fatalf("no line with %q within %v; lines so far:\n%s", want, timeout, strings.Join(w.all, "\n"))
		}
	}
}

// TestControllerTracksRunnersAndBots: the controller lists the runner
// that was already up, reports a runner that comes up and, once its
// heartbeats stop, goes (not before its lease could have expired); a bot
// registered and removed; a runner that keeps heartbeating never goes.
func TestControllerTracksRunnersAndBots(t *testing.T) {
	c := startNode(t)
	p := c.Pools()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ttl := client.MinLeaseTTL
	r0, err := p.StartRunner(ctx, "r0", "", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Stop()

	w := &lineWaiter{t: t, lines: make(chan string, 1000)}
	ctl := &Controller{Pools: p, Log: func(l string) { w.lines <- l }}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- ctl.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	got := map[string]bool{}
	for range 2 { // the two listings, in either order
		l := w.await("listed", 20*time.Second)
		got[strings.Join(strings.Fields(l)[:3], " ")] = true
	}
	if !got["listed 1 runners"] || !got["listed 0 bots"] {
		t.Fatalf("listing lines %v: want 1 runner and 0 bots", w.all)
	}
	if rs := ctl.Runners(); !slices.Equal(rs, []string{"r0"}) {
		t.Fatalf("runners after the listing: %v", rs)
	}

	r1, err := p.StartRunner(ctx, "r1", `{"host":"h1"}`, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Stop()
	w.await(`runner r1 up meta {"host":"h1"}`, 20*time.Second)
	if got := ctl.Runners(); !slices.Equal(got, []string{"r0", "r1"}) {
		t.Fatalf("runners after r1 came up: %v", got)
	}

	if _, err := p.RegisterBot(ctx, "alice", client.BotSpec{AgentID: "b1", Token: "tok-b1", ClientID: "app-b1", Tag: "B#1"}); err != nil {
		t.Fatal(err)
	}
	w.await("bot b1 registered in pool "+records.DefaultPoolID, 20*time.Second)
	if b, ok := ctl.Bots()["b1"]; !ok || !b.HasToken || b.Tag != "B#1" {
		t.Fatalf("bot b1 in the view: %+v %t", b, ok)
	}

	r1.Stop() // its heartbeats stop
	_, renewed := r1.TTL()
	w.await("runner r1 gone", ttl+30*time.Second)
	if el := time.Since(renewed); el < ttl {
		t.Fatalf("r1 reported gone %v after its last acknowledged heartbeat, within its TTL %v", el, ttl)
	}
	if got := ctl.Runners(); !slices.Equal(got, []string{"r0"}) {
		t.Fatalf("runners after r1 went: %v", got)
	}

	if err := p.RemoveBot(ctx, "alice", "b1"); err != nil {
		t.Fatal(err)
	}
	w.await("bot b1 removed from pool "+records.DefaultPoolID, 20*time.Second)
	if s := ctl.SummaryLine(); !strings.Contains(s, "1 runners up [r0]") || !strings.Contains(s, "0 bots") {
		t.Fatalf("summary %q", s)
	}
	for _, l := range w.all {
		if strings.Contains(l, "runner r0 gone") {
			t.Fatalf("r0 kept heartbeating but was reported gone: %q", l)
		}
	}
}
