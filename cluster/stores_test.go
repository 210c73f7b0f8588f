package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Scenario tests of the typed stores (client.Registry, client.Billing)
// against an in-process cluster, checked against the seeds' Store traits
// and, for the agent listings, against a naive model of every agent.

const storesT0 = int64(1_700_000_000_000) // a fixed Unix ms timestamp

// storesSmallPages makes the server cap every page at 5 items, so that
// listings cross many pages (ListShardAgents cursors, transaction pages).
func storesSmallPages(c *Config) { c.MaxScanPage = 5 }

// storesIDs makes deterministic ids.
type storesIDs struct{ rng *rand.Rand }

func newStoresIDs(seed uint64) *storesIDs {
	return &storesIDs{rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

func (g *storesIDs) fill(b []byte) {
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
}

func (g *storesIDs) user() (u keys.UserID)       { g.fill(u[:]); return u }
func (g *storesIDs) agentID() (a keys.AgentID)   { g.fill(a[:]); return a }
func (g *storesIDs) session() (s keys.SessionID) { g.fill(s[:]); return s }
func (g *storesIDs) account() (a keys.AccountID) { g.fill(a[:]); return a }

// userOn returns a user id routed to shard s.
func (g *storesIDs) userOn(m *shard.Map, s shard.ID) keys.UserID {
	for {
		if u := g.user(); m.ShardOf(u[:]) == s {
			return u
		}
	}
}

// accountOn returns an account id routed to shard s.
func (g *storesIDs) accountOn(m *shard.Map, s shard.ID) keys.AccountID {
	for {
		if a := g.account(); m.ShardOf(a[:]) == s {
			return a
		}
	}
}

func (g *storesIDs) agent(user keys.UserID, name string, s records.AgentState) *records.AgentRecord {
	return &records.AgentRecord{AgentID: g.agentID(), UserID: user, Name: name, Status: s,
		Spec:      records.AgentSpecRecord{CPUMillicores: 500, MemoryMB: 256, RuntimeVersion: "rt-1.4"},
		CreatedAt: storesT0, UpdatedAt: storesT0}
}

// wantErr fails unless err is (errors.Is) want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

// errOf drops a call's value and keeps its error.
func errOf[T any](_ T, err error) error { return err }

func sameRecords[R any](what string, got, want []R) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Errorf("%s: record %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
	return nil
}

// storesAgentModel is every agent the registry test has stored: the naive
// reference the listings are checked against.
type storesAgentModel map[keys.AgentID]*records.AgentRecord

func (m storesAgentModel) list(keep func(*records.AgentRecord) bool) []*records.AgentRecord {
	var out []*records.AgentRecord
	for _, a := range m {
		if keep(a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *records.AgentRecord) int {
		if c := bytes.Compare(a.UserID[:], b.UserID[:]); c != 0 {
			return c
		}
		return bytes.Compare(a.AgentID[:], b.AgentID[:])
	})
	return out
}

// check compares every listing with the model: all agents, by each status,
// and by each user (list and count).
func (m storesAgentModel) check(ctx context.Context, t *testing.T, reg *client.Registry) {
	t.Helper()
	all, err := reg.ListAllAgents(ctx)
	if err != nil {
		t.Fatalf("ListAllAgents: %v", err)
	}
	if err := sameRecords("ListAllAgents", all, m.list(func(*records.AgentRecord) bool { return true })); err != nil {
		t.Error(err)
	}
	for s := records.AgentPending; s.Valid(); s++ {
		got, err := reg.ListAgentsByStatus(ctx, s)
		if err != nil {
			t.Fatalf("ListAgentsByStatus(%s): %v", s, err)
		}
		if err := sameRecords("ListAgentsByStatus("+s.String()+")", got, m.list(func(a *records.AgentRecord) bool { return a.Status == s })); err != nil {
			t.Error(err)
		}
	}
	users := map[keys.UserID]bool{}
	for _, a := range m {
		users[a.UserID] = true
	}
	for u := range users {
		want := m.list(func(a *records.AgentRecord) bool { return a.UserID == u })
		got, err := reg.ListAgentsByUser(ctx, u)
		if err != nil {
			t.Fatalf("ListAgentsByUser: %v", err)
		}
		if err := sameRecords("ListAgentsByUser", got, want); err != nil {
			t.Error(err)
		}
		if n, err := reg.CountAgentsByUser(ctx, u); err != nil || int(n) != len(want) {
			t.Errorf("CountAgentsByUser = %d, %v; want %d", n, err, len(want))
		}
	}
}

// TestStoresRegistry runs every method of seed 000's Store trait against a
// 3-node, 8-shard cluster whose pages hold 5 items.
func TestStoresRegistry(t *testing.T) {
	tc := newTestCluster(t, 3, 8, storesSmallPages)
	c := tc.client()
	reg := c.Registry()
	ctx := ctxT(t, 3*time.Minute)
	g := newStoresIDs(1)
	m := c.Map()
	model := storesAgentModel{}
	put := func(t *testing.T, a *records.AgentRecord) {
		t.Helper()
		if err := reg.PutAgent(ctx, a); err != nil {
			t.Fatalf("PutAgent %q: %v", a.Name, err)
		}
		cp := *a
		model[a.AgentID] = &cp
	}
	// refresh reloads an agent the server changed (updated_at) into the model.
	refresh := func(t *testing.T, a keys.AgentID) *records.AgentRecord {
		t.Helper()
		got, err := reg.GetAgent(ctx, a)
		if err != nil {
			t.Fatalf("GetAgent: %v", err)
		}
		model[a] = got
		return got
	}

	t.Run("agents round trip", func(t *testing.T) {
		hb := storesT0 + 5
		u := g.user()
		for _, a := range []*records.AgentRecord{
			{AgentID: g.agentID(), UserID: u, Name: "minimal", CreatedAt: 0, UpdatedAt: 0},
			{AgentID: g.agentID(), UserID: u, Name: "full ✓", Status: records.AgentRunning,
				Spec:      records.AgentSpecRecord{CPUMillicores: 4000, MemoryMB: 8192, RuntimeVersion: strings.Repeat("r", records.MaxRuntimeLen)},
				CreatedAt: storesT0, UpdatedAt: storesT0 + 1, LastHeartbeatAt: &hb},
			{AgentID: g.agentID(), UserID: g.user(), Name: strings.Repeat("n", records.MaxNameLen), Status: records.AgentFailed},
		} {
			put(t, a)
			for name, get := range map[string]func() (*records.AgentRecord, error){
				"GetAgentOf": func() (*records.AgentRecord, error) { return reg.GetAgentOf(ctx, a.UserID, a.AgentID) },
				"GetAgent":   func() (*records.AgentRecord, error) { return reg.GetAgent(ctx, a.AgentID) },
			} {
				got, err := get()
				if err != nil || !reflect.DeepEqual(got, a) {
					t.Errorf("%s(%q) = %+v, %v; want %+v", name, a.Name, got, err, a)
				}
			}
		}
		// Replacing an agent replaces its record and moves its status entry.
		a := g.agent(u, "replaced", records.AgentPending)
		put(t, a)
		b := *a
		b.Name, b.Status, b.UpdatedAt = "replacement", records.AgentStopped, storesT0+9
		put(t, &b)
		if got, err := reg.GetAgentOf(ctx, u, a.AgentID); err != nil || !reflect.DeepEqual(got, &b) {
			t.Errorf("after replace: %+v, %v", got, err)
		}
		// A stale read from any replica converges to the same record.
		waitFor(t, 10*time.Second, "stale GetAgentOf", func() error {
			got, err := reg.GetAgentOf(ctx, u, a.AgentID, client.Stale())
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, &b) {
				return fmt.Errorf("stale read %+v", got)
			}
			return nil
		})
		model.check(ctx, t, reg)
	})

	t.Run("list and count by user", func(t *testing.T) {
		u := g.userOn(m, 3)
		v := g.userOn(m, 3) // same shard: its agents must not leak into u's
		for i := range 12 {
			put(t, g.agent(u, fmt.Sprintf("u-%d", i), records.AgentState(i%6)))
		}
		for i := range 2 {
			put(t, g.agent(v, fmt.Sprintf("v-%d", i), records.AgentRunning))
		}
		if n, err := reg.CountAgentsByUser(ctx, u); err != nil || n != 12 {
			t.Errorf("CountAgentsByUser(u) = %d, %v; want 12", n, err)
		}
		nobody := g.user()
		if n, err := reg.CountAgentsByUser(ctx, nobody); err != nil || n != 0 {
			t.Errorf("CountAgentsByUser(nobody) = %d, %v", n, err)
		}
		if as, err := reg.ListAgentsByUser(ctx, nobody); err != nil || len(as) != 0 {
			t.Errorf("ListAgentsByUser(nobody) = %v, %v", as, err)
		}
		model.check(ctx, t, reg)
	})

	t.Run("status index follows updates", func(t *testing.T) {
		// Agents in every shard, in several states, so that every
		// ListShardAgents page walk crosses pages.
		var mine []*records.AgentRecord
		for s := range shard.ID(8) {
			for i := range 4 {
				a := g.agent(g.userOn(m, s), fmt.Sprintf("s%d-%d", s, i), records.AgentState(i))
				put(t, a)
				mine = append(mine, a)
			}
		}
		model.check(ctx, t, reg)
		a := mine[0]
		prev := a.UpdatedAt
		for i, to := range []records.AgentState{records.AgentRunning, records.AgentStopping, records.AgentStopping,
			records.AgentStopped, records.AgentFailed, records.AgentPending, records.AgentProvisioning} {
			from := model[a.AgentID].Status
			var got *records.AgentRecord
			if i%2 == 0 {
				var err error
				if got, err = reg.UpdateAgentStatusOf(ctx, a.UserID, a.AgentID, to); err != nil {
					t.Fatalf("UpdateAgentStatusOf %s -> %s: %v", from, to, err)
				}
				if !reflect.DeepEqual(got, refresh(t, a.AgentID)) {
					t.Errorf("UpdateAgentStatusOf returned %+v, stored %+v", got, model[a.AgentID])
				}
			} else {
				if err := reg.UpdateAgentStatus(ctx, a.AgentID, to); err != nil {
					t.Fatalf("UpdateAgentStatus %s -> %s: %v", from, to, err)
				}
				got = refresh(t, a.AgentID)
			}
			want := *a
			want.Status, want.UpdatedAt = to, got.UpdatedAt
			if !reflect.DeepEqual(got, &want) || got.UpdatedAt < prev {
				t.Errorf("after %s -> %s: %+v, want %+v with updated_at >= %d", from, to, got, &want, prev)
			}
			prev = got.UpdatedAt
			for _, s := range []records.AgentState{from, to} {
				list, err := reg.ListAgentsByStatus(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				in := slices.ContainsFunc(list, func(x *records.AgentRecord) bool { return x.AgentID == a.AgentID })
				if in != (s == to) {
					t.Errorf("after %s -> %s: in ListAgentsByStatus(%s) = %t", from, to, s, in)
				}
			}
		}
		model.check(ctx, t, reg)
		// Stale listings converge to the model too.
		waitFor(t, 10*time.Second, "stale ListAllAgents", func() error {
			all, err := reg.ListAllAgents(ctx, client.Stale())
			if err != nil {
				return err
			}
			return sameRecords("stale ListAllAgents", all, model.list(func(*records.AgentRecord) bool { return true }))
		})
	})

	t.Run("deletes leave every listing", func(t *testing.T) {
		u := g.userOn(m, 5)
		a, b := g.agent(u, "del-of", records.AgentRunning), g.agent(u, "del-by-id", records.AgentStopped)
		put(t, a)
		put(t, b)
		model.check(ctx, t, reg)
		if err := reg.DeleteAgentOf(ctx, u, a.AgentID); err != nil {
			t.Fatalf("DeleteAgentOf: %v", err)
		}
		delete(model, a.AgentID)
		if err := reg.DeleteAgent(ctx, b.AgentID); err != nil {
			t.Fatalf("DeleteAgent: %v", err)
		}
		delete(model, b.AgentID)
		for _, x := range []*records.AgentRecord{a, b} {
			_, err := reg.GetAgentOf(ctx, u, x.AgentID)
			wantErr(t, "GetAgentOf deleted", err, client.ErrNotFound)
			_, err = reg.GetAgent(ctx, x.AgentID)
			wantErr(t, "GetAgent deleted", err, client.ErrNotFound)
			wantErr(t, "DeleteAgentOf deleted", reg.DeleteAgentOf(ctx, u, x.AgentID), client.ErrNotFound)
			wantErr(t, "DeleteAgent deleted", reg.DeleteAgent(ctx, x.AgentID), client.ErrNotFound)
			wantErr(t, "UpdateAgentStatus deleted", reg.UpdateAgentStatus(ctx, x.AgentID, records.AgentRunning), client.ErrNotFound)
			_, err = reg.UpdateAgentStatusOf(ctx, u, x.AgentID, records.AgentRunning)
			wantErr(t, "UpdateAgentStatusOf deleted", err, client.ErrNotFound)
		}
		model.check(ctx, t, reg)
		// A deleted agent id can be used again.
		put(t, a)
		model.check(ctx, t, reg)
	})

	t.Run("fan-out lookups by agent id", func(t *testing.T) {
		for s := range shard.ID(8) {
			a := g.agent(g.userOn(m, s), fmt.Sprintf("fan-%d", s), records.AgentRunning)
			put(t, a)
			got, err := reg.GetAgent(ctx, a.AgentID)
			if err != nil || !reflect.DeepEqual(got, a) {
				t.Errorf("GetAgent on shard %d: %+v, %v", s, got, err)
			}
			if err := reg.UpdateAgentStatus(ctx, a.AgentID, records.AgentStopped); err != nil {
				t.Errorf("UpdateAgentStatus on shard %d: %v", s, err)
			}
			refresh(t, a.AgentID)
		}
		unknown := g.agentID()
		_, err := reg.GetAgent(ctx, unknown)
		wantErr(t, "GetAgent unknown", err, client.ErrNotFound)
		_, err = reg.GetAgent(ctx, unknown, client.Stale())
		wantErr(t, "stale GetAgent unknown", err, client.ErrNotFound)
		model.check(ctx, t, reg)
	})

	t.Run("sessions", func(t *testing.T) {
		u := g.userOn(m, 2)
		agent := g.agent(u, "with-sessions", records.AgentRunning)
		put(t, agent)
		var want []*records.SessionRecord
		for i := range 4 {
			s := &records.SessionRecord{SessionID: g.session(), AgentID: agent.AgentID, UserID: u, CreatedAt: storesT0 + int64(i)}
			if err := reg.PutSession(ctx, s); err != nil {
				t.Fatalf("PutSession: %v", err)
			}
			want = append(want, s)
			for name, get := range map[string]func() (*records.SessionRecord, error){
				"GetSessionOf": func() (*records.SessionRecord, error) { return reg.GetSessionOf(ctx, u, s.SessionID) },
				"GetSession":   func() (*records.SessionRecord, error) { return reg.GetSession(ctx, s.SessionID) },
			} {
				if got, err := get(); err != nil || !reflect.DeepEqual(got, s) {
					t.Errorf("%s = %+v, %v; want %+v", name, got, err, s)
				}
			}
		}
		bySession := func(a, b *records.SessionRecord) int { return bytes.Compare(a.SessionID[:], b.SessionID[:]) }
		slices.SortFunc(want, bySession)
		listOf := func() []*records.SessionRecord {
			got, err := reg.ListSessionsByAgentOf(ctx, u, agent.AgentID)
			if err != nil {
				t.Fatalf("ListSessionsByAgentOf: %v", err)
			}
			return got
		}
		if err := sameRecords("ListSessionsByAgentOf", listOf(), want); err != nil {
			t.Error(err)
		}
		// Sessions of the same agent id of other users, in another shard
		// and in u's: the fan-out listing merges them in, the routed one
		// lists u's only.
		other := &records.SessionRecord{SessionID: g.session(), AgentID: agent.AgentID, UserID: g.userOn(m, 6), Status: records.SessionActive, CreatedAt: storesT0}
		neighbour := &records.SessionRecord{SessionID: g.session(), AgentID: agent.AgentID, UserID: g.userOn(m, 2), Status: records.SessionFailed, CreatedAt: storesT0}
		for _, s := range []*records.SessionRecord{other, neighbour} {
			if err := reg.PutSession(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		_, err := reg.GetSessionOf(ctx, u, neighbour.SessionID)
		wantErr(t, "GetSessionOf a neighbour's session", err, client.ErrNotFound)
		merged := slices.SortedFunc(slices.Values(append(slices.Clone(want), other, neighbour)), bySession)
		if got, err := reg.ListSessionsByAgent(ctx, agent.AgentID); err != nil {
			t.Fatal(err)
		} else if err := sameRecords("ListSessionsByAgent", got, merged); err != nil {
			t.Error(err)
		}
		if err := sameRecords("ListSessionsByAgentOf", listOf(), want); err != nil {
			t.Error(err)
		}
		// Status updates, routed and by id alone (the fan-out form finds
		// the session in whichever shard holds it).
		s0, s1 := want[0], want[1]
		got, err := reg.UpdateSessionStatusOf(ctx, u, s0.SessionID, records.SessionClosed)
		if err != nil || got.Status != records.SessionClosed || got.SessionID != s0.SessionID || got.AgentID != s0.AgentID {
			t.Errorf("UpdateSessionStatusOf = %+v, %v", got, err)
		} else if got.ClosedAt == nil {
			t.Errorf("UpdateSessionStatusOf(closed): closed_at not set (records.SessionClosed says it is)")
		}
		for _, sess := range []*records.SessionRecord{s1, other} {
			if err := reg.UpdateSessionStatus(ctx, sess.SessionID, records.SessionExpired); err != nil {
				t.Errorf("UpdateSessionStatus: %v", err)
			}
			if got, err := reg.GetSession(ctx, sess.SessionID); err != nil || got.Status != records.SessionExpired {
				t.Errorf("after UpdateSessionStatus: %+v, %v", got, err)
			}
		}
		// Setting the same status again is harmless.
		if _, err := reg.UpdateSessionStatusOf(ctx, u, s1.SessionID, records.SessionExpired); err != nil {
			t.Errorf("repeated UpdateSessionStatusOf: %v", err)
		}
		if got := listOf(); len(got) != len(want) || got[0].Status != records.SessionClosed || got[1].Status != records.SessionExpired {
			t.Errorf("index after status updates: %+v", got)
		}
		// Unknown sessions and agents.
		unknown := g.session()
		_, err = reg.GetSession(ctx, unknown)
		wantErr(t, "GetSession unknown", err, client.ErrNotFound)
		_, err = reg.GetSessionOf(ctx, u, unknown)
		wantErr(t, "GetSessionOf unknown", err, client.ErrNotFound)
		wantErr(t, "UpdateSessionStatus unknown", reg.UpdateSessionStatus(ctx, unknown, records.SessionClosed), client.ErrNotFound)
		_, err = reg.UpdateSessionStatusOf(ctx, u, unknown, records.SessionClosed)
		wantErr(t, "UpdateSessionStatusOf unknown", err, client.ErrNotFound)
		if got, err := reg.ListSessionsByAgent(ctx, g.agentID()); err != nil || len(got) != 0 {
			t.Errorf("ListSessionsByAgent unknown = %v, %v", got, err)
		}
	})

	t.Run("users", func(t *testing.T) {
		u := &records.UserRecord{UserID: g.user(), Email: "ada@example.com", CreatedAt: storesT0, LastSeenAt: storesT0 + 1}
		if err := reg.PutUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		if got, err := reg.GetUser(ctx, u.UserID); err != nil || !reflect.DeepEqual(got, u) {
			t.Errorf("GetUser = %+v, %v", got, err)
		}
		u2 := *u
		u2.Email, u2.LastSeenAt = "", storesT0+99
		if err := reg.PutUser(ctx, &u2); err != nil {
			t.Fatal(err)
		}
		if got, err := reg.GetUser(ctx, u.UserID); err != nil || !reflect.DeepEqual(got, &u2) {
			t.Errorf("GetUser after replace = %+v, %v", got, err)
		}
		_, err := reg.GetUser(ctx, g.user())
		wantErr(t, "GetUser unknown", err, client.ErrNotFound)
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		u := g.userOn(m, 1)
		a := g.agent(u, "victim", records.AgentRunning)
		put(t, a)
		sess := &records.SessionRecord{SessionID: g.session(), AgentID: a.AgentID, UserID: u, CreatedAt: storesT0}
		if err := reg.PutSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		model.check(ctx, t, reg)
		badAgent := func(f func(*records.AgentRecord)) *records.AgentRecord { b := *a; f(&b); return &b }
		neg := int64(-1)
		// Through the typed store: refused before sending.
		typed := map[string]error{
			"nil agent":         reg.PutAgent(ctx, nil),
			"empty name":        reg.PutAgent(ctx, badAgent(func(b *records.AgentRecord) { b.Name = "" })),
			"unknown status":    reg.PutAgent(ctx, badAgent(func(b *records.AgentRecord) { b.Status = 6 })),
			"long name":         reg.PutAgent(ctx, badAgent(func(b *records.AgentRecord) { b.Name = strings.Repeat("x", records.MaxNameLen+1) })),
			"negative hb":       reg.PutAgent(ctx, badAgent(func(b *records.AgentRecord) { b.LastHeartbeatAt = &neg })),
			"update to 9":       reg.UpdateAgentStatus(ctx, a.AgentID, 9),
			"session status 4":  reg.PutSession(ctx, &records.SessionRecord{SessionID: sess.SessionID, AgentID: a.AgentID, UserID: u, Status: 4}),
			"nil session":       reg.PutSession(ctx, nil),
			"session to 200":    reg.UpdateSessionStatus(ctx, sess.SessionID, 200),
			"user email length": reg.PutUser(ctx, &records.UserRecord{UserID: u, Email: strings.Repeat("e", records.MaxEmailLen+1)}),
		}
		_, typed["update of to 6"] = reg.UpdateAgentStatusOf(ctx, u, a.AgentID, 6)
		_, typed["list by status 7"] = reg.ListAgentsByStatus(ctx, 7)
		for name, err := range typed {
			wantErr(t, name, err, client.ErrInvalidArgument)
		}
		// Raw requests the typed API cannot express: the server refuses
		// them with InvalidArgument.
		id := c.ShardOf(u[:])
		good := rpc.AgentToProto(a)
		mut := func(f func(*rpc.Agent)) *rpc.Agent {
			p := rpc.AgentToProto(a)
			f(p)
			return p
		}
		raw := map[string]func(context.Context, rpc.RegistryClient) error{
			"agent_id 31 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.PutAgent(ctx, &rpc.PutAgentRequest{Agent: mut(func(p *rpc.Agent) { p.AgentId = p.AgentId[:31] })})
				return err
			},
			"user_id 33 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.PutAgent(ctx, &rpc.PutAgentRequest{Agent: mut(func(p *rpc.Agent) { p.UserId = append(p.UserId, 0) })})
				return err
			},
			"missing agent": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.PutAgent(ctx, &rpc.PutAgentRequest{})
				return err
			},
			"status 300": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.PutAgent(ctx, &rpc.PutAgentRequest{Agent: mut(func(p *rpc.Agent) { p.Status = 300 })})
				return err
			},
			"get agent_id 5 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.GetAgent(ctx, &rpc.AgentRef{Target: &rpc.Target{Shard: uint32(id), HasShard: true}, AgentId: good.AgentId[:5]})
				return err
			},
			"target user_id 16 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.GetAgent(ctx, &rpc.AgentRef{Target: &rpc.Target{UserId: good.UserId[:16]}, AgentId: good.AgentId})
				return err
			},
			"target shard and user": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.DeleteAgent(ctx, &rpc.AgentRef{Target: &rpc.Target{UserId: good.UserId, Shard: uint32(id), HasShard: true}, AgentId: good.AgentId})
				return err
			},
			"delete agent_id 0 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.DeleteAgent(ctx, &rpc.AgentRef{Target: &rpc.Target{UserId: good.UserId}})
				return err
			},
			"update status 6": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.UpdateAgentStatus(ctx, &rpc.UpdateAgentStatusRequest{UserId: good.UserId, AgentId: good.AgentId, Status: 6})
				return err
			},
			"update agent_id 33 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.UpdateAgentStatus(ctx, &rpc.UpdateAgentStatusRequest{UserId: good.UserId, AgentId: append(slices.Clone(good.AgentId), 1), Status: 1})
				return err
			},
			"session_id 15 bytes": func(ctx context.Context, rc rpc.RegistryClient) error {
				p := rpc.SessionToProto(sess)
				p.SessionId = p.SessionId[:15]
				_, err := rc.PutSession(ctx, &rpc.PutSessionRequest{Session: p})
				return err
			},
			"session status 4 on the wire": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.UpdateSessionStatus(ctx, &rpc.UpdateSessionStatusRequest{Target: &rpc.Target{UserId: good.UserId}, SessionId: sess.SessionID[:], Status: 4})
				return err
			},
			"user_id empty": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.PutUser(ctx, &rpc.PutUserRequest{User: &rpc.User{Email: "x@y"}})
				return err
			},
			"list shard 99": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: 99})
				return err
			},
			"list by status 6": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: uint32(id), ByStatus: true, Status: 6})
				return err
			},
			"foreign cursor": func(ctx context.Context, rc rpc.RegistryClient) error {
				_, err := rc.ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: uint32(id), ByStatus: true, Status: 2, Cursor: []byte{0x05, 1, 2}})
				return err
			},
		}
		for name, call := range raw {
			err := c.CallShard(ctx, id, client.CallOptions{}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
				return call(ctx, rpc.NewRegistryClient(cc))
			})
			wantErr(t, "raw "+name, err, client.ErrInvalidArgument)
		}
		if got, err := reg.GetAgentOf(ctx, u, a.AgentID); err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("agent after bad input: %+v, %v", got, err)
		}
		if got, err := reg.GetSessionOf(ctx, u, sess.SessionID); err != nil || !reflect.DeepEqual(got, sess) {
			t.Errorf("session after bad input: %+v, %v", got, err)
		}
		_, err := reg.GetUser(ctx, u)
		wantErr(t, "user after bad input", err, client.ErrNotFound)
		model.check(ctx, t, reg)
	})
}

