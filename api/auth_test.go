package api

import (
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/auth"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/internal/freeport"
)

// nodeMethods starts a node as server.New does (cluster.New with
// Services) and returns the full name of every method, unary and stream,
// of every service registered on the gRPC server the node built: the
// core's (Admin, Console) and this package's, whatever they are.
func nodeMethods(t *testing.T) []string {
	t.Helper()
	addr := func() string {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cfg := cluster.Config{ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"),
		RaftAddr: addr(), GRPCAddr: addr(), GossipAddr: addr(), GossipProfile: "local",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var gs *grpc.Server
	n, err := cluster.New(cfg, func(n *cluster.Node) cluster.Services {
		s := Services(n)
		register := s.Register
		s.Register = func(srv *grpc.Server, unary grpc.UnaryServerInterceptor) {
			gs = srv
			register(srv, unary)
		}
		return s
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if gs == nil {
		t.Fatal("cluster.New did not register the services")
	}
	var methods []string
	for name, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			methods = append(methods, "/"+name+"/"+m.Name)
		}
	}
	return methods
}

// missingPerms returns the methods that have no entry in perms.
func missingPerms(methods []string, perms map[string]auth.Perm) []string {
	var out []string
	for _, m := range methods {
		if _, ok := perms[m]; !ok {
			out = append(out, m)
		}
	}
	return out
}

// TestGRPCPermsCoverEveryMethod: every method, unary or stream, of every
// service registered on the gRPC server a node builds has a permission in
// grpcPerms, so a new RPC or stream cannot be left open or forgotten (the
// guards refuse a method missing from the table, so it would not work
// either); and the table names no method the server lacks. The walk
// catches a missing entry: with any one entry deleted, it reports that
// method.
func TestGRPCPermsCoverEveryMethod(t *testing.T) {
	methods := nodeMethods(t)
	// The etcd front's entries are its own server's (etcdfront:
	// TestEtcdFrontMethodsCovered walks it).
	grpcPerms := maps.Clone(grpcPerms)
	for m := range grpcPerms {
		if strings.HasPrefix(m, etcdMethodPrefix) {
			delete(grpcPerms, m)
		}
	}
	streams := 0
	for _, m := range methods {
		if strings.HasSuffix(m, "/Watch") || strings.HasSuffix(m, "/Calls") || strings.HasSuffix(m, "/KeepAliveStream") ||
			strings.HasSuffix(m, "/ExportSlots") || strings.HasSuffix(m, "/BackupShard") {
			streams++
		}
	}
	if streams != 5 {
		t.Errorf("the walk saw %d of the 5 streams among %d methods: %v", streams, len(methods), methods)
	}
	for _, m := range missingPerms(methods, grpcPerms) {
		t.Errorf("%s has no entry in grpcPerms", m)
	}
	if len(methods) != len(grpcPerms) {
		t.Errorf("grpcPerms has %d entries, the server %d methods", len(grpcPerms), len(methods))
	}
	for _, m := range methods {
		less := map[string]auth.Perm{}
		for k, v := range grpcPerms {
			if k != m {
				less[k] = v
			}
		}
		if got := missingPerms(methods, less); len(got) != 1 || got[0] != m {
			t.Errorf("without %s's entry the walk reports %v", m, got)
		}
	}
	for m, p := range grpcPerms {
		nodeToNode := strings.HasPrefix(m, "/swarmkv.v1.Admin/") || strings.HasPrefix(m, "/swarmkv.v1.Console/")
		if nodeToNode != (p.Keyspace == auth.Node) {
			t.Errorf("%s: %v; the Admin and Console services and only they are node-to-node", m, p)
		}
	}
}
