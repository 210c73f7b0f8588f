package cluster

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// TestLeaseOwnersTwoTokens reproduces issue 37's attack through the real
// gRPC API with authentication on: a victim token grants a lease and puts
// secret-doc under it; a second token holding only leases:write (or
// leases:read) may not revoke it, keep it alive (unary or streamed), read
// its TTL or list its keys, nor see it in List, and a token with kv:write
// may not put a key under it; the refusals are
// PermissionDenied, name their reason and are audit-logged, and the key
// survives. The owner and an admin may. A lease without an owner (granted
// as before protocol version 4) is ended only by a caller with the write
// role of its keys' keyspaces, and its keys listed only with their read
// role. Lease ids carry random bits. A lease holds at most
// --max-keys-per-lease keys.
func TestLeaseOwnersTwoTokens(t *testing.T) {
	var logs syncBuffer
	tc := newTestCluster(t, 1, 1, func(c *Config) {
		c.Auth = true
		c.MaxKeysPerLease = 3
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test_node", c.ID)
	})
	ctx := ctxT(t, 90*time.Second)
	n := tc.nodes[0]
	token := func(name string, roles ...string) *client.Client {
		t.Helper()
		var ti *authn.TokenInfo
		waitFor(t, 20*time.Second, "token "+name+" created", func() (err error) {
			ti, err = n.CreateToken(ctx, name, roles, "")
			return err
		})
		waitFor(t, 10*time.Second, "token "+name+" known", func() error {
			if _, ok := n.Authn().IdentifyToken(ti.Token); !ok {
				return errors.New("not yet")
			}
			return nil
		})
		c, err := client.New(ctx, client.Config{Endpoints: []string{n.Addrs().GRPCAddr}, AttemptTimeout: 2 * time.Second, Token: ti.Token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	victim := token("victim", "kv:write", "leases:write")
	attacker := token("attacker", "leases:write")
	peeker := token("peeker", "leases:read")
	kvWriter := token("kvwriter", "kv:write", "leases:write")
	kvReader := token("kvreader", "kv:read", "leases:read")
	admin := token("ops", "admin", "leases:write")

	rk := []byte("victim-rk")
	denied := func(what string, err error, why string) {
		t.Helper()
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), why) {
			t.Fatalf("%s: %v, want PermissionDenied saying %q", what, err, why)
		}
	}
	l := grantUntilKnown(ctx, t, victim.Leases(), rk, 30*time.Second)
	putLeased(ctx, t, victim, rk, "secret-doc", l)

	// The attacker (leases:write only) and the peeker (leases:read).
	_, err := attacker.Leases().Revoke(ctx, l)
	denied("attacker's revoke", err, "belongs to another identity")
	_, err = attacker.Leases().KeepAliveOnce(ctx, l)
	denied("attacker's keep-alive", err, "belongs to another identity")
	if _, err := attacker.Leases().KeepAliveOnceStream(ctx, l); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("attacker's streamed keep-alive: %v, want ErrLeaseNotFound", err)
	}
	_, err = peeker.Leases().TimeToLive(ctx, l, true)
	denied("peeker's ttl --keys", err, "belongs to another identity")
	_, err = peeker.Leases().TimeToLive(ctx, l, false)
	denied("peeker's ttl", err, "belongs to another identity")
	if ls, err := peeker.Leases().List(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("peeker's list: %v %v, want none", ls, err)
	}
	// Nor may another identity attach its keys to the lease (filling it
	// up to its bound).
	err = kvWriter.Put(ctx, rk, []byte("intruder"), []byte("v"), client.WithLease(l))
	denied("another identity's put under the lease", err, "belongs to another identity")
	if !present(ctx, t, victim, rk, "secret-doc") || present(ctx, t, victim, rk, "intruder") {
		t.Fatal("secret-doc deleted, or intruder written, by another identity")
	}
	for _, why := range []string{"/swarmkv.v1.Lease/Revoke", "/swarmkv.v1.Lease/KeepAlive", "/swarmkv.v1.Lease/KeepAliveStream", "/swarmkv.v1.Lease/TimeToLive"} {
		if !strings.Contains(logs.String(), "what="+why+" allowed=false why=\"lease "+l.String()+" belongs to another identity") {
			t.Errorf("no audit record of the refused %s:\n%s", why, logs.String())
		}
	}

	// The owner sees, keeps alive and lists its lease.
	if info, err := victim.Leases().TimeToLive(ctx, l, true); err != nil || info.KeyCount != 1 || string(info.Keys[0].Key) != "secret-doc" {
		t.Fatalf("owner's ttl --keys: %+v %v", info, err)
	}
	if _, err := victim.Leases().KeepAliveOnceStream(ctx, l); err != nil {
		t.Fatalf("owner's streamed keep-alive: %v", err)
	}
	if ls, err := victim.Leases().List(ctx); err != nil || len(ls) != 1 || ls[0].ID != l {
		t.Fatalf("owner's list: %v %v", ls, err)
	}
	// Ids are not the slot's sequence: a second grant is not the next id.
	l2 := grantUntilKnown(ctx, t, victim.Leases(), rk, 30*time.Second)
	if keys.LeaseSlot(uint64(l2)) != byte(shard.SlotOf(rk)) || uint64(l2)&keys.MaxLeaseSeq < 1<<24 || l2 == l+1 {
		t.Fatalf("lease ids %s then %s: guessable", l, l2)
	}
	// The bound: three keys, not four; nothing written by the refusal.
	for _, k := range []string{"a", "b", "c"} {
		putLeased(ctx, t, victim, rk, k, l2)
	}
	if err := victim.Put(ctx, rk, []byte("d"), []byte("v"), client.WithLease(l2)); !errors.Is(err, client.ErrLeaseFull) || !strings.Contains(err.Error(), "holds 3 keys") {
		t.Fatalf("a fourth key: %v", err)
	}
	if present(ctx, t, victim, rk, "d") {
		t.Fatal("the refused put wrote its key")
	}
	// An admin may end any lease; the owner its own.
	if n, err := admin.Leases().Revoke(ctx, l2); err != nil || n != 3 {
		t.Fatalf("admin's revoke: %d %v", n, err)
	}
	if n, err := victim.Leases().Revoke(ctx, l); err != nil || n != 1 || present(ctx, t, victim, rk, "secret-doc") {
		t.Fatalf("owner's revoke: %d %v", n, err)
	}

	// A lease without an owner (as granted before version 4).
	_, r := tc.leaderReplica(0)
	var legacy client.LeaseID
	waitFor(t, 10*time.Second, "ownerless lease granted", func() error {
		id, err := r.Leases().Grant(ctx, rk, 30*time.Second)
		legacy = client.LeaseID(id)
		return err
	})
	putLeased(ctx, t, victim, rk, "doc", legacy)
	_, err = attacker.Leases().Revoke(ctx, legacy)
	denied("attacker's revoke of an ownerless lease", err, "holds kv keys: ending them needs kv:write")
	_, err = peeker.Leases().TimeToLive(ctx, legacy, true)
	denied("peeker's ttl --keys of an ownerless lease", err, "holds kv keys: listing them needs kv:read")
	if _, err := peeker.Leases().TimeToLive(ctx, legacy, false); err != nil {
		t.Fatalf("peeker's ttl of an ownerless lease: %v", err)
	}
	if info, err := kvReader.Leases().TimeToLive(ctx, legacy, true); err != nil || info.KeyCount != 1 {
		t.Fatalf("kv reader's ttl --keys of an ownerless lease: %+v %v", info, err)
	}
	if !present(ctx, t, victim, rk, "doc") {
		t.Fatal("doc deleted by a refused revoke")
	}
	if n, err := kvWriter.Leases().Revoke(ctx, legacy); err != nil || n != 1 {
		t.Fatalf("kv writer's revoke of an ownerless lease: %d %v", n, err)
	}
}
