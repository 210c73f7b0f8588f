package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
)

// callCounter counts the unary calls of a client by method.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *callCounter) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

func protoSize(m proto.Message) int { return proto.Size(m) }

// pagingPageBytes is the byte bound of the paging tests' cluster.
const pagingPageBytes = 8192

// readPages follows a listing's cursors from the first page and returns
// the item names of each page. A listing that does not end in 20 pages
// fails the test.
func readPages[T any](t *testing.T, page func(client.Page) ([]T, []byte, error), name func(T) string) [][]string {
	t.Helper()
	var out [][]string
	var cursor []byte
	for range 20 {
		items, next, err := page(client.Page{Cursor: cursor})
		if err != nil {
			t.Fatalf("page after cursor %x: %v", cursor, err)
		}
		var names []string
		for _, it := range items {
			names = append(names, name(it))
		}
		out = append(out, names)
		if next == nil {
			return out
		}
		cursor = next
	}
	t.Fatal("listing does not end")
	return nil
}

// TestListingsPaged: every listing answers a page of at most
// --max-scan-page items (3 here) with a cursor that continues to exactly
// the remaining items, a page of large items stops at --max-page-bytes,
// and the Go client's list methods still return everything, page by page.
func TestListingsPaged(t *testing.T) {
	tc := newTestCluster(t, 1, 2, func(c *Config) {
		c.MaxScanPage = 3
		c.MaxPageBytes = pagingPageBytes
		c.TokenKeys = poolsRing(t, "k1")
	})
	calls := &callCounter{n: map[string]int{}}
	c, err := client.New(ctxT(t, 10*time.Second), client.Config{Endpoints: []string{tc.nodes[0].Addrs().GRPCAddr},
		AttemptTimeout: 5 * time.Second, Unary: true, DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(calls.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 2*time.Minute)
	g := newStoresIDs(22)

	t.Run("kv scan", func(t *testing.T) {
		rk := []byte("paging-kv")
		var want []string
		for i := range 7 {
			k := fmt.Sprintf("k%d", i)
			want = append(want, k)
			if err := c.Put(ctx, rk, []byte(k), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		var got [][]string
		var after []byte
		for more := true; more; {
			var items []client.KeyValue
			items, more, err = c.Scan(ctx, rk, nil, after, 0)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, kv := range items {
				names = append(names, string(kv.Key))
			}
			got = append(got, names)
			after = items[len(items)-1].Key
		}
		if g, w := fmt.Sprint(got), "[[k0 k1 k2] [k3 k4 k5] [k6]]"; g != w {
			t.Errorf("scan pages %s, want %s", g, w)
		}
		var all []string
		for kv, err := range c.ScanAll(ctx, rk, nil) {
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, string(kv.Key))
		}
		eqs(t, "ScanAll", all, want)
	})

	t.Run("kv scan byte bound", func(t *testing.T) {
		rk := []byte("paging-kv-big")
		// 3000-byte values: two fit 8192 bytes, three do not; the
		// 10000-byte value is a page of its own.
		for i := range 5 {
			if err := c.Put(ctx, rk, fmt.Appendf(nil, "b%d", i), bytes.Repeat([]byte("v"), 3000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Put(ctx, rk, []byte("b5"), bytes.Repeat([]byte("w"), 10000)); err != nil {
			t.Fatal(err)
		}
		var got [][]string
		var after []byte
		for more := true; more; {
			var resp *rpc.ScanResponse
			err := c.CallShard(ctx, c.ShardOf(rk), client.CallOptions{Idempotent: true}, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
				resp, err = rpc.NewKVClient(cc).Scan(ctx, &rpc.ScanRequest{RoutingKey: rk, StartAfter: after})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(resp.GetItems()); n > 1 && protoSize(resp) > pagingPageBytes {
				t.Errorf("a page of %d items is %d bytes, over %d", n, protoSize(resp), pagingPageBytes)
			}
			var names []string
			for _, kv := range resp.GetItems() {
				names = append(names, string(kv.GetKey()))
			}
			got = append(got, names)
			more = resp.GetMore()
			after = resp.GetItems()[len(resp.GetItems())-1].GetKey()
		}
		if g, w := fmt.Sprint(got), "[[b0 b1] [b2 b3] [b4] [b5]]"; g != w {
			t.Errorf("scan pages %s, want %s", g, w)
		}
	})

	t.Run("agents by user", func(t *testing.T) {
		reg := c.Registry()
		u := g.user()
		var want []string
		for i := range 7 {
			a := g.agent(u, fmt.Sprintf("a%d", i), records.AgentRunning)
			if err := reg.PutAgent(ctx, a); err != nil {
				t.Fatal(err)
			}
			want = append(want, a.Name)
		}
		// agent id order
		all, err := reg.ListAgentsByUser(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range all {
			names = append(names, a.Name)
		}
		slices.Sort(want)
		if s := slices.Sorted(slices.Values(names)); !slices.Equal(s, want) {
			t.Fatalf("ListAgentsByUser: %v, want %v", names, want)
		}
		if n := calls.get("ListAgentsByUser"); n != 3 {
			t.Errorf("ListAgentsByUser made %d calls, want 3 pages", n)
		}
		pages := readPages(t, func(p client.Page) ([]*records.AgentRecord, []byte, error) {
			return reg.ListAgentsByUserPage(ctx, u, p)
		}, func(a *records.AgentRecord) string { return a.Name })
		if g, w := fmt.Sprint(pages), fmt.Sprint([][]string{names[:3], names[3:6], names[6:]}); g != w {
			t.Errorf("pages %s, want %s", g, w)
		}
		// A page of 2 after the first page's cursor: the 4th and 5th.
		_, cur, err := reg.ListAgentsByUserPage(ctx, u, client.Page{})
		if err != nil || cur == nil {
			t.Fatalf("first page: cursor %x, err %v", cur, err)
		}
		two, next, err := reg.ListAgentsByUserPage(ctx, u, client.Page{Cursor: cur, Limit: 2})
		if err != nil || len(two) != 2 || two[0].Name != names[3] || two[1].Name != names[4] || next == nil {
			t.Errorf("page of 2 after 3: %d agents, next %x, err %v", len(two), next, err)
		}
		// A cursor of another listing is refused.
		_, _, err = reg.ListAgentsByUserPage(ctx, g.user(), client.Page{Cursor: cur})
		wantErr(t, "foreign cursor", err, client.ErrInvalidArgument)
	})

	t.Run("sessions by agent", func(t *testing.T) {
		reg := c.Registry()
		u := g.user()
		agent := g.agentID()
		var want []string
		for range 7 {
			s := &records.SessionRecord{SessionID: g.session(), AgentID: agent, UserID: u, CreatedAt: storesT0}
			if err := reg.PutSession(ctx, s); err != nil {
				t.Fatal(err)
			}
			want = append(want, fmt.Sprintf("%x", s.SessionID[:4]))
		}
		slices.Sort(want)
		name := func(s *records.SessionRecord) string { return fmt.Sprintf("%x", s.SessionID[:4]) }
		pages := readPages(t, func(p client.Page) ([]*records.SessionRecord, []byte, error) {
			return reg.ListSessionsByAgentOfPage(ctx, u, agent, p)
		}, name)
		if g, w := fmt.Sprint(pages), fmt.Sprint([][]string{want[:3], want[3:6], want[6:]}); g != w {
			t.Errorf("pages %s, want %s", g, w)
		}
		before := calls.get("ListSessionsByAgent")
		for what, list := range map[string]func() ([]*records.SessionRecord, error){
			"ListSessionsByAgentOf": func() ([]*records.SessionRecord, error) { return reg.ListSessionsByAgentOf(ctx, u, agent) },
			"ListSessionsByAgent":   func() ([]*records.SessionRecord, error) { return reg.ListSessionsByAgent(ctx, agent) },
		} {
			all, err := list()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range all {
				got = append(got, name(s))
			}
			eqs(t, what, got, want)
		}
		// 3 pages routed; fanned out: 3 pages on the user's shard, 1 on
		// the other.
		if n := calls.get("ListSessionsByAgent") - before; n != 7 {
			t.Errorf("session listings made %d calls, want 7", n)
		}
	})

	t.Run("pools bots runners", func(t *testing.T) {
		p := c.Pools()
		var wantPools []string
		for i := range 6 {
			id := fmt.Sprintf("pg-%d", i)
			vis := records.VisibilityPublic
			if i == 2 {
				vis = records.VisibilityPrivate // bob's: alice does not see it
			}
			owner := "alice"
			if i == 2 {
				owner = "bob"
			} else {
				wantPools = append(wantPools, id)
			}
			// 3000 bytes of meta: three pools pass the byte bound.
			meta := `{"pad":"` + strings.Repeat("p", 3000) + `"}`
			if _, err := p.CreatePool(ctx, owner, client.PoolSpec{PoolID: id, Name: id, Visibility: vis, Meta: meta}); err != nil {
				t.Fatal(err)
			}
		}
		wantPools = append(wantPools, records.DefaultPoolID)
		slices.Sort(wantPools)
		pages := readPages(t, func(pg client.Page) ([]*records.Pool, []byte, error) {
			return p.ListPoolsPage(ctx, "alice", pg)
		}, func(x *records.Pool) string { return x.PoolID })
		// Bytes end the first two pages (a third 3 KB pool would pass
		// 7 KiB; bob's pool, read and skipped, counts), the item limit
		// the last.
		if g, w := fmt.Sprint(pages), "[[pg-0 pg-1] [pg-3] [pg-4 pg-5 pool_goot27]]"; g != w {
			t.Errorf("pool pages %s, want %s", g, w)
		}
		all, err := p.ListPools(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, x := range all {
			got = append(got, x.PoolID)
		}
		eqs(t, "ListPools", got, wantPools)

		var wantBots []string
		for i := range 7 {
			id := fmt.Sprintf("%d", 1000+i)
			if _, err := p.RegisterBot(ctx, "alice", client.BotSpec{AgentID: id, Token: "tok-" + id, PoolID: "pg-0"}); err != nil {
				t.Fatal(err)
			}
			wantBots = append(wantBots, id)
		}
		bpages := readPages(t, func(pg client.Page) ([]*client.BotInfo, []byte, error) {
			return p.ListBotsPage(ctx, "alice", "pg-0", pg)
		}, func(b *client.BotInfo) string { return b.AgentID })
		if g, w := fmt.Sprint(bpages), fmt.Sprint([][]string{wantBots[:3], wantBots[3:6], wantBots[6:]}); g != w {
			t.Errorf("bot pages %s, want %s", g, w)
		}
		bots, err := p.ListBots(ctx, "alice", "pg-0")
		if err != nil || len(bots) != 7 {
			t.Errorf("ListBots: %d bots, err %v", len(bots), err)
		}

		var wantRunners []string
		for i := range 7 {
			id := fmt.Sprintf("r%d", i)
			if _, err := p.Heartbeat(ctx, id, ""); err != nil {
				t.Fatal(err)
			}
			wantRunners = append(wantRunners, id)
		}
		rpages := readPages(t, func(pg client.Page) ([]*records.Runner, []byte, error) {
			return p.ListRunnersPage(ctx, 0, pg)
		}, func(r *records.Runner) string { return r.RunnerID })
		if g, w := fmt.Sprint(rpages), fmt.Sprint([][]string{wantRunners[:3], wantRunners[3:6], wantRunners[6:]}); g != w {
			t.Errorf("runner pages %s, want %s", g, w)
		}
		before := calls.get("ListRunners")
		runners, err := p.ListRunners(ctx)
		if err != nil || len(runners) != 7 {
			t.Errorf("ListRunners: %d runners, err %v", len(runners), err)
		}
		if n := calls.get("ListRunners") - before; n != 3 {
			t.Errorf("ListRunners made %d calls, want 3 pages", n)
		}
	})

	t.Run("cursor outside the listing", func(t *testing.T) {
		var err error
		cerr := c.CallShard(ctx, 0, client.CallOptions{Idempotent: true}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			_, err = rpc.NewRegistryClient(cc).ListShardAgents(ctx, &rpc.ShardAgentsRequest{Shard: 0, Cursor: keys.TablePrefix(keys.TableUsers)})
			return nil
		})
		if cerr != nil || status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListShardAgents with a users cursor: %v, %v; want InvalidArgument", cerr, err)
		}
	})
}

// TestRedisKeysBounded: KEYS over --max-keys-reply keys (summed over the
// shards) is refused with the error that points to SCAN, DBSIZE still
// counts every key, and SCAN lists them all.
func TestRedisKeysBounded(t *testing.T) {
	tc := newTestCluster(t, 1, 4, func(c *Config) {
		c.RedisAddr = "127.0.0.1:0"
		c.MaxKeysReply = 5
	})
	rdb := redisClient(t, tc, 0, 2)
	ctx := ctxT(t, time.Minute)
	for i := range 12 {
		must(rdb.Set(ctx, fmt.Sprintf("key:%02d", i), "v", 0).Result())
	}
	eq(t, "DBSIZE", must(rdb.DBSize(ctx).Result()), int64(12))
	_, err := rdb.Keys(ctx, "*").Result()
	wantRedisErr(t, "KEYS *", err, "ERR KEYS result exceeds 5 keys; use SCAN")
	eq(t, "KEYS key:0[0-4]", len(must(rdb.Keys(ctx, "key:0[0-4]").Result())), 5)
	var all []string
	for it := rdb.Scan(ctx, 0, "key:*", 3).Iterator(); it.Next(ctx); {
		all = append(all, it.Val())
	}
	slices.Sort(all)
	if len(all) != 12 || all[0] != "key:00" || all[11] != "key:11" {
		t.Errorf("SCAN: %v", all)
	}
}
