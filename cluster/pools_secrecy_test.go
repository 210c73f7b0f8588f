package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
)

// Token secrecy of the pool store: tokens never in data dirs, logs or errors;
// key rotation. Shared helpers are in pools_test.go.

// poolsLeakForms returns the forms in which a token must never be found:
// itself, its hex, and the inner part of its base64 (standard and URL
// alphabets) at each of the 3 alignments it can have in a longer stream.
func poolsLeakForms(token string) map[string][]byte {
	forms := map[string][]byte{"plain": []byte(token), "hex": []byte(hex.EncodeToString([]byte(token)))}
	for off := range 3 {
		in := append(make([]byte, off), token...)
		for name, enc := range map[string]*base64.Encoding{"base64": base64.StdEncoding, "base64url": base64.URLEncoding} {
			s := enc.EncodeToString(in)
			forms[fmt.Sprintf("%s@%d", name, off)] = []byte(s[4 : len(s)-4])
		}
	}
	return forms
}

// poolsCheckNoLeak fails for every form of every token found in data.
func poolsCheckNoLeak(t *testing.T, where string, data []byte, tokens map[string]string) {
	t.Helper()
	for name, tok := range tokens {
		for form, b := range poolsLeakForms(tok) {
			if bytes.Contains(data, b) {
				t.Errorf("%s: token %s found (%s)", where, name, form)
			}
		}
	}
}

