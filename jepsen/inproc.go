package jepsen

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/admin"
	"github.com/swarmkv/swarmkv/internal/freeport"
	"github.com/swarmkv/swarmkv/server"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/faultnet"
)

// InProcConfig configures an in-process cluster.
type InProcConfig struct {
	// Dir holds the nodes' data dirs (one folder per node).
	Dir string
	// Nodes is the number of nodes (default 3); Shards the shard count
	// (default 8).
	Nodes, Shards int
	// Seed seeds faultnet's drop draws.
	Seed int64
	// Logger receives the nodes' logs; default discards them.
	Logger *slog.Logger
}

// InProc is a Driver over nodes in this process on loopback, their Raft
// traffic through faultnet. Kill closes a node (its data dir stays) and
// Start reopens it on the same addresses; Pause cuts all of its Raft
// traffic (the process cannot stop one node's goroutines). It implements
// Membership (membership.go): Nodes, Endpoints and AdminAddrs follow the
// members it adds and removes.
type InProc struct {
	fn     *faultnet.Network
	dir    string
	shards int
	logger *slog.Logger

	mu struct {
		sync.Mutex
		// cfgs holds every node ever configured, removed ones included;
		// members the current members, sorted; next numbers the next
		// new node.
		cfgs    map[string]cluster.Config
		members []string
		next    int
		nodes   map[string]*cluster.Node
		// admins serve the nodes' admin HTTP API (the leader-transfer
		// nemesis uses it), as cmd/swarmnode does.
		admins map[string]*admin.Server
		paused map[string]bool
		// groups is the active partition, reapplied when a pause ends.
		groups [][]string
		blocks [][2]string
	}
}

var _ Driver = (*InProc)(nil)

// NewInProc starts the nodes and waits until they are ready.
func NewInProc(ctx context.Context, cfg InProcConfig) (*InProc, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	d := &InProc{fn: faultnet.New(cfg.Seed), dir: cfg.Dir, shards: cfg.Shards, logger: cfg.Logger}
	d.mu.cfgs = map[string]cluster.Config{}
	d.mu.nodes = map[string]*cluster.Node{}
	d.mu.admins = map[string]*admin.Server{}
	d.mu.paused = map[string]bool{}
	var ids []string
	for range cfg.Nodes {
		c, err := d.newConfig(cfg.Nodes)
		if err != nil {
			return nil, err
		}
		ids = append(ids, c.ID)
	}
	for _, id := range ids {
		c := d.mu.cfgs[id]
		for _, o := range ids {
			if o != id {
				c.Join = append(c.Join, d.mu.cfgs[o].GossipAddr)
			}
		}
		d.mu.cfgs[id] = c
	}
	d.mu.members = ids
	for _, id := range ids {
		if err := d.Start(ctx, id); err != nil {
			d.Close()
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitReady(rctx, d, ids); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// newConfig records the config of the next node, n<next>, on fresh
// loopback ports with its own data dir. bootstrapExpect 0 makes it wait to
// be admitted; the caller sets Join.
func (d *InProc) newConfig(bootstrapExpect int) (cluster.Config, error) {
	var addrs [4]string
	for j := range addrs {
		a, err := freePort()
		if err != nil {
			return cluster.Config{}, err
		}
		addrs[j] = a
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.next++
	name := fmt.Sprintf("n%d", d.mu.next)
	c := cluster.Config{
		ID:                 name,
		DataDir:            filepath.Join(d.dir, name),
		RaftAddr:           addrs[0],
		GRPCAddr:           addrs[1],
		GossipAddr:         addrs[2],
		HTTPAddr:           addrs[3],
		BootstrapExpect:    bootstrapExpect,
		Shards:             d.shards,
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond,
		GossipProfile:      "local",
		Logger:             d.logger.With("jepsen_node", name),
		Testing:            cluster.Testing{Dial: d.fn.Dialer(name)},
	}
	c.Testing.WrapRaftListener = func(ln net.Listener) net.Listener { return d.fn.Listen(name, ln) }
	d.mu.cfgs[name] = c
	return c, nil
}

// freePort returns a loopback address with a free port below the kernel's
// ephemeral range, so that no outgoing connection takes it while its node
// is down between a kill and a restart (internal/freeport).
func freePort() (string, error) { return freeport.Addr() }

func (d *InProc) Name() string { return "inproc" }

// Nodes returns the current members.
func (d *InProc) Nodes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.mu.members)
}

// Endpoints returns the current members' gRPC addresses.
func (d *InProc) Endpoints() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var eps []string
	for _, id := range d.mu.members {
		eps = append(eps, d.mu.cfgs[id].GRPCAddr)
	}
	return eps
}

// AdminAddrs returns the current members' HTTP addresses.
func (d *InProc) AdminAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.mu.members {
		out = append(out, d.mu.cfgs[id].HTTPAddr)
	}
	return out
}

