package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/transport"
)

// writeSecret writes a cluster secret file (0600) and returns its path.
func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster-secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// raftServers returns the Raft configuration of group (a shard, or
// MetaGroup) on node n, sorted by id.
func raftServers(t *testing.T, n *Node, group uint32) []raft.Server {
	t.Helper()
	tr := n.raftOf(group)
	if tr == nil {
		t.Fatalf("%s has no replica of group %d", n.ID(), group)
	}
	f := tr.(*raft.Raft).GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	s := slices.Clone(f.Configuration().Servers)
	slices.SortFunc(s, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return s
}

// raftProbe sends one harmless AppendEntries (term 0: refused by any
// replica, changing nothing) to group at addr through a Mux of cfg, and
// reports whether a Raft replica answered.
func raftProbe(t *testing.T, cfg transport.MuxConfig, group uint32, addr string) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = ln
	m, err := transport.NewMux(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Layer(group, 0)
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 1, Timeout: 3 * time.Second, Logger: hclog.NewNullLogger()})
	defer trans.Close()
	var resp raft.AppendEntriesResponse
	req := raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte(ln.Addr().String())}, Term: 0}
	if err := trans.AppendEntries(raft.ServerID("x"), raft.ServerAddress(addr), &req, &resp); err != nil {
		return err
	}
	if resp.Term == 0 {
		return errors.New("answer without a term")
	}
	return nil
}

// TestAuthWithoutTLSRefusesAnonymousNodeCalls (issue 22 item 1): a node
// with --auth and no TLS refuses an anonymous Admin/ChangeReplica (and a
// forged node credential) with PermissionDenied, leaving the shard and meta
// configurations and the cluster state unchanged; its Raft port serves no
// Raft RPC to a connection without the cluster secret.
func TestAuthWithoutTLSRefusesAnonymousNodeCalls(t *testing.T) {
	tc := newTestCluster(t, 1, 2, func(c *Config) { c.Auth = true })
	n1 := tc.nodes[0]
	ctx := ctxT(t, 30*time.Second)

	// A one-node cluster made its own secret, 0600, and keeps it.
	secretFile := filepath.Join(tc.cfgs[0].DataDir, "cluster-secret")
	if st, err := os.Stat(secretFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("generated secret: %v %v", st, err)
	}
	secret, err := authn.ReadClusterSecret(secretFile)
	if err != nil || !slices.Equal(secret, n1.secret) {
		t.Fatalf("secret in use is not the file's: %v", err)
	}

	var before *State
	waitFor(t, 10*time.Second, "meta state", func() error {
		before, err = n1.fetchMeta(ctx)
		return err
	})
	metaBefore, shardBefore := raftServers(t, n1, MetaGroup), raftServers(t, n1, 0)

	cc, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	admin := rpc.NewAdminClient(cc)
	evil := freePort(t)
	for _, meta := range []bool{true, false} {
		_, err := admin.ChangeReplica(ctx, &rpc.ChangeReplicaRequest{Meta: meta, Shard: 0, Change: rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, NodeId: "evil", RaftAddr: evil})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("anonymous ChangeReplica (meta %v): %v, want PermissionDenied", meta, err)
		}
	}
	if _, err := admin.MetaState(ctx, &rpc.MetaStateRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("anonymous MetaState: %v, want PermissionDenied", err)
	}
	// A credential made with another secret, or for another method, is no
	// better.
	wrong := []byte(strings.Repeat("x", 40))
	cc2, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(transport.NodeCredUnary(wrong, "n1")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if _, err := rpc.NewAdminClient(cc2).ChangeReplica(ctx, &rpc.ChangeReplicaRequest{Meta: true, Change: rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, NodeId: "evil", RaftAddr: evil}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ChangeReplica with a forged credential: %v, want PermissionDenied", err)
	}
	// (transport's TestNodeCredScope: a credential of another method, or an
	// hour old, does not pass either.)

	after, err := n1.fetchMeta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Epoch != before.Epoch || len(after.Nodes) != 1 || !slices.Equal(after.MetaLearners, before.MetaLearners) {
		t.Fatalf("cluster state changed: epoch %d -> %d, nodes %v, meta learners %v", before.Epoch, after.Epoch, after.Nodes, after.MetaLearners)
	}
	if got := raftServers(t, n1, MetaGroup); !slices.Equal(got, metaBefore) {
		t.Fatalf("meta configuration changed: %v -> %v", metaBefore, got)
	}
	if got := raftServers(t, n1, 0); !slices.Equal(got, shardBefore) {
		t.Fatalf("shard 0 configuration changed: %v -> %v", shardBefore, got)
	}

	// The Raft port: no Raft RPC without the secret, nor with a wrong one;
	// with the secret (and a member's id) the replica answers.
	raftAddr := n1.Addrs().RaftAddr
	if err := raftProbe(t, transport.MuxConfig{}, MetaGroup, raftAddr); err == nil {
		t.Fatal("raft port served an AppendEntries without the cluster secret")
	}
	if err := raftProbe(t, transport.MuxConfig{Secret: wrong, LocalID: "n1"}, MetaGroup, raftAddr); err == nil {
		t.Fatal("raft port served an AppendEntries with a wrong secret")
	}
	if err := raftProbe(t, transport.MuxConfig{Secret: secret, LocalID: "n1"}, MetaGroup, raftAddr); err != nil {
		t.Fatalf("raft probe with the secret: %v", err)
	}
	// A raw connection with the plain header is closed unanswered.
	raw, err := net.Dial("tcp", raftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	raw.Write(append([]byte("SW\xff\xff\xff\xff"), make([]byte, 64)...)) // the plain header of MetaGroup
	if n, err := raw.Read(make([]byte, 1)); err == nil || n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("raw connection with a plain header: read %d, %v; want it closed", n, err)
	}
}