// billingFixture is a billing store on a cluster, with helpers that fail
// the test they are given.
type billingFixture struct {
	ctx context.Context
	b   *client.Billing
	g   *storesIDs
	m   *shard.Map
}

// account creates an account on shard s with balance cents.
func (f *billingFixture) account(t *testing.T, s shard.ID, balance int64) keys.AccountID {
	t.Helper()
	a := &records.Account{UserID: f.g.accountOn(f.m, s), BalanceCents: balance, LifetimeCreditsCents: balance, CreatedAt: storesT0, UpdatedAt: storesT0}
	if err := f.b.PutAccount(f.ctx, a); err != nil {
		t.Fatalf("PutAccount: %v", err)
	}
	return a.UserID
}

func (f *billingFixture) get(t *testing.T, user keys.AccountID) *records.Account {
	t.Helper()
	a, err := f.b.GetAccount(f.ctx, user)
	if err != nil {
		t.Fatalf("GetAccount: %v", err)
	}
	return a
}

func (f *billingFixture) all(t *testing.T, user keys.AccountID) []*records.CreditTransaction {
	t.Helper()
	txs, err := f.b.ListTransactionsByUser(f.ctx, user, 10_000, 0)
	if err != nil {
		t.Fatalf("ListTransactionsByUser: %v", err)
	}
	newestFirst(t, "ListTransactionsByUser", txs)
	return txs
}

