package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster/replica"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// Lease owners (docs/security.md, "Lease owners"). A lease belongs to the
// identity that granted it (fsm.LeaseRecord.Owner, leaseOwner): its revoke,
// keep-alives (unary and streamed) and TimeToLive are refused to any other
// identity, and List shows a caller only its own leases, unless the
// caller is privileged (admin, or a node). A lease without an owner (one
// granted without authentication, or before protocol version 4) is open
// to any holder of the method's leases role, as before. Whoever ends a
// lease other than a privileged caller needs the write role of every
// keyspace its attached keys live in (kv keys: kv, runners: pools, agents:
// registry); listing them (TimeToLive with keys) needs their read roles,
// unless the caller owns the lease. Every refusal is PermissionDenied,
// names its reason and is audit-logged.

// leaseCaller is what the lease checks need of the caller: nil id when
// authentication is off (every lease is open).
type leaseCaller struct {
	id         *authn.Identity
	owner      string // leaseOwner(id)
	privileged bool   // admin or a node
	roles      []string
}

// leaseCallerOf returns the caller the auth interceptor put in ctx
// (authUnary), identifying it again when none is there (a stream:
// KeepAliveStream).
func (s *server) leaseCallerOf(ctx context.Context, method string) leaseCaller {
	a := s.node.Authn()
	if !a.On() {
		return leaseCaller{}
	}
	id := authn.CallerOf(ctx)
	if id == nil {
		id, _ = a.IdentifyGRPC(ctx, method)
	}
	if id == nil { // the interceptor refused it already; never here
		return leaseCaller{id: &authn.Identity{}, owner: "\x00none"}
	}
	return leaseCaller{id: id, owner: leaseOwner(id.Name(), id.IsNode()), roles: id.Roles(),
		privileged: id.IsNode() || auth.Allows(id.Roles(), auth.Perm{Keyspace: auth.Admin})}
}

// leaseOwner is the owner recorded for a lease granted by the identity
// named name (authn.Identity.Name): a token's id ("token:<id>", not its
// display name), a certificate's name, a node's id.
func leaseOwner(name string, node bool) string {
	if strings.HasPrefix(name, "token:") && !node {
		if i := strings.IndexByte(name, '('); i > 0 {
			name = name[:i]
		}
	}
	if len(name) > fsm.MaxLeaseOwner {
		name = name[:fsm.MaxLeaseOwner]
	}
	return name
}

// open reports whether c may use the lease rec: auth off, privileged, the
// owner, or a lease without one.
func (c leaseCaller) open(rec *fsm.LeaseRecord) bool {
	return c.id == nil || c.privileged || rec.Owner == "" || rec.Owner == c.owner
}

// grantOwner is the owner a grant by c records ("": auth off).
func (c leaseCaller) grantOwner() string {
	if c.id == nil {
		return ""
	}
	return c.owner
}

// leaseKindKeyspaces maps each kind of attached key to its keyspace.
var leaseKindKeyspaces = []struct {
	kind     uint8
	keyspace string
}{{fsm.LeaseKindKV, auth.KV}, {fsm.LeaseKindRunner, auth.Pools}, {fsm.LeaseKindAgent, auth.Registry}}

// missing returns the kinds of attached keys whose keyspace c may not
// read (write false) or write.
func (c leaseCaller) missing(write bool) uint8 {
	if c.id == nil || c.privileged {
		return 0
	}
	var kinds uint8
	for _, k := range leaseKindKeyspaces {
		if !auth.Allows(c.roles, auth.Perm{Keyspace: k.keyspace, Write: write}) {
			kinds |= k.kind
		}
	}
	return kinds
}

// kindRoles names the roles that read (write false) or write the kinds.
func kindRoles(kinds uint8, write bool) string {
	var need []string
	for _, k := range leaseKindKeyspaces {
		if kinds&k.kind != 0 {
			need = append(need, auth.Perm{Keyspace: k.keyspace, Write: write}.String())
		}
	}
	return strings.Join(need, " and ")
}

// refuse audits a refusal of method to c and returns its status.
func (s *server) refuseLease(c leaseCaller, method, why string) error {
	s.node.Authn().Audit("grpc", c.id, method, false, why)
	return status.Errorf(codes.PermissionDenied, "swarmkv: %s may not call %s: %s", c.id.Name(), method, why)
}

func notOwner(id uint64) string {
	return fmt.Sprintf("lease %016x belongs to another identity (only its owner or an admin may use it)", id)
}

// checkLeaseUse refuses c the use of lease id on replica r (revoke, keep-alive)
// when the lease has an owner that is not c. The owner of a lease never
// changes, so the replica's state, if it holds the lease, answers; a
// lease it does not hold yet (a grant just applied elsewhere) is looked up
// again after a read barrier. A lease that does not exist is left to the
// lessor to answer (NotFound).
func (s *server) checkLeaseUse(ctx context.Context, c leaseCaller, method string, sid shard.ID, r *replica.Replica, id uint64) (*fsm.LeaseRecord, error) {
	if c.id == nil {
		return nil, nil
	}
	rec, err := r.FSM().Lease(id)
	if errors.Is(err, fsm.ErrLeaseNotFound) {
		if err := r.ReadBarrier(ctx); err != nil {
			return nil, s.statusErr(sid, err)
		}
		rec, err = r.FSM().Lease(id)
	}
	if errors.Is(err, fsm.ErrLeaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, s.statusErr(sid, err)
	}
	if !c.open(rec) {
		return nil, s.refuseLease(c, method, notOwner(id))
	}
	return rec, nil
}

// checkLeaseKinds refuses c an act on the keys attached to lease id (write:
// ending them; else listing them) when c lacks the role of one of their
// keyspaces.
func (s *server) checkLeaseKinds(c leaseCaller, method string, sid shard.ID, r *replica.Replica, id uint64, write bool) error {
	miss := c.missing(write)
	if miss == 0 {
		return nil
	}
	kinds, err := r.FSM().LeaseKinds(id)
	if err != nil {
		return s.statusErr(sid, err)
	}
	if kinds&miss == 0 {
		return nil
	}
	verb := "listing"
	if write {
		verb = "ending"
	}
	return s.refuseLease(c, method, fmt.Sprintf("lease %016x holds %s: %s them needs %s", id, fsm.LeaseKindNames(kinds&miss), verb, kindRoles(kinds&miss, write)))
}

// proposeAttaching is proposeRouted of an OpBatch whose puts may attach
// keys to leases: each lease must be open to the caller (checkLeaseUse),
// so that no identity fills another's lease up to its key bound.
func (s *server) proposeAttaching(ctx context.Context, method string, rk []byte, cmd *fsm.Command) (*fsm.Result, error) {
	id, r, err := s.route(rk)
	if err != nil {
		return nil, err
	}
	var c *leaseCaller
	var checked []uint64
	for _, m := range cmd.Batch.Mutations {
		if m.Lease == 0 || slices.Contains(checked, m.Lease) {
			continue
		}
		if c == nil {
			lc := s.leaseCallerOf(ctx, method)
			c = &lc
		}
		if _, err := s.checkLeaseUse(ctx, *c, method, id, r, m.Lease); err != nil {
			return nil, err
		}
		checked = append(checked, m.Lease)
	}
	return s.proposeTo(ctx, id, r, cmd)
}
