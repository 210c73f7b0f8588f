// Package transport owns how swarmkv nodes reach each other: the Raft
// connection mux that shares one TCP port among a node's Raft groups
// (Mux, Layer: a raft.StreamLayer per group), the authenticated preface
// of that port with a cluster secret, the node TLS identity and the
// tls.Configs of node-to-node connections (NodeTLS), the node credential
// of node-to-node gRPC calls without TLS, the pool of gRPC connections to
// peer nodes (Peers), the batched leadership check of linearizable
// reads (LeaderChecker), and the notices of quiet groups (Noticer).
//
// It knows nothing of the cluster state: what it must ask of the node is
// passed in as function fields (MuxConfig.AllowPeer: may this node id
// connect; NewLeaderChecker's lookup: the local Raft instance of a group;
// NewNoticer's handle: the local replica's answer to a notice).
// It imports the standard library, hashicorp/raft, gRPC and internal/
// packages only; package cluster imports it, never the other way.
//
// Usage, as a node wires it:
//
//	id, _ := transport.LoadNodeTLS(files, "n1", log)
//	mux, _ := transport.NewMux(transport.MuxConfig{Listener: ln,
//		ServerTLS: id.ServerConfig(true), ClientTLS: id.PeerConfig(),
//		AllowPeer: isMember})
//	layer, _ := mux.Layer(shardGroup, incarnation) // one per Raft group
//	trans := raft.NewNetworkTransport(layer, 3, 10*time.Second, logOut)
//	ck, _ := mux.Layer(readCheckGroup, 0)
//	checker := transport.NewLeaderChecker(ck, "n1", raftOf, log)
//	ok := checker.Confirm(group, term, configuration) // else VerifyLeader
//	nl, _ := mux.Layer(noticeGroup, 0)
//	noticer := transport.NewNoticer(nl, "n1", replicaAnswers, log)
//	reply, err := noticer.Notify(ctx, follower, transport.Notice{Kind: transport.NoticeQuiet, ...})
package transport