func usageOf(user keys.AccountID, eventID string, cost int64) (*records.UsageEvent, *records.CreditTransaction) {
	e := &records.UsageEvent{EventID: eventID, UserID: user, AgentID: "agent-1", Resource: "llm_tokens", Quantity: cost * 10, CostCents: cost, CreatedAt: storesT0}
	t := &records.CreditTransaction{TransactionID: client.NewTransactionID(time.Now()), UserID: user, AmountCents: cost,
		TransactionType: records.TxUsage, Description: "usage " + eventID, EventID: eventID, CreatedAt: storesT0}
	return e, t
}

func purchaseOf(user keys.AccountID, amount int64) *records.CreditTransaction {
	return &records.CreditTransaction{TransactionID: client.NewTransactionID(time.Now()), UserID: user, AmountCents: amount,
		TransactionType: records.TxPurchase, Description: "purchase", CreatedAt: storesT0}
}

// newestFirst fails unless txs are in strictly decreasing id order.
func newestFirst(t *testing.T, what string, txs []*records.CreditTransaction) {
	t.Helper()
	for i := 1; i < len(txs); i++ {
		if bytes.Compare(txs[i-1].TransactionID[:], txs[i].TransactionID[:]) <= 0 {
			t.Errorf("%s: transaction %d is not older than %d", what, i, i-1)
		}
	}
}

