package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/internal/lograte"
)

// Server is a node's admin HTTP server.
//
// Threads: Start starts one goroutine, the server's accept loop (and
// net/http one per connection); Close stops accepting, waits up to 3 s
// for requests in flight, and joins the accept loop.
type Server struct {
	srv    *http.Server
	addr   string
	served chan struct{} // closed when the accept loop returned

	closeOnce sync.Once
}

// Start serves the admin API of n on the listener n bound for it
// (cluster.Node.HTTPListener; with TLS when the node has TLS). It returns
// nil when the node has no HTTP listener (Config.HTTPAddr empty, or taken
// before).
func Start(n Node) *Server {
	ln := n.HTTPListener()
	if ln == nil {
		return nil
	}
	cfg := n.Config()
	errLog := lograte.NewKeyed(n.Logger(), lograte.Every, lograte.HTTPKey).With("component", "http")
	s := &Server{
		srv: &http.Server{Handler: Handler(n),
			ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout, ReadTimeout: cfg.HTTPReadTimeout,
			WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
			MaxHeaderBytes: cfg.HTTPMaxHeaderBytes,
			ErrorLog:       slog.NewLogLogger(errLog.Handler(), slog.LevelInfo)},
		addr:   ln.Addr().String(),
		served: make(chan struct{}),
	}
	serve := s.srv.Serve
	if tc := n.ServerTLS(); tc != nil {
		s.srv.TLSConfig = tc
		serve = func(ln net.Listener) error { return s.srv.ServeTLS(ln, "", "") }
	}
	go func() {
		defer close(s.served)
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.Logger().Error("http server stopped", "err", err)
		}
	}()
	return s
}

// Addr returns the address the server is bound to.
func (s *Server) Addr() string { return s.addr }

// Close stops the server: no new connections, requests in flight get up
// to 3 s. Idempotent; safe on a nil Server; returns after the accept loop
// exited.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s.srv.Shutdown(ctx)
		cancel()
		<-s.served
	})
}
