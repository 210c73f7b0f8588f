package etcdfront

import (
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
)

// TestCheckSecure: the etcd address follows the node's listener rule: off
// loopback, TLS or --insecure; with --auth, TLS even with --insecure.
func TestCheckSecure(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		cfg      cluster.Config
		tls, bad bool
	}{
		{"127.0.0.1:2379", cluster.Config{}, false, false},
		{"localhost:2379", cluster.Config{Auth: true}, false, false},
		{"0.0.0.0:2379", cluster.Config{}, false, true},
		{"0.0.0.0:2379", cluster.Config{Insecure: true}, false, false},
		{"0.0.0.0:2379", cluster.Config{Insecure: true, Auth: true}, false, true},
		{"0.0.0.0:2379", cluster.Config{Auth: true}, true, false},
	} {
		err := checkSecure(tc.addr, tc.cfg, tc.tls)
		if tc.bad != (err != nil) || err != nil && !errors.Is(err, cluster.ErrInsecure) {
			t.Errorf("%s %+v tls=%v: %v, want refused %v (ErrInsecure)", tc.addr, tc.cfg.Insecure, tc.tls, err, tc.bad)
		}
	}
}
