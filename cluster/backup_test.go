package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/backup"
	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/faultnet"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// backupKeys sign the tests' backups; backupRead checks them.
var (
	backupKeys, _ = backup.ParseKeys([]byte("0123456789abcdef0123456789abcdef-cluster-tests"))
	backupRead    = backup.ReadOptions{Keys: backupKeys}
)

// backupSource is node i's admin API as a backup source, with bearer
// token tok ("": none).
func (tc *testCluster) backupSource(i int, tok string) *backup.HTTPSource {
	return &backup.HTTPSource{Client: &http.Client{}, BaseURL: "http://" + tc.nodes[i].Addrs().HTTPAddr,
		Authorize: func(r *http.Request) error {
			if tok != "" {
				r.Header.Set("Authorization", "Bearer "+tok)
			}
			return nil
		}}
}

// restoredCluster seeds a new data dir with the backup file, starts a
// node on it alone (a new cluster), then n-1 more nodes that join it and
// are admitted; it returns once every group has a voter on each node
// (n <= 3) and every node is ready. tweak adjusts every node's config.
func restoredCluster(t *testing.T, file string, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, net: faultnet.New(2), nodes: make([]*Node, n), redis: map[int]testFront{}, admin: map[int]func(){}}
	base := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("r%d", i+1)
		cfg := Config{ID: name, DataDir: filepath.Join(base, name), Seed: backup.Seeds{}, RaftAddr: freePort(t), GRPCAddr: freePort(t),
			GossipAddr: freePort(t), HTTPAddr: freePort(t), HeartbeatTimeout: testHeartbeat,
			ReconcileInterval: 200 * time.Millisecond, // replicas placed sooner: a shorter test
			ElectionTimeout:   testHeartbeat, LeaderLeaseTimeout: testHeartbeat / 2, GossipProfile: "local",
			Logger: testLogger(t).With("test_node", name), Testing: Testing{Dial: tc.net.Dialer(name)}}
		cfg.Testing.WrapRaftListener = func(ln net.Listener) net.Listener { return tc.net.Listen(name, ln) }
		if i > 0 {
			cfg.Join = []string{tc.cfgs[0].GossipAddr}
		}
		if tweak != nil {
			tweak(&cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
	}
	t.Cleanup(tc.closeAll)
	if _, err := backup.Seed(file, tc.cfgs[0].DataDir, backupRead); err != nil {
		t.Fatal(err)
	}
	tc.start(0)
	waitFor(t, 30*time.Second, "the restored node ready", tc.nodes[0].Ready)
	if _, err := os.Stat(filepath.Join(tc.cfgs[0].DataDir, backup.SeedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the seed is still there: %v", err)
	}
	ctx := ctxT(t, 5*time.Minute)
	start := time.Now()
	for i := 1; i < n; i++ {
		tc.start(i)
		waitFor(t, 30*time.Second, "join "+tc.cfgs[i].ID, func() error {
			_, err := tc.nodes[0].JoinNode(ctx, tc.cfgs[i].ID)
			return err
		})
	}
	waitFor(t, 4*time.Minute, "every group on every node", func() error {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := tc.nodes[0].Status(sctx)
		if err != nil {
			return err
		}
		for _, s := range st.Shards {
			if !shardSettled(s, n) {
				return fmt.Errorf("group %s: %+v", s.Shard, s.Replicas)
			}
		}
		return nil
	})
	t.Logf("restored cluster: %d nodes settled %v after the first joined", n, time.Since(start).Round(time.Millisecond))
	tc.waitReady()
	return tc
}

// shardSettled: a leader and n reachable voters.
func shardSettled(s ShardInfo, n int) bool {
	voters := 0
	for _, r := range s.Replicas {
		if r.Role == "voter" && r.Reachable {
			voters++
		}
	}
	return s.Leader != "" && voters == n && len(s.Replicas) == n
}

// knowToken fails unless every node's cluster state has token id.
func (tc *testCluster) knowToken(id string) error {
	for _, n := range tc.nodes {
		st, _ := n.LocalState()
		if st == nil || !slices.ContainsFunc(st.Tokens, func(t Token) bool { return t.ID == id }) {
			return fmt.Errorf("%s does not know token %s yet", n.ID(), id)
		}
	}
	return nil
}

type record struct{ k, v []byte }

// backupRecords reads every shard's records of a backup file.
func backupRecords(t *testing.T, file string) (map[shard.ID][]record, *backup.Manifest) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := backup.NewReader(f, backupRead)
	if err != nil {
		t.Fatal(err)
	}
	out := map[shard.ID][]record{}
	for {
		s, err := r.Next()
		if err == io.EOF {
			return out, r.Manifest()
		}
		if err != nil {
			t.Fatal(err)
		}
		out[s.Shard] = []record{}
		for {
			k, v, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out[s.Shard] = append(out[s.Shard], record{bytes.Clone(k), bytes.Clone(v)})
		}
	}
}

