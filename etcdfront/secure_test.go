package etcdfront

import (
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/transport"
)

// TestCheckSecure: the etcd address follows the node's listener rule
// (cluster.Config.CheckListener): off loopback, TLS or --insecure; with
// --auth, TLS even with --insecure.
func TestCheckSecure(t *testing.T) {
	tlsOn := transport.TLSFiles{CAFile: "ca.pem", CertFile: "node.pem", KeyFile: "node.key"}
	for _, tc := range []struct {
		addr string
		cfg  cluster.Config
		bad  bool
	}{
		{"127.0.0.1:2379", cluster.Config{}, false},
		{"localhost:2379", cluster.Config{Auth: true}, false},
		{"0.0.0.0:2379", cluster.Config{}, true},
		{"0.0.0.0:2379", cluster.Config{Insecure: true}, false},
		{"0.0.0.0:2379", cluster.Config{Insecure: true, Auth: true}, true},
		{"0.0.0.0:2379", cluster.Config{Auth: true, TLS: tlsOn}, false},
	} {
		err := tc.cfg.CheckListener("etcd", tc.addr)
		if tc.bad != (err != nil) || err != nil && !errors.Is(err, cluster.ErrInsecure) {
			t.Errorf("%s insecure=%v auth=%v tls=%v: %v, want refused %v (ErrInsecure)", tc.addr, tc.cfg.Insecure, tc.cfg.Auth, tc.cfg.TLS.Enabled(), err, tc.bad)
		}
	}
}
