package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/internal/pki"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/transport"
)

// testCA is a CA in a temp dir that issues node and client certificates.
type testCA struct {
	t   testing.TB
	dir string
	ca  *pki.CA
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	return &testCA{t: t, dir: dir, ca: ca}
}

func (c *testCA) caFile() string { return filepath.Join(c.dir, "ca.pem") }

// node issues a node certificate for id and returns the node's TLSFiles.
func (c *testCA) node(id string) transport.TLSFiles {
	c.t.Helper()
	p, err := c.ca.Issue(pki.Request{Node: id, Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pki.WriteFiles(c.dir, id, p); err != nil {
		c.t.Fatal(err)
	}
	return transport.TLSFiles{CAFile: c.caFile(), CertFile: filepath.Join(c.dir, id+".pem"), KeyFile: filepath.Join(c.dir, id+"-key.pem")}
}

// client returns a client TLS config trusting the CA, with a client
// certificate for name (none when name is "").
func (c *testCA) client(name string, roles ...string) *tls.Config {
	c.t.Helper()
	cert, key := "", ""
	if name != "" {
		p, err := c.ca.Issue(pki.Request{Client: name, Roles: roles})
		if err != nil {
			c.t.Fatal(err)
		}
		if err := pki.WriteFiles(c.dir, "client-"+name, p); err != nil {
			c.t.Fatal(err)
		}
		cert, key = filepath.Join(c.dir, "client-"+name+".pem"), filepath.Join(c.dir, "client-"+name+"-key.pem")
	}
	tc, err := client.LoadTLS(c.caFile(), cert, key)
	if err != nil {
		c.t.Fatal(err)
	}
	return tc
}

// newTLSCluster is newTestCluster with every node on certificates of ca.
func newTLSCluster(t *testing.T, n int, ca *testCA, tweak func(*Config)) *testCluster {
	return newTestCluster(t, n, 2, func(c *Config) {
		c.TLS = ca.node(c.ID)
		c.HTTPAddr = freePort(t)
		if tweak != nil {
			tweak(c)
		}
	})
}

func tlsClient(t *testing.T, tc *testCluster, cfg client.Config) (*client.Client, error) {
	t.Helper()
	for _, n := range tc.nodes {
		if n != nil {
			cfg.Endpoints = append(cfg.Endpoints, n.Addrs().GRPCAddr)
		}
	}
	cfg.AttemptTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestTLSClusterServesOverMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 3, ca, nil)
	c, err := tlsClient(t, tc, client.Config{TLS: ca.client("ops", "admin", "*:write")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := putUntilKnown(ctx, c, []byte("alice"), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, []byte("alice"), []byte("k"))
	if err != nil || string(v) != "v" {
		t.Fatalf("get: %q %v", v, err)
	}

	// A plaintext client cannot talk to a TLS node.
	if _, err := tlsClient(t, tc, client.Config{}); err == nil {
		t.Fatal("plaintext client connected to a TLS cluster")
	}
	// A client trusting another CA refuses the nodes' certificates.
	other := newTestCA(t)
	if _, err := tlsClient(t, tc, client.Config{TLS: other.client("")}); err == nil {
		t.Fatal("client trusting another CA connected")
	}

	// The admin HTTP API speaks https only.
	hc := &tlsHTTP{cfg: ca.client("")}
	if code, err := hc.get("https://" + tc.nodes[0].Addrs().HTTPAddr + "/readyz"); err != nil || code != 200 {
		t.Fatalf("https readyz: %d %v", code, err)
	}
	if _, err := (&tlsHTTP{}).get("http://" + tc.nodes[0].Addrs().HTTPAddr + "/readyz"); err == nil {
		// net/http answers a plaintext request to a TLS server with 400, which
		// counts as refused too; only a 200 would be wrong.
		if code, _ := (&tlsHTTP{}).get("http://" + tc.nodes[0].Addrs().HTTPAddr + "/readyz"); code == 200 {
			t.Fatal("plaintext HTTP served by a TLS node")
		}
	}
}

func TestTLSRefusesNodeOfAnotherCA(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 1, ca, nil)
	n1 := tc.nodes[0]
	other := newTestCA(t)
	intruder, err := transport.LoadNodeTLS(other.node("n9"), "n9", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}

	// The Raft port: the handshake fails in both directions.
	raw, err := net.Dial("tcp", n1.Addrs().RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, intruder.PeerConfig())
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	err = conn.Handshake()
	if err == nil { // TLS 1.3: the server's refusal of our certificate arrives with the first read
		conn.Write([]byte("SW\xff\xff\xff\xff")) // the plain header of MetaGroup
		_, err = conn.Read(make([]byte, 1))
	}
	conn.Close()
	if err == nil {
		t.Fatal("raft port accepted a node certificate of another CA")
	}
	// Through a Mux configured with the foreign identity, as a node would dial.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	m, err := transport.NewMux(transport.MuxConfig{Listener: ln, ServerTLS: intruder.ServerConfig(true), ClientTLS: intruder.PeerConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, _ := m.Layer(MetaGroup, 0)
	if c, err := l.Dial(raft.ServerAddress(n1.Addrs().RaftAddr), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("mux dial with a foreign CA succeeded")
	}

	// Node-to-node gRPC: the Admin service refuses it.
	cc, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(intruder.PeerConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rpc.NewAdminClient(cc).MetaState(ctx, &rpc.MetaStateRequest{}); err == nil {
		t.Fatal("admin call with a foreign node certificate succeeded")
	}
	// A client certificate of the right CA is not a node certificate.
	cc2, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(ca.client("mallory", "admin"))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if _, err := rpc.NewAdminClient(cc2).MetaState(ctx, &rpc.MetaStateRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("admin call with a client certificate: %v, want PermissionDenied", err)
	}

	// A node whose certificate names another id does not start.
	cfg := tc.cfgs[0]
	cfg.DataDir = t.TempDir()
	cfg.ID = "n2"
	cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr, cfg.HTTPAddr = freePort(t), freePort(t), freePort(t), ""
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), `bound to node "n1"`) {
		t.Fatalf("node with another node's certificate: %v", err)
	}
}

func TestTLSCertificateReload(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 1, ca, nil)
	n1 := tc.nodes[0]
	serial := func() (string, error) {
		c, err := tls.Dial("tcp", n1.Addrs().GRPCAddr, &tls.Config{RootCAs: ca.client("").RootCAs, NextProtos: []string{"h2"}, ServerName: "127.0.0.1"})
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	before, err := serial()
	if err != nil {
		t.Fatal(err)
	}
	files := ca.node("n1") // a new certificate over the old files
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	want := cert.Leaf.SerialNumber.String()
	if want == before {
		t.Fatal("same serial")
	}
	// Make sure the modification time moves even on coarse clocks.
	future := time.Now().Add(2 * time.Second)
	os.Chtimes(files.CertFile, future, future)
	os.Chtimes(files.KeyFile, future, future)
	waitFor(t, 10*time.Second, "new certificate served", func() error {
		got, err := serial()
		if err != nil {
			return err
		}
		if got != want {
			return errors.New("still the old certificate")
		}
		return nil
	})
	// A broken file keeps the current certificate.
	os.WriteFile(files.CertFile, []byte("garbage"), 0o644)
	future = future.Add(2 * time.Second)
	os.Chtimes(files.CertFile, future, future)
	time.Sleep(transport.TLSReloadEvery + 100*time.Millisecond) // let a reload attempt happen
	if got, err := serial(); err != nil || got != want {
		t.Fatalf("after a broken file: %s %v", got, err)
	}
}

func TestSecureByDefault(t *testing.T) {
	base := Config{ID: "n1", DataDir: t.TempDir()}
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"loopback defaults", func(*Config) {}, true},
		{"localhost", func(c *Config) { c.GRPCAddr = "localhost:0" }, true},
		{"all interfaces grpc", func(c *Config) { c.GRPCAddr = "0.0.0.0:7100" }, false},
		{"empty host http", func(c *Config) { c.HTTPAddr = ":7102" }, false},
		{"public redis", func(c *Config) { c.RedisAddr = "10.1.2.3:6379" }, false},
		{"public raft insecure", func(c *Config) { c.RaftAddr = "0.0.0.0:7101"; c.Insecure = true }, true},
		{"tls without gossip key", func(c *Config) {
			c.TLS = transport.TLSFiles{CAFile: "ca", CertFile: "cert", KeyFile: "key"}
			c.GossipAddr = "0.0.0.0:7103"
		}, false},
		{"tls with gossip key", func(c *Config) {
			c.TLS = transport.TLSFiles{CAFile: "ca", CertFile: "cert", KeyFile: "key"}
			c.GossipAddr = "0.0.0.0:7103"
			c.GossipKeys = [][]byte{make([]byte, 32)}
		}, true},
		{"half tls", func(c *Config) { c.TLS = transport.TLSFiles{CAFile: "ca"} }, false},
	} {
		c := base
		tt.mod(&c)
		err := c.WithDefaults().Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
		if err != nil && strings.Contains(tt.name, "public") || strings.Contains(tt.name, "interfaces") {
			if !errors.Is(err, ErrInsecure) || !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v: want one line matching ErrInsecure", tt.name, err)
			}
		}
	}
}

