package transport

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// PeersConfig configures Peers.
type PeersConfig struct {
	// Creds are the transport credentials of every connection: mTLS with
	// the node certificate (credentials.NewTLS(NodeTLS.PeerConfig())) or,
	// nil, insecure.
	Creds credentials.TransportCredentials
	// Unary, if set, intercepts every call: NodeCredUnary adds the
	// cluster-secret credential without TLS.
	Unary grpc.UnaryClientInterceptor
	// Stream, if set, intercepts every stream: NodeCredStream.
	Stream grpc.StreamClientInterceptor
	// DialOptions are added to every connection (the node passes the
	// client's keepalive).
	DialOptions []grpc.DialOption
}

// Peers keeps one gRPC connection per peer address for node-to-node calls
// (the node's Admin calls: meta state, replica status and configuration
// changes). Connections are made on first use and kept until Close.
type Peers struct {
	opts []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewPeers returns an empty set of connections made with cfg.
func NewPeers(cfg PeersConfig) *Peers {
	creds := cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, cfg.DialOptions...)
	if cfg.Unary != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(cfg.Unary))
	}
	if cfg.Stream != nil {
		opts = append(opts, grpc.WithStreamInterceptor(cfg.Stream))
	}
	return &Peers{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// Conn returns the connection to the node at addr, made on first use
// (also after Close, for a late caller; the next Close closes it).
func (p *Peers) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// Close closes every connection.
func (p *Peers) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
