package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/swarmkv/swarmkv/transport"
)

// Node identities (who may make node-to-node calls).
//
// With TLS a node proves its id with its node certificate (transport/tls.go).
// With Config.Auth and no TLS (loopback only, config.go checkSecure) nodes
// share a cluster secret (Config.ClusterSecretFile) and prove that they
// know it:
//
//	gRPC       every node-to-node call carries a node credential for its
//	           method (transport/nodecred.go)
//	Raft port  a challenge/response on the connection preface
//	           (transport/mux_auth.go)
//
// Either way an identity counts only while the cluster state lists that
// node id as a member (active or leaving; isMemberNode): a removed node's
// certificate, or a removed node that kept the secret and claims its old
// id, is refused on the Raft port, on Admin and on the client API. A node
// that is in no cluster yet (no state: waiting to be admitted, or before
// bootstrap) accepts every valid node identity: it holds no data, and the
// meta leader that admits it must reach it before it is listed anywhere.
// Admin/MetaState is the one call a non-member node may still make: it is
// answered with that node's own membership record only (redactForNonMember),
// which is how a removed node learns it was removed and stops.

const (
	// clusterSecretName is the secret a one-node cluster makes in its data
	// dir when Auth is on without TLS and no ClusterSecretFile is given.
	clusterSecretName = "cluster-secret"
	// minClusterSecret is the least length of a cluster secret, in bytes.
	minClusterSecret = 32
)

// ErrClusterSecret is wrapped by every cluster secret file error.
var ErrClusterSecret = errors.New("cluster: cluster secret")

// loadClusterSecret returns the cluster secret of cfg (Auth without TLS),
// or nil when none is needed. A secret file must be readable by its owner
// only and hold at least minClusterSecret bytes (surrounding white space
// is not part of the secret). Errors never quote the secret.
func loadClusterSecret(cfg Config) ([]byte, error) {
	if !cfg.Auth || cfg.TLS.Enabled() {
		return nil, nil
	}
	path := cfg.ClusterSecretFile
	if path == "" {
		if len(cfg.Join) > 0 { // Validate refuses this too
			return nil, fmt.Errorf("%w: a node that joins others needs --cluster-secret-file", ErrClusterSecret)
		}
		path = filepath.Join(cfg.DataDir, clusterSecretName)
		if err := makeClusterSecret(path); err != nil {
			return nil, err
		}
	}
	return readClusterSecret(path)
}

// readClusterSecret reads and checks a cluster secret file.
func readClusterSecret(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClusterSecret, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by group or others (mode %#o): chmod 600 it", ErrClusterSecret, path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClusterSecret, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < minClusterSecret {
		return nil, fmt.Errorf("%w: %s holds %d bytes, want at least %d random ones (head -c 32 /dev/urandom | base64)", ErrClusterSecret, path, len(b), minClusterSecret)
	}
	return b, nil
}

