// Package server composes a swarmkv node with its fronts, as etcd's embed
// does: New builds the core (cluster.Node: replicas, meta group, gRPC
// services, admin HTTP) from one cluster.Config and starts the fronts that
// Config asks for (the RESP front of package redisfront with
// Config.RedisAddr); Close stops the fronts first, then the node.
//
// It may import cluster and the fronts (redisfront); nothing below imports
// it. cmd/swarmnode and the tests that need a whole node use it.
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

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/redisfront"
)

// Server is a node with its fronts.
type Server struct {
	node  *cluster.Node
	redis *redisfront.Front // nil without Config.RedisAddr

	closeOnce sync.Once
	closeErr  error
}

// New starts a node (cluster.New: listeners bound, recorded replicas
// open, bootstrap continuing in the background) and then its fronts. On
// an error whatever was started is closed.
func New(cfg cluster.Config) (*Server, error) {
	n, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{node: n}
	if cfg.RedisAddr != "" {
		if s.redis, err = redisfront.Start(n, cfg.RedisAddr); err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	return s, nil
}

// Node returns the node.
func (s *Server) Node() *cluster.Node { return s.node }

// RedisAddr returns the address the RESP front is bound to ("" when
// Config.RedisAddr is empty).
func (s *Server) RedisAddr() string {
	if s.redis == nil {
		return ""
	}
	return s.redis.Addr()
}

// Close stops the fronts (no new commands; running ones cancelled and
// joined), then the node (cluster.Node.Close). Idempotent; returns after
// every goroutine either started has exited.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.redis != nil {
			s.redis.Close()
		}
		s.closeErr = s.node.Close()
	})
	return s.closeErr
}