// replicaRecords is every record of a replica's state (fsm.ExportState).
func replicaRecords(ctx context.Context, f *fsm.FSM) ([]record, error) {
	out := []record{}
	err := f.ExportState(ctx, 0, func(uint64) error { return nil }, func(ps []fsm.Pair) error {
		for _, p := range ps {
			out = append(out, record{p.Key, p.Value})
		}
		return nil
	})
	return out, err
}

func sameRecordList(got, want []record) error {
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i].k, want[i].k) || !bytes.Equal(got[i].v, want[i].v) {
			return fmt.Errorf("record %d: key %x, want %x (or its value differs)", i, got[i].k, want[i].k)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d records, want %d", len(got), len(want))
	}
	return nil
}

// TestBackupRestore: a cluster with --auth (cluster secret, no TLS) holds
// a known data set in all four stores and the generic KV, a token and a
// bot's sealed token; it is backed up through a node that does not lead
// every shard (node-to-node streams) while a writer runs, and the backup
// is restored into a fresh 3-node cluster: every record of every replica
// of every shard is the backup's, the writes acknowledged before the
// backup started are there, the token works there and the bot's token
// decrypts under the same key ring; the cluster id is new, the shard map
// the same.
func TestBackupRestore(t *testing.T) {
	ring := poolsRing(t, "k1")
	// Each shard's stream, after its first chunk, waits for writes to
	// land during the backup.
	var started atomic.Bool
	var during atomic.Int64 // writes acknowledged since the backup started
	src := newTestCluster(t, 3, 4, func(c *Config) {
		c.TokenKeys, c.Auth, c.HTTPAddr = ring, true, freePort(t)
		c.ClusterSecretFile = writeSecret(t, "0123456789abcdef0123456789abcdef-backup-src")
		c.Testing.BackupChunk = func(ctx context.Context, _ shard.ID) error {
			want := during.Load() + 5
			for during.Load() < want && started.Load() && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			return nil
		}
	})
	ctx := ctxT(t, 5*time.Minute)
	var tok *authn.TokenInfo
	waitFor(t, 20*time.Second, "token created", func() error {
		var err error
		tok, err = src.nodes[src.metaLeaderIndex()].CreateToken(ctx, "ops", []string{"*:write", "admin"}, "")
		return err
	})
	eps := func(tc *testCluster) (out []string) {
		for _, n := range tc.nodes {
			out = append(out, n.Addrs().GRPCAddr)
		}
		return out
	}
	waitFor(t, 20*time.Second, "token known on every node", func() error { return src.knowToken(tok.ID) })
	c, err := client.New(ctx, client.Config{Endpoints: eps(src), AttemptTimeout: time.Second, Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The known data set: KV, registry, billing, assets, pools.
	smap := src.nodes[0].smapNow()
	g := newStoresIDs(26)
	kvWant := map[string]string{}
	for i := range 60 {
		rk, k, v := fmt.Sprintf("user-%d", i), fmt.Sprintf("key-%d", i%7), fmt.Sprintf("value-%d", i)
		if err := putUntilKnown(ctx, c, []byte(rk), []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		kvWant[rk+"/"+k] = v
	}
	var agents []*records.AgentRecord
	var accounts []keys.AccountID
	for _, s := range smap.Shards() {
		a := g.agent(g.userOn(smap, s), fmt.Sprintf("agent-%d", s), records.AgentRunning)
		if err := c.Registry().PutAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		acct := &records.Account{UserID: g.accountOn(smap, s), CreatedAt: storesT0, UpdatedAt: storesT0}
		if err := c.Billing().PutAccount(ctx, acct); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Billing().AddCredits(ctx, acct.UserID, 500+int64(s), purchaseOf(acct.UserID, 500+int64(s))); err != nil {
			t.Fatal(err)
		}
		accounts = append(accounts, acct.UserID)
	}
	asset := &client.Asset{ID: "google_search", Version: "1.2.0", Category: "tool", Name: "Google", GithubSHA: "sha1", CreatedAt: 1704067200, UpdatedAt: 1704067200}
	if _, err := c.Assets().Upsert(ctx, asset); err != nil {
		t.Fatal(err)
	}
	pools := c.Pools()
	if _, err := pools.CreatePool(ctx, poolsOwner, client.PoolSpec{PoolID: "bk-pool", Name: "backed up"}); err != nil {
		t.Fatal(err)
	}
	botToken := newPoolsTokens(26).token(40)
	if _, err := pools.RegisterBot(ctx, poolsOwner, client.BotSpec{AgentID: "bk-bot", Token: botToken, PoolID: "bk-pool"}); err != nil {
		t.Fatal(err)
	}

	// A writer runs during the backup.
	var mu sync.Mutex
	var ackedBefore []int // writes acknowledged before the backup started
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Acknowledged with started still false: committed before
			// the backup began.
			err := c.Put(ctx, fmt.Appendf(nil, "w-%d", i), []byte("k"), fmt.Appendf(nil, "%d", i))
			switch {
			case err != nil:
			case !started.Load():
				mu.Lock()
				ackedBefore = append(ackedBefore, i)
				mu.Unlock()
			default:
				during.Add(1)
			}
		}
	}()
	waitFor(t, 20*time.Second, "writes before the backup", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(ackedBefore) < 20 {
			return fmt.Errorf("%d writes", len(ackedBefore))
		}
		return nil
	})
	// The admin node leads no shard: every shard streams to it from
	// another node, under node credentials.
	for _, s := range smap.Shards() {
		if li, _ := src.leaderReplica(s); li == 0 {
			waitFor(t, 20*time.Second, "leadership moved off n1", func() error {
				_, err := src.nodes[0].TransferLeader(ctx, fmt.Sprint(s), "")
				return err
			})
		}
	}
	file := filepath.Join(t.TempDir(), "cluster.swkvbak")
	started.Store(true)
	m, err := backup.Save(ctx, src.backupSource(0, tok.Token), file, backup.Options{Keys: backupKeys})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	srcState, _ := src.nodes[0].LocalState()
	if m.ClusterID != srcState.ClusterID || len(m.Shards) != 4 || len(m.Tokens) != 1 || m.Tokens[0].Hash == "" {
		t.Fatalf("manifest %+v", m)
	}
	t.Logf("backup: %d shards, %d records; writes acknowledged before it %d, during it %d", len(m.Shards), m.Records(), len(ackedBefore), during.Load())
	want, _ := backupRecords(t, file)

	dst := restoredCluster(t, file, 3, func(cfg *Config) {
		cfg.TokenKeys, cfg.Auth = ring, true
		cfg.ClusterSecretFile = writeSecret(t, "0123456789abcdef0123456789abcdef-backup-dst")
	})
	dstState, dstMap := dst.nodes[0].LocalState()
	if dstState.ClusterID == srcState.ClusterID || dstMap.Version != smap.Version || dstMap.Slots != smap.Slots {
		t.Fatalf("restored cluster %s map %+v, source %s map %+v", dstState.ClusterID, dstMap, srcState.ClusterID, smap)
	}
	if len(dstState.Tokens) != 1 || dstState.Tokens[0].ID != tok.ID || dstState.Tokens[0].Hash != srcState.Tokens[0].Hash {
		t.Fatalf("restored tokens %+v", dstState.Tokens)
	}
	// Every replica of every shard holds exactly the backup's records.
	compared := 0
	for _, s := range m.Shards {
		for _, n := range dst.nodes {
			r := n.localReplica(s.Shard)
			if r == nil {
				t.Fatalf("%s holds no replica of shard %d", n.ID(), s.Shard)
			}
			waitFor(t, 30*time.Second, fmt.Sprintf("shard %d on %s", s.Shard, n.ID()), func() error {
				got, err := replicaRecords(ctx, r.FSM())
				if err == nil {
					err = sameRecordList(got, want[s.Shard])
				}
				return err
			})
			compared += len(want[s.Shard])
		}
	}
	t.Logf("records compared: %d (%d per replica set)", compared, m.Records())

	// Through the API, with the source's token.
	waitFor(t, 20*time.Second, "the source's token on every restored node", func() error { return dst.knowToken(tok.ID) })
	dc, err := client.New(ctx, client.Config{Endpoints: eps(dst), AttemptTimeout: time.Second, Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	for rk, v := range kvWant {
		u, k, _ := bytes.Cut([]byte(rk), []byte("/"))
		if got, err := dc.Get(ctx, u, k); err != nil || string(got) != v {
			t.Fatalf("kv %s: %q %v, want %q", rk, got, err, v)
		}
	}
	for _, i := range ackedBefore {
		if got, err := dc.Get(ctx, fmt.Appendf(nil, "w-%d", i), []byte("k")); err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("write %d acknowledged before the backup: %q %v", i, got, err)
		}
	}
	for _, a := range agents {
		got, err := dc.Registry().GetAgentOf(ctx, a.UserID, a.AgentID)
		if err != nil || got.Name != a.Name || got.Status != a.Status {
			t.Fatalf("agent %s: %+v %v", a.Name, got, err)
		}
	}
	for i, acct := range accounts {
		got, err := dc.Billing().GetAccount(ctx, acct)
		if s := smap.ShardOf(acct[:]); err != nil || got.BalanceCents != 500+int64(s) {
			t.Fatalf("account %d: %+v %v", i, got, err)
		}
	}
	if got, err := dc.Assets().Get(ctx, asset.ID); err != nil || got.GithubSHA != "sha1" || got.Name != asset.Name {
		t.Fatalf("asset: %+v %v", got, err)
	}
	if got, err := dc.Pools().GetBotToken(ctx, poolsOwner, "bk-bot"); err != nil || got != botToken {
		t.Fatalf("bot token: %v", err)
	}
	// The restored cluster takes writes.
	if err := putUntilKnown(ctx, dc, []byte("after"), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// TestBackupLeaderCrash: the leader streaming a shard stops mid-backup:
// the backup fails, leaves no file (an older backup at the path stays),
// and the cluster keeps serving, the stopped node rejoining it.
func TestBackupLeaderCrash(t *testing.T) {
	reached := make(chan shard.ID, 1)
	var hold, haltMoves atomic.Bool
	hold.Store(true)
	tc := newTestCluster(t, 3, 1, func(c *Config) {
		c.HTTPAddr = freePort(t)
		c.Testing.AfterMovePhase = func(uint64, string) bool { return haltMoves.Load() }
		c.Testing.BackupChunk = func(ctx context.Context, id shard.ID) error {
			if !hold.Load() {
				return nil
			}
			select {
			case reached <- id:
			default:
			}
			<-ctx.Done() // held until the node stops
			return ctx.Err()
		}
	})
	ctx := ctxT(t, 3*time.Minute)
	c := tc.client()
	val := bytes.Repeat([]byte("x"), 100<<10)
	for i := range 40 { // 4 MiB: several chunks of 1 MiB
		if err := putUntilKnown(ctx, c, fmt.Appendf(nil, "u-%d", i), []byte("k"), val); err != nil {
			t.Fatal(err)
		}
	}
	leader, _ := tc.leaderReplica(0)
	via := (leader + 1) % 3
	dir := t.TempDir()
	file := filepath.Join(dir, "b.swkvbak")
	os.WriteFile(file, []byte("an older backup"), 0o600)
	errc := make(chan error, 1)
	go func() {
		_, err := backup.Save(ctx, tc.backupSource(via, ""), file, backup.Options{Keys: backupKeys})
		errc <- err
	}()
	select {
	case <-reached:
	case err := <-errc:
		t.Fatalf("backup ended before the stream was held: %v", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	tc.stop(leader)
	err := <-errc
	if err == nil {
		t.Fatal("the backup succeeded without its leader")
	}
	t.Logf("backup: %v", err)
	names, _ := os.ReadDir(dir)
	if len(names) != 1 || names[0].Name() != "b.swkvbak" {
		t.Fatalf("dir holds %v", names)
	}
	if b, _ := os.ReadFile(file); string(b) != "an older backup" {
		t.Fatalf("the older backup changed")
	}
	// The cluster serves: a new leader takes writes; the node comes back.
	if err := putUntilKnown(ctx, c, []byte("after"), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, []byte("u-7"), []byte("k")); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	hold.Store(false)
	tc.start(leader)
	tc.waitReady()
	if _, err := backup.Save(ctx, tc.backupSource(leader, ""), file, backup.Options{Keys: backupKeys}); err != nil {
		t.Fatalf("a backup after the restart: %v", err)
	}

	// A split in progress (its mover halted after the plan): refused,
	// nothing written.
	haltMoves.Store(true)
	waitFor(t, 20*time.Second, "split planned", func() error {
		_, err := tc.nodes[tc.metaLeaderIndex()].SplitShard(ctx, 0, nil)
		return err
	})
	before, _ := os.ReadFile(file)
	_, err = backup.Save(ctx, tc.backupSource(via, ""), file, backup.Options{Keys: backupKeys})
	if !errors.Is(err, backup.ErrMoveInProgress) || !strings.Contains(err.Error(), "split of shard 0") {
		t.Fatalf("a backup during a split: %v", err)
	}
	t.Logf("during a split: %v", err)
	if after, _ := os.ReadFile(file); !bytes.Equal(after, before) || len(dirNames(t, dir)) != 1 {
		t.Fatal("a refused backup changed the dir")
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
