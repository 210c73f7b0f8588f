package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmkv/swarmkv/rpc"
)

// Nemesis injects one kind of fault. Start injects it and describes what
// it did; Stop undoes it. Nemeses act only through the Driver, so every
// nemesis works with every driver that supports its primitives (a Start
// that returns ErrUnsupported drops the nemesis from the schedule).
type Nemesis interface {
	Name() string
	Start(ctx context.Context, env *Env) (string, error)
	Stop(ctx context.Context, env *Env) error
}

// Env is what a nemesis acts on.
type Env struct {
	Driver Driver
	Rng    *rand.Rand
	// Rec is the run's history (nil: none); a nemesis may record its
	// operations in it under the workload "nemesis", which no checker
	// reads.
	Rec *Recorder

	// moves is shared by the split-merge nemeses of a run.
	moves *moveBook
}

func (e *Env) moveBook() *moveBook {
	if e.moves == nil {
		e.moves = &moveBook{}
	}
	return e.moves
}

// now is the history's time, or 0 without one.
func (e *Env) now() int64 {
	if e.Rec == nil {
		return 0
	}
	return e.Rec.Now()
}

// nemesisRegistry maps names to constructors. New kinds of fault (e.g.
// membership changes once the admin API exists) are added with
// RegisterNemesis, from this package or another, and are then selectable
// by name with --nemesis.
var nemesisRegistry = struct {
	sync.Mutex
	m map[string]func() Nemesis
}{m: map[string]func() Nemesis{}}

// RegisterNemesis makes a nemesis selectable by name.
func RegisterNemesis(name string, make func() Nemesis) {
	nemesisRegistry.Lock()
	defer nemesisRegistry.Unlock()
	nemesisRegistry.m[name] = make
}

// NemesisNames lists the registered nemeses, sorted.
func NemesisNames() []string {
	nemesisRegistry.Lock()
	defer nemesisRegistry.Unlock()
	var names []string
	for n := range nemesisRegistry.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Nemeses resolves a comma-separated list of names ("all": every
// registered nemesis; "none": no faults). The schedule injects them one
// at a time; "a+b" is one nemesis that injects a and b together (started
// in that order, stopped in reverse), e.g. "split-merge+kill" splits or
// merges a shard while a node is down.
func Nemeses(spec string) ([]Nemesis, error) {
	var names []string
	switch spec {
	case "", "none":
		return nil, nil
	case "all":
		names = NemesisNames()
	default:
		names = strings.Split(spec, ",")
	}
	nemesisRegistry.Lock()
	defer nemesisRegistry.Unlock()
	var out []Nemesis
	for _, n := range names {
		var parts []Nemesis
		for _, p := range strings.Split(n, "+") {
			mk, ok := nemesisRegistry.m[strings.TrimSpace(p)]
			if !ok {
				return nil, fmt.Errorf("jepsen: unknown nemesis %q", strings.TrimSpace(p))
			}
			parts = append(parts, mk())
		}
		if len(parts) == 1 {
			out = append(out, parts[0])
		} else {
			out = append(out, &comboNemesis{parts: parts})
		}
	}
	return out, nil
}

// comboNemesis injects several nemeses together: Start starts them in
// order, each after a random pause of up to comboStagger (so that, e.g.,
// the kill of "split-merge+kill" lands in some phase of the move); if one
// is unsupported, those started are stopped and the combo is unsupported.
// Stop stops them in reverse order.
type comboNemesis struct {
	parts   []Nemesis
	started int
}

// comboStagger bounds the pause before each part of a combination after
// the first.
const comboStagger = 400 * time.Millisecond

func (c *comboNemesis) Name() string {
	var names []string
	for _, p := range c.parts {
		names = append(names, p.Name())
	}
	return strings.Join(names, "+")
}

func (c *comboNemesis) Start(ctx context.Context, env *Env) (string, error) {
	var descs []string
	var errs error
	c.started = 0
	for i, p := range c.parts {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(env.Rng.Int64N(int64(comboStagger)))):
			}
		}
		d, err := p.Start(ctx, env)
		c.started++
		if errors.Is(err, ErrUnsupported) {
			return "", errors.Join(err, c.Stop(ctx, env))
		}
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: %w", p.Name(), err))
		}
		descs = append(descs, d)
	}
	return strings.Join(descs, " + "), errs
}

func (c *comboNemesis) Stop(ctx context.Context, env *Env) error {
	var errs error
	for i := c.started - 1; i >= 0; i-- {
		if err := c.parts[i].Stop(ctx, env); err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s: %w", c.parts[i].Name(), err))
		}
	}
	c.started = 0
	return errs
}

// Result joins the results of the parts that have one.
func (c *comboNemesis) Result() string {
	var out []string
	for _, p := range c.parts {
		if r, ok := p.(interface{ Result() string }); ok {
			out = append(out, r.Result())
		}
	}
	return strings.Join(out, "; ")
}

func init() {
	RegisterNemesis("kill", func() Nemesis { return &killNemesis{} })
	RegisterNemesis("kill-all", func() Nemesis { return &killNemesis{all: true} })
	RegisterNemesis("pause", func() Nemesis { return &pauseNemesis{} })
	RegisterNemesis("partition-minority", func() Nemesis { return &partitionNemesis{kind: "minority"} })
	RegisterNemesis("isolate-leader", func() Nemesis { return &partitionNemesis{kind: "leader"} })
	RegisterNemesis("bridge", func() Nemesis { return &bridgeNemesis{} })
	RegisterNemesis("delay", func() Nemesis { return &delayNemesis{} })
	RegisterNemesis("drop", func() Nemesis { return &dropNemesis{} })
}