// tlsHTTP is a tiny https getter.
type tlsHTTP struct {
	cfg   *tls.Config
	token string
}

func (h *tlsHTTP) do(method, url string, body io.Reader) (int, string, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = h.cfg
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return 0, "", err
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (h *tlsHTTP) get(url string) (int, error) {
	code, _, err := h.do("GET", url, nil)
	return code, err
}

// TestTLSCAReload: a client certificate of a second CA is refused until
// the node's CA file also holds that CA; then it is accepted without a
// restart. A broken CA file keeps the previous CA.
func TestTLSCAReload(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 1, ca, nil)
	defer tc.closeAll()
	tc.waitReady()
	n1 := tc.nodes[0]
	second := newTestCA(t)
	bob := second.client("bob", "kv:write")
	bob.RootCAs = ca.client("").RootCAs // bob trusts the node's certificate
	put := func() error {
		c, err := grpc.NewClient(n1.Addrs().GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(bob)))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = rpc.NewKVClient(c).Put(ctx, &rpc.PutRequest{RoutingKey: []byte("u"), Key: []byte("k"), Value: []byte("v")})
		return err
	}
	if err := put(); err == nil {
		t.Fatal("client certificate of another CA accepted")
	}
	a, err := os.ReadFile(ca.caFile())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(second.caFile())
	if err != nil {
		t.Fatal(err)
	}
	writeCA := func(data []byte, mod time.Time) {
		tmp := ca.caFile() + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(tmp, mod, mod) // the modification time moves even on coarse clocks
		if err := os.Rename(tmp, ca.caFile()); err != nil {
			t.Fatal(err)
		}
	}
	future := time.Now().Add(2 * time.Second)
	writeCA(append(append([]byte{}, a...), b...), future)
	waitFor(t, 10*time.Second, "second CA trusted", put)

	// A broken CA file keeps the bundle: bob still gets in.
	writeCA([]byte("garbage"), future.Add(2*time.Second))
	time.Sleep(transport.TLSReloadEvery + 100*time.Millisecond) // let a reload attempt happen
	if err := put(); err != nil {
		t.Fatalf("after a broken CA file: %v", err)
	}
	// Back to the first CA alone: bob is refused again.
	writeCA(a, future.Add(4*time.Second))
	waitFor(t, 10*time.Second, "second CA no longer trusted", func() error {
		if put() == nil {
			return errors.New("still accepted")
		}
		return nil
	})
}