// TestAuthWithoutTLSCluster: a 3-node loopback cluster with --auth and a
// shared cluster secret forms, serves a token's writes and reads, and
// moves a leadership (node-to-node Admin calls); a node with another
// secret is not heard on the Raft port.
func TestAuthWithoutTLSCluster(t *testing.T) {
	secretFile := writeSecret(t, "0123456789abcdef0123456789abcdef-test-secret")
	tc := newTestCluster(t, 3, 2, func(c *Config) { c.Auth = true; c.ClusterSecretFile = secretFile; c.HTTPAddr = freePort(t) })
	ctx := ctxT(t, 60*time.Second)
	// The operator's first token, signed with the cluster secret, made
	// through a node that does not lead the meta group: forwarded with
	// the signature to the leader, which checks it again.
	secret, err := authn.ReadClusterSecret(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "signed token create through a follower", func() error {
		li := tc.metaLeaderIndex()
		if m := tc.nodes[li].metaReplica(); m == nil || m.Leader() != tc.nodes[li].ID() {
			return errors.New("no meta leader yet")
		}
		follower := tc.nodes[(li+1)%3]
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+follower.Addrs().HTTPAddr+"/v1/tokens", strings.NewReader(`{"name": "ops", "roles": ["admin"]}`))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", authn.AdminSecretAuth(secret, "POST", "/v1/tokens", "", time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"token": "swk_`) {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		return nil
	})
	var tok *authn.TokenInfo
	waitFor(t, 20*time.Second, "token created", func() error {
		var err error
		tok, err = tc.nodes[0].CreateToken(ctx, "app", []string{"kv:write"}, "")
		if errors.Is(err, errMetaNotLeader) {
			tok, err = tc.nodes[tc.metaLeaderIndex()].CreateToken(ctx, "app", []string{"kv:write"}, "")
		}
		return err
	})
	var eps []string
	for _, n := range tc.nodes {
		eps = append(eps, n.Addrs().GRPCAddr)
	}
	// The sync loop spreads the token: every node must know it before any
	// call, as a call may reach any of them (a client that connected
	// through one node proved only that one knows it: CI once saw the get
	// below refused by another).
	waitFor(t, 20*time.Second, "token known on every node", func() error { return tc.knowToken(tok.ID) })
	c, err := client.New(ctx, client.Config{Endpoints: eps, AttemptTimeout: time.Second, Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 20*time.Second, "write with the token", func() error {
		return putUntilKnown(ctx, c, []byte("alice"), []byte("k"), []byte("v"))
	})
	if v, err := c.Get(ctx, []byte("alice"), []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("get: %q %v", v, err)
	}
	// A leadership transfer through a follower: Admin calls between nodes.
	li, _ := tc.leaderReplica(0)
	from := (li + 1) % 3
	to := tc.cfgs[(li+2)%3].ID
	waitFor(t, 20*time.Second, "leadership moved", func() error {
		l, err := tc.nodes[from].TransferLeader(ctx, "0", to)
		if err == nil && l != to {
			err = fmt.Errorf("leader %s", l)
		}
		return err
	})
	// Another secret: the Raft port refuses it.
	other := []byte(strings.Repeat("y", 40))
	if err := raftProbe(t, transport.MuxConfig{Secret: other, LocalID: "n2"}, 0, tc.nodes[0].Addrs().RaftAddr); err == nil {
		t.Fatal("raft port answered a node with another secret")
	}
}

// metaLeaderIndex returns the index of the node leading the meta group, or 0.
func (tc *testCluster) metaLeaderIndex() int {
	for i, n := range tc.nodes {
		if n != nil {
			if m := n.metaReplica(); m != nil && m.Leader() == n.ID() {
				return i
			}
		}
	}
	return 0
}

// TestClusterSecretFile: a node that joins others needs a cluster secret
// file, one with auth only and without TLS, and a node refuses to start
// with a file others may read (the file's own checks:
// authn.TestReadClusterSecret).
func TestClusterSecretFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(strings.Repeat("s", 32)+"\n"), 0o600)
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte(strings.Repeat("s", 40)), 0o640)

	base := Config{ID: "n1", DataDir: t.TempDir(), Auth: true}
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"auth loopback, lone node", func(*Config) {}, true},
		{"auth joining without a secret", func(c *Config) { c.Join = []string{"127.0.0.1:7203"} }, false},
		{"auth joining with a secret", func(c *Config) { c.Join = []string{"127.0.0.1:7203"}; c.ClusterSecretFile = good }, true},
		{"secret without auth", func(c *Config) { c.Auth = false; c.ClusterSecretFile = good }, false},
		{"secret with tls", func(c *Config) {
			c.TLS = transport.TLSFiles{CAFile: "ca", CertFile: "cert", KeyFile: "key"}
			c.ClusterSecretFile = good
		}, false},
	} {
		c := base
		tt.mod(&c)
		if err := c.WithDefaults().Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	// A node refuses to start with an open secret file.
	cfg := base
	cfg.ClusterSecretFile = open
	cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = freePort(t), freePort(t), freePort(t)
	if n, err := New(cfg); !errors.Is(err, authn.ErrClusterSecret) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("start with a group-readable secret: %v", err)
	}
}

// TestInsecureAuthRefused (issue 22 item 1): --auth without TLS is refused
// on a non-loopback listener even with --insecure.
func TestInsecureAuthRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7100", "10.1.2.3:7100", ":7100"} {
		c := Config{ID: "n1", DataDir: t.TempDir(), Auth: true, Insecure: true, GRPCAddr: addr}
		err := c.WithDefaults().Validate()
		if !errors.Is(err, ErrInsecure) || !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--auth") {
			t.Errorf("--insecure --auth on %s: %v, want one line refusing --auth", addr, err)
		}
	}
	c := Config{ID: "n1", DataDir: t.TempDir(), Insecure: true, GRPCAddr: "0.0.0.0:7100"}
	if err := c.WithDefaults().Validate(); err != nil {
		t.Errorf("--insecure without --auth: %v", err)
	}
}

// TestRemovedNodeCertificateRefused (issue 22 item 3): a node joined with
// its certificate and then removed can no longer use that certificate: the
// Raft port closes its connections, Admin calls are PermissionDenied (but
// MetaState, which tells it only that it was removed), and so are client
// calls; restarted from its data dir it learns it was removed and stops;
// the remaining cluster keeps working.
func TestRemovedNodeCertificateRefused(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 3, ca, fastMembership)
	ctx := ctxT(t, 150*time.Second)
	n4 := tc.add("n4", func(c *Config) { c.TLS = ca.node("n4"); c.HTTPAddr = freePort(t) })
	waitFor(t, 20*time.Second, "n4 admitted", func() error {
		_, err := tc.nodes[0].JoinNode(ctx, "n4")
		return err
	})
	waitFor(t, 90*time.Second, "n4 holds replicas", func() error {
		st, err := tc.nodes[0].fetchMeta(ctx)
		if err != nil {
			return err
		}
		if st.ReplicaCount("n4") == 0 {
			return errors.New("n4 holds no replica yet")
		}
		return tc.nodes[n4].Ready()
	})
	n4TLS, err := transport.LoadNodeTLS(tc.cfgs[n4].TLS, "n4", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	n2TLS, err := transport.LoadNodeTLS(tc.cfgs[1].TLS, "n2", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	n1 := tc.nodes[0]
	raftAddr := n1.Addrs().RaftAddr
	// While a member, n4's certificate is heard.
	if err := raftProbe(t, transport.MuxConfig{ServerTLS: n4TLS.ServerConfig(true), ClientTLS: n4TLS.PeerConfig()}, MetaGroup, raftAddr); err != nil {
		t.Fatalf("raft probe as member n4: %v", err)
	}

	if _, err := n1.RemoveNode(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "n4 removed", func() error {
		for i := range 3 {
			n := tc.nodes[i]
			n.mu.RLock()
			st := n.mu.state
			n.mu.RUnlock()
			if st == nil || st.Status("n4") != StatusRemoved {
				return fmt.Errorf("%s: n4 not yet removed", tc.cfgs[i].ID)
			}
		}
		return nil
	})
	tc.stop(n4)

	// Raft: refused; another member's certificate is still heard.
	if err := raftProbe(t, transport.MuxConfig{ServerTLS: n4TLS.ServerConfig(true), ClientTLS: n4TLS.PeerConfig()}, MetaGroup, raftAddr); err == nil {
		t.Fatal("raft port answered removed node n4")
	}
	if err := raftProbe(t, transport.MuxConfig{ServerTLS: n2TLS.ServerConfig(true), ClientTLS: n2TLS.PeerConfig()}, MetaGroup, raftAddr); err != nil {
		t.Fatalf("raft probe as member n2: %v", err)
	}

	// Admin: refused, but for MetaState, which holds n4's own record only.
	cc, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(n4TLS.PeerConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	admin := rpc.NewAdminClient(cc)
	before := raftServers(t, n1, MetaGroup)
	_, err = admin.ChangeReplica(ctx, &rpc.ChangeReplicaRequest{Meta: true, Change: rpc.ReplicaChange_REPLICA_CHANGE_ADD_NONVOTER, NodeId: "n4", RaftAddr: tc.cfgs[n4].RaftAddr})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("ChangeReplica as removed n4: %v, want PermissionDenied", err)
	}
	if got := raftServers(t, n1, MetaGroup); !slices.Equal(got, before) {
		t.Fatalf("meta configuration changed: %v -> %v", before, got)
	}
	if _, err := admin.ReplicaStatus(ctx, &rpc.ReplicaStatusRequest{Meta: true}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ReplicaStatus as removed n4: %v, want PermissionDenied", err)
	}
	resp, err := admin.MetaState(ctx, &rpc.MetaStateRequest{})
	if err != nil {
		t.Fatalf("MetaState as removed n4: %v", err)
	}
	st, err := decodeState(resp.StateJson)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 1 || st.Status("n4") != StatusRemoved || len(st.Tokens) != 0 || len(st.Shards) != 0 || len(st.MetaVoters) != 0 {
		t.Fatalf("MetaState as removed n4 tells too much: %s", resp.StateJson)
	}
	// A member still gets the whole state.
	cc2, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(n2TLS.PeerConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if resp, err := rpc.NewAdminClient(cc2).MetaState(ctx, &rpc.MetaStateRequest{}); err != nil {
		t.Fatal(err)
	} else if st, err := decodeState(resp.StateJson); err != nil || len(st.Nodes) != 4 {
		t.Fatalf("MetaState as member n2: %v nodes, %v", st, err)
	}

	// The client API: n4's certificate grants nothing any more.
	_, err = rpc.NewKVClient(cc).Put(ctx, &rpc.PutRequest{RoutingKey: []byte("u"), Key: []byte("k"), Value: []byte("v")})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("KV Put as removed n4: %v, want PermissionDenied", err)
	}
	hc := &tlsHTTP{cfg: n4TLS.PeerConfig()}
	if code, _, err := hc.do("GET", "https://"+n1.Addrs().HTTPAddr+"/v1/state", nil); err != nil || code != 403 {
		t.Fatalf("admin HTTP as removed n4: %d %v, want 403", code, err)
	}

	// Restarted from its data dir (which still says it is a member), n4
	// learns that it was removed and refuses to serve.
	tc.start(n4)
	waitFor(t, 30*time.Second, "restarted n4 refused", func() error {
		if err := tc.nodes[n4].Ready(); !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "was removed") {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	tc.stop(n4)

	// The remaining cluster works.
	c, err := tlsClient(t, tc, client.Config{TLS: ca.client("ops", "*:write")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		rk := []byte(fmt.Sprintf("after-%d", i))
		if err := putUntilKnown(ctx, c, rk, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, rk, []byte("k")); err != nil || string(v) != "v" {
			t.Fatalf("read back %q %v", v, err)
		}
	}
}

// TestSplitAuthWithoutTLS: under --auth with a cluster secret, a split
// completes: the target's leader pulls the frozen slots over a
// node-to-node stream (Admin.ExportSlots), which carries the node
// credential (transport.NodeCredStream; without it the stream was
// refused and the move stayed frozen).
func TestSplitAuthWithoutTLS(t *testing.T) {
	secretFile := writeSecret(t, "0123456789abcdef0123456789abcdef-split-secret")
	tc := newTestCluster(t, 3, 1, func(c *Config) { c.Auth = true; c.ClusterSecretFile = secretFile })
	ctx := ctxT(t, 2*time.Minute)
	waitFor(t, 20*time.Second, "split planned", func() error {
		_, err := tc.nodes[tc.metaLeaderIndex()].SplitShard(ctx, 0, nil)
		return err
	})
	tc.waitMovesDone(ctx, 90*time.Second)
	waitFor(t, 20*time.Second, "two shards in the committed map", func() error {
		st, err := tc.nodes[0].adminMeta(ctx)
		if err != nil {
			return err
		}
		if m, err := st.Map(); err != nil || len(m.Shards()) != 2 {
			return fmt.Errorf("map %v: %v", m, err)
		}
		return nil
	})
}
