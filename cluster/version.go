package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/transport"
)

// Protocol versions and rolling upgrades.
//
// A binary speaks a range of protocol versions, MinProtocolVersion..
// ProtocolVersion (Config.Testing may narrow it). The cluster runs one of
// them, its active version, committed in the cluster state
// (State.ProtocolVersion):
//   - A node announces in gossip the active version as "v" (before it
//     belongs to a cluster, the lowest it speaks) and its range as "min"
//     and "max", fields binaries before ranges ignore: those refuse a peer
//     whose "v" differs from their 1, which a node announces while the
//     cluster runs 1. It refuses a peer whose range does not include the
//     active version (before it belongs to a cluster: whose range does
//     not meet its own), and does not run when its own range does not
//     include it (New fails; a running node refuses to serve).
//   - A new cluster bootstraps at the highest version every bootstrapping
//     node speaks (planBootstrap).
//   - The meta leader raises the active version, with a guarded meta
//     update, once every member that is not removed is alive in gossip
//     and speaks the higher version (raiseVersion, on each sync round);
//     it is never lowered, so a node cannot go back to a binary that does
//     not speak it.
//   - What a version brings is used only once the cluster runs it: a
//     command type (fsm.Command.Since: CheckCommand refuses it with
//     FailedPrecondition before, so a binary that does not know it never
//     applies it) or a wire change (versionIncarnation).

// Versions and what each brings.
const (
	// versionIncarnation: Raft connection headers carry the group
	// incarnation (transport/mux_inc.go). A node sends them once it sees
	// its cluster run this version, accepts plain headers for
	// Testing.IncarnationGrace (10 s) more, then refuses them and closes
	// the Raft connections opened with one (requireIncarnations).
	versionIncarnation = 2
	// Version 2 also brings leases (fsm.VersionLeases: the lease ops and
	// the commands that attach a lease; the API refuses them before the
	// cluster runs it, CheckCommand).

	// Version 3 brings the pre-copy of a slot move (fsm.VersionPrecopy:
	// OpSyncSlots, the live export and the pull by difference of
	// Admin.PullSlots; the mover uses them only once the cluster runs 3,
	// cluster/shardmove).

	// Version 4 brings the second hardening round (fsm.VersionHardening:
	// lease owners, cluster-wide transaction ids).

	// Version 5 brings the etcd namespaces (fsm.VersionEtcd: OpEtcdTxn and
	// OpEtcdCompact, the etcd front's writes).

	// Version 6 brings nested etcd txns (fsm.VersionEtcdNested: an
	// OpEtcdTxn with a txn in a branch, which a binary of 5 refuses as
	// malformed).
)

// defaultIncarnationGrace is Testing.IncarnationGrace's default.
const defaultIncarnationGrace = 10 * time.Second

// protocolRange returns the protocol versions the node speaks.
func (c Config) protocolRange() (lo, hi int) {
	lo, hi = MinProtocolVersion, ProtocolVersion
	if c.Testing.MinProtocolVersion != 0 {
		lo = c.Testing.MinProtocolVersion
	}
	if c.Testing.MaxProtocolVersion != 0 {
		hi = c.Testing.MaxProtocolVersion
	}
	return lo, hi
}

// versionState is the node's memory of the versions its cluster ran.
type versionState struct {
	mu sync.Mutex
	// seen is the highest active version this process saw.
	seen int
	// incSince is when it first saw versionIncarnation or more.
	incSince time.Time
	// required: the grace is over, plain Raft connections were closed.
	required bool
	// waiting is the last reason a raise waits that this node logged
	// (as meta leader).
	waiting string
}

// ActiveVersion returns the protocol version the node's cluster runs, as
// its cluster state says (0 before it belongs to a cluster).
func (n *Node) ActiveVersion() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state == nil {
		return 0
	}
	return n.mu.state.ActiveVersion()
}

// announcedVersion is the "v" the node announces in gossip.
func (n *Node) announcedVersion() int {
	if v := n.ActiveVersion(); v != 0 {
		return v
	}
	lo, _ := n.cfg.protocolRange()
	return lo
}