func wantInsufficient(t *testing.T, what string, err error, balance, required int64) {
	t.Helper()
	var ic *client.InsufficientCreditsError
	if !errors.As(err, &ic) || ic.Balance != balance || ic.Required != required {
		t.Errorf("%s: got %v, want InsufficientCredits{balance %d, required %d}", what, err, balance, required)
	}
}

func wantDuplicate(t *testing.T, what string, err error, eventID string) {
	t.Helper()
	var de *client.DuplicateEventError
	if !errors.As(err, &de) || de.EventID != eventID {
		t.Errorf("%s: got %v, want DuplicateEvent{%q}", what, err, eventID)
	}
}

// TestStoresBilling runs every method of seed 001's Store trait against a
// 3-node, 8-shard cluster whose pages hold 5 items.
func TestStoresBilling(t *testing.T) {
	tc := newTestCluster(t, 3, 8, storesSmallPages)
	c := tc.client()
	ctx := ctxT(t, 3*time.Minute)
	f := &billingFixture{ctx: ctx, b: c.Billing(), g: newStoresIDs(2), m: c.Map()}
	b, g := f.b, f.g

	t.Run("accounts", func(t *testing.T) {
		a := &records.Account{UserID: g.account(), BalanceCents: 1234, LifetimeCreditsCents: 2000, LifetimeUsageCents: 766, CreatedAt: storesT0, UpdatedAt: storesT0 + 1}
		if err := b.PutAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
		if got := f.get(t, a.UserID); !reflect.DeepEqual(got, a) {
			t.Errorf("GetAccount = %+v, want %+v", got, a)
		}
		a2 := *a
		a2.BalanceCents, a2.UpdatedAt = 7, storesT0+2
		if err := b.PutAccount(ctx, &a2); err != nil {
			t.Fatal(err)
		}
		if got := f.get(t, a.UserID); !reflect.DeepEqual(got, &a2) {
			t.Errorf("GetAccount after replace = %+v, want %+v", got, &a2)
		}
		if err := b.DeleteAccount(ctx, a.UserID); err != nil {
			t.Fatalf("DeleteAccount: %v", err)
		}
		_, err := b.GetAccount(ctx, a.UserID)
		wantErr(t, "GetAccount deleted", err, client.ErrNotFound)
		wantErr(t, "DeleteAccount deleted", b.DeleteAccount(ctx, a.UserID), client.ErrNotFound)
		_, err = b.GetAccount(ctx, g.account(), client.Stale())
		wantErr(t, "stale GetAccount unknown", err, client.ErrNotFound)
	})

	t.Run("update balance", func(t *testing.T) {
		u := f.account(t, 4, 0)
		for _, step := range []struct{ delta, want int64 }{{500, 500}, {-200, 300}} {
			if got, err := b.UpdateBalance(ctx, u, step.delta); err != nil || got != step.want {
				t.Fatalf("UpdateBalance(%d) = %d, %v; want %d", step.delta, got, err, step.want)
			}
		}
		_, err := b.UpdateBalance(ctx, u, -400)
		wantInsufficient(t, "UpdateBalance(-400)", err, 300, 400)
		a := f.get(t, u)
		if a.BalanceCents != 300 || a.LifetimeCreditsCents != 500 || a.LifetimeUsageCents != 200 {
			t.Errorf("account after updates: %+v, want balance 300, lifetime credits 500, usage 200", a)
		}
		txs := f.all(t, u)
		if len(txs) != 2 || txs[0].AmountCents != -200 || txs[0].BalanceAfterCents != 300 ||
			txs[1].AmountCents != 500 || txs[1].BalanceAfterCents != 500 ||
			txs[0].TransactionType != records.TxAdjustment || txs[1].TransactionType != records.TxAdjustment {
			t.Errorf("adjustments: %+v", txs)
		}
		_, err = b.UpdateBalance(ctx, g.account(), 5)
		wantErr(t, "UpdateBalance unknown", err, client.ErrNotFound)
	})

	t.Run("transactions and pages", func(t *testing.T) {
		u, v := f.account(t, 6, 0), f.account(t, 6, 0) // one shard: v's must not show in u's
		var put []*records.CreditTransaction
		for i := range 23 {
			tx := purchaseOf(u, int64(i+1))
			if err := b.PutTransaction(ctx, tx); err != nil {
				t.Fatal(err)
			}
			put = append(put, tx)
		}
		for range 3 {
			if err := b.PutTransaction(ctx, purchaseOf(v, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// Replacing a transaction replaces it in place.
		put[4].Description = "replaced"
		if err := b.PutTransaction(ctx, put[4]); err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(put)
		slices.Reverse(want)
		if err := sameRecords("all of u", f.all(t, u), want); err != nil {
			t.Error(err)
		}
		if n := len(f.all(t, v)); n != 3 {
			t.Errorf("v has %d transactions, want 3", n)
		}
		n := len(want)
		for _, p := range []struct{ limit, offset int }{{5, 0}, {5, 5}, {5, 20}, {5, 23}, {5, 100}, {0, 0}, {1, 22}, {23, 0}, {7, 3}, {100, 1}} {
			got, err := b.ListTransactionsByUser(ctx, u, p.limit, p.offset)
			if err != nil {
				t.Fatalf("ListTransactionsByUser(%d, %d): %v", p.limit, p.offset, err)
			}
			if err := sameRecords(fmt.Sprintf("limit %d offset %d", p.limit, p.offset), got, want[min(p.offset, n):min(p.offset+p.limit, n)]); err != nil {
				t.Error(err)
			}
		}
		// Cursor pages, read in sequence, equal the offset pages.
		var before *keys.TransactionID
		var walked []*records.CreditTransaction
		for page := 0; ; page++ {
			txs, next, err := b.ListTransactionsPage(ctx, u, before, 5)
			if err != nil {
				t.Fatalf("ListTransactionsPage %d: %v", page, err)
			}
			byOffset, err := b.ListTransactionsByUser(ctx, u, 5, 5*page)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRecords(fmt.Sprintf("cursor page %d", page), txs, byOffset); err != nil {
				t.Error(err)
			}
			walked = append(walked, txs...)
			if next == nil {
				break
			}
			if page > n {
				t.Fatal("cursor pages do not end")
			}
			before = next
		}
		if err := sameRecords("cursor walk", walked, want); err != nil {
			t.Error(err)
		}
		// The server's page size caps a page; more still follow.
		for _, limit := range []int{0, 50} {
			txs, next, err := b.ListTransactionsPage(ctx, u, nil, limit)
			if err != nil || len(txs) != 5 || next == nil || *next != txs[4].TransactionID {
				t.Errorf("ListTransactionsPage(limit %d) = %d items, next %v, %v", limit, len(txs), next, err)
			}
		}
		// Lookups.
		for name, get := range map[string]func() (*records.CreditTransaction, error){
			"GetTransactionOf": func() (*records.CreditTransaction, error) { return b.GetTransactionOf(ctx, u, put[4].TransactionID) },
			"GetTransaction":   func() (*records.CreditTransaction, error) { return b.GetTransaction(ctx, put[4].TransactionID) },
		} {
			if got, err := get(); err != nil || !reflect.DeepEqual(got, put[4]) {
				t.Errorf("%s = %+v, %v", name, got, err)
			}
		}
		_, err := b.GetTransactionOf(ctx, v, put[4].TransactionID)
		wantErr(t, "GetTransactionOf another user", err, client.ErrNotFound)
		_, err = b.GetTransaction(ctx, client.NewTransactionID(time.Now()))
		wantErr(t, "GetTransaction unknown", err, client.ErrNotFound)
	})

	t.Run("usage events", func(t *testing.T) {
		u := f.account(t, 0, 1000)
		e := &records.UsageEvent{EventID: "stored-only", UserID: u, Resource: "cpu_ms", Quantity: 3, CostCents: 9, CreatedAt: storesT0}
		if err := b.PutUsageEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		for name, get := range map[string]func() (*records.UsageEvent, error){
			"GetUsageEventOf": func() (*records.UsageEvent, error) { return b.GetUsageEventOf(ctx, u, e.EventID) },
			"GetUsageEvent":   func() (*records.UsageEvent, error) { return b.GetUsageEvent(ctx, e.EventID) },
		} {
			if got, err := get(); err != nil || !reflect.DeepEqual(got, e) {
				t.Errorf("%s = %+v, %v", name, got, err)
			}
		}
		for name, has := range map[string]func(string) (bool, error){
			"HasUsageEvent":   func(id string) (bool, error) { return b.HasUsageEvent(ctx, id) },
			"HasUsageEventOf": func(id string) (bool, error) { return b.HasUsageEventOf(ctx, u, id) },
		} {
			if ok, err := has(e.EventID); err != nil || !ok {
				t.Errorf("%s(stored) = %t, %v", name, ok, err)
			}
			if ok, err := has("never-seen"); err != nil || ok {
				t.Errorf("%s(unknown) = %t, %v", name, ok, err)
			}
		}
		_, err := b.GetUsageEvent(ctx, "never-seen")
		wantErr(t, "GetUsageEvent unknown", err, client.ErrNotFound)
		_, err = b.GetUsageEventOf(ctx, u, "never-seen")
		wantErr(t, "GetUsageEventOf unknown", err, client.ErrNotFound)
		// A stored event counts as processed.
		_, tx := usageOf(u, e.EventID, 9)
		_, err = b.ProcessUsage(ctx, e, tx)
		wantDuplicate(t, "ProcessUsage of a stored event", err, e.EventID)
		if a := f.get(t, u); a.BalanceCents != 1000 {
			t.Errorf("balance %d, want 1000", a.BalanceCents)
		}
	})

	t.Run("process usage", func(t *testing.T) {
		u := f.account(t, 1, 1000)
		e, tx := usageOf(u, "pu-1", 300)
		if bal, err := b.ProcessUsage(ctx, e, tx); err != nil || bal != 700 {
			t.Fatalf("ProcessUsage = %d, %v; want 700", bal, err)
		}
		stored := *tx
		stored.BalanceAfterCents = 700
		if got, err := b.GetTransaction(ctx, tx.TransactionID); err != nil || !reflect.DeepEqual(got, &stored) {
			t.Errorf("charge = %+v, %v; want %+v", got, err, &stored)
		}
		if got, err := b.GetUsageEvent(ctx, e.EventID); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("event = %+v, %v", got, err)
		}
		if a := f.get(t, u); a.BalanceCents != 700 || a.LifetimeUsageCents != 300 || a.LifetimeCreditsCents != 1000 {
			t.Errorf("account %+v", a)
		}
		// Insufficient credits change nothing.
		e2, tx2 := usageOf(u, "pu-2", 800)
		_, err := b.ProcessUsage(ctx, e2, tx2)
		wantInsufficient(t, "ProcessUsage(800)", err, 700, 800)
		if ok, err := b.HasUsageEvent(ctx, e2.EventID); err != nil || ok {
			t.Errorf("refused event stored: %t, %v", ok, err)
		}
		_, err = b.GetTransaction(ctx, tx2.TransactionID)
		wantErr(t, "refused charge", err, client.ErrNotFound)
		// No account.
		e3, tx3 := usageOf(g.account(), "pu-3", 1)
		_, err = b.ProcessUsage(ctx, e3, tx3)
		wantErr(t, "ProcessUsage without account", err, client.ErrNotFound)
		if ok, err := b.HasUsageEvent(ctx, e3.EventID); err != nil || ok {
			t.Errorf("event without account stored: %t, %v", ok, err)
		}
		// The same event twice is charged once.
		e4, tx4 := usageOf(u, "pu-dup", 100)
		if bal, err := b.ProcessUsage(ctx, e4, tx4); err != nil || bal != 600 {
			t.Fatalf("ProcessUsage = %d, %v; want 600", bal, err)
		}
		_, tx5 := usageOf(u, "pu-dup", 100)
		for _, again := range []*records.CreditTransaction{tx5, tx4} {
			_, err = b.ProcessUsage(ctx, e4, again)
			wantDuplicate(t, "ProcessUsage twice", err, e4.EventID)
		}
		if a := f.get(t, u); a.BalanceCents != 600 || a.LifetimeUsageCents != 400 {
			t.Errorf("account after duplicate: %+v", a)
		}
		var usage []string
		for _, x := range f.all(t, u) {
			if x.TransactionType == records.TxUsage {
				usage = append(usage, x.EventID)
			}
		}
		if !slices.Equal(usage, []string{"pu-dup", "pu-1"}) {
			t.Errorf("usage transactions %v, want [pu-dup pu-1]", usage)
		}
	})

	t.Run("add credits", func(t *testing.T) {
		u := f.account(t, 7, 100)
		tx := purchaseOf(u, 250)
		for i := range 2 {
			if bal, err := b.AddCredits(ctx, u, 250, tx); err != nil || bal != 350 {
				t.Errorf("AddCredits #%d = %d, %v; want 350", i+1, bal, err)
			}
		}
		if a := f.get(t, u); a.BalanceCents != 350 || a.LifetimeCreditsCents != 350 {
			t.Errorf("account %+v, want balance 350, lifetime credits 350", a)
		}
		stored := *tx
		stored.BalanceAfterCents = 350
		if err := sameRecords("credits", f.all(t, u), []*records.CreditTransaction{&stored}); err != nil {
			t.Error(err)
		}
		other := g.account()
		_, err := b.AddCredits(ctx, other, 5, purchaseOf(other, 5))
		wantErr(t, "AddCredits without account", err, client.ErrNotFound)
	})

	t.Run("fan-out lookups", func(t *testing.T) {
		for s := range shard.ID(8) {
			u := f.account(t, s, 10)
			e, tx := usageOf(u, fmt.Sprintf("fan-%d", s), 1)
			if _, err := b.ProcessUsage(ctx, e, tx); err != nil {
				t.Fatal(err)
			}
			if got, err := b.GetTransaction(ctx, tx.TransactionID); err != nil || got.UserID != u || got.EventID != e.EventID {
				t.Errorf("GetTransaction on shard %d = %+v, %v", s, got, err)
			}
			if ok, err := b.HasUsageEvent(ctx, e.EventID); err != nil || !ok {
				t.Errorf("HasUsageEvent on shard %d = %t, %v", s, ok, err)
			}
			if got, err := b.GetUsageEvent(ctx, e.EventID); err != nil || !reflect.DeepEqual(got, e) {
				t.Errorf("GetUsageEvent on shard %d = %+v, %v", s, got, err)
			}
		}
		if ok, err := b.HasUsageEvent(ctx, "fan-none", client.Stale()); err != nil || ok {
			t.Errorf("HasUsageEvent unknown = %t, %v", ok, err)
		}
	})

	t.Run("concurrent usage", func(t *testing.T) {
		storesConcurrentUsage(t, tc, f)
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		storesBillingBadInput(t, c, f)
	})
}

// storesConcurrentUsage: 200 concurrent ProcessUsage calls on one account
// funded for exactly 100 of them: exactly 100 are charged, 100 are refused
// with InsufficientCredits, the balance ends at 0, and the 100 charges are
// listed newest first.
func storesConcurrentUsage(t *testing.T, tc *testCluster, f *billingFixture) {
	const n, cost = 200, 7
	u := f.account(t, 5, (n/2)*cost)
	// A client with a long attempt timeout, so that a slow attempt under
	// -race is not abandoned and retried (a retry of an applied attempt
	// answers DuplicateEvent, which the test counts but does not expect).
	var eps []string
	for _, nd := range tc.nodes {
		eps = append(eps, nd.Addrs().GRPCAddr)
	}
	c, err := client.New(f.ctx, client.Config{Endpoints: eps, AttemptTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := c.Billing()
	events := make([]*records.UsageEvent, n)
	txs := make([]*records.CreditTransaction, n)
	for i := range n {
		events[i], txs[i] = usageOf(u, fmt.Sprintf("conc-%03d", i), cost)
	}
	balances, errs := make([]int64, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { balances[i], errs[i] = b.ProcessUsage(f.ctx, events[i], txs[i]) })
	}
	wg.Wait()
	charged := map[string]bool{}
	var after []int64
	var refused, dup int
	for i, err := range errs {
		var ic *client.InsufficientCreditsError
		var de *client.DuplicateEventError
		switch {
		case err == nil:
			charged[events[i].EventID] = true
			after = append(after, balances[i])
		case errors.As(err, &ic):
			refused++
			if ic.Balance != 0 || ic.Required != cost {
				t.Errorf("event %d refused with %+v, want balance 0, required %d", i, *ic, cost)
			}
		case errors.As(err, &de):
			// An earlier attempt of this call applied.
			dup++
			charged[events[i].EventID] = true
		default:
			t.Errorf("event %d: %v", i, err)
		}
	}
	if dup > 0 {
		t.Logf("%d calls answered DuplicateEvent after a retry", dup)
	}
	if len(charged) != n/2 || refused != n/2 {
		t.Errorf("%d charged, %d refused; want %d and %d", len(charged), refused, n/2, n/2)
	}
	// The balances returned are distinct: each charge saw the one before.
	slices.Sort(after)
	if len(slices.Compact(after)) != len(after) {
		t.Errorf("two charges returned the same balance: %v", after)
	}
	if a := f.get(t, u); a.BalanceCents != 0 || a.LifetimeUsageCents != (n/2)*cost {
		t.Errorf("account %+v, want balance 0, lifetime usage %d", a, (n/2)*cost)
	}
	list := f.all(t, u)
	if len(list) != n/2 {
		t.Fatalf("%d transactions listed, want %d", len(list), n/2)
	}
	seenAfter := map[int64]bool{}
	for _, x := range list {
		if x.TransactionType != records.TxUsage || !charged[x.EventID] || x.AmountCents != cost {
			t.Errorf("listed %+v", x)
		}
		seenAfter[x.BalanceAfterCents] = true
	}
	for k := range int64(n / 2) {
		if !seenAfter[k*cost] {
			t.Errorf("no charge left the balance at %d", k*cost)
		}
	}
	for i, e := range events {
		if ok, err := f.b.HasUsageEventOf(f.ctx, u, e.EventID); err != nil || ok != charged[e.EventID] {
			t.Errorf("HasUsageEventOf(event %d) = %t, %v; charged %t", i, ok, err, charged[e.EventID])
		}
	}
}

// storesBillingBadInput: invalid arguments, refused by the typed store or
// (for what it cannot express) by the server, change nothing.
func storesBillingBadInput(t *testing.T, c *client.Client, f *billingFixture) {
	ctx, b := f.ctx, f.b
	u := f.account(t, 3, 500)
	other := f.g.accountOn(f.m, 3)
	before := f.all(t, u)
	e, tx := usageOf(u, "bad-1", 10)
	_, foreignTx := usageOf(other, "bad-1", 10)
	badTx := func(mut func(*records.CreditTransaction)) *records.CreditTransaction { x := *tx; mut(&x); return &x }
	badEvent := func(mut func(*records.UsageEvent)) *records.UsageEvent { x := *e; mut(&x); return &x }
	typed := map[string]error{
		"nil account":      b.PutAccount(ctx, nil),
		"negative balance": b.PutAccount(ctx, &records.Account{UserID: u, BalanceCents: -1}),
		"zero amount":      b.PutTransaction(ctx, badTx(func(x *records.CreditTransaction) { x.AmountCents = 0 })),
		"type 9":           b.PutTransaction(ctx, badTx(func(x *records.CreditTransaction) { x.TransactionType = 9 })),
		"empty event id":   b.PutUsageEvent(ctx, badEvent(func(x *records.UsageEvent) { x.EventID = "" })),
	}
	typed["update by 0"] = errOf(b.UpdateBalance(ctx, u, 0))
	typed["usage tx of another user"] = errOf(b.ProcessUsage(ctx, e, foreignTx))
	typed["negative cost"] = errOf(b.ProcessUsage(ctx, badEvent(func(x *records.UsageEvent) { x.CostCents = -1 }), tx))
	typed["event id 257 bytes"] = errOf(b.ProcessUsage(ctx, badEvent(func(x *records.UsageEvent) { x.EventID = strings.Repeat("e", 257) }), tx))
	typed["credits 0"] = errOf(b.AddCredits(ctx, u, 0, purchaseOf(u, 1)))
	typed["credits tx of another user"] = errOf(b.AddCredits(ctx, u, 5, purchaseOf(other, 5)))
	typed["limit -1"] = errOf(b.ListTransactionsByUser(ctx, u, -1, 0))
	typed["offset -1"] = errOf(b.ListTransactionsByUser(ctx, u, 1, -1))
	typed["has empty event"] = errOf(b.HasUsageEvent(ctx, ""))
	typed["get long event"] = errOf(b.GetUsageEvent(ctx, strings.Repeat("e", 257)))
	for name, err := range typed {
		wantErr(t, name, err, client.ErrInvalidArgument)
	}
	acct := u[:]
	raw := map[string]func(context.Context, rpc.BillingClient) error{
		"account user_id 15 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.PutAccount(ctx, &rpc.PutAccountRequest{Account: &rpc.Account{UserId: acct[:15]}})
			return err
		},
		"update user_id 17 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.UpdateBalance(ctx, &rpc.UpdateBalanceRequest{UserId: append(slices.Clone(acct), 0), DeltaCents: 5})
			return err
		},
		"update transaction_id 3 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.UpdateBalance(ctx, &rpc.UpdateBalanceRequest{UserId: acct, DeltaCents: 5, TransactionId: []byte{1, 2, 3}})
			return err
		},
		"update by 0": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.UpdateBalance(ctx, &rpc.UpdateBalanceRequest{UserId: acct})
			return err
		},
		"transaction type 9": func(ctx context.Context, bc rpc.BillingClient) error {
			p := rpc.TransactionToProto(tx)
			p.TransactionType = 9
			_, err := bc.PutTransaction(ctx, &rpc.PutTransactionRequest{Transaction: p})
			return err
		},
		"usage without transaction": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ProcessUsage(ctx, &rpc.ProcessUsageRequest{Event: rpc.UsageEventToProto(e)})
			return err
		},
		"usage tx of another user": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ProcessUsage(ctx, &rpc.ProcessUsageRequest{Event: rpc.UsageEventToProto(e), Transaction: rpc.TransactionToProto(foreignTx)})
			return err
		},
		"credits without transaction": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.AddCredits(ctx, &rpc.AddCreditsRequest{UserId: acct, AmountCents: 5})
			return err
		},
		"credits user_id empty": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.AddCredits(ctx, &rpc.AddCreditsRequest{AmountCents: 5, Transaction: rpc.TransactionToProto(purchaseOf(u, 5))})
			return err
		},
		"list before 5 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ListTransactionsByUser(ctx, &rpc.ListTransactionsRequest{UserId: acct, Before: []byte{1, 2, 3, 4, 5}})
			return err
		},
		"list offset and before": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ListTransactionsByUser(ctx, &rpc.ListTransactionsRequest{UserId: acct, Offset: 1, Before: tx.TransactionID[:]})
			return err
		},
		"get transaction_id 17 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.GetTransaction(ctx, &rpc.TransactionRef{Target: &rpc.Target{UserId: acct}, TransactionId: make([]byte, 17)})
			return err
		},
		"has empty event id": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.HasUsageEvent(ctx, &rpc.UsageEventRef{Target: &rpc.Target{UserId: acct}})
			return err
		},
		"target user_id 32 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.GetUsageEvent(ctx, &rpc.UsageEventRef{Target: &rpc.Target{UserId: make([]byte, 32)}, EventId: "x"})
			return err
		},
	}
	id := c.ShardOf(acct)
	for name, call := range raw {
		err := c.CallShard(ctx, id, client.CallOptions{}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			return call(ctx, rpc.NewBillingClient(cc))
		})
		wantErr(t, "raw "+name, err, client.ErrInvalidArgument)
	}
	if a := f.get(t, u); a.BalanceCents != 500 {
		t.Errorf("balance %d after bad input, want 500", a.BalanceCents)
	}
	if err := sameRecords("transactions after bad input", f.all(t, u), before); err != nil {
		t.Error(err)
	}
	if ok, err := b.HasUsageEvent(ctx, e.EventID); err != nil || ok {
		t.Errorf("bad input stored event %q: %t, %v", e.EventID, ok, err)
	}
	_, err := b.GetAccount(ctx, other)
	wantErr(t, "account of other after bad input", err, client.ErrNotFound)
}

