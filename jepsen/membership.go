package jepsen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster"
)

func init() {
	RegisterNemesis("replace", func() Nemesis { return &memberNemesis{kind: "replace"} })
	RegisterNemesis("remove-readd", func() Nemesis { return &memberNemesis{kind: "remove-readd"} })
}

// memberTimeout bounds one membership change as a whole (the schedule
// gives Stop a minute).
const memberTimeout = 55 * time.Second

// memberNemesis changes the members during load through a driver's
// Membership:
//
//   - replace: admit a new node, then decommission a random member (one of
//     those before the new node), so there are never fewer members than
//     before;
//   - remove-readd: decommission a random member (the cluster shrinks by
//     one meanwhile; it needs 3 members), wipe its data dir, start it
//     again in join mode and admit it.
//
// Start launches the change and returns; Stop waits for it to finish and
// returns its error, which names the step that failed or timed out.
type memberNemesis struct {
	kind   string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	err    error
	result []string // finished steps with their times
}

func (m *memberNemesis) Name() string { return m.kind }

func (m *memberNemesis) Start(_ context.Context, env *Env) (string, error) {
	mem, ok := env.Driver.(Membership)
	if !ok {
		return "", fmt.Errorf("%w: %s driver cannot change members", ErrUnsupported, env.Driver.Name())
	}
	m.mu.Lock()
	m.err, m.result = nil, nil
	m.mu.Unlock()
	nodes := env.Driver.Nodes()
	if m.kind == "remove-readd" && len(nodes) < 3 {
		return "", fmt.Errorf("jepsen: remove-readd: only %d members; it needs 3", len(nodes))
	}
	victim := nodes[env.Rng.IntN(len(nodes))]
	// The change runs until it is done (or memberTimeout), not until
	// Start's ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), memberTimeout)
	m.cancel, m.done = cancel, make(chan struct{})
	begin := time.Now()
	step := func(what string) {
		m.mu.Lock()
		m.result = append(m.result, fmt.Sprintf("%s at +%.1fs", what, time.Since(begin).Seconds()))
		m.mu.Unlock()
	}
	go func() {
		defer close(m.done)
		var err error
		switch m.kind {
		case "replace":
			var added string
			added, err = mem.AddNode(ctx)
			if err == nil {
				step(added + " admitted, holds replicas")
				err = mem.Decommission(ctx, victim)
			}
			if err == nil {
				step(victim + " removed and stopped")
			}
		case "remove-readd":
			err = mem.Decommission(ctx, victim)
			if err == nil {
				step(victim + " removed and stopped")
				err = mem.Rejoin(ctx, victim)
			}
			if err == nil {
				step(victim + " wiped, readmitted, holds replicas")
			}
		}
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
	}()
	if m.kind == "replace" {
		return fmt.Sprintf("replace %s with a new node", victim), nil
	}
	return fmt.Sprintf("remove %s, wipe it, add it again", victim), nil
}

// Stop waits for the change to finish (or ctx to end, which cancels it).
func (m *memberNemesis) Stop(ctx context.Context, _ *Env) error {
	if m.cancel == nil {
		return nil
	}
	select {
	case <-m.done:
	case <-ctx.Done():
		m.cancel()
		<-m.done
	}
	m.cancel()
	m.cancel = nil
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Result lists the finished steps.
func (m *memberNemesis) Result() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.result) == 0 {
		return "no step finished"
	}
	return strings.Join(m.result, "; ")
}

// Step deadlines of the membership changes (each also ends with its ctx).
// They are generous: the changes run under load and other faults' aftermath.
const (
	admitTimeout  = 20 * time.Second // JoinNode accepted (gossip must see the node first)
	placedTimeout = 30 * time.Second // the new member holds replicas and is ready
	removeTimeout = 30 * time.Second // RemoveNode accepted and the member marked removed
	// adminAttemptTimeout bounds one admin call through one member.
	adminAttemptTimeout = 10 * time.Second
)

