// Package leakcheck holds the goleak options of the test packages that run
// nodes (cluster, server, api, admin): every goroutine a node starts is
// joined by Node.Close and checked, except the ones memberlist starts and
// does not join. memberlist's Shutdown closes its transport and its
// shutdown channel and returns without waiting for the goroutines that
// watch that channel (streamListen, packetListen, packetHandler,
// checkBroadcastQueueDepth, the probe/gossip/push-pull triggers) or for a
// stream handler (handleConn) still reading a peer's connection until its
// TCP timeout; on a loaded machine one of them can outlive goleak's retries
// (seen once, a memberlist goroutine after TestSplitStaleMapShardRequest).
// Only tests import it.
package leakcheck

import "go.uber.org/goleak"

// Options are the goleak options for a package whose tests run nodes.
func Options() []goleak.Option {
	const ml = "github.com/hashicorp/memberlist."
	return []goleak.Option{
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).handleConn"),
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).streamListen"),
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).packetListen"),
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).packetHandler"),
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).checkBroadcastQueueDepth"),
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).triggerFunc"),
		goleak.IgnoreAnyFunction(ml + "(*Memberlist).pushPullTrigger"),
	}
}