// TestStoresBillingLeaderChange: a usage event processed before the leader
// of its account's shard stops, and sent again after, is charged once; so
// is a credit transaction added twice around the change.
func TestStoresBillingLeaderChange(t *testing.T) {
	tc := newTestCluster(t, 3, 8, nil)
	c := tc.client()
	ctx := ctxT(t, 2*time.Minute)
	f := &billingFixture{ctx: ctx, b: c.Billing(), g: newStoresIDs(3), m: c.Map()}
	b := f.b
	const sh = shard.ID(2)
	u := f.account(t, sh, 0)
	credit := purchaseOf(u, 1000)
	if bal, err := b.AddCredits(ctx, u, 1000, credit); err != nil || bal != 1000 {
		t.Fatalf("AddCredits = %d, %v", bal, err)
	}
	e, first := usageOf(u, "leader-change", 150)
	if bal, err := b.ProcessUsage(ctx, e, first); err != nil || bal != 850 {
		t.Fatalf("ProcessUsage = %d, %v; want 850", bal, err)
	}
	victim := tc.leaderOf(sh)
	if victim < 0 {
		t.Fatalf("no leader of shard %d", sh)
	}
	tc.stop(victim)
	_, second := usageOf(u, "leader-change", 150)
	for _, tx := range []*records.CreditTransaction{second, first} {
		_, err := b.ProcessUsage(ctx, e, tx)
		wantDuplicate(t, "ProcessUsage after the leader change", err, e.EventID)
	}
	// A repeat answers as the original did: the balance right after it.
	if bal, err := b.AddCredits(ctx, u, 1000, credit); err != nil || bal != 1000 {
		t.Errorf("AddCredits again after the leader change = %d, %v; want 1000", bal, err)
	}
	waitFor(t, 20*time.Second, "a new leader", func() error {
		if l := tc.leaderOf(sh); l < 0 || l == victim {
			return fmt.Errorf("leader of shard %d: node %d", sh, l)
		}
		return nil
	})
	if a := f.get(t, u); a.BalanceCents != 850 || a.LifetimeUsageCents != 150 || a.LifetimeCreditsCents != 1000 {
		t.Errorf("account %+v, want balance 850, usage 150, credits 1000", a)
	}
	var ids []keys.TransactionID
	for _, x := range f.all(t, u) {
		ids = append(ids, x.TransactionID)
	}
	if !slices.Equal(ids, []keys.TransactionID{first.TransactionID, credit.TransactionID}) {
		t.Errorf("transactions %x, want the charge and the credit once each", ids)
	}
	// A new event is charged by the new leader.
	e2, tx2 := usageOf(u, "after-change", 50)
	if bal, err := b.ProcessUsage(ctx, e2, tx2); err != nil || bal != 800 {
		t.Errorf("ProcessUsage after the change = %d, %v; want 800", bal, err)
	}
}