// memberAdmin is what the shared membership steps below need from a
// driver: the cluster's admin API reached through one chosen member
// (InProc: cluster.Node's Go API; Docker: the admin HTTP API). Errors carry
// gRPC codes; NotFound and InvalidArgument are permanent.
type memberAdmin interface {
	// adminVia lists the members other than except that run (neither
	// killed nor paused).
	adminVia(except string) []string
	// adminJoin and adminRemove return node's status afterwards.
	adminJoin(ctx context.Context, via, node string) (string, error)
	adminRemove(ctx context.Context, via, node string) (string, error)
	adminMembers(ctx context.Context, via string) ([]cluster.MemberInfo, error)
}

// joinMember admits node (already started in join mode) through a running
// member.
func joinMember(ctx context.Context, a memberAdmin, node string) error {
	ctx, cancel := context.WithTimeout(ctx, admitTimeout)
	defer cancel()
	return viaMember(ctx, a, "admit "+node, node, func(ctx context.Context, via string) error {
		s, err := a.adminJoin(ctx, via, node)
		if err != nil {
			return err
		}
		if s != cluster.StatusActive {
			return fmt.Errorf("status %q after join", s)
		}
		return nil
	})
}

// waitPlaced waits until node is an active member holding replicas and
// ready says it serves.
func waitPlaced(ctx context.Context, a memberAdmin, node string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, placedTimeout)
	defer cancel()
	return waitMember(ctx, a, node+" holds replicas", node, func(m *cluster.MemberInfo) error {
		if m == nil || m.Status != cluster.StatusActive || m.Replicas == 0 {
			return fmt.Errorf("status %s, %d replicas", memberStatus(m), memberReplicas(m))
		}
		if err := ready(ctx); err != nil {
			return fmt.Errorf("not ready: %w", err)
		}
		return nil
	})
}

// removeMember decommissions node through another running member and
// waits until the cluster state marks it removed (its replicas moved).
func removeMember(ctx context.Context, a memberAdmin, node string) error {
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	err := viaMember(ctx, a, "remove "+node, node, func(ctx context.Context, via string) error {
		s, err := a.adminRemove(ctx, via, node)
		if err != nil {
			return err
		}
		if s != cluster.StatusLeaving && s != cluster.StatusRemoved {
			return fmt.Errorf("status %q after remove", s)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return waitMember(ctx, a, node+" removed", node, func(m *cluster.MemberInfo) error {
		if m == nil || m.Status != cluster.StatusRemoved {
			return fmt.Errorf("status %s, %d replicas", memberStatus(m), memberReplicas(m))
		}
		return nil
	})
}

// waitMember polls the member list through running members until cond
// accepts node's entry (nil: not a member).
func waitMember(ctx context.Context, a memberAdmin, step, node string, cond func(*cluster.MemberInfo) error) error {
	return viaMember(ctx, a, step, node, func(ctx context.Context, via string) error {
		ms, err := a.adminMembers(ctx, via)
		if err != nil {
			return err
		}
		for i := range ms {
			if ms[i].ID == node {
				return cond(&ms[i])
			}
		}
		return cond(nil)
	})
}

// viaMember calls f through the running members other than except, one
// after the other, every 200ms until f succeeds, f fails with a permanent
// error (NotFound, InvalidArgument) or ctx ends; the error names step and
// the last failure.
func viaMember(ctx context.Context, a memberAdmin, step, except string, f func(ctx context.Context, via string) error) error {
	var last error
	for attempt := 0; ; attempt++ {
		if vias := a.adminVia(except); len(vias) == 0 {
			last = errors.New("no running member")
		} else {
			via := vias[attempt%len(vias)]
			actx, cancel := context.WithTimeout(ctx, adminAttemptTimeout)
			err := f(actx, via)
			cancel()
			if err == nil {
				return nil
			}
			last = fmt.Errorf("via %s: %w", via, err)
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