// makeClusterSecret writes 32 random bytes (hex) to path (0600) unless it
// exists.
func makeClusterSecret(path string) error {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("%w: %w", ErrClusterSecret, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrClusterSecret, err)
	}
	_, err = f.WriteString(hex.EncodeToString(raw[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("%w: %w", ErrClusterSecret, err)
	}
	return nil
}

// Operators without TLS (Config.Auth, loopback) have no client
// certificate, and no token before the first one is made. The operator
// CLI (--cluster-secret-file) reads the cluster secret and signs each admin
// HTTP request with it:
//
//	Authorization: SwarmkvSecret <unix seconds>.<hex HMAC-SHA256(secret,
//	    "swarmkv admin http\x00" method "\x00" path "\x00" query "\x00"
//	    seconds)>
//
// (path: the decoded URL path, query: the raw query). IdentifyHTTP accepts it
// within transport.CredSkew of its clock as the operator identity
// adminSecretIdentity, with the admin role, only while the node has a
// cluster secret (Auth without TLS). The body is not covered, as the gRPC
// node credential does not cover the request: the signature never leaves
// loopback, and whoever reads loopback traffic can read the secret file.

// adminSecretScheme is the Authorization scheme of a signed admin request.
const adminSecretScheme = "SwarmkvSecret"

// adminSecretIdentity is the name (audit log) of a caller that signed with
// the cluster secret.
const adminSecretIdentity = "operator:cluster-secret"

// ReadClusterSecret reads and checks a cluster secret file (the node's
// checks: owner-only mode, at least 32 bytes) for the operator CLI.
func ReadClusterSecret(path string) ([]byte, error) { return readClusterSecret(path) }

// AdminSecretAuth returns the Authorization header value that signs an
// admin HTTP request (method, decoded URL path, raw query) at time now
// with the cluster secret.
func AdminSecretAuth(secret []byte, method, path, rawQuery string, now time.Time) string {
	return adminSecretScheme + " " + transport.TimedMAC(secret, now, "swarmkv admin http", method, path, rawQuery)
}

// isAdminSecretAuth reports whether an Authorization header value uses
// the SwarmkvSecret scheme (case-insensitive, as HTTP schemes are).
func isAdminSecretAuth(h string) bool {
	scheme, _, _ := strings.Cut(h, " ")
	return strings.EqualFold(scheme, adminSecretScheme)
}

// checkAdminSecretAuth reports whether the Authorization header value h
// signs the request (method, path, rawQuery) with secret, within
// transport.CredSkew of now.
func checkAdminSecretAuth(secret []byte, method, path, rawQuery, h string, now time.Time) bool {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, adminSecretScheme) || len(secret) == 0 {
		return false
	}
	return transport.CheckTimedMAC(secret, cred, now, "swarmkv admin http", method, path, rawQuery)
}

// identifySecret returns the node identity of a call that carries a valid
// cluster-secret credential for method, or nil.
func (n *Node) identifySecret(md metadata.MD, method string) *Identity {
	if n.secret == nil {
		return nil
	}
	id, ok := transport.CheckNodeCred(md, n.secret, method, time.Now())
	if !ok {
		return nil
	}
	return &Identity{name: "node:" + id, node: true, nodeID: id}
}

// isMemberNode reports whether node id may act as a node: the cluster state
// this node knows lists it as active or leaving, or this node has no state
// yet (see the comment at the top of this file).
func (n *Node) isMemberNode(id string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.mu.state == nil {
		return true
	}
	return stateHasMember(n.mu.state, id)
}

// stateHasMember reports whether st lists node id as active or leaving.
func stateHasMember(st *State, id string) bool {
	s := st.Status(id)
	return s == StatusActive || s == StatusLeaving
}

// errNotMember is why a node identity that is not a member is refused.
func errNotMember(id string) string {
	return "swarmkv: node " + id + " is not a member of the cluster (removed or never admitted)"
}

// raftPeerAllowed is the Mux's check of a peer's node id (Raft port).
func (n *Node) raftPeerAllowed(id string) error {
	if !n.isMemberNode(id) {
		return errors.New(errNotMember(id))
	}
	return nil
}

// redactForNonMember returns the state a non-member node is told: the
// cluster id, the epoch, the shard map (public: Cluster/ClusterMap) and
// its own membership record, if any. No other member, no placement, no
// token.
func redactForNonMember(st *State, id string) *State {
	out := &State{FormatVersion: st.FormatVersion, ClusterID: st.ClusterID, Epoch: st.Epoch,
		MapVersion: st.MapVersion, NumShards: st.NumShards, Slots: st.Slots}
	if m := st.Member(id); m != nil {
		out.Nodes = []NodeAddrs{*m}
	}
	return out
}

// callerKey carries the caller's identity in a call's context (package
// api's auth interceptor, through WithCaller).
type callerKey struct{}

func withCaller(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// callerOf returns the identity the auth interceptor found for the call, or nil.
func callerOf(ctx context.Context) *Identity {
	id, _ := ctx.Value(callerKey{}).(*Identity)
	return id
}