// acceptVersions is the gossip check of a peer that speaks lo..hi.
func (n *Node) acceptVersions(lo, hi int) error {
	if v := n.ActiveVersion(); v != 0 {
		if v < lo || v > hi {
			return fmt.Errorf("speaks protocol versions %d..%d, the cluster runs %d: refused", lo, hi, v)
		}
		return nil
	}
	mlo, mhi := n.cfg.protocolRange()
	if hi < mlo || lo > mhi {
		return fmt.Errorf("speaks protocol versions %d..%d, this node %d..%d: refused", lo, hi, mlo, mhi)
	}
	return nil
}

// checkOwnVersion reports whether the node can run in a cluster that
// runs st's version: nil, or why not.
func (n *Node) checkOwnVersion(st *State) error {
	lo, hi := n.cfg.protocolRange()
	if v := st.ActiveVersion(); v < lo || v > hi {
		return fmt.Errorf("cluster: cluster %s runs protocol version %d, this binary speaks %d..%d: run a binary that speaks %d (a cluster's version is never lowered; docs/operations.md, Upgrades)",
			st.ClusterID, v, lo, hi, v)
	}
	return nil
}

// noteVersion records that the node's cluster state now says version v
// (at start, bootstrap, admission and each newer state the sync loop
// installs) and logs a change. It reports whether v is higher than any
// version seen before (the node announces it in gossip).
func (n *Node) noteVersion(v int) bool {
	n.version.mu.Lock()
	defer n.version.mu.Unlock()
	if v <= n.version.seen {
		return false
	}
	prev := n.version.seen
	n.version.seen = v
	n.log.Info("cluster protocol version", "version", v, "was", prev)
	if v >= versionIncarnation && n.version.incSince.IsZero() {
		n.version.incSince = time.Now()
		if _, hi := n.cfg.protocolRange(); hi >= versionIncarnation {
			n.log.Info("raft connections carry group incarnations", "plain_headers_refused_in", n.incarnationGrace())
		}
	}
	return true
}

func (n *Node) incarnationGrace() time.Duration {
	if g := n.cfg.Testing.IncarnationGrace; g != 0 {
		return g
	}
	return defaultIncarnationGrace
}

// incarnationMode is what the node's Raft mux does with group
// incarnations now (transport.MuxConfig.Incarnations).
func (n *Node) incarnationMode() transport.IncarnationMode {
	if _, hi := n.cfg.protocolRange(); hi < versionIncarnation {
		return transport.IncarnationRefuse // a binary before them
	}
	n.version.mu.Lock()
	since := n.version.incSince
	n.version.mu.Unlock()
	switch {
	case since.IsZero():
		return transport.IncarnationAccept
	case time.Since(since) < n.incarnationGrace():
		return transport.IncarnationSend
	}
	return transport.IncarnationRequire
}

// requireIncarnations, once the grace is over, closes the Raft
// connections opened with a plain header (their peers dial again with
// the incarnation) and logs that plain headers are refused from now on.
// The sync loop calls it every round.
func (n *Node) requireIncarnations() {
	if n.incarnationMode() != transport.IncarnationRequire {
		return
	}
	n.version.mu.Lock()
	done := n.version.required
	n.version.required = true
	n.version.mu.Unlock()
	if !done {
		closed := n.mux.ClosePlain()
		n.log.Info("raft connections without a group incarnation are refused from now on", "plain_connections_closed", closed)
	}
}

// memberVersions is what the node knows of a member's protocol versions.
type memberVersions struct {
	id     string
	lo, hi int
	known  bool // alive in gossip with the admitted data dir (or this node)
}

// membersVersions returns the versions of st's members that are not
// removed, as gossip announces them (this node's own range for itself).
func (n *Node) membersVersions(st *State) []memberVersions {
	var out []memberVersions
	for _, m := range st.Nodes {
		if st.Status(m.ID) == StatusRemoved {
			continue
		}
		mv := memberVersions{id: m.ID}
		if m.ID == n.cfg.ID {
			mv.lo, mv.hi = n.cfg.protocolRange()
			mv.known = true
		} else if g, ok := n.members.Get(m.ID); ok && g.Alive && g.Meta.Inc == m.Incarnation {
			mv.lo, mv.hi = g.Meta.Range()
			mv.known = true
		}
		out = append(out, mv)
	}
	return out
}

