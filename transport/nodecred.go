package transport

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Node credentials of node-to-node gRPC calls with a cluster secret and no
// TLS (the Raft port has the preface of mux_auth.go instead):
//
//	swarmkv-node: <id>
//	swarmkv-node-auth: <unix seconds>.<hex HMAC-SHA256(secret,
//	    "swarmkv grpc\x00" id "\x00" method "\x00" seconds)>
//
// accepted within CredSkew of the server's clock, for that method only.
// Whether the id may act as a node (a member) is the caller's question.

const (
	// CredSkew is how far a timed MAC's time (a gRPC node credential's, a
	// signed admin request's) may be from the checker's clock (every node
	// is on one host: loopback only).
	CredSkew = 2 * time.Minute

	mdNode     = "swarmkv-node"
	mdNodeAuth = "swarmkv-node-auth"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidNodeID reports whether id is a valid node id: 1-64 letters, digits,
// '.', '_' or '-', starting with a letter or digit.
func ValidNodeID(id string) bool { return idPattern.MatchString(id) }

// nodeMAC is HMAC-SHA256(secret, label 0 part 0 part ...).
func nodeMAC(secret []byte, label string, parts ...string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

// grpcNodeCred returns the metadata value of mdNodeAuth for a call of
// method by node id at time now.
func grpcNodeCred(secret []byte, id, method string, now time.Time) string {
	return TimedMAC(secret, now, "swarmkv grpc", id, method)
}

// checkGRPCNodeCred reports whether cred is a valid credential of node id
// for method at time now.
func checkGRPCNodeCred(secret []byte, id, method, cred string, now time.Time) bool {
	return CheckTimedMAC(secret, cred, now, "swarmkv grpc", id, method)
}

// TimedMAC returns "<unix seconds>.<hex HMAC-SHA256(secret, label 0 part 0
// ... 0 seconds)>": a proof of the secret bound to parts and to now.
func TimedMAC(secret []byte, now time.Time, label string, parts ...string) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return ts + "." + hex.EncodeToString(nodeMAC(secret, label, append(parts, ts)...))
}

// CheckTimedMAC reports whether cred is TimedMAC(secret, t, label,
// parts...) for a time t within CredSkew of now.
func CheckTimedMAC(secret []byte, cred string, now time.Time, label string, parts ...string) bool {
	ts, mac, ok := strings.Cut(cred, ".")
	if !ok || len(ts) > 20 {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if d := now.Sub(time.Unix(sec, 0)); d > CredSkew || d < -CredSkew {
		return false
	}
	got, err := hex.DecodeString(mac)
	if err != nil {
		return false
	}
	return hmac.Equal(got, nodeMAC(secret, label, append(parts, ts)...))
}

// NodeCredUnary returns the client interceptor of node-to-node gRPC calls
// without TLS: it adds node id's credential for the call's method.
func NodeCredUnary(secret []byte, id string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, mdNode, id, mdNodeAuth, grpcNodeCred(secret, id, method, time.Now()))
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// NodeCredStream is NodeCredUnary for streams (a shard move's export, a
// backup): without it a node's streams to its peers carry no credential
// and are refused.
func NodeCredStream(secret []byte, id string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx = metadata.AppendToOutgoingContext(ctx, mdNode, id, mdNodeAuth, grpcNodeCred(secret, id, method, time.Now()))
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// CheckNodeCred returns the node id of a call whose metadata md carries a
// valid node credential for method at time now, or ok false.
func CheckNodeCred(md metadata.MD, secret []byte, method string, now time.Time) (id string, ok bool) {
	ids, creds := md.Get(mdNode), md.Get(mdNodeAuth)
	if len(ids) != 1 || len(creds) != 1 || !ValidNodeID(ids[0]) {
		return "", false
	}
	if !checkGRPCNodeCred(secret, ids[0], method, creds[0], now) {
		return "", false
	}
	return ids[0], true
}
