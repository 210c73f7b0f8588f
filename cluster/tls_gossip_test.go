package cluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestTLSRedisFront(t *testing.T) {
	ca := newTestCA(t)
	tc := newTLSCluster(t, 1, ca, func(c *Config) { c.RedisAddr = freePort(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: tc.redisAddr(0), TLSConfig: ca.client("assets-app", "assets:write"), MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Set(ctx, "asset:1", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	plain := redis.NewClient(&redis.Options{Addr: tc.redisAddr(0), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plaintext RESP client served by a TLS node")
	}
}

// TestGossipWrongKeyIgnored: nodes share a gossip key; a node with another
// key is never seen by them (its messages fail to decrypt), while a node
// with the right key, started after it, is.
func TestGossipWrongKeyIgnored(t *testing.T) {
	key := func() []byte { k := make([]byte, 32); rand.Read(k); return k }
	good, bad := key(), key()
	tc := newTestCluster(t, 2, 1, func(c *Config) { c.GossipKeys = [][]byte{good} })
	seeds := []string{tc.nodes[0].Addrs().GossipAddr, tc.nodes[1].Addrs().GossipAddr}
	start := func(id string, keys [][]byte) *Node {
		n, err := New(Config{ID: id, DataDir: t.TempDir(), RaftAddr: freePort(t), GRPCAddr: freePort(t),
			GossipAddr: freePort(t), Join: seeds, GossipProfile: "local", GossipKeys: keys, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	start("intruder", [][]byte{bad})
	// Rotation, step one: a node that also knows the next key (not yet
	// primary) still talks to nodes on the current one.
	start("rotated", [][]byte{good, key()})
	start("friend", [][]byte{good})
	seen := func(id string) bool { _, ok := tc.nodes[0].members.Get(id); return ok }
	waitFor(t, 20*time.Second, "friend and rotated seen", func() error {
		for _, id := range []string{"friend", "rotated"} {
			if !seen(id) {
				return fmt.Errorf("%s not seen", id)
			}
		}
		return nil
	})
	for _, n := range tc.nodes {
		if _, ok := n.members.Get("intruder"); ok {
			t.Fatalf("%s sees the node with the wrong gossip key", n.ID())
		}
	}
}
