package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/transport"
)

// previousBinary runs a node as the binary before protocol version 2
// (f6c5d17): it speaks version 1 only, announces "v" alone, and neither
// sends nor accepts Raft headers with a group incarnation.
func previousBinary(c *Config) { c.Testing.MaxProtocolVersion = 1 }

// TestVersionPlan: the version the meta leader raises the cluster to is
// the highest every member that is not removed speaks, as gossip
// announces it; a member not alive in gossip holds the raise back; the
// plan names the members an upgrade waits for.
func TestVersionPlan(t *testing.T) {
	cfg := Config{ID: "n1", DataDir: "x"}.WithDefaults()
	cfg.Testing.MaxProtocolVersion = 2 // a binary of 1..2
	n := &Node{cfg: cfg}
	st := &State{Nodes: []NodeAddrs{
		{ID: "n1", Status: StatusActive}, {ID: "n2", Status: StatusActive, Incarnation: "i2"},
		{ID: "n3", Status: StatusLeaving, Incarnation: "i3"}, {ID: "n4", Status: StatusRemoved, Incarnation: "i4"},
	}}
	anyVersion := func(lo, hi int) error { return nil }
	announce := func(id, inc string, alive bool, lo, hi int) {
		m := gossip.Meta{Version: lo, Min: lo, Max: hi, ID: id, Raft: "r", GRPC: "g", Inc: inc}
		if hi == 1 {
			m.Min, m.Max = 0, 0 // a binary before version ranges
		}
		b, _ := json.Marshal(m)
		n.members.Set(id, b, alive, anyVersion)
	}
	announce("n2", "i2", true, 1, 2)
	announce("n3", "i3", true, 1, 1)
	announce("n4", "i4", true, 1, 1) // removed: does not count
	p := n.versionPlan(st)
	if p.Active != 1 || p.Target != 1 || p.Highest != 2 || !slices.Equal(p.WaitingFor, []string{"n3 speaks 1..1"}) {
		t.Fatalf("one member of the previous binary: %+v", p)
	}
	announce("n3", "i3", true, 1, 2)
	if p := n.versionPlan(st); p.Target != 2 || len(p.WaitingFor) != 0 {
		t.Fatalf("every member upgraded: %+v", p)
	}
	announce("n3", "i3", false, 1, 2)
	if p := n.versionPlan(st); p.Target != 1 || !slices.Equal(p.WaitingFor, []string{"n3 not alive in gossip"}) {
		t.Fatalf("a member down: %+v", p)
	}
	announce("n3", "other", true, 1, 2) // another data dir under the id
	if p := n.versionPlan(st); p.Target != 1 {
		t.Fatalf("a member's id announced by another data dir: %+v", p)
	}
	st.ProtocolVersion = 2
	announce("n3", "i3", false, 1, 2)
	if p := n.versionPlan(st); p.Active != 2 || p.Target != 2 || len(p.WaitingFor) != 0 {
		t.Fatalf("at the highest version with a member down: %+v", p)
	}
}

// gatedKey marks the writes TestNewOpWaitsForVersion treats as an
// operation of protocol version 2.
const gatedKey = "/gated"

func gateWrites(cmd *fsm.Command) int {
	if cmd.Op == fsm.OpBatch && cmd.Batch != nil {
		for _, m := range cmd.Batch.Mutations {
			if bytes.HasSuffix(m.Key, []byte(gatedKey)) {
				return 2
			}
		}
	}
	return 0
}

