package jepsen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/internal/faultnet"
)

// DockerConfig describes a cluster started by docker-compose.cluster.yml.
type DockerConfig struct {
	// Nodes are the current members (default n1, n2, n3). Node nI's
	// container is ContainerPrefix+nI, its gRPC address 127.0.0.1:I<D>100
	// and its HTTP address 127.0.0.1:I<D>102 with D = PortDigit, as the
	// compose file publishes them (or PortBase+100*I and PortBase+100*I+2
	// when PortBase is set).
	Nodes []string
	// Services are every node the compose file defines (default n1..n5,
	// the spares n4 and n5 under the profile "spare"); the membership
	// nemeses add nodes from those that are not members.
	Services []string
	// PortDigit is the compose file's SWARMKV_PORT_DIGIT (default 7).
	PortDigit int
	// PortBase, when not 0, replaces PortDigit's scheme: node nI publishes
	// gRPC on PortBase+100*I and HTTP on PortBase+100*I+2
	// (docker-compose.zones.yml: 32000, so n1 32100/32102 .. n6
	// 32600/32602).
	PortBase int
	// ContainerPrefix is prepended to node ids (default "swarmkv-").
	ContainerPrefix string
	// Network is the private network (default "swarmkv-net").
	Network string
	// Docker is the docker binary (default "docker").
	Docker string
	// Compose is the compose command with its file, project and profile
	// (default docker-compose -f docker-compose.cluster.yml -p swarmkv
	// --profile spare, as the Makefile runs it); Project names the
	// volumes (<Project>_<node>-data, default "swarmkv").
	Compose []string
	Project string
}

// Docker is a Driver over the docker-compose cluster: docker kill/start,
// docker pause/unpause, and docker network disconnect/connect (with the
// node's fixed IP) for partitions. A partition whose smaller sides each
// hold one node is a set of disconnections. Finer faults (one-way blocks,
// hence bridges; delays; drops) would need netem or iptables, which the
// kernel and a FROM scratch container lack: they are injected by the nodes
// themselves, into their Raft-port connections (internal/faultnet.Local,
// swarmnode serve --fault-injection), set through each node's
// PUT /debug/faults. A node restarted by Start begins without injected
// faults (nemeses do not overlap).
//
// It implements Membership through the nodes' admin HTTP API: a node is
// added by recreating its container with an empty volume (docker-compose
// up, its join list the current members) and admitting it; a
// decommissioned node's container is killed.
type Docker struct {
	cfg DockerConfig

	mu      sync.Mutex
	members []string          // current members, sorted
	ips     map[string]string // node -> IP on the network, learned before disconnecting
	cut     map[string]bool   // disconnected nodes
	down    map[string]bool   // killed (or paused) by the driver
	// removedAt is when each decommissioned node left (AddNode takes the
	// non-member that left longest ago).
	removedAt map[string]time.Time
	// The faults injected through the nodes' PUT /debug/faults (compose
	// sets SWARM_FAULT_INJECTION): delay and drop rate on every node,
	// blocks [from, to] on from.
	delay  time.Duration
	drop   float64
	blocks map[[2]string]bool
}

var (
	_ Driver      = (*Docker)(nil)
	_ Membership  = (*Docker)(nil)
	_ memberAdmin = (*Docker)(nil)
)

// NewDocker checks that every member's container runs.
func NewDocker(ctx context.Context, cfg DockerConfig) (*Docker, error) {
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []string{"n1", "n2", "n3"}
	}
	if len(cfg.Services) == 0 {
		cfg.Services = []string{"n1", "n2", "n3", "n4", "n5"}
	}
	if cfg.ContainerPrefix == "" {
		cfg.ContainerPrefix = "swarmkv-"
	}
	if cfg.Network == "" {
		cfg.Network = "swarmkv-net"
	}
	if cfg.Docker == "" {
		cfg.Docker = "docker"
	}
	if cfg.PortDigit == 0 {
		cfg.PortDigit = 7
	}
	if cfg.Project == "" {
		cfg.Project = "swarmkv"
	}
	if len(cfg.Compose) == 0 {
		cfg.Compose = []string{"docker-compose", "-f", "docker-compose.cluster.yml", "-p", cfg.Project, "--profile", "spare"}
	}
	d := &Docker{cfg: cfg,
		ips: map[string]string{}, cut: map[string]bool{}, down: map[string]bool{},
		removedAt: map[string]time.Time{}, blocks: map[[2]string]bool{}}
	for _, n := range append(slices.Clone(cfg.Nodes), cfg.Services...) {
		if _, err := nodeIndex(n); err != nil {
			return nil, err
		}
	}
	for _, n := range cfg.Nodes {
		running, err := d.docker(ctx, "inspect", "-f", "{{.State.Running}}", d.container(n))
		if err != nil || strings.TrimSpace(running) != "true" {
			return nil, fmt.Errorf("jepsen: container %s is not running (make cluster-up): %v", d.container(n), err)
		}
		if err := d.learnIP(ctx, n); err != nil {
			return nil, fmt.Errorf("jepsen: is the compose cluster up (make cluster-up)? %w", err)
		}
	}
	d.members = slices.Sorted(slices.Values(cfg.Nodes))
	return d, nil
}

