package authn

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/internal/fsutil"
	"github.com/swarmkv/swarmkv/transport"
)

// Node identities (who may make node-to-node calls).
//
// With TLS a node proves its id with its node certificate (transport/tls.go).
// With Config.Auth and no TLS (loopback only, cluster/config.go
// checkSecure) nodes share a cluster secret (Config.ClusterSecretFile) and
// prove that they know it:
//
//	gRPC       every node-to-node call carries a node credential for its
//	           method (transport/nodecred.go; identifySecret checks it)
//	Raft port  a challenge/response on the connection preface
//	           (transport/mux_auth.go)
//
// Either way an identity counts only while the cluster state lists that
// node id as a member (State.IsMember; package cluster's auth.go has the
// rule and what a non-member may still do).

const (
	// clusterSecretName is the secret a one-node cluster makes in its data
	// dir when Auth is on without TLS and no ClusterSecretFile is given.
	clusterSecretName = "cluster-secret"
	// minClusterSecret is the least length of a cluster secret, in bytes.
	minClusterSecret = 32
)

// ErrClusterSecret is wrapped by every cluster secret file error.
var ErrClusterSecret = errors.New("cluster: cluster secret")

// LoadClusterSecret returns the cluster secret of a node with Auth and
// without TLS: the file path names, or, when path is "", the one a lone
// node makes (once) and keeps in dataDir; a node that joins others (joins)
// needs a path. A secret file must be readable by its owner only and hold
// at least minClusterSecret bytes (surrounding white space is not part of
// the secret). Errors never quote the secret.
func LoadClusterSecret(path, dataDir string, joins bool) ([]byte, error) {
	if path == "" {
		if joins { // Config.Validate refuses this too
			return nil, fmt.Errorf("%w: a node that joins others needs --cluster-secret-file", ErrClusterSecret)
		}
		path = filepath.Join(dataDir, clusterSecretName)
		if err := makeClusterSecret(path); err != nil {
			return nil, err
		}
	}
	return ReadClusterSecret(path)
}

// ReadClusterSecret reads and checks a cluster secret file (owner-only
// mode, at least 32 bytes): the node's check, and the operator CLI's.
func ReadClusterSecret(path string) ([]byte, error) {
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
	err := fsutil.CreateExclusive(path, []byte(hex.EncodeToString(raw[:])+"\n"), 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
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
