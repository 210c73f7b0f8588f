package jepsen

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
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
