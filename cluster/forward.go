package cluster

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/swarmkv/swarmkv/rpc"
)

// adminClient returns an Admin client for node id.
func (n *Node) adminClient(id string) (rpc.AdminClient, error) {
	a, ok := n.nodeAddrs(id)
	if !ok || a.GRPCAddr == "" {
		return nil, fmt.Errorf("cluster: no address known for node %s", id)
	}
	c, err := n.peers.Conn(a.GRPCAddr)
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