// poolsCheckDataDirs walks every node's data dir with every node stopped
// (so Pebble and the Raft log are flushed and closed) and fails if any file
// holds a token. It returns how many files held mustFind (a value that is
// stored in the clear, proving the walk sees the data) and how many files
// it read.
func poolsCheckDataDirs(t *testing.T, tc *testCluster, tokens map[string]string, mustFind string) (found, files int) {
	t.Helper()
	for i := range tc.nodes {
		if tc.nodes[i] != nil {
			t.Fatalf("node %d still running", i)
		}
		err := filepath.WalkDir(tc.cfgs[i].DataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			if bytes.Contains(b, []byte(mustFind)) {
				found++
			}
			poolsCheckNoLeak(t, path, b, tokens)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return found, files
}

// poolsStoredKeyID reads bot agentID's record from every live node's
// replica of the pools shard and returns the key id that sealed its token.
func poolsStoredKeyID(t *testing.T, tc *testCluster, c *client.Client, agentID string) string {
	t.Helper()
	sh := c.ShardOf([]byte("pools"))
	var id string
	waitFor(t, 10*time.Second, "bot record on every replica", func() error {
		ids := map[string]bool{}
		for _, n := range tc.nodes {
			if n == nil {
				continue
			}
			r := n.localReplica(sh)
			if r == nil {
				continue
			}
			v, err := r.FSM().Get(keys.Bot(agentID))
			if err != nil {
				return fmt.Errorf("%s: %w", n.ID(), err)
			}
			var b records.Bot
			if err := records.Decode(v, &b); err != nil {
				return err
			}
			ids[b.Token.KeyID] = true
			id = b.Token.KeyID
		}
		if len(ids) != 1 {
			return fmt.Errorf("key ids %v across replicas", ids)
		}
		return nil
	})
	return id
}

// TestPoolsTokenSecrecy registers bots with distinctive tokens (and sends
// tokens in refused calls), forces snapshots, stops every node and checks
// that no file of any data dir, no log line and no error message holds a
// token. Then it rotates the key ring (k1 -> k2,k1 -> k2): old tokens stay
// readable while k1 is in the ring, new tokens are sealed with k2, and an
// update with a token re-seals a bot whose key was dropped.
func TestPoolsTokenSecrecy(t *testing.T) {
	logs := &syncBuffer{}
	tc := newPoolsCluster(t, poolsRing(t, "k1"), func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test_node", c.ID)
		// Snapshots soon and often, the whole log kept: both hold the bots.
		c.SnapshotThreshold = 8
		c.SnapshotInterval = 50 * time.Millisecond
	})
	ctx := ctxT(t, 4*time.Minute)
	c := tc.client()
	p := c.Pools()
	toks := newPoolsTokens(0x5ec)
	tokens := map[string]string{}
	newToken := func(name string, n int) string { tokens[name] = toks.token(n); return tokens[name] }
	var errs []error
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: succeeded, want an error", what)
		}
		errs = append(errs, err)
	}
	waitDefaultPool(t, ctx, p)

	for _, s := range []struct {
		owner string
		spec  client.PoolSpec
	}{
		{poolsOwner, client.PoolSpec{PoolID: "sec-pub", Name: "pub"}},
		{poolsOwner, client.PoolSpec{PoolID: "sec-priv", Name: "priv", Visibility: records.VisibilityPrivate}},
	} {
		if _, err := p.CreatePool(ctx, s.owner, s.spec); err != nil {
			t.Fatal(err)
		}
	}
	reg := func(actor, agent, pool, token string) {
		t.Helper()
		if _, err := p.RegisterBot(ctx, actor, client.BotSpec{AgentID: agent, Token: token, ClientID: "app-" + agent, PoolID: pool}); err != nil {
			t.Fatalf("register %s: %v", agent, err)
		}
	}
	reg(poolsOwner, "sec-bot-a", "sec-pub", newToken("a", 32))
	reg(poolsOther, "sec-bot-b", "sec-pub", newToken("b-old", 32))
	reg(poolsOwner, "sec-bot-c", "sec-priv", newToken("c", 32))
	if _, err := p.UpdateBot(ctx, poolsOther, client.BotSpec{AgentID: "sec-bot-b", Token: newToken("b", 32), PoolID: "sec-pub"}); err != nil {
		t.Fatal(err)
	}
	// Tokens sent in calls that are refused.
	refused("register a taken agent id", errOf(p.RegisterBot(ctx, poolsOther, client.BotSpec{AgentID: "sec-bot-a", Token: newToken("dup", 32), PoolID: "sec-pub"})))
	refused("register into another's private pool", errOf(p.RegisterBot(ctx, poolsOther, client.BotSpec{AgentID: "sec-bot-x", Token: newToken("priv", 32), PoolID: "sec-priv"})))
	refused("register into a missing pool", errOf(p.RegisterBot(ctx, poolsOther, client.BotSpec{AgentID: "sec-bot-y", Token: newToken("missing", 32), PoolID: "sec-none"})))
	refused("update another's bot", errOf(p.UpdateBot(ctx, poolsThird, client.BotSpec{AgentID: "sec-bot-a", Token: newToken("upd", 32), PoolID: "sec-pub"})))
	// Refused by the client's own checks, and printed.
	spec := client.BotSpec{AgentID: "sec-bot-z", Token: newToken("client-checked", 32), PoolID: "sec-pub", Profile: "{not json"}
	refused("client-checked profile", errOf(p.RegisterBot(ctx, poolsOwner, spec)))
	spec.Profile, spec.Status = "", 7
	refused("client-checked status", errOf(p.UpdateBot(ctx, poolsOwner, spec)))
	errs = append(errs, fmt.Errorf("printed: %v %+v %#v %s", spec, spec, spec, spec))
	for name, bot := range map[string]*rpc.Bot{
		// The server's own checks, past the client's.
		"bad-profile": {AgentId: "sec-bot-z", PoolId: "sec-pub", Profile: "{not json", Token: newToken("bad-profile", 32)},
		"too-long":    {AgentId: "sec-bot-z", PoolId: "sec-pub", Token: newToken("too-long", 3000)},
		"bad-status":  {AgentId: "sec-bot-z", PoolId: "sec-pub", Status: 9, Token: newToken("bad-status", 32)},
		"bad-id":      {AgentId: "sec bot", PoolId: "sec-pub", Token: newToken("bad-id", 32)},
	} {
		refused("raw register "+name, poolsRaw(ctx, c, func(ctx context.Context, pc rpc.PoolsClient) error {
			_, err := pc.RegisterBot(ctx, &rpc.RegisterBotRequest{Actor: poolsOther, Bot: bot})
			return err
		}))
	}
	for name, agent := range map[string]string{"a": "sec-bot-a", "b": "sec-bot-b", "c": "sec-bot-c"} {
		got, err := p.GetBotToken(ctx, poolsOwner, agent)
		if err != nil || got != tokens[name] {
			t.Fatalf("GetBotToken(%s): wrong token or %v", agent, err)
		}
	}
	refused("token as a third user", errOf(p.GetBotToken(ctx, poolsThird, "sec-bot-a")))
	if got := poolsStoredKeyID(t, tc, c, "sec-bot-a"); got != "k1" {
		t.Errorf("sec-bot-a sealed with key %q, want k1", got)
	}

	// Enough further commands for snapshots after the registrations, on
	// every replica of the pools shard.
	sh := c.ShardOf([]byte("pools"))
	applied := tc.nodes[max(tc.leaderOf(sh), 0)].localReplica(sh).FSM().AppliedIndex()
	for i := range 20 {
		if _, err := p.Heartbeat(ctx, fmt.Sprintf("sec-runner-%d", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "snapshots past the registrations", func() error {
		for _, n := range tc.nodes {
			if r := n.localReplica(sh); r != nil {
				if s, _ := strconv.ParseUint(r.Raft().Stats()["last_snapshot_index"], 10, 64); s < applied {
					return fmt.Errorf("%s: last snapshot %d < %d", n.ID(), s, applied)
				}
			}
		}
		return nil
	})

	for i := range tc.nodes {
		tc.stop(i)
	}
	found, files := poolsCheckDataDirs(t, tc, tokens, "sec-bot-a")
	if found == 0 {
		t.Errorf("no file of %d holds the agent id sec-bot-a: the walk does not see the data", files)
	}
	t.Logf("data dirs: %d files checked, %d hold the agent id sec-bot-a", files, found)

	// Rotation: k2 first, k1 still readable.
	poolsRestartAll(tc, func(c *Config) { c.TokenKeys = poolsRing(t, "k2", "k1") })
	c = tc.client()
	p = c.Pools()
	for name, agent := range map[string]string{"a": "sec-bot-a", "b": "sec-bot-b", "c": "sec-bot-c"} {
		got, err := p.GetBotToken(ctx, poolsOwner, agent)
		if err != nil || got != tokens[name] {
			t.Errorf("after rotation, GetBotToken(%s): wrong token or %v", agent, err)
		}
	}
	reg(poolsOwner, "sec-bot-d", "sec-pub", newToken("d", 32))
	if got, err := p.GetBotToken(ctx, poolsOwner, "sec-bot-d"); err != nil || got != tokens["d"] {
		t.Errorf("GetBotToken(sec-bot-d): wrong token or %v", err)
	}
	if a, d := poolsStoredKeyID(t, tc, c, "sec-bot-a"), poolsStoredKeyID(t, tc, c, "sec-bot-d"); a != "k1" || d != "k2" {
		t.Errorf("sealed with %q (old bot) and %q (new bot), want k1 and k2", a, d)
	}

	// k1 dropped: its tokens no longer open, k2's do; an update with a
	// token re-seals the old bot under k2.
	poolsRestartAll(tc, func(c *Config) { c.TokenKeys = poolsRing(t, "k2") })
	c = tc.client()
	p = c.Pools()
	if got, err := p.GetBotToken(ctx, poolsOwner, "sec-bot-d"); err != nil || got != tokens["d"] {
		t.Errorf("k2 only, GetBotToken(sec-bot-d): wrong token or %v", err)
	}
	refused("token sealed with a dropped key", errOf(p.GetBotToken(ctx, poolsOwner, "sec-bot-a")))
	if _, err := p.UpdateBot(ctx, poolsOwner, client.BotSpec{AgentID: "sec-bot-a", Token: newToken("a2", 32), PoolID: "sec-pub"}); err != nil {
		t.Fatal(err)
	}
	if got, err := p.GetBotToken(ctx, poolsOwner, "sec-bot-a"); err != nil || got != tokens["a2"] {
		t.Errorf("GetBotToken after re-sealing: wrong token or %v", err)
	}
	if got := poolsStoredKeyID(t, tc, c, "sec-bot-a"); got != "k2" {
		t.Errorf("re-sealed with %q, want k2", got)
	}

	for i := range tc.nodes {
		tc.stop(i)
	}
	if found, files := poolsCheckDataDirs(t, tc, tokens, "sec-bot-d"); found == 0 {
		t.Errorf("no file of %d holds the agent id sec-bot-d: the walk does not see the data", files)
	}
	out := logs.String()
	if !strings.Contains(out, "test_node=n1") {
		t.Fatalf("captured no logs of n1 (%d bytes)", len(out))
	}
	poolsCheckNoLeak(t, "the node logs", []byte(out), tokens)
	for i, err := range errs {
		if err != nil { // the message itself is not printed: it may be the leak
			poolsCheckNoLeak(t, fmt.Sprintf("error message %d", i), []byte(err.Error()), tokens)
		}
	}
	t.Logf("checked %d tokens against %d bytes of logs and %d error messages", len(tokens), len(out), len(errs))
}
