package cluster

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/rpc"
)

// peers keeps one gRPC connection per peer address for node-to-node Admin
// calls (meta state, replica status and configuration changes).
type peers struct {
	// creds are the transport credentials of every connection: mTLS with
	// the node certificate (nodeTLS.peerConfig) or, without TLS, insecure.
	// Set by New before any call.
	creds credentials.TransportCredentials
	// unary, if set, intercepts every call: it adds the cluster-secret
	// credential without TLS (nodeauth.go). Set by New before any call.
	unary grpc.UnaryClientInterceptor

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (p *peers) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	creds := p.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), client.Keepalive()}
	if p.unary != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(p.unary))
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// adminClient returns an Admin client for node id.
func (n *Node) adminClient(id string) (rpc.AdminClient, error) {
	a, ok := n.nodeAddrs(id)
	if !ok || a.GRPCAddr == "" {
		return nil, fmt.Errorf("cluster: no address known for node %s", id)
	}
	c, err := n.peers.conn(a.GRPCAddr)
	if err != nil {
		return nil, err
	}
	return rpc.NewAdminClient(c), nil
}

// forwardedKey marks a call one node forwarded to another, so the second
// never forwards it again (no loops while leadership moves).
const forwardedKey = "swarmkv-forwarded"

func forwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

func forwarding(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}
