package cluster

import (
	"context"
	"crypto/tls"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/internal/pki"
)

// grpcServerOptions are the gRPC server's transport options: TLS with the
// node certificate (a client certificate of the CA is verified if given).
func (n *Node) grpcServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if n.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.tls.serverConfig(false))))
	}
	return opts
}

// authOn reports whether clients must authenticate: with TLS, or with
// Config.Auth.
func (n *Node) authOn() bool { return n.tls != nil || n.cfg.Auth }

// peerTLS returns the verified TLS state of a gRPC call's connection.
func peerTLS(ctx context.Context) (tls.ConnectionState, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tls.ConnectionState{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return tls.ConnectionState{}, false
	}
	return ti.State, true
}

// peerNodeID returns the node id of a call made with a node certificate of
// the cluster CA, or "".
func peerNodeID(ctx context.Context) string {
	st, ok := peerTLS(ctx)
	if !ok {
		return ""
	}
	return pki.NodeID(st.PeerCertificates[0])
}

// authUnary guards every unary gRPC call: with TLS, node-to-node services
// (Admin) answer only callers holding a node certificate.
func (n *Node) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if n.tls != nil && strings.HasPrefix(info.FullMethod, "/swarmkv.v1.Admin/") && peerNodeID(ctx) == "" {
		return nil, status.Error(codes.PermissionDenied, "swarmkv: node-to-node call without a node certificate")
	}
	return handler(ctx, req)
}
