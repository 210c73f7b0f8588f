package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/swarmkv/swarmkv/cluster"
)

var (
	_ Membership  = (*InProc)(nil)
	_ memberAdmin = (*InProc)(nil)
)

// AddNode starts n<next> in join mode with a fresh data dir, admits it
// through a running member and waits until it holds replicas.
func (d *InProc) AddNode(ctx context.Context) (string, error) {
	c, err := d.newConfig(0)
	if err != nil {
		return "", err
	}
	if err := d.admit(ctx, c.ID); err != nil {
		return c.ID, err
	}
	return c.ID, nil
}

// Decommission removes node through another running member, waits until
// the cluster state marks it removed, stops it and drops it from Nodes.
func (d *InProc) Decommission(ctx context.Context, node string) error {
	if !slices.Contains(d.Nodes(), node) {
		return fmt.Errorf("jepsen: decommission %s: not a member", node)
	}
	if err := removeMember(ctx, d, node); err != nil {
		return err
	}
	d.mu.Lock()
	d.mu.members = slices.DeleteFunc(d.mu.members, func(id string) bool { return id == node })
	delete(d.mu.paused, node)
	d.mu.Unlock()
	return d.Kill(ctx, node)
}

// Rejoin wipes a decommissioned node's data dir, starts it in join mode on
// its old addresses, admits it and waits until it holds replicas.
func (d *InProc) Rejoin(ctx context.Context, node string) error {
	if slices.Contains(d.Nodes(), node) {
		return fmt.Errorf("jepsen: rejoin %s: still a member; decommission it first", node)
	}
	c, err := d.cfg(node)
	if err != nil {
		return err
	}
	if err := d.Kill(ctx, node); err != nil {
		return err
	}
	if err := os.RemoveAll(c.DataDir); err != nil {
		return fmt.Errorf("jepsen: wipe %s: %w", node, err)
	}
	return d.admit(ctx, node)
}

// admit starts node in join mode (Join: the members' gossip addresses),
// admits it through a running member, adds it to Nodes and waits until it
// holds replicas and is ready. A node that is not admitted is stopped.
func (d *InProc) admit(ctx context.Context, node string) error {
	d.mu.Lock()
	c := d.mu.cfgs[node]
	c.BootstrapExpect, c.Join = 0, nil
	for _, id := range d.mu.members {
		c.Join = append(c.Join, d.mu.cfgs[id].GossipAddr)
	}
	d.mu.cfgs[node] = c
	d.mu.Unlock()
	if err := d.Start(ctx, node); err != nil {
		return err
	}
	if err := joinMember(ctx, d, node); err != nil {
		return errors.Join(err, d.Kill(ctx, node))
	}
	d.mu.Lock()
	if !slices.Contains(d.mu.members, node) {
		d.mu.members = append(d.mu.members, node)
		slices.Sort(d.mu.members)
	}
	d.mu.Unlock()
	return waitPlaced(ctx, d, node, func(ctx context.Context) error { return d.Ready(ctx, node) })
}

func (d *InProc) adminVia(except string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.mu.members {
		if d.mu.nodes[id] != nil && id != except && !d.mu.paused[id] {
			out = append(out, id)
		}
	}
	return out
}

func (d *InProc) node(id string) (*cluster.Node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := d.mu.nodes[id]; n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("%s is not running", id)
}

func (d *InProc) adminJoin(ctx context.Context, via, node string) (string, error) {
	n, err := d.node(via)
	if err != nil {
		return "", err
	}
	st, err := n.JoinNode(ctx, node)
	if err != nil {
		return "", err
	}
	return st.Status(node), nil
}

func (d *InProc) adminRemove(ctx context.Context, via, node string) (string, error) {
	n, err := d.node(via)
	if err != nil {
		return "", err
	}
	st, err := n.RemoveNode(ctx, node)
	if err != nil {
		return "", err
	}
	return st.Status(node), nil
}

func (d *InProc) adminMembers(ctx context.Context, via string) ([]cluster.MemberInfo, error) {
	n, err := d.node(via)
	if err != nil {
		return nil, err
	}
	cs, err := n.Status(ctx)
	if err != nil {
		return nil, err
	}
	return cs.Members, nil
}
