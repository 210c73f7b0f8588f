package placement

import (
	"cmp"
	"fmt"
	"slices"
)

// Failure domains (issue 41). Every member has a zone and a host
// (NodeAddrs.Zone, Host: the labels its serve --zone and --host announce in
// gossip, recorded by the meta leader); a member without a label is its own
// zone and its own host (the label is its node id), so a cluster of
// unlabelled nodes places replicas exactly as before labels.
//
// The rule, for a group whose target is T voters, with Z zones and H hosts
// among the active members (alive or not: a lost zone still counts until
// its nodes are removed):
//
//   - at most ceil(T/Z) of the group's replicas in one zone: distinct zones
//     while Z >= T, as even as possible below;
//   - at most ceil(T/H) on one host: never two on one host while H >= T.
//
// How far a set of voters is from the rule is its spread (the replicas
// beyond each zone's share, then beyond each host's share). The isolation
// level decides which of the two shares is a hard limit for a new replica
// (PickCandidate): with IsolationZone both, with IsolationHost the host's,
// with IsolationNone neither (the shares are then only preferences). The
// reconciler repairs a group whose spread is not zero one replica at a time
// (Step: add a learner where it lowers the spread, then remove the voter
// whose departure lowers it most) and BalanceReplicas never raises it.

// Isolation is the failure domain a group's replicas are kept apart by
// when a new replica is placed (serve --isolation-level).
type Isolation int

const (
	// IsolationZone (the default): a new replica never goes to a zone (or
	// host) that already holds its share of the group; after a zone is
	// lost its replicas are not rebuilt in the surviving zones (the
	// group is reported under-replicated) until the lost zone's nodes
	// come back or are removed.
	IsolationZone Isolation = iota
	// IsolationHost: only the host's share is a limit; a lost zone's
	// replicas are rebuilt in the surviving zones, on other hosts.
	IsolationHost
	// IsolationNone: a lost replica is rebuilt on any live node (the
	// shares are preferences only).
	IsolationNone
)

var isolationNames = [...]string{"zone", "host", "none"}

func (i Isolation) String() string {
	if i >= 0 && int(i) < len(isolationNames) {
		return isolationNames[i]
	}
	return fmt.Sprintf("isolation(%d)", int(i))
}

// ParseIsolation parses "zone", "host" or "none".
func ParseIsolation(s string) (Isolation, error) {
	if i := slices.Index(isolationNames[:], s); i >= 0 {
		return Isolation(i), nil
	}
	return 0, fmt.Errorf("placement: isolation level %q: want zone, host or none", s)
}

// Zone returns node id's zone: its recorded label, or its id when it has
// none (an unlabelled node is its own zone).
func (s *State) Zone(id string) string {
	if m := s.Member(id); m != nil && m.Zone != "" {
		return m.Zone
	}
	return id
}

// Host returns node id's host: its recorded label, or its id when it has
// none.
func (s *State) Host(id string) string {
	if m := s.Member(id); m != nil && m.Host != "" {
		return m.Host
	}
	return id
}

// SetLabels records node id's zone and host labels (empty: none) in s;
// ErrNoChange when s already has them or id is not a member.
func SetLabels(s *State, id, zone, host string) error {
	m := s.Member(id)
	if m == nil || (m.Zone == zone && m.Host == host) {
		return ErrNoChange
	}
	m.Zone, m.Host = zone, host
	return nil
}

// survives reports whether a group with these voters keeps a majority of
// them after losing every voter of any one domain.
func survives(voters []string, domain func(string) string) bool {
	if len(voters) == 0 {
		return false
	}
	count := map[string]int{}
	for _, v := range voters {
		count[domain(v)]++
	}
	for _, c := range count {
		if len(voters)-c <= len(voters)/2 {
			return false
		}
	}
	return true
}

// ZoneSafe reports whether a group with these voters survives the loss of
// any one zone: in every zone, the voters outside it are a majority.
func (s *State) ZoneSafe(voters []string) bool { return survives(voters, s.Zone) }