func (d *InProc) cfg(node string) (cluster.Config, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.mu.cfgs[node]
	if !ok {
		return cluster.Config{}, fmt.Errorf("jepsen: unknown node %q", node)
	}
	return c, nil
}

func (d *InProc) Ready(_ context.Context, node string) error {
	d.mu.Lock()
	n := d.mu.nodes[node]
	d.mu.Unlock()
	if n == nil {
		return fmt.Errorf("%s is down", node)
	}
	return n.Ready()
}

func (d *InProc) Kill(_ context.Context, node string) error {
	d.mu.Lock()
	n, srv := d.mu.nodes[node], d.mu.admins[node]
	delete(d.mu.nodes, node)
	delete(d.mu.admins, node)
	d.mu.Unlock()
	srv.Close()
	if n == nil {
		return nil
	}
	return n.Close()
}

func (d *InProc) Start(_ context.Context, node string) error {
	c, err := d.cfg(node)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.nodes[node] != nil {
		return nil
	}
	n, err := cluster.New(c, server.Services)
	if err != nil {
		return fmt.Errorf("start %s: %w", node, err)
	}
	d.mu.nodes[node] = n
	d.mu.admins[node] = admin.Start(n)
	return nil
}

func (d *InProc) Pause(_ context.Context, node string) error {
	d.mu.Lock()
	d.mu.paused[node] = true
	d.mu.Unlock()
	d.fn.Isolate(node)
	return nil
}

func (d *InProc) Resume(_ context.Context, node string) error {
	d.mu.Lock()
	delete(d.mu.paused, node)
	d.mu.Unlock()
	d.reapply()
	return nil
}

// reapply rebuilds faultnet's cuts from the recorded partition, blocks and
// pauses (faultnet's Heal clears isolation and blocks together).
func (d *InProc) reapply() {
	d.mu.Lock()
	groups := d.mu.groups
	blocks := append([][2]string(nil), d.mu.blocks...)
	var paused []string
	for n := range d.mu.paused {
		paused = append(paused, n)
	}
	d.mu.Unlock()
	d.fn.Heal()
	if groups != nil {
		d.fn.Partition(groups...)
	}
	for _, b := range blocks {
		d.fn.Block(b[0], b[1])
	}
	for _, n := range paused {
		d.fn.Isolate(n)
	}
}

func (d *InProc) Partition(_ context.Context, groups [][]string) error {
	d.mu.Lock()
	d.mu.groups = groups
	d.mu.Unlock()
	d.fn.Partition(groups...)
	return nil
}

func (d *InProc) Block(_ context.Context, from, to string) error {
	d.mu.Lock()
	d.mu.blocks = append(d.mu.blocks, [2]string{from, to})
	d.mu.Unlock()
	d.fn.Block(from, to)
	return nil
}

func (d *InProc) Heal(context.Context) error {
	d.mu.Lock()
	d.mu.groups, d.mu.blocks = nil, nil
	d.mu.Unlock()
	d.reapply()
	return nil
}

func (d *InProc) SetDelay(_ context.Context, dl time.Duration) error {
	d.fn.SetDelay(faultnet.Any, faultnet.Any, dl)
	return nil
}

func (d *InProc) SetDropRate(_ context.Context, p float64) error {
	d.fn.SetDropRate(faultnet.Any, faultnet.Any, p)
	return nil
}

// Close closes every node.
func (d *InProc) Close() error {
	d.mu.Lock()
	nodes, admins := d.mu.nodes, d.mu.admins
	d.mu.nodes, d.mu.admins = map[string]*cluster.Node{}, map[string]*admin.Server{}
	d.mu.Unlock()
	for _, srv := range admins {
		srv.Close()
	}
	var err error
	for _, n := range nodes {
		if e := n.Close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}
