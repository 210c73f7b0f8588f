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
	"testing"
	"time"

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
