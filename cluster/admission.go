package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/internal/pki"
)

// Admission with certificates: with TLS, the meta leader admits a node
// (JoinNode) only after the node proved its id. It dials the addresses the
// candidate announces in gossip (gRPC and Raft port) and completes a TLS
// handshake with each: the peer must present a node certificate of the
// cluster CA whose SAN URI swarmkv://node/<id> names the candidate. A node
// with a certificate of another CA, or of another id (or an address that
// belongs to another node), is refused with FailedPrecondition, before
// anything is recorded.

// verifyCandidate checks that the gRPC and Raft addresses g announces are
// served by node id with a certificate of the cluster CA. Without TLS it
// does nothing.
func (n *Node) verifyCandidate(ctx context.Context, id string, g gossip.Meta) error {
	if n.tls == nil {
		return nil
	}
	for _, a := range []struct{ what, addr string }{{"grpc", g.GRPC}, {"raft", g.Raft}} {
		if err := n.proveNodeID(ctx, id, a.what, a.addr); err != nil {
			return status.Errorf(codes.FailedPrecondition, "node %s not admitted: %v", id, err)
		}
	}
	return nil
}

// proveNodeID completes a TLS handshake with addr as this node's peer
// configuration does (chain to the cluster CA, node certificate) and
// checks the certificate's node id.
func (n *Node) proveNodeID(ctx context.Context, id, what, addr string) error {
	if addr == "" {
		return fmt.Errorf("it announces no %s address", what)
	}
	dial := (&net.Dialer{}).DialContext
	if what == "raft" {
		dial = n.cfg.Testing.Dial // the Raft network (fault injection in tests)
	}
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot reach its %s address %s: %w", what, addr, err)
	}
	defer raw.Close()
	cfg := n.tls.PeerConfig()
	if what == "grpc" {
		cfg.NextProtos = []string{"h2"} // gRPC servers require ALPN h2
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("its %s address %s did not present a node certificate of this cluster's CA: %w", what, addr, err)
	}
	defer c.Close()
	if got := pki.NodeID(c.ConnectionState().PeerCertificates[0]); got != id {
		return fmt.Errorf("its %s address %s presented the certificate of node %q, not %q", what, addr, got, id)
	}
	return nil
}
