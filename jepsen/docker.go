package jepsen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"
)

// DockerConfig describes a cluster started by docker-compose.cluster.yml.
type DockerConfig struct {
	// Nodes are the node ids (default n1, n2, n3). Node nI's container is
	// ContainerPrefix+nI, its gRPC address 127.0.0.1:I<D>100 and its HTTP
	// address 127.0.0.1:I<D>102 with D = PortDigit, as the compose file
	// publishes them.
	Nodes []string
	// PortDigit is the compose file's SWARMKV_PORT_DIGIT (default 7).
	PortDigit int
	// ContainerPrefix is prepended to node ids (default "swarmkv-").
	ContainerPrefix string
	// Network is the private network (default "swarmkv-net").
	Network string
	// Docker is the docker binary (default "docker").
	Docker string
}

// Docker is a Driver over the docker-compose cluster: docker kill/start,
// docker pause/unpause, and docker network disconnect/connect (with the
// node's fixed IP) for partitions. A partition whose smaller sides each
// hold one node is a set of disconnections; anything finer (bridges,
// one-way blocks, delays, drops) needs netem or iptables, which a FROM
// scratch container lacks, and is ErrUnsupported.
type Docker struct {
	cfg  DockerConfig
	hc   *http.Client
	port map[string]int // node -> index I of its I7100/I7102 ports

	mu  sync.Mutex
	ips map[string]string // node -> IP on the network, learned before disconnecting
	cut map[string]bool   // disconnected nodes
}

var _ Driver = (*Docker)(nil)

// NewDocker checks that every container runs.
func NewDocker(ctx context.Context, cfg DockerConfig) (*Docker, error) {
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []string{"n1", "n2", "n3"}
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
	sort.Strings(cfg.Nodes)
	d := &Docker{cfg: cfg, hc: &http.Client{Timeout: 2 * time.Second}, port: map[string]int{},
		ips: map[string]string{}, cut: map[string]bool{}}
	for _, n := range cfg.Nodes {
		var i int
		if _, err := fmt.Sscanf(n, "n%d", &i); err != nil || i < 1 || i > 6 {
			return nil, fmt.Errorf("jepsen: docker node %q: want n1..n6", n)
		}
		d.port[n] = i
		running, err := d.docker(ctx, "inspect", "-f", "{{.State.Running}}", d.container(n))
		if err != nil || strings.TrimSpace(running) != "true" {
			return nil, fmt.Errorf("jepsen: container %s is not running (make cluster-up): %v", d.container(n), err)
		}
		ip, err := d.docker(ctx, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+cfg.Network+"\").IPAddress}}", d.container(n))
		if err != nil {
			return nil, fmt.Errorf("jepsen: is the compose cluster up (make cluster-up)? %w", err)
		}
		d.ips[n] = strings.TrimSpace(ip)
	}
	return d, nil
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

func (d *Docker) Name() string    { return "docker" }
func (d *Docker) Nodes() []string { return append([]string(nil), d.cfg.Nodes...) }

func (d *Docker) Endpoints() []string {
	var eps []string
	for _, n := range d.cfg.Nodes {
		eps = append(eps, fmt.Sprintf("127.0.0.1:%d%d100", d.port[n], d.cfg.PortDigit))
	}
	return eps
}

func (d *Docker) AdminAddrs() []string {
	var out []string
	for _, n := range d.cfg.Nodes {
		out = append(out, fmt.Sprintf("127.0.0.1:%d%d102", d.port[n], d.cfg.PortDigit))
	}
	return out
}

func (d *Docker) Ready(ctx context.Context, node string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%d102/readyz", d.port[node], d.cfg.PortDigit), nil)
	if err != nil {
		return err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", strings.TrimSpace(string(body)))
	}
	return nil
}

func (d *Docker) Kill(ctx context.Context, node string) error {
	_, err := d.docker(ctx, "kill", "-s", "KILL", d.container(node))
	return err
}

func (d *Docker) Start(ctx context.Context, node string) error {
	running, err := d.docker(ctx, "inspect", "-f", "{{.State.Running}}", d.container(node))
	if err == nil && strings.TrimSpace(running) == "true" {
		return nil
	}
	// Publishing a port fails while an outgoing connection of the host
	// holds it as its local port (37100 and up lie in Linux's ephemeral
	// range); such connections come and go, so retry for a while.
	for {
		_, err = d.docker(ctx, "start", d.container(node))
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
	_, err := d.docker(ctx, "pause", d.container(node))
	return err
}

func (d *Docker) Resume(ctx context.Context, node string) error {
	paused, err := d.docker(ctx, "inspect", "-f", "{{.State.Paused}}", d.container(node))
	if err == nil && strings.TrimSpace(paused) != "true" {
		return nil
	}
	_, err = d.docker(ctx, "unpause", d.container(node))
	return err
}

// Partition keeps the largest group on the network and disconnects every
// other node; it needs every other group to be a single node.
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
	for i, g := range groups {
		if i != largest && len(g) > 1 {
			return fmt.Errorf("%w: docker partitions isolate single nodes, not group %v", ErrUnsupported, g)
		}
	}
	for _, n := range d.cfg.Nodes {
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

func (d *Docker) Block(context.Context, string, string) error {
	return fmt.Errorf("%w: one-way blocks", ErrUnsupported)
}

// Heal reconnects every disconnected node with its fixed IP.
func (d *Docker) Heal(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	return firstErr
}

func (d *Docker) SetDelay(_ context.Context, dl time.Duration) error {
	if dl == 0 {
		return nil
	}
	return fmt.Errorf("%w: delays (no netem in the containers)", ErrUnsupported)
}

func (d *Docker) SetDropRate(_ context.Context, p float64) error {
	if p == 0 {
		return nil
	}
	return fmt.Errorf("%w: packet drops (no netem in the containers)", ErrUnsupported)
}

// Close heals the network and restarts stopped or paused nodes, leaving the
// cluster as it found it.
func (d *Docker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := d.Heal(ctx)
	for _, n := range d.cfg.Nodes {
		if e := d.Resume(ctx, n); e != nil && err == nil {
			err = e
		}
		if e := d.Start(ctx, n); e != nil && err == nil {
			err = e
		}
	}
	return err
}
