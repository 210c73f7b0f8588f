package cluster

import (
	"context"
	"net"

	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/internal/connlimit"
	"github.com/swarmkv/swarmkv/internal/lograte"
)

// Limits against abuse (docs/security.md, "Limits"): besides the request
// size, batch size and scan page limits (Config.Limits, MaxScanPage;
// api/validate.go),
//
//	connections per client IP   internal/connlimit on the gRPC and RESP
//	                            listeners (Config.MaxConnsPerIP)
//	streams per gRPC connection grpc.MaxConcurrentStreams (Config.MaxConcurrentStreams)
//	server-side deadlines       deadlineUnary: a gRPC call without a
//	                            deadline gets Config.RequestTimeout, so
//	                            every read barrier, proposal and forward
//	                            it makes ends; RESP commands get the same
//	                            timeout (redisfront)
//	idle and slow RESP clients  Config.RedisIdleTimeout (read) and
//	                            Config.RedisWriteTimeout (each write)
//	admin HTTP connections      http.Server timeouts and header bytes
//	                            (Config.HTTP*), the per-IP limit
//	idle and dead gRPC clients  keepalive: Config.GRPCMaxConnIdle,
//	                            GRPCKeepaliveTime/Timeout; pings at most
//	                            every Config.GRPCKeepaliveMinTime
//	Raft port connections       limitRaftConns (Config.RaftMaxConns,
//	                            RaftMaxConnsPerIP), the mux's handshake
//	                            timeout (Config.RaftHandshakeTimeout)
//	log floods                  internal/lograte
//	RESP commands, MULTI blocks Config.RedisMax* (redisfront/conn.go): checked
//	                            as each header arrives

// deadlineUnary gives a call without a deadline the node's request
// timeout. A client's own deadline is kept.
func (n *Node) deadlineUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, ok := ctx.Deadline(); ok {
		return handler(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	return handler(ctx, req)
}

// limitRaftConns wraps the Raft listener with its caps: open connections
// in all (Config.RaftMaxConns) and from one IP (Config.RaftMaxConnsPerIP),
// those still in their handshake included. Refused connections are logged
// at most once a second.
func (n *Node) limitRaftConns(ln net.Listener) net.Listener {
	log := lograte.New(n.log, lograte.Every).With("listener", "raft")
	return connlimit.New(ln, n.cfg.RaftMaxConnsPerIP, func(ip string) {
		log.Warn("connection refused: too many connections from one IP", "ip", ip, "raft_max_conns_per_ip", n.cfg.RaftMaxConnsPerIP)
	}).WithTotal(n.cfg.RaftMaxConns, func(ip string) {
		log.Warn("connection refused: too many connections", "ip", ip, "raft_max_conns", n.cfg.RaftMaxConns)
	})
}

// LimitConns wraps a listener with the per-IP connection limit; refused
// connections are logged at most once a second (internal/lograte).
func (n *Node) LimitConns(ln net.Listener, what string) net.Listener {
	log := lograte.New(n.log, lograte.Every).With("listener", what, "max_conns_per_ip", n.cfg.MaxConnsPerIP)
	return connlimit.New(ln, n.cfg.MaxConnsPerIP, func(ip string) {
		log.Warn("connection refused: too many connections from one IP", "ip", ip)
	})
}
