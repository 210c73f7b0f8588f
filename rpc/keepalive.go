package rpc

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// KeepaliveTime is how long a connection to a node may be silent before
// the dialer (the Go client, or a node dialing another) pings it, with or
// without calls in flight, and KeepaliveTimeout how long it waits for the
// answer before it drops the connection (a node gone without a FIN).
// Nodes refuse pings more often than their --grpc-keepalive-min-time,
// which is at most half of KeepaliveTime.
const (
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
)

// Keepalive is the dial option with KeepaliveTime and KeepaliveTimeout,
// shared by the Go client's connections and the nodes' connections to
// each other.
func Keepalive() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true,
	})
}