// killNemesis crashes one random node (or all) and restarts it on Stop.
type killNemesis struct {
	all    bool
	killed []string
}

func (k *killNemesis) Name() string {
	if k.all {
		return "kill-all"
	}
	return "kill"
}

func (k *killNemesis) Start(ctx context.Context, env *Env) (string, error) {
	nodes := env.Driver.Nodes()
	if !k.all {
		nodes = []string{nodes[env.Rng.IntN(len(nodes))]}
	}
	k.killed = nil
	for _, n := range nodes {
		if err := env.Driver.Kill(ctx, n); err != nil {
			return "", err
		}
		k.killed = append(k.killed, n)
	}
	return "killed " + strings.Join(nodes, ","), nil
}

func (k *killNemesis) Stop(ctx context.Context, env *Env) error {
	var err error
	for _, n := range k.killed {
		err = errors.Join(err, env.Driver.Start(ctx, n))
	}
	k.killed = nil
	return err
}

// pauseNemesis freezes one random node.
type pauseNemesis struct{ node string }

func (p *pauseNemesis) Name() string { return "pause" }

func (p *pauseNemesis) Start(ctx context.Context, env *Env) (string, error) {
	nodes := env.Driver.Nodes()
	p.node = nodes[env.Rng.IntN(len(nodes))]
	return "paused " + p.node, env.Driver.Pause(ctx, p.node)
}

func (p *pauseNemesis) Stop(ctx context.Context, env *Env) error {
	if p.node == "" {
		return nil
	}
	err := env.Driver.Resume(ctx, p.node)
	p.node = ""
	return err
}

// partitionNemesis cuts a minority (one random node, or the node leading
// the most shards) off from the majority.
type partitionNemesis struct{ kind string }

func (p *partitionNemesis) Name() string {
	if p.kind == "leader" {
		return "isolate-leader"
	}
	return "partition-minority"
}

func (p *partitionNemesis) Start(ctx context.Context, env *Env) (string, error) {
	nodes := env.Driver.Nodes()
	victim := nodes[env.Rng.IntN(len(nodes))]
	how := "random"
	if p.kind == "leader" {
		if l, n, err := topLeader(ctx, env.Driver.Endpoints()); err == nil && l != "" {
			victim, how = l, fmt.Sprintf("leader of %d shards", n)
		} else {
			how = fmt.Sprintf("random; leader lookup: %v", err)
		}
	}
	var rest []string
	for _, n := range nodes {
		if n != victim {
			rest = append(rest, n)
		}
	}
	desc := fmt.Sprintf("partition [%s] | [%s] (%s)", victim, strings.Join(rest, ","), how)
	return desc, env.Driver.Partition(ctx, [][]string{{victim}, rest})
}

func (p *partitionNemesis) Stop(ctx context.Context, env *Env) error { return env.Driver.Heal(ctx) }

// bridgeNemesis cuts the nodes into two halves that only a bridge node
// joins: with n1..n3 and bridge n2, n1 and n3 cannot talk while both talk
// to n2.
type bridgeNemesis struct{}

func (bridgeNemesis) Name() string { return "bridge" }

func (bridgeNemesis) Start(ctx context.Context, env *Env) (string, error) {
	nodes := slices.Clone(env.Driver.Nodes())
	env.Rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	bridge := nodes[0]
	left, right := nodes[1:1+(len(nodes)-1)/2], nodes[1+(len(nodes)-1)/2:]
	for _, a := range left {
		for _, b := range right {
			if err := env.Driver.Block(ctx, a, b); err != nil {
				return "", err
			}
			if err := env.Driver.Block(ctx, b, a); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("bridge [%s] - %s - [%s]", strings.Join(left, ","), bridge, strings.Join(right, ",")), nil
}

func (bridgeNemesis) Stop(ctx context.Context, env *Env) error { return env.Driver.Heal(ctx) }

// delayNemesis slows every message between nodes.
type delayNemesis struct{}

func (delayNemesis) Name() string { return "delay" }

func (delayNemesis) Start(ctx context.Context, env *Env) (string, error) {
	d := time.Duration(20+env.Rng.IntN(80)) * time.Millisecond
	return fmt.Sprintf("delay %v on every link", d), env.Driver.SetDelay(ctx, d)
}

func (delayNemesis) Stop(ctx context.Context, env *Env) error { return env.Driver.SetDelay(ctx, 0) }

// dropNemesis resets a fraction of the writes between nodes.
type dropNemesis struct{}

func (dropNemesis) Name() string { return "drop" }

func (dropNemesis) Start(ctx context.Context, env *Env) (string, error) {
	p := 0.01 + env.Rng.Float64()*0.04
	return fmt.Sprintf("drop %.1f%% of writes on every link", p*100), env.Driver.SetDropRate(ctx, p)
}

func (dropNemesis) Stop(ctx context.Context, env *Env) error { return env.Driver.SetDropRate(ctx, 0) }

// topLeader asks the nodes for the cluster map and returns the node that
// leads the most shards.
func topLeader(ctx context.Context, endpoints []string) (string, int, error) {
	var errs error
	for _, ep := range endpoints {
		cc, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := rpc.NewClusterClient(cc).ClusterMap(cctx, &rpc.ClusterMapRequest{})
		cancel()
		cc.Close()
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		count := map[string]int{}
		for _, s := range resp.GetShards() {
			if l := s.GetLeaderId(); l != "" {
				count[l]++
			}
		}
		best, n := "", 0
		for _, id := range sortedKeys(count) {
			if count[id] > n {
				best, n = id, count[id]
			}
		}
		if best != "" {
			return best, n, nil
		}
	}
	return "", 0, fmt.Errorf("no leader known: %w", errs)
}