// TestStoresNewTransactionID: ids carry their time, and strictly increase
// within the process even when the clock stands still or goes back, also
// across goroutines.
func TestStoresNewTransactionID(t *testing.T) {
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	id := client.NewTransactionID(future)
	if got := ulid.ULID(id).Time(); got != ulid.Timestamp(future) {
		t.Errorf("id time %d, want %d", got, ulid.Timestamp(future))
	}
	prev := id
	for i := range 5000 {
		now := future
		switch i % 3 {
		case 1:
			now = future.Add(-time.Hour) // the clock went back
		case 2:
			now = time.Unix(-5, 0) // before the epoch
		}
		id := client.NewTransactionID(now)
		if bytes.Compare(id[:], prev[:]) <= 0 {
			t.Fatalf("id %d (%v) is not after the previous one", i, now)
		}
		prev = id
	}
	const workers, each = 8, 500
	got := make([][]keys.TransactionID, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				got[w] = append(got[w], client.NewTransactionID(time.Now()))
			}
		})
	}
	wg.Wait()
	seen := map[keys.TransactionID]bool{}
	for _, ids := range got {
		for i, id := range ids {
			if seen[id] || (i > 0 && bytes.Compare(id[:], ids[i-1][:]) <= 0) {
				t.Fatalf("ids of one goroutine do not strictly increase, or repeat")
			}
			seen[id] = true
		}
	}
}