// VersionPlan is where a cluster's protocol version stands: the version
// it runs, the highest one every member speaks (the meta leader raises
// the cluster to it), and the highest one any member speaks with the
// members that keep the cluster below it.
type VersionPlan struct {
	Active int `json:"active"`
	// Target is what the meta leader raises the cluster to: the highest
	// version every member that is not removed speaks, Active while one
	// is not alive in gossip.
	Target int `json:"target"`
	// Highest is the highest version a member speaks; WaitingFor names
	// the members that keep the cluster below it ("n3 speaks 1..1",
	// "n4 not alive in gossip").
	Highest    int      `json:"highest"`
	WaitingFor []string `json:"waiting_for,omitempty"`
}

// versionPlan returns st's VersionPlan, from gossip and this node's range.
func (n *Node) versionPlan(st *State) VersionPlan {
	p := VersionPlan{Active: st.ActiveVersion()}
	mvs := n.membersVersions(st)
	p.Highest = p.Active
	for _, m := range mvs {
		if m.known {
			p.Highest = max(p.Highest, m.hi)
		}
	}
	p.Target = p.Highest
	for _, m := range mvs {
		switch {
		case !m.known:
			p.Target = p.Active
			p.WaitingFor = append(p.WaitingFor, m.id+" not alive in gossip")
		case m.hi < p.Highest:
			p.Target = min(p.Target, m.hi)
			p.WaitingFor = append(p.WaitingFor, fmt.Sprintf("%s speaks %d..%d", m.id, m.lo, m.hi))
		}
	}
	p.Target = max(p.Target, p.Active)
	if p.Highest == p.Active {
		p.WaitingFor = nil // nothing to wait for: a dead member blocks no raise
	}
	return p
}

// raiseVersion, on the meta leader, raises the cluster's protocol version
// to the plan's target when it is above the active one, and logs (on
// change) what a raise waits for. st is the committed state the sync
// round fetched; the update checks the plan again on the state it
// changes.
func (n *Node) raiseVersion(ctx context.Context, st *State) {
	p := n.versionPlan(st)
	why := ""
	if p.Highest > p.Target {
		why = strings.Join(p.WaitingFor, ", ")
	}
	n.version.mu.Lock()
	changed := why != n.version.waiting
	n.version.waiting = why
	n.version.mu.Unlock()
	if changed && why != "" {
		n.log.Info("protocol version raise waits for members", "version", p.Active, "to", p.Highest, "waiting_for", why)
	}
	if p.Target <= p.Active {
		return
	}
	from, to := 0, 0
	_, err := n.metaUpdate(ctx, func(s *State) error {
		q := n.versionPlan(s)
		if q.Target <= q.Active {
			return errNoChange
		}
		from, to = q.Active, q.Target
		s.ProtocolVersion = q.Target
		return nil
	})
	switch {
	case err != nil:
		n.log.Warn("protocol version raise failed", "to", p.Target, "err", err)
	case to != 0:
		n.log.Info("protocol version raised", "from", from, "to", to)
	}
}

// ErrProtocolVersion is wrapped by a VersionError.
var ErrProtocolVersion = errors.New("cluster: protocol version")

// VersionError refuses an operation that needs a higher protocol version
// than the cluster runs (CheckCommand): nothing was proposed.
type VersionError struct {
	Active, Needs int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("cluster runs protocol version %d, this operation needs %d: upgrade every node (docs/operations.md, Upgrades)", e.Active, e.Needs)
}

func (e *VersionError) Unwrap() error { return ErrProtocolVersion }

// CheckCommand returns a *VersionError (FailedPrecondition) when the
// cluster does not run the protocol version cmd needs yet
// (fsm.Command.Since): a binary of an older version may hold a replica
// and would not apply it as a newer one does. Every shard replica calls
// it before proposing a command (replica.Config.Admit), whoever proposes:
// the API, the lessor, the history compactor.
func (n *Node) CheckCommand(cmd *fsm.Command) error {
	since := cmd.Since()
	if f := n.cfg.Testing.CommandSince; f != nil {
		if s := f(cmd); s > 0 {
			since = s
		}
	}
	if since <= MinProtocolVersion {
		return nil
	}
	if v := n.ActiveVersion(); v < since {
		return &VersionError{Active: v, Needs: since}
	}
	return nil
}

// speaks returns nil when node id's versions lo..hi include v, else a
// refusal that names them (admission).
func speaks(id string, lo, hi, v int) error {
	if v < lo || v > hi {
		return fmt.Errorf("node %s speaks protocol versions %d..%d, the cluster runs %d: run a binary that speaks %d", id, lo, hi, v, v)
	}
	return nil
}
