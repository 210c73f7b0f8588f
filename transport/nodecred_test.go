package transport

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

// metaStateMethod is a node-to-node method name (rpc.Admin's MetaState).
const metaStateMethod = "/swarmkv.v1.Admin/MetaState"

// FuzzGRPCNodeCred: a credential made for (id, method, time) checks out
// for exactly that id (a valid node id, as CheckNodeCred requires) and
// method; the fuzzed credential text never panics the check; every
// credential round-trips.
func FuzzGRPCNodeCred(f *testing.F) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Unix(1_800_000_000, 0)
	good := grpcNodeCred(secret, "n1", metaStateMethod, now)
	f.Add("n1", metaStateMethod, good)
	f.Add("n2", metaStateMethod, good)
	f.Add("n1", "/x", "1800000000.00")
	f.Add("n1", "/x", "-9223372036854775808.")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, id, method, cred string) {
		checkGRPCNodeCred(secret, id, method, cred, now) // no panic
		if !ValidNodeID(id) {
			return
		}
		if ok := checkGRPCNodeCred(secret, id, method, good, now); ok != (id == "n1" && method == metaStateMethod) {
			t.Fatalf("n1's MetaState credential for %q %q: %v", id, method, ok)
		}
		if !checkGRPCNodeCred(secret, id, method, grpcNodeCred(secret, id, method, now), now) {
			t.Fatalf("round trip failed for %q %q", id, method)
		}
	})
}

// TestNodeCredScope: a credential passes for its method, node id and time
// only, and through the metadata only with exactly one id and one
// credential.
func TestNodeCredScope(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	const changeReplica = "/swarmkv.v1.Admin/ChangeReplica"
	if checkGRPCNodeCred(secret, "n1", changeReplica, grpcNodeCred(secret, "n1", metaStateMethod, time.Now()), time.Now()) {
		t.Fatal("a MetaState credential passes for ChangeReplica")
	}
	if checkGRPCNodeCred(secret, "n1", metaStateMethod, grpcNodeCred(secret, "n1", metaStateMethod, time.Now().Add(-time.Hour)), time.Now()) {
		t.Fatal("an hour-old credential passes")
	}
	now := time.Now()
	cred := grpcNodeCred(secret, "n1", metaStateMethod, now)
	for _, c := range []struct {
		name string
		md   metadata.MD
		want bool
	}{
		{"valid", metadata.Pairs(mdNode, "n1", mdNodeAuth, cred), true},
		{"other id", metadata.Pairs(mdNode, "n2", mdNodeAuth, cred), false},
		{"bad id", metadata.Pairs(mdNode, "-n1", mdNodeAuth, cred), false},
		{"two ids", metadata.Pairs(mdNode, "n1", mdNode, "n1", mdNodeAuth, cred), false},
		{"no credential", metadata.Pairs(mdNode, "n1"), false},
		{"other secret", metadata.Pairs(mdNode, "n1", mdNodeAuth, grpcNodeCred([]byte(strings.Repeat("x", 32)), "n1", metaStateMethod, now)), false},
	} {
		id, ok := CheckNodeCred(c.md, secret, metaStateMethod, now)
		if ok != c.want || ok && id != "n1" {
			t.Errorf("%s: %q %v, want %v", c.name, id, ok, c.want)
		}
	}
}
