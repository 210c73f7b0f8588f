package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
)

var _ Membership = (*InProc)(nil)

// Step deadlines of the membership changes (each also ends with its ctx).
// They are generous: the changes run under load and other faults' aftermath.
const (
	admitTimeout  = 20 * time.Second // JoinNode accepted (gossip must see the node first)
	placedTimeout = 30 * time.Second // the new member holds replicas and is ready
	removeTimeout = 30 * time.Second // RemoveNode accepted and the member marked removed
	// adminAttemptTimeout bounds one admin call through one member.
	adminAttemptTimeout = 10 * time.Second
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
	rctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	err := d.viaMember(rctx, "remove "+node, node, func(ctx context.Context, n *cluster.Node) error {
		st, err := n.RemoveNode(ctx, node)
		if err != nil {
			return err
		}
		if s := st.Status(node); s != cluster.StatusLeaving && s != cluster.StatusRemoved {
			return fmt.Errorf("status %q after remove", s)
		}
		return nil
	})
	if err == nil {
		err = d.waitMember(rctx, node+" removed", node, func(m *cluster.MemberInfo) error {
			if m == nil || m.Status != cluster.StatusRemoved {
				return fmt.Errorf("status %s, %d replicas", memberStatus(m), memberReplicas(m))
			}
			return nil
		})
	}
	if err != nil {
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
	actx, cancel := context.WithTimeout(ctx, admitTimeout)
	err := d.viaMember(actx, "admit "+node, node, func(ctx context.Context, n *cluster.Node) error {
		st, err := n.JoinNode(ctx, node)
		if err != nil {
			return err
		}
		if s := st.Status(node); s != cluster.StatusActive {
			return fmt.Errorf("status %q after join", s)
		}
		return nil
	})
	cancel()
	if err != nil {
		return errors.Join(err, d.Kill(ctx, node))
	}
	d.mu.Lock()
	if !slices.Contains(d.mu.members, node) {
		d.mu.members = append(d.mu.members, node)
		slices.Sort(d.mu.members)
	}
	d.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, placedTimeout)
	defer cancel()
	return d.waitMember(pctx, node+" holds replicas", node, func(m *cluster.MemberInfo) error {
		if m == nil || m.Status != cluster.StatusActive || m.Replicas == 0 {
			return fmt.Errorf("status %s, %d replicas", memberStatus(m), memberReplicas(m))
		}
		if err := d.Ready(ctx, node); err != nil {
			return fmt.Errorf("not ready: %w", err)
		}
		return nil
	})
}

// waitMember polls the cluster status through running members until cond
// accepts node's entry (nil: not a member).
func (d *InProc) waitMember(ctx context.Context, step, node string, cond func(*cluster.MemberInfo) error) error {
	return d.viaMember(ctx, step, node, func(ctx context.Context, n *cluster.Node) error {
		cs, err := n.Status(ctx)
		if err != nil {
			return err
		}
		for i := range cs.Members {
			if cs.Members[i].ID == node {
				return cond(&cs.Members[i])
			}
		}
		return cond(nil)
	})
}

// viaMember calls f through the running members other than except, one
// after the other, every 200ms until f succeeds, f fails with a permanent
// error (NotFound, InvalidArgument) or ctx ends; the error names step and
// the last failure.
func (d *InProc) viaMember(ctx context.Context, step, except string, f func(context.Context, *cluster.Node) error) error {
	var last error
	for attempt := 0; ; attempt++ {
		d.mu.Lock()
		var nodes []*cluster.Node
		for _, id := range d.mu.members {
			if n := d.mu.nodes[id]; n != nil && id != except && !d.mu.paused[id] {
				nodes = append(nodes, n)
			}
		}
		d.mu.Unlock()
		if len(nodes) == 0 {
			last = errors.New("no running member")
		} else {
			n := nodes[attempt%len(nodes)]
			actx, cancel := context.WithTimeout(ctx, adminAttemptTimeout)
			err := f(actx, n)
			cancel()
			if err == nil {
				return nil
			}
			last = fmt.Errorf("via %s: %w", n.ID(), err)
			if c := status.Code(err); c == codes.NotFound || c == codes.InvalidArgument {
				return fmt.Errorf("jepsen: %s: %w", step, last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jepsen: %s: not done in time (%v); last: %w", step, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func memberStatus(m *cluster.MemberInfo) string {
	if m == nil {
		return "not a member"
	}
	return m.Status
}

func memberReplicas(m *cluster.MemberInfo) int {
	if m == nil {
		return 0
	}
	return m.Replicas
}