// HostSafe reports whether a group with these voters survives the loss of
// any one host.
func (s *State) HostSafe(voters []string) bool { return survives(voters, s.Host) }

// Safety counts the shards (the meta group excluded) that are not zone-safe
// and not host-safe.
func (s *State) Safety() (notZoneSafe, notHostSafe int) {
	for _, p := range s.Shards {
		if !s.ZoneSafe(p.Voters) {
			notZoneSafe++
		}
		if !s.HostSafe(p.Voters) {
			notHostSafe++
		}
	}
	return notZoneSafe, notHostSafe
}

// spread is how far a set of replicas is from the rule: the replicas
// beyond each zone's share, then beyond each host's share (zero: none).
type spread struct{ zone, host int }

func (a spread) compare(b spread) int {
	return cmp.Or(cmp.Compare(a.zone, b.zone), cmp.Compare(a.host, b.host))
}

// shares returns the most replicas of a group of target voters that one
// zone and one host should hold: ceil(target/zones), ceil(target/hosts).
func (lv *Liveness) shares(target int) (zone, host int) {
	return ceilDiv(target, lv.zones), ceilDiv(target, lv.hosts)
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}

// spreadOf returns the spread of ids for a group of target voters.
func (lv *Liveness) spreadOf(ids []string, target int) spread {
	zs, hs := lv.shares(target)
	zc, hc := map[string]int{}, map[string]int{}
	for _, id := range ids {
		zc[lv.State.Zone(id)]++
		hc[lv.State.Host(id)]++
	}
	var s spread
	for _, c := range zc {
		s.zone += max(0, c-zs)
	}
	for _, c := range hc {
		s.host += max(0, c-hs)
	}
	return s
}

// allowed reports whether the isolation level lets a group of target
// voters whose other replicas are on others take a replica on node c.
func (lv *Liveness) allowed(c string, others []string, target int) bool {
	if lv.Isolation == IsolationNone {
		return true
	}
	zs, hs := lv.shares(target)
	z, h := 0, 0
	for _, o := range others {
		if lv.State.Zone(o) == lv.State.Zone(c) {
			z++
		}
		if lv.State.Host(o) == lv.State.Host(c) {
			h++
		}
	}
	if lv.Isolation == IsolationZone && z+1 > zs {
		return false
	}
	return h+1 <= hs
}

// eligibleOf returns the members of ids that may keep their replicas.
func (lv *Liveness) eligibleOf(ids []string) []string {
	var out []string
	for _, id := range ids {
		if lv.Eligible(id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// repair decides the move that brings a settled group (voters, all good,
// exactly target of them, no learner) closer to the rule: a learner on
// the placeable node c and the voter v it replaces, such that the spread of
// voters without v and with c is below the current one and the isolation
// level allows c; the lowest resulting spread, then the least loaded c,
// then the most loaded v, then the smallest ids. ok false when the group is as good as it gets.
func (lv *Liveness) repair(g Group, voters []string, target int) (c, v string, ok bool) {
	cur := lv.spreadOf(voters, target)
	if cur == (spread{}) {
		return "", "", false
	}
	best := cur
	for _, m := range lv.State.Nodes {
		cand := m.ID
		if !lv.Placeable(cand) || slices.Contains(g.Holders(), cand) {
			continue
		}
		for _, out := range voters {
			rest := Without(voters, out)
			if !lv.allowed(cand, rest, target) {
				continue
			}
			s := lv.spreadOf(append(rest, cand), target)
			d := s.compare(best)
			if d > 0 || (d == 0 && !ok) {
				continue // no better than now
			}
			if d == 0 && cmp.Or(cmp.Compare(lv.Replicas[cand], lv.Replicas[c]), cmp.Compare(lv.Replicas[v], lv.Replicas[out])) >= 0 {
				continue // as good as the best, no less loaded
			}
			best, c, v, ok = s, cand, out, true
		}
	}
	return c, v, ok
}
