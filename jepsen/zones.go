package jepsen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/swarmkv/swarmkv/cluster"
)

// The zone nemeses (issue 41): kill-zone kills every node of one zone
// (their --zone label, as the admin API's members list reports it) and
// restarts them on Stop; partition-zone cuts one zone off from the others
// and heals on Stop. Each fault of a run takes the next zone in turn.
// Both need a driver that lists members
// (zoneLister: the docker and in-process drivers) and at least three
// labelled zones, else they are ErrUnsupported: with two, one of them
// holds a majority of some group and losing it is not a fault a
// zone-safe cluster survives.

func init() {
	RegisterNemesis("kill-zone", func() Nemesis { return &zoneNemesis{kill: true} })
	RegisterNemesis("partition-zone", func() Nemesis { return &zoneNemesis{} })
}

// zoneLister is what the zone nemeses need of a driver: the members with
// their labels, asked through node via.
type zoneLister interface {
	adminMembers(ctx context.Context, via string) ([]cluster.MemberInfo, error)
}

type zoneNemesis struct {
	kill  bool
	zone  string
	nodes []string // the zone's nodes, killed or cut off
	// turns counts the Starts: the first picks a zone at random, each
	// next one the zone after it in name order, so that a run's faults
	// take every zone in turn.
	turns, first int
}

func (z *zoneNemesis) Name() string {
	if z.kill {
		return "kill-zone"
	}
	return "partition-zone"
}

// zonesOf returns the current nodes by zone label (nodes without one left
// out), asking each node in turn until one answers.
func zonesOf(ctx context.Context, d Driver) (map[string][]string, error) {
	zl, ok := d.(zoneLister)
	if !ok {
		return nil, ErrUnsupported
	}
	nodes := d.Nodes()
	var errs error
	for _, via := range nodes {
		ms, err := zl.adminMembers(ctx, via)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		out := map[string][]string{}
		for _, m := range ms {
			if m.Zone != "" && slices.Contains(nodes, m.ID) {
				out[m.Zone] = append(out[m.Zone], m.ID)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("jepsen: no node lists the members: %w", errs)
}

func (z *zoneNemesis) Start(ctx context.Context, env *Env) (string, error) {
	zones, err := zonesOf(ctx, env.Driver)
	if err != nil {
		return "", err
	}
	if len(zones) < 3 {
		return "", ErrUnsupported
	}
	names := make([]string, 0, len(zones))
	for n := range zones {
		names = append(names, n)
	}
	sort.Strings(names)
	if z.turns == 0 {
		z.first = env.Rng.IntN(len(names))
	}
	z.zone = names[(z.first+z.turns)%len(names)]
	z.turns++
	z.nodes = nil
	if !z.kill {
		var rest []string
		for _, n := range env.Driver.Nodes() {
			if !slices.Contains(zones[z.zone], n) {
				rest = append(rest, n)
			}
		}
		z.nodes = zones[z.zone]
		return fmt.Sprintf("cut zone %s (%s) off", z.zone, strings.Join(z.nodes, ",")),
			env.Driver.Partition(ctx, [][]string{zones[z.zone], rest})
	}
	for _, n := range zones[z.zone] {
		if err := env.Driver.Kill(ctx, n); err != nil {
			return "", err
		}
		z.nodes = append(z.nodes, n)
	}
	return fmt.Sprintf("killed zone %s (%s)", z.zone, strings.Join(z.nodes, ",")), nil
}

func (z *zoneNemesis) Stop(ctx context.Context, env *Env) error {
	defer func() { z.nodes = nil }()
	if !z.kill {
		return env.Driver.Heal(ctx)
	}
	var err error
	for _, n := range z.nodes {
		err = errors.Join(err, env.Driver.Start(ctx, n))
	}
	return err
}