// TestNewOpWaitsForVersion: an operation that needs a protocol version
// the cluster does not run yet is refused with FailedPrecondition naming
// both versions, and changes nothing; once the last node of the previous
// binary is upgraded and the cluster raised, it is served.
func TestNewOpWaitsForVersion(t *testing.T) {
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		if c.ID == "n3" {
			previousBinary(c)
		}
		c.Testing.CommandSince = gateWrites
	})
	ctx := ctxT(t, 90*time.Second)
	c := tc.client()
	rk := []byte("alice")
	for _, n := range tc.nodes {
		if v := n.ActiveVersion(); v != 1 {
			t.Fatalf("%s runs version %d with a node of the previous binary, want 1", n.ID(), v)
		}
	}
	if err := c.Put(ctx, rk, []byte("plain"), []byte("v")); err != nil {
		t.Fatalf("a write of version 1: %v", err)
	}
	err := c.Put(ctx, rk, []byte("x"+gatedKey), []byte("v"))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cluster runs protocol version 1, this operation needs 2") {
		t.Fatalf("a write of version 2 in a cluster at 1: %v, want FailedPrecondition naming both versions", err)
	}
	if _, err := c.Get(ctx, rk, []byte("x"+gatedKey)); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the refused write: get %v, want not found", err)
	}
	// Leases come with version 2 (fsm.VersionLeases): refused, nothing
	// granted, while a node of the previous binary is a member.
	if _, err := c.Leases().Grant(ctx, rk, 10*time.Second); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "cluster runs protocol version 1, this operation needs 2") {
		t.Fatalf("a lease grant in a cluster at 1: %v, want FailedPrecondition naming both versions", err)
	}
	// The gate is the replica's (replica.Config.Admit), not the API's: a
	// proposer inside the node (here the shard leader's lessor, asked
	// directly) is refused the same way.
	id, _, err := tc.nodes[0].Route(rk)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := tc.leaderReplica(id); r == nil {
		t.Fatalf("no leader of shard %d", id)
	} else {
		if _, err := r.Leases().Grant(ctx, rk, 10*time.Second); !errors.Is(err, ErrProtocolVersion) {
			t.Fatalf("the lessor's own grant in a cluster at 1: %v, want ErrProtocolVersion", err)
		}
		// The history compactor's op came with version 2 too.
		ret := fsm.HistoryRetention{MaxRevisions: 10}
		if _, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpCompactHistory, Time: time.Now().UnixMilli(), History: &ret}); !errors.Is(err, ErrProtocolVersion) {
			t.Fatalf("a history compaction in a cluster at 1: %v, want ErrProtocolVersion", err)
		}
	}
	if ls, err := c.Leases().List(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("leases after the refused grants: %v, %v", ls, err)
	}

	tc.stop(2)
	tc.cfgs[2].Testing.MaxProtocolVersion = 0 // the new binary
	tc.start(2)
	waitFor(t, 30*time.Second, "every node runs the highest version", func() error {
		for _, n := range tc.nodes {
			if v := n.ActiveVersion(); v != ProtocolVersion {
				return fmt.Errorf("%s runs %d", n.ID(), v)
			}
		}
		return nil
	})
	if err := c.Put(ctx, rk, []byte("x"+gatedKey), []byte("v2")); err != nil {
		t.Fatalf("a write of version 2 in a cluster at 2: %v", err)
	}
	if got, err := c.Get(ctx, rk, []byte("x"+gatedKey)); err != nil || string(got) != "v2" {
		t.Fatalf("get %q, %v", got, err)
	}
	if _, err := c.Leases().Grant(ctx, rk, 10*time.Second); err != nil {
		t.Fatalf("a lease grant in a cluster at 2: %v", err)
	}
}