// nodeIndex is I of node nI, which picks its published ports.
func nodeIndex(node string) (int, error) {
	var i int
	if _, err := fmt.Sscanf(node, "n%d", &i); err != nil || i < 1 || i > 6 || node != fmt.Sprintf("n%d", i) {
		return 0, fmt.Errorf("jepsen: docker node %q: want n1..n6", node)
	}
	return i, nil
}

func (d *Docker) learnIP(ctx context.Context, node string) error {
	ip, err := d.docker(ctx, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+d.cfg.Network+"\").IPAddress}}", d.container(node))
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.ips[node] = strings.TrimSpace(ip)
	d.mu.Unlock()
	return nil
}

func (d *Docker) grpcAddr(node string) string { return d.hostAddr(node, 0) }

func (d *Docker) httpAddr(node string) string { return d.hostAddr(node, 2) }

// hostAddr is node's published port ending in 10<off> on the host.
func (d *Docker) hostAddr(node string, off int) string {
	i, _ := nodeIndex(node)
	if d.cfg.PortBase != 0 {
		return fmt.Sprintf("127.0.0.1:%d", d.cfg.PortBase+100*i+off)
	}
	return fmt.Sprintf("127.0.0.1:%d%d10%d", i, d.cfg.PortDigit, off)
}

func (d *Docker) container(node string) string { return d.cfg.ContainerPrefix + node }

func (d *Docker) docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.cfg.Docker, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (d *Docker) Name() string { return "docker" }

func (d *Docker) Nodes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.members)
}

func (d *Docker) Endpoints() []string {
	var eps []string
	for _, n := range d.Nodes() {
		eps = append(eps, d.grpcAddr(n))
	}
	return eps
}

func (d *Docker) AdminAddrs() []string {
	var out []string
	for _, n := range d.Nodes() {
		out = append(out, d.httpAddr(n))
	}
	return out
}

func (d *Docker) Ready(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return adminHTTP(ctx, http.MethodGet, "http://"+d.httpAddr(node)+"/readyz", nil, nil)
}

func (d *Docker) Kill(ctx context.Context, node string) error {
	d.setDown(node, true)
	_, err := d.docker(ctx, "kill", "-s", "KILL", d.container(node))
	return err
}

func (d *Docker) setDown(node string, down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if down {
		d.down[node] = true
	} else {
		delete(d.down, node)
	}
}

func (d *Docker) Start(ctx context.Context, node string) error {
	running, err := d.docker(ctx, "inspect", "-f", "{{.State.Running}}", d.container(node))
	if err == nil && strings.TrimSpace(running) == "true" {
		return nil
	}
	// Publishing a port fails while an outgoing connection of the host
	// holds it as its local port (37100 and up lie in Linux's ephemeral
	// range); such connections come and go, so retry for a while.
	err = retryPortInUse(ctx, func() error {
		_, err := d.docker(ctx, "start", d.container(node))
		return err
	})
	if err != nil {
		return err
	}
	d.setDown(node, false)
	if f, _ := d.faultsOf(node); f.Delay == 0 && f.DropRate == 0 && len(f.Block) == 0 {
		return nil // a new process starts without injected faults
	}
	return d.pushFaults(ctx, node)
}

