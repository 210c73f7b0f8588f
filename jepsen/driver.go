package jepsen

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrUnsupported is returned by a Driver for a fault it cannot inject; the
// nemesis that needs it is left out of the schedule.
var ErrUnsupported = errors.New("jepsen: fault not supported by this driver")

// Driver runs a cluster and injects faults into it. The in-process driver
// (InProc) and the docker-compose driver (Docker) share every workload,
// nemesis and checker; only these primitives differ.
type Driver interface {
	// Name is "inproc" or "docker".
	Name() string
	// Nodes returns the ids of the current members, sorted.
	Nodes() []string
	// Endpoints returns the gRPC addresses clients use.
	Endpoints() []string
	// AdminAddrs returns the nodes' HTTP addresses (health, admin API).
	AdminAddrs() []string
	// Ready reports whether node serves (every local shard has a leader).
	Ready(ctx context.Context, node string) error

	// Kill crashes node (in-process: closes it; docker: SIGKILL); Start
	// restarts it from its data dir.
	Kill(ctx context.Context, node string) error
	Start(ctx context.Context, node string) error
	// Pause freezes node (docker: SIGSTOP through docker pause;
	// in-process: cuts all its Raft traffic); Resume undoes it.
	Pause(ctx context.Context, node string) error
	Resume(ctx context.Context, node string) error
	// Partition splits the nodes into groups that cannot talk to each
	// other; a node in no group is isolated.
	Partition(ctx context.Context, groups [][]string) error
	// Block cuts the one-way link from -> to.
	Block(ctx context.Context, from, to string) error
	// Heal removes partitions and blocks.
	Heal(ctx context.Context) error
	// SetDelay delays every message between nodes by d (0: none).
	SetDelay(ctx context.Context, d time.Duration) error
	// SetDropRate resets each write between nodes with probability p.
	SetDropRate(ctx context.Context, p float64) error

	// Close stops what the driver started.
	Close() error
}

// Membership is implemented by a driver that can change the cluster's
// members (the replace and remove-readd nemeses need it; a driver without
// it makes them ErrUnsupported). Nodes, Endpoints and AdminAddrs follow
// every change. Each call retries through any live member until its ctx
// ends and then says which step timed out.
type Membership interface {
	// AddNode starts a new node with a fresh data dir in join mode, admits
	// it, and returns its id once it holds replicas and is ready.
	AddNode(ctx context.Context) (string, error)
	// Decommission removes node from the cluster, waits until the cluster
	// state marks it removed, then stops it; it leaves Nodes.
	Decommission(ctx context.Context, node string) error
	// Rejoin wipes a decommissioned node's data dir, starts it in join
	// mode on its old addresses, admits it, and returns once it holds
	// replicas and is ready; it is in Nodes again.
	Rejoin(ctx context.Context, node string) error
}

// waitReady polls until every node in nodes is ready or ctx ends.
func waitReady(ctx context.Context, d Driver, nodes []string) error {
	var err error
	for {
		err = nil
		for _, n := range nodes {
			if e := d.Ready(ctx, n); e != nil {
				err = fmt.Errorf("%s: %w", n, e)
				break
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
