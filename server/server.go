// Package server composes a swarmkv node with its fronts, as etcd's embed
// does: New builds the core (cluster.Node: replicas, meta group) with the
// gRPC services of package api (registered before the node's gRPC server
// serves) from one cluster.Config and starts the fronts that Config asks
// for (the admin HTTP API of package admin with Config.HTTPAddr, the RESP
// front of package redisfront with Config.RedisAddr, the etcd v3 front of
// package etcdfront with the WithEtcd option); Close stops the fronts
// first, then the node.
//
// It may import cluster, api and the fronts (admin, redisfront, etcdfront); nothing below
// imports it. cmd/swarmnode and the tests that need a whole node use it.
//
// Usage:
//
//	s, err := server.New(cfg)
//	if err != nil { ... }
//	defer s.Close()
//	fmt.Println(s.Node().Addrs().GRPCAddr, s.RedisAddr())
package server

import (
	"sync"

	"github.com/swarmkv/swarmkv/admin"
	"github.com/swarmkv/swarmkv/api"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/console"
	"github.com/swarmkv/swarmkv/etcdfront"
	"github.com/swarmkv/swarmkv/redisfront"
)

// The fronts reach the core through small interfaces each declares where
// it uses them (api.Node, api.Replicas, admin.Node, redisfront.Node,
// console.Source); this package is the one that names the concrete
// *cluster.Node, and checks here that it satisfies every one.
var (
	_ api.Node        = (*cluster.Node)(nil)
	_ api.Replicas    = (*cluster.Node)(nil)
	_ admin.Node      = (*cluster.Node)(nil)
	_ redisfront.Node = (*cluster.Node)(nil)
	_ etcdfront.Node  = (*cluster.Node)(nil)
	_ console.Source  = (*cluster.Node)(nil)
)

// Services is api.Services for a *cluster.Node, in the form cluster.New
// takes (the in-process jepsen driver and the cluster tests build their
// nodes with it too).
func Services(n *cluster.Node) cluster.Services { return api.Services(n) }

// Server is a node with its fronts.
type Server struct {
	node  *cluster.Node
	admin *admin.Server     // nil without Config.HTTPAddr
	redis *redisfront.Front // nil without Config.RedisAddr
	etcd  *etcdfront.Front  // nil without WithEtcd

	closeOnce sync.Once
	closeErr  error
}

// Option adds a front that has its own configuration (the fronts whose
// settings left cluster.Config).
type Option func(*options)

type options struct {
	etcd *etcdfront.Config
}

// WithEtcd serves etcd's v3 API with cfg (serve --etcd-addr).
func WithEtcd(cfg etcdfront.Config) Option {
	return func(o *options) { o.etcd = &cfg }
}

// New starts a node with api's services (cluster.New: listeners bound,
// the admin HTTP one included, recorded replicas open, services
// registered, bootstrap continuing in the background) and then its fronts: the admin HTTP API on the node's
// listener, then the RESP front, then the etcd front. On an error whatever
// was started is closed.
func New(cfg cluster.Config, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.etcd != nil { // a bad etcd config fails before the node starts
		if err := o.etcd.WithDefaults().Validate(); err != nil {
			return nil, err
		}
	}
	n, err := cluster.New(withSeeds(cfg), Services) // seed.go
	if err != nil {
		return nil, err
	}
	s := &Server{node: n, admin: admin.Start(n)}
	if cfg.RedisAddr != "" {
		if s.redis, err = redisfront.Start(n, cfg.RedisAddr); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	if o.etcd != nil {
		if s.etcd, err = etcdfront.Start(n, *o.etcd); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// EtcdAddr returns the address the etcd front is bound to ("" without
// WithEtcd).
func (s *Server) EtcdAddr() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.Addr()
}

// Etcd returns the etcd front (nil without WithEtcd).
func (s *Server) Etcd() *etcdfront.Front { return s.etcd }

// Node returns the node.
func (s *Server) Node() *cluster.Node { return s.node }

// HTTPAddr returns the address the admin HTTP API is bound to ("" when
// Config.HTTPAddr is empty).
func (s *Server) HTTPAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr()
}

// RedisAddr returns the address the RESP front is bound to ("" when
// Config.RedisAddr is empty).
func (s *Server) RedisAddr() string {
	if s.redis == nil {
		return ""
	}
	return s.redis.Addr()
}

// Close stops the fronts (the etcd front: its gRPC server stopped; the
// RESP front: no new commands, running ones
// cancelled and joined; then the admin HTTP API: no new requests, those
// in flight given up to 3 s), then the node (cluster.Node.Close). Idempotent; returns after
// every goroutine either started has exited.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.redis != nil {
			s.redis.Close()
		}
		s.admin.Close()
		s.closeErr = s.node.Close()
	})
	return s.closeErr
}
