package etcdfront

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/swarmkv/swarmkv/api"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// Node is what the etcd front uses of its node: its replicas (a
// namespace's shard, proposed to and read from here), its identity and
// membership (Status, MemberList), authentication and its server TLS.
// *cluster.Node satisfies it; package server passes one.
type Node interface {
	api.Replicas
	Config() cluster.Config
	ID() string
	Logger() *slog.Logger
	Authn() *authn.Authenticator
	ServerTLS() *tls.Config
	// GRPCServerOptions are the node's options for a client-facing gRPC
	// server: TLS and the bounds of a connection (streams, keepalive
	// enforcement, idle limit), the same as its gRPC API's.
	GRPCServerOptions() []grpc.ServerOption
	LocalState() (*cluster.State, *shard.Map)
	LeaderHint(id shard.ID) (leaderID, leaderAddr string)
	ActiveVersion() int
	// LimitConns wraps a listener with the node's per-IP connection cap
	// (--max-conns-per-ip), as the gRPC API's and the Redis front's.
	LimitConns(ln net.Listener, what string) net.Listener
}

// MetadataNamespace is the gRPC metadata key with which a client selects
// the namespace of its calls (the Go client:
// metadata.AppendToOutgoingContext(ctx, MetadataNamespace, "team-a"));
// without it a call uses Config.Namespace.
const MetadataNamespace = "swarmkv-etcd-namespace"

// Config configures the front. Zero fields take the defaults named.
type Config struct {
	// Addr is the listen address (serve --etcd-addr; make run:
	// 127.0.0.1:2379). Required.
	Addr string
	// Namespace is the namespace of calls that name none (serve
	// --etcd-namespace); default "default".
	Namespace string
	// MaxTxnOps bounds a txn's compares and each branch's operations, as
	// etcd's --max-txn-ops (serve --etcd-max-txn-ops); default 128, at
	// most fsm.MaxEtcdTxnOps.
	MaxTxnOps int
	// MaxRequestBytes bounds a write request's size, as etcd's
	// --max-request-bytes (serve --etcd-max-request-bytes); default 1.5
	// MiB, at most 8 MiB. gRPC refuses a message over it plus 512 KiB
	// before decoding it.
	MaxRequestBytes int
	// MaxWatchers bounds the watchers the front serves on the node (serve
	// --etcd-max-watchers); default 10000. MaxWatchersPerConn bounds them
	// per client connection (serve --etcd-max-watchers-per-conn); default
	// 1000. A create over either is refused (watch.go).
	MaxWatchers, MaxWatchersPerConn int
	// WatchProgressInterval is how often a watcher that asked for
	// progress notifications and got no event gets one (etcd's
	// --experimental-watch-progress-notify-interval); default 10 minutes.
	WatchProgressInterval time.Duration
	// WatchSendTimeout ends a Watch stream whose client has read nothing
	// for that long while the front has responses for it (a slow
	// consumer); default 1 minute. The official client resumes.
	WatchSendTimeout time.Duration
}

// Defaults.
const (
	DefaultNamespace       = "default"
	DefaultMaxTxnOps       = 128
	DefaultMaxRequestBytes = 3 << 19 // 1.5 MiB
	maxMaxRequestBytes     = 8 << 20
	grpcOverheadBytes      = 512 << 10 // as etcd's
)

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return c.watchDefaults()
}

// Validate reports a bad Config.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("etcdfront: no listen address")
	case keys.ValidateEtcdNamespace(c.Namespace) != nil:
		return fmt.Errorf("etcdfront: namespace: %w", keys.ValidateEtcdNamespace(c.Namespace))
	case c.MaxTxnOps < 1 || c.MaxTxnOps > fsmMaxTxnOps:
		return fmt.Errorf("etcdfront: max txn ops %d, want 1..%d", c.MaxTxnOps, fsmMaxTxnOps)
	case c.MaxRequestBytes < 1 || c.MaxRequestBytes > maxMaxRequestBytes:
		return fmt.Errorf("etcdfront: max request bytes %d, want 1..%d", c.MaxRequestBytes, maxMaxRequestBytes)
	}
	return c.validateWatch()
}

// Front is a node's etcd front: a listener and its gRPC server.
type Front struct {
	n   Node
	cfg Config
	log *slog.Logger
	ln  net.Listener
	gs  *grpc.Server

	served  chan struct{}
	once    sync.Once
	watches *watchCounts
}

// Start validates cfg, listens on cfg.Addr and serves etcd's services.
func Start(n Node, cfg Config) (*Front, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The node's rule for its own listeners: off loopback, TLS or
	// --insecure; with --auth, TLS even with --insecure.
	if err := n.Config().CheckListener("etcd", cfg.Addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("etcdfront: listen %s: %w", cfg.Addr, err)
	}
	// The node's bounds for a client listener: connections per IP and
	// calls per connection, as on the gRPC API (docs/security.md).
	ln = n.LimitConns(ln, "etcd")
	f := &Front{n: n, cfg: cfg, log: n.Logger().With("front", "etcd"), ln: ln, served: make(chan struct{}),
		watches: newWatchCounts(cfg)}
	unary, stream := api.Guard(n.Authn)
	f.gs = grpc.NewServer(append(n.GRPCServerOptions(),
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes+grpcOverheadBytes),
		grpc.ChainUnaryInterceptor(tokenUnary, unary),
		grpc.ChainStreamInterceptor(tokenStream, stream),
	)...)
	f.register(f.gs)
	go func() {
		defer close(f.served)
		if err := f.gs.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			f.log.Warn("etcd front stopped", "err", err)
		}
	}()
	f.log.Info("etcd front listening", "addr", ln.Addr().String(), "namespace", cfg.Namespace)
	return f, nil
}

// register registers every etcd service on gs (the tests walk it).
func (f *Front) register(gs *grpc.Server) {
	pb.RegisterKVServer(gs, &kvServer{f: f})
	pb.RegisterWatchServer(gs, &watchServer{f: f})
	pb.RegisterLeaseServer(gs, &pb.UnimplementedLeaseServer{})
	pb.RegisterClusterServer(gs, &clusterServer{f: f})
	pb.RegisterMaintenanceServer(gs, &maintenanceServer{f: f})
	pb.RegisterAuthServer(gs, &authServer{f: f})
}

// Addr is the address the front listens on.
func (f *Front) Addr() string { return f.ln.Addr().String() }

// Close stops the server (in-flight calls cancelled) and returns once its
// goroutines have exited. Idempotent.
func (f *Front) Close() {
	f.once.Do(func() {
		f.gs.Stop()
		<-f.served
	})
}

// tokenUnary and tokenStream read an etcd client's token (metadata
// "token", set after Auth/Authenticate) as the bearer token the guard
// checks, unless the call carries an authorization header itself.
func tokenUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(withBearer(ctx), req)
}

func tokenStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &ctxStream{ServerStream: ss, ctx: withBearer(ss.Context())})
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func withBearer(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get("authorization")) > 0 {
		return ctx
	}
	tok := md.Get("token")
	if len(tok) == 0 {
		return ctx
	}
	md = md.Copy()
	md.Set("authorization", "Bearer "+tok[0])
	return metadata.NewIncomingContext(ctx, md)
}