// retryPortInUse runs f again every second while it fails because a
// published port is in use.
func retryPortInUse(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func (d *Docker) Pause(ctx context.Context, node string) error {
	d.setDown(node, true)
	_, err := d.docker(ctx, "pause", d.container(node))
	return err
}

func (d *Docker) Resume(ctx context.Context, node string) error {
	paused, err := d.docker(ctx, "inspect", "-f", "{{.State.Paused}}", d.container(node))
	if err == nil && strings.TrimSpace(paused) != "true" {
		return nil
	}
	if _, err = d.docker(ctx, "unpause", d.container(node)); err != nil {
		return err
	}
	d.setDown(node, false)
	return d.pushFaults(ctx, node) // it kept the rules it had when paused
}

// Partition keeps the largest group on the network and disconnects every
// other node. A smaller group of several nodes (a zone, for
// partition-zone) is disconnected node by node, so its nodes lose each
// other too: a stricter cut than the one asked for, and the same one for
// a zone of a zone-safe cluster, which holds one voter of each group.
func (d *Docker) Partition(ctx context.Context, groups [][]string) error {
	largest := 0
	for i, g := range groups {
		if len(g) > len(groups[largest]) {
			largest = i
		}
	}
	keep := map[string]bool{}
	if len(groups) > 0 {
		for _, n := range groups[largest] {
			keep[n] = true
		}
	}
	for _, n := range d.Nodes() {
		if keep[n] {
			continue
		}
		if err := d.disconnect(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (d *Docker) disconnect(ctx context.Context, node string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut[node] {
		return nil
	}
	if _, err := d.docker(ctx, "network", "disconnect", d.cfg.Network, d.container(node)); err != nil {
		return err
	}
	d.cut[node] = true
	return nil
}

// Block cuts from -> to inside from: its dials to to's IP fail and its
// writes on connections with to close them.
func (d *Docker) Block(ctx context.Context, from, to string) error {
	d.mu.Lock()
	d.blocks[[2]string{from, to}] = true
	d.mu.Unlock()
	return d.pushFaults(ctx, from)
}

// Heal reconnects every disconnected node with its fixed IP and lifts
// every block (delays and drop rates stay, as in faultnet).
func (d *Docker) Heal(ctx context.Context) error {
	d.mu.Lock()
	var firstErr error
	for n := range d.cut {
		args := []string{"network", "connect"}
		if ip := d.ips[n]; ip != "" {
			args = append(args, "--ip", ip)
		}
		args = append(args, d.cfg.Network, d.container(n))
		if _, err := d.docker(ctx, args...); err != nil && !strings.Contains(err.Error(), "already exists") {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		delete(d.cut, n)
	}
	var blocked []string
	for b := range d.blocks {
		blocked = append(blocked, b[0])
	}
	clear(d.blocks)
	d.mu.Unlock()
	if err := d.pushFaults(ctx, blocked...); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

func (d *Docker) SetDelay(ctx context.Context, dl time.Duration) error {
	d.mu.Lock()
	d.delay = dl
	d.mu.Unlock()
	return d.pushFaults(ctx, d.Nodes()...)
}

func (d *Docker) SetDropRate(ctx context.Context, p float64) error {
	d.mu.Lock()
	d.drop = p
	d.mu.Unlock()
	return d.pushFaults(ctx, d.Nodes()...)
}

// pushFaults sends each running node of nodes its injected faults: the
// delay, the drop rate, and the IPs of the nodes it blocks. A node that is
// starting up (its port published, the process not yet listening) is
// retried for up to 15 s.
func (d *Docker) pushFaults(ctx context.Context, nodes ...string) error {
	var errs []error
	for _, n := range slices.Compact(slices.Sorted(slices.Values(nodes))) {
		f, down := d.faultsOf(n)
		if down {
			continue
		}
		body, err := json.Marshal(f)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var got faultnet.Faults
			err = adminHTTP(pctx, http.MethodPut, "http://"+d.httpAddr(n)+"/debug/faults", bytes.NewReader(body), &got)
			cancel()
			if err == nil && (got.Delay != f.Delay || got.DropRate != f.DropRate || len(got.Block) != len(f.Block)) {
				err = fmt.Errorf("node holds faults %+v after setting %+v", got, f)
			}
			if err == nil || status.Code(err) != codes.Unknown || time.Now().After(deadline) || ctx.Err() != nil {
				break // answered (or refused) by the node, or out of time
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (is the node started with --fault-injection?)", n, err))
		}
	}
	return errors.Join(errs...)
}

// faultsOf returns the faults node should hold and whether the driver
// has it killed or paused.
func (d *Docker) faultsOf(node string) (faultnet.Faults, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := faultnet.Faults{Delay: faultnet.Duration(d.delay), DropRate: d.drop, Block: []string{}}
	for b := range d.blocks {
		if b[0] == node && d.ips[b[1]] != "" {
			f.Block = append(f.Block, d.ips[b[1]])
		}
	}
	return f, d.down[node]
}

// Close heals the network and restarts stopped or paused nodes, leaving the
// cluster as it found it.
func (d *Docker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := d.Heal(ctx)
	for _, n := range d.Nodes() {
		if e := d.Resume(ctx, n); e != nil && err == nil {
			err = e
		}
		if e := d.Start(ctx, n); e != nil && err == nil {
			err = e
		}
	}
	return err
}