// upgradeLoad writes distinct keys from a few writers until stopped and
// records what each write's answer was.
type upgradeLoad struct {
	mu      sync.Mutex
	acked   map[string]string // routing key/key -> value
	unknown int               // writes of unknown outcome
	failed  []error           // any other error
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startUpgradeLoad(c *client.Client, writers int) *upgradeLoad {
	w := &upgradeLoad{acked: map[string]string{}, stop: make(chan struct{})}
	for g := range writers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				rk, k, v := fmt.Sprintf("user-%d-%d", g, i%20), fmt.Sprintf("k%d-%d", g, i), fmt.Sprint(i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := c.Put(ctx, []byte(rk), []byte(k), []byte(v))
				cancel()
				w.mu.Lock()
				switch {
				case err == nil:
					w.acked[rk+"/"+k] = v
				case errors.Is(err, client.ErrOutcomeUnknown):
					w.unknown++
				default:
					w.failed = append(w.failed, fmt.Errorf("put %s/%s: %w", rk, k, err))
				}
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *upgradeLoad) acks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// TestRollingUpgrade: three nodes of the previous binary (protocol version
// 1) are replaced one at a time, from their data dirs, by the new binary
// while a client writes throughout. No acknowledged write is lost and no
// write fails but with an unknown outcome; the cluster runs version 1
// until the last node runs the new binary, then is raised to the highest
// version (ProtocolVersion); Raft
// connections carry no incarnation before, carry it after, and one
// without it is refused once the grace is over. A node of the previous
// binary cannot come back into the raised cluster.
func TestRollingUpgrade(t *testing.T) {
	const grace = 2 * time.Second
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		previousBinary(c)
		c.Testing.IncarnationGrace = grace
	})
	ctx := ctxT(t, 4*time.Minute)

	// live mirrors tc.nodes for the watcher below (tc.nodes is the test
	// goroutine's).
	var liveMu sync.Mutex
	live := slices.Clone(tc.nodes)
	setLive := func(i int, n *Node) {
		liveMu.Lock()
		live[i] = n
		liveMu.Unlock()
	}
	// upgrading counts the nodes of the new binary started (counted
	// before each start); raisedWith records it when a node first sees
	// version 2.
	var upgrading, raisedWith atomic.Int32
	raisedWith.Store(-1)
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			liveMu.Lock()
			for _, n := range live {
				if n != nil && n.ActiveVersion() >= 2 {
					raisedWith.CompareAndSwap(-1, upgrading.Load())
				}
			}
			liveMu.Unlock()
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopWatch); <-watchDone }()

	c := tc.client()
	load := startUpgradeLoad(c, 4)
	noIncarnations := func(stage string) {
		t.Helper()
		for _, n := range tc.nodes {
			if v := n.ActiveVersion(); v != 1 {
				t.Fatalf("%s: %s runs version %d, want 1", stage, n.ID(), v)
			}
			if s := n.mux.Stats(); s.DialedIncarnation != 0 || s.AcceptedIncarnation != 0 || s.RefusedWithIncarnation != 0 {
				t.Fatalf("%s: %s saw incarnation headers while the cluster runs 1: %+v", stage, n.ID(), s)
			}
		}
	}
	waitFor(t, 30*time.Second, "writes before the upgrade", func() error {
		if load.acks() < 50 {
			return errors.New("fewer than 50 acknowledged")
		}
		return nil
	})
	noIncarnations("before the upgrade")

	for i := range tc.nodes {
		before := load.acks()
		tc.stop(i) // the test goroutine writes tc.nodes; the watcher reads live
		setLive(i, nil)
		tc.cfgs[i].Testing.MaxProtocolVersion = 0 // the new binary, same data dir
		upgrading.Add(1)
		tc.start(i)
		setLive(i, tc.nodes[i])
		t.Logf("%s runs the new binary", tc.cfgs[i].ID)
		tc.waitReady()
		waitFor(t, 60*time.Second, "shards healthy and writes going on", func() error {
			if _, err := settled(ctx, tc.nodes[i], 3, 3); err != nil {
				return err
			}
			if load.acks() < before+50 {
				return fmt.Errorf("%d writes acknowledged since the restart", load.acks()-before)
			}
			return nil
		})
		if i == len(tc.nodes)-1 {
			break
		}
		// Every node sees what the raise waits for: the nodes of the
		// previous binary left.
		var want []string
		for _, c := range tc.cfgs[i+1:] {
			want = append(want, c.ID+" speaks 1..1")
		}
		waitFor(t, 30*time.Second, "the raise waits for the previous binary", func() error {
			for _, n := range tc.nodes {
				st, err := n.Status(ctx)
				if err != nil {
					return err
				}
				if p := st.Protocol; st.ProtocolVersion != 1 || p.Highest != ProtocolVersion || p.Target != 1 || !slices.Equal(p.WaitingFor, want) {
					return fmt.Errorf("%s: version %d, plan %+v", n.ID(), st.ProtocolVersion, p)
				}
			}
			return nil
		})
		noIncarnations(fmt.Sprintf("after %d of 3 upgraded", i+1))
	}

	waitFor(t, 30*time.Second, "every node runs the highest version", func() error {
		for _, n := range tc.nodes {
			if v := n.ActiveVersion(); v != ProtocolVersion {
				return fmt.Errorf("%s runs %d", n.ID(), v)
			}
		}
		return nil
	})
	if got := raisedWith.Load(); got != 3 {
		t.Fatalf("the cluster was raised past version 1 with %d of 3 nodes upgraded", got)
	}
	// After the grace every node requires incarnations and holds no
	// connection opened without one; connections are opened again with
	// it (dialed by a leader, accepted by its followers).
	dialedPlain := map[string]uint64{}
	waitFor(t, 30*time.Second, "incarnations required and carried", func() error {
		var dialed, accepted uint64
		for _, n := range tc.nodes {
			n.version.mu.Lock()
			required := n.version.required
			n.version.mu.Unlock()
			s := n.mux.Stats()
			if !required || s.OpenPlain != 0 {
				return fmt.Errorf("%s: required %v, %+v", n.ID(), required, s)
			}
			dialed += s.DialedIncarnation
			accepted += s.AcceptedIncarnation
			dialedPlain[n.ID()] = s.DialedPlain
		}
		if dialed == 0 || accepted == 0 {
			return fmt.Errorf("%d connections dialed, %d accepted with the incarnation", dialed, accepted)
		}
		return nil
	})
	// A header without the incarnation is refused now.
	for _, n := range tc.nodes {
		before := n.mux.Stats().RefusedPlain
		probe, err := net.Dial("tcp", n.Addrs().RaftAddr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := probe.Write([]byte{'S', 'W', 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the plain header refused", func() error {
			if n.mux.Stats().RefusedPlain == before {
				return errors.New("not refused yet")
			}
			return nil
		})
		probe.Close()
		if m := n.incarnationMode(); m != transport.IncarnationRequire {
			t.Fatalf("%s: mode %v", n.ID(), m)
		}
	}
	st, err := tc.nodes[0].Status(ctx)
	if err != nil || st.ProtocolVersion != ProtocolVersion || st.Protocol.Target != ProtocolVersion || len(st.Protocol.WaitingFor) != 0 {
		t.Fatalf("status after the upgrade: %+v, %v", st, err)
	}
	for _, m := range st.Members {
		if m.Version != ProtocolVersion || m.MinVersion != 1 || m.MaxVersion != ProtocolVersion {
			t.Fatalf("member %s announces %d (%d..%d), want %d (1..%d)", m.ID, m.Version, m.MinVersion, m.MaxVersion, ProtocolVersion, ProtocolVersion)
		}
	}

	// Writes go on after the raise; then every acknowledged one is read
	// back.
	before := load.acks()
	waitFor(t, 30*time.Second, "writes after the raise", func() error {
		if load.acks() < before+50 {
			return errors.New("fewer than 50 acknowledged")
		}
		return nil
	})
	close(load.stop)
	load.wg.Wait()
	for _, n := range tc.nodes {
		if s := n.mux.Stats(); s.DialedPlain != dialedPlain[n.ID()] || s.OpenPlain != 0 {
			t.Errorf("%s dialed without the incarnation after requiring it: %+v, %d before", n.ID(), s, dialedPlain[n.ID()])
		}
	}
	for _, err := range load.failed {
		t.Errorf("write failed with an error other than an unknown outcome: %v", err)
	}
	lost := 0
	for rkk, v := range load.acked {
		rk, k, _ := strings.Cut(rkk, "/")
		got, err := c.Get(ctx, []byte(rk), []byte(k))
		if err != nil || string(got) != v {
			if lost++; lost < 5 {
				t.Errorf("acknowledged write %s = %q: read %q, %v", rkk, v, got, err)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(load.acked))
	}
	t.Logf("%d acknowledged writes read back, %d of unknown outcome, %d failed", len(load.acked), load.unknown, len(load.failed))

	// The previous binary cannot come back: the version is never lowered.
	tc.stop(0)
	setLive(0, nil)
	cfg := tc.cfgs[0]
	previousBinary(&cfg)
	if n, err := New(cfg, APIServices); err == nil {
		n.Close()
		t.Fatal("a node of the previous binary started in a cluster that runs the highest version")
	} else if !strings.Contains(err.Error(), fmt.Sprintf("runs protocol version %d, this binary speaks 1..1", ProtocolVersion)) {
		t.Fatalf("the previous binary refused with %v, want the versions named", err)
	}
}

// TestIncarnationHeadersWithSecret: a new cluster with a cluster secret
// (Auth without TLS) runs the highest version from its bootstrap: its Raft
// connections carry the group incarnation in the authenticated preface,
// none is opened without it, and the cluster serves writes once plain
// prefaces are refused.
func TestIncarnationHeadersWithSecret(t *testing.T) {
	secretFile := writeSecret(t, "0123456789abcdef0123456789abcdef-test-secret")
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		c.Auth, c.ClusterSecretFile = true, secretFile
		c.Testing.IncarnationGrace = 300 * time.Millisecond
	})
	ctx := ctxT(t, 60*time.Second)
	waitFor(t, 30*time.Second, "incarnations required and carried", func() error {
		var accepted uint64
		for _, n := range tc.nodes {
			if v := n.ActiveVersion(); v != ProtocolVersion {
				return fmt.Errorf("%s runs %d", n.ID(), v)
			}
			s := n.mux.Stats()
			if n.incarnationMode() != transport.IncarnationRequire || s.OpenPlain != 0 || s.AcceptedPlain != 0 {
				return fmt.Errorf("%s: %v, %+v", n.ID(), n.incarnationMode(), s)
			}
			accepted += s.AcceptedIncarnation
		}
		if accepted == 0 {
			return errors.New("no preface with an incarnation accepted")
		}
		return nil
	})
	rk := []byte("alice")
	for i := range 20 {
		if err := tc.putRouted(ctx, rk, fmt.Sprint("k", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := tc.getRouted(ctx, rk, "k19"); err != nil || string(v) != "v" {
		t.Fatalf("read back %q, %v", v, err)
	}
}
