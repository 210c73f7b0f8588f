package redisfront

import (
	"crypto/tls"
	"log/slog"
	"net"

	"github.com/swarmkv/swarmkv/api"
	"github.com/swarmkv/swarmkv/auth/authn"
	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/shard"
)

// Node is what the RESP front uses of its node: its settings, identity and
// limits, the shard map its routing client starts from, and its replicas,
// on which a request for a shard this node leads runs directly
// (api.RedisLocal; any other travels through the routing client to the
// key's leader). *cluster.Node satisfies it; server.New passes one.
type Node interface {
	api.Replicas
	Config() cluster.Config
	Logger() *slog.Logger
	Addrs() cluster.NodeAddrs
	ShardMap() *shard.Map
	Authn() *authn.Authenticator
	PeerTLS() *tls.Config
	ServerTLS() *tls.Config
	LimitConns(ln net.Listener, what string) net.Listener
}
