package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/faultnet"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/raftlog"
	"github.com/swarmkv/swarmkv/secrets"
	"github.com/swarmkv/swarmkv/shard"
	"github.com/swarmkv/swarmkv/transport"
)

// ProtocolVersion and MinProtocolVersion bound the protocol versions this
// binary speaks; the cluster runs one of them, raised as its members are
// upgraded (version.go; seed 004's handshake rule).
const (
	ProtocolVersion    = 6
	MinProtocolVersion = 1
)

// Config configures a Node. Zero values take the defaults documented on each
// field (see WithDefaults); Validate reports bad values as errors.
type Config struct {
	// ID is the node's stable id: Raft server id and memberlist name. It
	// never changes for a data dir. Letters, digits, '-', '_' and '.'.
	ID string
	// DataDir holds the node's state (cluster.json, one folder per shard
	// replica). Created if missing.
	DataDir string
	// Seed finds the restore a data dir holding no cluster state was
	// seeded with (restore.go); nil: the node restores nothing and
	// starts or joins a cluster as usual. server sets backup.Seeds.
	Seed Seeder

	// RaftAddr is the TCP address the node's one Raft port listens on,
	// shared by every local replica. Default "127.0.0.1:7101".
	RaftAddr string
	// RaftAdvertise is the address peers dial; default RaftAddr (with the
	// port actually bound when RaftAddr ends in ":0").
	RaftAdvertise string
	// GRPCAddr is the client API address. Default "127.0.0.1:7100".
	GRPCAddr string
	// GRPCAdvertise is the address clients are told; default GRPCAddr.
	GRPCAdvertise string
	// HTTPAddr is the admin HTTP API's address (/healthz, /readyz,
	// /metrics, /v1; package admin serves it on the listener New binds);
	// empty disables it. Default "127.0.0.1:7102".
	HTTPAddr string
	// RedisAddr is the RESP (Redis protocol) front's address: the asset
	// catalogue of seed 002 for Redis clients (package redisfront,
	// started by package server). Empty disables it; no default.
	RedisAddr string
	// GossipAddr is memberlist's bind address (TCP and UDP). Default
	// "127.0.0.1:7103".
	GossipAddr string
	// GossipAdvertise is the gossip address peers use; default GossipAddr.
	GossipAdvertise string
	// Join lists gossip addresses of existing nodes. Joining is retried in
	// the background until one answers.
	Join []string
	// BootstrapExpect is the number of nodes that form the cluster at
	// first start: when that many nodes are known through gossip, each
	// bootstraps its shard replicas with the same placement. 0 means: 1
	// when Join is empty (a one-node cluster), otherwise never bootstrap:
	// the node waits until an operator admits it into the cluster it
	// gossips with (`swarmnode join <id>`, the admin API's join).
	BootstrapExpect int
	// Shards is the number of shards (Raft groups) at bootstrap, 0..256.
	// 0 (default): automatic, max(1, BootstrapExpect / NodesPerShard)
	// shards with the policy's count rule on (the meta leader splits and
	// merges as members come and go: cluster/shardmove/policy.go); N: N shards with
	// the count rule off (the size and load rules still apply). Ignored
	// once the cluster is bootstrapped (the policy is in the cluster
	// state; `swarmnode shards policy` changes it).
	Shards int
	// NodesPerShard is the count rule's ratio: one shard per this many
	// active members. Default 3 (placement.DefaultNodesPerShard); 1..1000.
	// Recorded at bootstrap.
	NodesPerShard int
	// MaxShardBytes is the size rule: a shard whose leader's state
	// machine uses more disk space is split. Default 1 GiB; negative: no
	// size rule. Recorded at bootstrap.
	MaxShardBytes int64
	// MaxShardLoad is the load rule: a shard whose leader applies more
	// commands per second (replica.Replica.Load) is split. 0 (default):
	// no load rule. Recorded at bootstrap.
	MaxShardLoad float64
	// PolicyInterval is how often the meta leader evaluates the shard
	// policy (asking every shard's replicas for their status), and
	// PolicyCooldown how long it waits after a move (any: its own or an
	// operator's) before it plans the next one, and after it becomes the
	// meta leader. Defaults 10s and 2m.
	PolicyInterval time.Duration
	PolicyCooldown time.Duration
	// ReplicationFactor is the number of voters per shard (fewer when the
	// cluster has fewer nodes). Default 3. Fixed at bootstrap (recorded in
	// the cluster state).
	ReplicationFactor int
	// DeadNodeTimeout is how long gossip must report a member dead before
	// the reconciler replaces its replicas on other nodes (when enough live
	// nodes exist). Default 5m.
	DeadNodeTimeout time.Duration
	// ReconcileInterval is how often the meta group's leader compares the
	// placement with the live cluster and takes the next step. Default 1s.
	ReconcileInterval time.Duration
	// LeaderBalanceInterval is the least time between two leadership moves
	// the reconciler makes to even out leader counts (a move makes the
	// writes in flight on that shard fail with an unknown outcome), and
	// how long a new meta leader waits before the first. Default 30s.
	LeaderBalanceInterval time.Duration
	// Zone and Host are the node's failure-domain labels, announced in
	// gossip and recorded by the meta leader (cluster/placement, zones.go):
	// letters, digits, '.', '_', '-', at most 63 bytes. Zone "" (the
	// default): the node is its own zone. Host defaults to the machine's
	// hostname (os.Hostname; "" when it has none: its own host).
	Zone, Host string
	// IsolationLevel is what the reconciler keeps a group's replicas apart
	// by when it places a new one, on this node while it leads the meta
	// group: "zone" (the default), "host" or "none" (placement.Isolation).
	// Set the same on every node.
	IsolationLevel string

	// Raft timing. Defaults: heartbeat and election timeout 1s, leader
	// lease 500ms, commit timeout 500ms. The commit timeout is how long a
	// shard leader with nothing new to replicate waits before it tells
	// its followers the commit index anyway (hashicorp/raft's heartbeats
	// do not carry it): under load entries carry it within milliseconds,
	// so it only bounds how stale an idle shard's followers are, and
	// every expiry is an AppendEntries round trip per follower and group.
	// At 50ms (hashicorp/raft's default) those round trips were a third of
	// an idle 3-node, 8-shard cluster's CPU (docs/performance-log.md, round 7).
	// The meta group uses at most metaCommitTimeout, so that every node
	// learns a cluster-state change promptly.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// QuietAfter turns quiet groups on (docs/architecture.md, "Quiet
	// groups"): a shard group whose leader saw no proposal, read,
	// configuration change, leadership transfer or live lease for this
	// long moves, on every replica, to heartbeat and election timeouts of
	// QuietTimeout, a lease of half of it and a commit timeout of
	// QuietTimeout, and back on its first request. 0 (the default): off.
	// Above CommitTimeout when set (followers have heard the last commit
	// index before the group goes quiet). The meta group is never quiet.
	QuietAfter time.Duration
	// QuietTimeout is a quiet group's heartbeat and election timeout: a
	// node failure moves a quiet group's leader after QuietTimeout to
	// twice that plus an election. Default 10s; at least the heartbeat and
	// election timeouts.
	QuietTimeout time.Duration
	// SnapshotThreshold is the number of log entries since the last
	// snapshot that triggers a new one (checked every SnapshotInterval).
	// Default 8192.
	SnapshotThreshold uint64
	// SnapshotInterval is how often each replica checks the threshold.
	// Default 30s.
	SnapshotInterval time.Duration
	// TrailingLogs is the number of entries kept after a snapshot so that
	// slightly lagging followers catch up by log. Default 10240.
	TrailingLogs uint64

	// Limits bound request sizes (key, value, batch); defaults from
	// fsm.Limits (4 KiB keys, 1 MiB values, 1024 ops per batch).
	Limits fsm.Limits
	// MaxLeasesPerShard caps the leases one shard holds: a grant over it
	// is refused (FailedPrecondition, nothing granted). Default 100000;
	// 1..10000000.
	MaxLeasesPerShard int
	// MaxKeysPerLease caps the keys (kv keys, runners, agents) one lease
	// holds: recorded with each lease a shard leader grants once the
	// cluster runs protocol version 4 (fsm.LeaseRecord.MaxKeys, so every
	// replica refuses the same attachments), an attachment over it is
	// refused (FailedPrecondition, nothing written), and ending the lease
	// is one apply of at most that many deletes. Default 10000;
	// 1..fsm.MaxLeaseKeysBound (1000000).
	MaxKeysPerLease int
	// LeaseCheckpointInterval is how often a shard leader checkpoints the
	// remaining TTLs of the leases not kept alive (docs/architecture.md,
	// "Leases"). Default 1s; 10ms..1m.
	LeaseCheckpointInterval time.Duration
	// MaxScanPage caps a Scan's page size. Default 1000.
	MaxScanPage int
	// MaxPageBytes bounds the encoded size of one page of a Scan or a
	// listing, and of a KEYS reply: a page ends before it would pass it
	// (it holds at least one item whatever its size). Default 4 MiB;
	// 4 KiB..256 MiB.
	MaxPageBytes int
	// MaxKeysReply bounds the keys of a RESP KEYS reply: a KEYS that
	// would answer more (or more than MaxPageBytes) is refused with an
	// error that names SCAN. Default 100000; 1..10000000.
	MaxKeysReply int
	// RequestTimeout is the deadline of a gRPC call that arrives without
	// one, and of each RESP command (forwarding and retries included):
	// every read barrier, proposal and forward a call makes ends by then.
	// Default 10s; 10ms..1h.
	RequestTimeout time.Duration
	// MaxConcurrentStreams caps the concurrent calls of one gRPC
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; more wait on the
	// client side). Default 1024; 1..1048576.
	MaxConcurrentStreams uint32
	// HistoryRevisions and HistoryAge are the history each shard keeps
	// for watches (docs/architecture.md, "Watches"): a revision is
	// dropped once it is more than HistoryRevisions behind the shard's
	// applied index, or older than HistoryAge.
	// Defaults 100000 and 1h; negative: no bound of that kind (not both).
	HistoryRevisions int64
	HistoryAge       time.Duration
	// HistoryCompactEvery is how often a shard leader proposes a history
	// compaction (and a time mark). Default 10s.
	HistoryCompactEvery time.Duration
	// MaxWatchers caps the watches a node serves, MaxWatchersPerConn
	// those of one client connection; WatchBuffer is the revisions
	// buffered per watcher before a slow one is cancelled. Defaults
	// 10000, 1000, 1024.
	MaxWatchers        int
	MaxWatchersPerConn int
	WatchBuffer        int
	// MaxWatchersPerIdentity caps the watches of one identity (a token,
	// a certificate; without auth, a client IP) on a node, over all its
	// connections. Default 1000; 1..MaxWatchers.
	MaxWatchersPerIdentity int
	// MaxKeepAliveStreamsPerIdentity caps the lease keep-alive streams of
	// one identity (as above) on a node. Default 256; 1..1048576.
	MaxKeepAliveStreamsPerIdentity int
	// MaxConcurrentCatchUps caps the watches of a node reading history
	// at once to catch up (a watch from an old revision); a new one waits
	// up to 250 ms for a turn, then is refused with ResourceExhausted and
	// a retry hint. Default 32; 1..4096.
	MaxConcurrentCatchUps int
	// MaxWatchMemory bounds the bytes of watch messages the node's
	// watches hold at once (a list page or a catch-up's page from before
	// it is read until it is sent, an event message while gRPC sends it),
	// over all of them; one identity (as above) holds at most a quarter.
	// A watch over the budget waits for its turn. Default 256 MiB;
	// 4 MiB..1 TiB.
	MaxWatchMemory int64
	// MaxConnsPerIP caps the open connections from one client IP on each
	// of the gRPC and RESP listeners; more are closed as they are
	// accepted (logged at most once a second). Default 256; 1..1048576.
	MaxConnsPerIP int
	// RedisIdleTimeout closes a RESP connection that sends no command for
	// this long. Default 5m; 1s..24h.
	RedisIdleTimeout time.Duration
	// RedisWriteTimeout bounds each write of a reply to a RESP client (a
	// client that stops reading is disconnected). Default 30s; 100ms..1h.
	RedisWriteTimeout time.Duration
	// HTTPReadHeaderTimeout bounds reading a request's headers on the
	// admin HTTP listener (from the first byte), HTTPReadTimeout reading
	// the whole request, HTTPWriteTimeout writing its response (from the
	// end of the headers; above the admin API's 30 s call bound and a 30 s
	// CPU profile), and HTTPIdleTimeout how long a keep-alive connection
	// may wait for its next request. Defaults 5s, 30s, 2m, 2m; ranges
	// 100ms..1h, 100ms..1h, 1s..24h, 100ms..24h.
	HTTPReadHeaderTimeout time.Duration
	HTTPReadTimeout       time.Duration
	HTTPWriteTimeout      time.Duration
	HTTPIdleTimeout       time.Duration
	// HTTPMaxHeaderBytes caps a request's header bytes on the admin HTTP
	// listener (431 beyond). Default 64 KiB; 4 KiB..1 MiB.
	HTTPMaxHeaderBytes int
	// GRPCMaxConnIdle closes (GOAWAY) a gRPC connection without a call in
	// flight for this long; clients reconnect on their next call. Default
	// 5m; 100ms..24h.
	GRPCMaxConnIdle time.Duration
	// GRPCKeepaliveTime is how long a gRPC connection may be silent before
	// the server pings it, and GRPCKeepaliveTimeout how long it waits for
	// the answer before it closes the connection (dead clients). Defaults
	// 1m and 20s; 1s..24h and 1s..1h.
	GRPCKeepaliveTime    time.Duration
	GRPCKeepaliveTimeout time.Duration
	// GRPCKeepaliveMinTime is the least interval between a client's
	// keepalive pings; a client that pings more often is sent GOAWAY
	// too_many_pings. Pings are allowed without calls in flight. Default
	// 5s; 1s..15s: at most half the Go client's and the nodes' own ping
	// interval (rpc.KeepaliveTime, 30s), so they are never refused.
	GRPCKeepaliveMinTime time.Duration
	// RaftMaxConns caps the open connections of the Raft port, and
	// RaftMaxConnsPerIP those from one IP; connections in their handshake
	// count. More are closed as they are accepted (logged at most once a
	// second). Defaults 16384 and 4096 (a peer opens about five per Raft
	// group it shares with the node); 1..1048576.
	RaftMaxConns      int
	RaftMaxConnsPerIP int
	// RaftHandshakeTimeout bounds an accepted Raft connection's TLS
	// handshake and header (transport.MuxConfig.HandshakeTimeout). Default 5s;
	// 100ms..1m.
	RaftHandshakeTimeout time.Duration
	// RedisMaxBulk bounds one argument of a RESP command, checked when
	// its "$<len>" header arrives (Redis's proto-max-bulk-len). Default
	// max(Limits.MaxValueSize, 2 KiB); 1 KiB..64 MiB.
	RedisMaxBulk int
	// RedisMaxArgs bounds the arguments of one RESP command (the name
	// included). Default 16384; 16..1048576.
	RedisMaxArgs int
	// RedisMaxCommandBytes bounds one RESP command on the wire, headers
	// included, checked as each header arrives (Redis's
	// client-query-buffer-limit), and what one entry of a single command
	// carries. Default 2*RedisMaxBulk + 64 KiB (at most 128 MiB);
	// 4 KiB..128 MiB.
	RedisMaxCommandBytes int
	// RedisMaxMultiCommands bounds the commands a MULTI block queues.
	// Default and upper bound fsm.MaxRedisTxCmds (4096).
	RedisMaxMultiCommands int
	// RedisMaxMultiBytes bounds the commands a MULTI block queues in
	// bytes (resp.CommandSize), and so what one proposed Redis entry
	// carries. Default 2*Limits.MaxValueSize + 64 KiB (at most 128 MiB);
	// 4 KiB..128 MiB.
	RedisMaxMultiBytes int
	// BlockCacheSize is the memory for cached Pebble blocks, shared by
	// every local replica and the Raft log store, in bytes. Default 32 MiB
	// (docs/architecture.md, "Pebble options": what fills it is the Raft
	// snapshot's scan).
	// Pebble charges memtables against the block cache, so the node's
	// cache is this plus the memtables of its stores (cacheCapacity).
	BlockCacheSize int64
	// MemTableSize is each replica's Pebble memtable size. Default 4 MiB.
	MemTableSize uint64
	// LogStore selects the Raft log and stable store: "pebble" (default),
	// one raftlog.Store (<data-dir>/raftlog) shared by every local Raft
	// group, so concurrent appends of all groups share WAL fsyncs; or
	// "bolt", one raft-boltdb file per replica (shards/NNN/raft.db).
	// Both fsync every append before it counts. A data dir keeps the store
	// it was created with: a node refuses to start with the other one.
	LogStore string
	// WALMinSyncInterval is the least time between two fsyncs of the
	// shared Raft log store's WAL (raftlog.Options.MinSyncInterval): an
	// append that comes sooner waits for the rest of it, so that more
	// groups' appends share one fsync. 0 (default): sync at once. At most
	// 10ms; only with LogStore "pebble".
	WALMinSyncInterval time.Duration
	// logStore is the shared Raft log store New opens when LogStore is
	// "pebble" (nil with "bolt"); every replica's Raft group uses it.
	logStore *raftlog.Store

	// TokenKeys seals and opens the agent pools' bot tokens (seed 004;
	// package secrets): tokens are encrypted with its active key before a
	// command enters the Raft log, and decrypted for GetBotToken. Every
	// node of a cluster needs the same ring (or at least every key that
	// sealed a stored token). nil: RegisterBot, UpdateBot with a token, and
	// GetBotToken fail with codes.FailedPrecondition "no token key ring
	// configured"; everything else works.
	TokenKeys *secrets.Ring

	// Testing holds the hooks of tests and fault injection; a production
	// node leaves it zero (but for --fault-injection, which sets Faults).
	Testing Testing
	// GossipProfile selects memberlist's timing: "lan" (default) or
	// "local" (fast, for loopback clusters and tests).
	GossipProfile string

	// TLS is the node's certificate and the cluster CA (transport/tls.go).
	// With it every listener speaks TLS 1.3 (client gRPC, admin HTTP,
	// RESP), the Raft port and node-to-node gRPC require a node
	// certificate of the CA on both sides, and client authentication is on
	// (package auth/authn). Without it, every listen address must be loopback unless
	// Insecure is set.
	TLS transport.TLSFiles
	// Insecure allows listening on non-loopback addresses without TLS and
	// gossip encryption (trusted networks and tests only).
	Insecure bool
	// GossipKeys is memberlist's keyring (16, 24 or 32 bytes each; the
	// first encrypts, all decrypt; see gossip.LoadKeys). Required with TLS
	// on a non-loopback gossip address unless Insecure is set. Nodes with
	// another key are not heard.
	GossipKeys [][]byte
	// Auth turns client authentication and roles on without TLS (bearer
	// tokens only; tests). It is always on with TLS. Without TLS it is
	// refused on a non-loopback listener (even with Insecure), and nodes
	// prove to each other that they know the cluster secret
	// (ClusterSecretFile, authn.LoadClusterSecret).
	Auth bool
	// ClusterSecretFile is the cluster secret of Auth without TLS: a file
	// of at least 32 bytes of random text (e.g. `head -c 32 /dev/urandom |
	// base64`), the same on every node, readable by its owner only (mode
	// 0600 or 0400). Node-to-node gRPC calls and Raft connections carry an
	// HMAC made with it (transport/nodecred.go, transport/mux_auth.go).
	// Empty: a one-node cluster (no Join) makes and keeps
	// <DataDir>/cluster-secret; a node with Join addresses refuses to
	// start. Not used with TLS (node
	// certificates prove who a node is); setting it there is an error.
	ClusterSecretFile string

	// Logger receives structured logs; default slog.Default(). Records
	// carry node (and shard) attributes.
	Logger *slog.Logger
}

// Testing is the part of Config that tests (and fault-injection runs) set
// and production leaves alone.
type Testing struct {
	// Dial dials peers' Raft ports (tests inject faults here). Default
	// net.Dialer.
	Dial transport.DialFunc
	// WrapRaftListener, if set, wraps the Raft listener (tests inject
	// faults here).
	WrapRaftListener func(net.Listener) net.Listener
	// Faults, if set, injects the faults it holds into this node's Raft
	// port connections (dialed and accepted; peers named by IP) and
	// serves GET/PUT /debug/faults on the HTTP API to change them
	// (swarmnode serve --fault-injection; for test clusters such as the
	// docker-compose one, whose nodes run in separate processes).
	Faults *faultnet.Local
	// MinProtocolVersion and MaxProtocolVersion override the protocol
	// versions the node speaks (0: MinProtocolVersion, ProtocolVersion).
	// MaxProtocolVersion 1 runs the node as a binary before protocol
	// version 2 (f6c5d17): it keeps the cluster at version 1 and neither
	// sends nor accepts Raft headers with a group incarnation.
	MinProtocolVersion, MaxProtocolVersion int
	// IncarnationGrace is how long after the node first sees its cluster
	// run protocol version 2 it still accepts Raft connections whose
	// header carries no group incarnation (version.go). Default 10s.
	IncarnationGrace time.Duration
	// CommandSince, if set, overrides the protocol version a command
	// needs (fsm.Command.Since) when it returns more than 0: tests gate
	// an existing command as a new feature would be (Node.CheckCommand).
	CommandSince func(*fsm.Command) int
	// AfterMovePhase, if set, is called by the mover (meta leader) after
	// it committed a slot move's phase ("done" once removed); returning
	// true halts this node's mover for good (tests stop the node there to
	// check that another meta leader resumes the move).
	AfterMovePhase func(moveID uint64, phase string) (halt bool)
	// BeforeAdopt, if set, is called by a target shard's leader that
	// ingested a move's data, before it proposes the adoption; an error
	// fails the pull instead (tests cancel a move there).
	BeforeAdopt func(moveID uint64) error
	// AfterIngest, if set, is called by a target shard's leader after each
	// chunk of a pull it ingested, with the pairs this pull ingested so
	// far; an error cuts the pull off there (tests check that the next
	// pull resumes after what was ingested).
	AfterIngest func(moveID uint64, pairs uint64) error
	// PullChunk, if set, is called by a target shard's leader for each
	// chunk of a move's data it receives from the source (a pull, a
	// pre-copy, a sync pass), with the chunk's pairs (tests count what a
	// resumed pass reads again).
	PullChunk func(moveID uint64, pairs int)
	// AfterPrecopy, if set, is called by the mover (meta leader) after a
	// move's pre-copy and before the source's freeze (tests write the
	// moving slots there, so that the sync pass has changes to bring).
	AfterPrecopy func(moveID uint64)
	// HoldSync, if set and true, makes the sync loop skip its round
	// (tests keep a node's map behind the cluster's).
	HoldSync func() bool
	// BackupChunk, if set, is called by a shard's leader after each chunk
	// of a backup stream it sent (Admin.BackupShard, or the local export);
	// an error ends the stream (tests stop the leader there).
	BackupChunk func(ctx context.Context, id shard.ID) error
}

// BootstrapShards is the shard count the cluster bootstraps with: Shards,
// or with Shards 0 the count rule's for BootstrapExpect nodes.
func (c Config) BootstrapShards() int {
	if c.Shards > 0 {
		return c.Shards
	}
	return placement.DesiredShards(c.NodesPerShard, c.BootstrapExpect)
}

// bootstrapPolicy is the shard policy the cluster bootstraps with: the
// count rule on with automatic shards (Shards 0).
func (c Config) bootstrapPolicy() placement.ShardPolicy {
	return placement.ShardPolicy{Auto: c.Shards == 0, NodesPerShard: c.NodesPerShard,
		MaxShardBytes: uint64(max(c.MaxShardBytes, 0)), MaxShardLoad: c.MaxShardLoad}
}

// policyText is a bootstrap policy's form in gossip: nodes bootstrap
// together only with the same one.
func policyText(p placement.ShardPolicy) string {
	return "auto=" + strconv.FormatBool(p.Auto) + ",nodes_per_shard=" + strconv.Itoa(p.NodesPerShard) +
		",max_shard_bytes=" + strconv.FormatUint(p.MaxShardBytes, 10) + ",max_shard_load=" + strconv.FormatFloat(p.MaxShardLoad, 'g', -1, 64)
}

// Config.LogStore values.
const (
	LogStorePebble = "pebble"
	LogStoreBolt   = "bolt"
)

// MaxKeySizeLimit, MaxValueSizeLimit and MaxBatchOpsLimit are the largest
// Config.Limits a node accepts (Validate).
const (
	MaxKeySizeLimit   = maxKeySizeLimit
	MaxValueSizeLimit = maxValueSizeLimit
	MaxBatchOpsLimit  = maxBatchOpsLimit
)

// Upper bounds of the configurable request limits.
const (
	maxKeySizeLimit   = 8 << 10
	maxValueSizeLimit = 64 << 20
	maxBatchOpsLimit  = 65536
	maxScanPageLimit  = 100000
	// minPageBytes and maxPageBytesLimit bound MaxPageBytes.
	minPageBytes      = 4 << 10
	maxPageBytesLimit = 256 << 20
	maxKeysReplyLimit = 10000000
	// maxCatchUpsLimit bounds MaxConcurrentCatchUps.
	maxCatchUpsLimit = 4096
	// maxStreamsLimit and maxConnsPerIPLimit bound the connection limits.
	maxStreamsLimit    = 1 << 20
	maxConnsPerIPLimit = 1 << 20
	// maxKeepaliveMinTime is half of rpc.KeepaliveTime (the Go client's
	// and the nodes' ping interval; TestKeepaliveWithinPolicy).
	maxKeepaliveMinTime = 15 * time.Second
	// maxRedisEntryLimit bounds a RESP command and a MULTI block, so what
	// one Redis log entry carries.
	maxRedisEntryLimit = 128 << 20
)

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.RaftAddr, "127.0.0.1:7101")
	def(&c.GRPCAddr, "127.0.0.1:7100")
	def(&c.GossipAddr, "127.0.0.1:7103")
	def(&c.GossipProfile, "lan")
	if c.BootstrapExpect == 0 && len(c.Join) == 0 {
		c.BootstrapExpect = 1
	}
	if c.DeadNodeTimeout == 0 {
		c.DeadNodeTimeout = 5 * time.Minute
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = time.Second
	}
	if c.LeaderBalanceInterval == 0 {
		c.LeaderBalanceInterval = 30 * time.Second
	}
	if c.Host == "" {
		c.Host = defaultHost()
	}
	def(&c.IsolationLevel, placement.IsolationZone.String())
	if c.NodesPerShard == 0 {
		c.NodesPerShard = placement.DefaultNodesPerShard
	}
	if c.MaxShardBytes == 0 {
		c.MaxShardBytes = placement.DefaultMaxShardBytes
	}
	if c.PolicyInterval == 0 {
		c.PolicyInterval = 10 * time.Second
	}
	if c.PolicyCooldown == 0 {
		c.PolicyCooldown = 2 * time.Minute
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 3
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = time.Second
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = time.Second
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = c.HeartbeatTimeout / 2
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = 500 * time.Millisecond
	}
	if c.QuietTimeout == 0 {
		c.QuietTimeout = 10 * time.Second
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = 30 * time.Second
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	c.Limits = c.Limits.WithDefaults()
	if c.MaxLeasesPerShard == 0 {
		c.MaxLeasesPerShard = 100000
	}
	if c.MaxKeysPerLease == 0 {
		c.MaxKeysPerLease = 10000 // replica.DefaultMaxKeysPerLease
	}
	if c.LeaseCheckpointInterval == 0 {
		c.LeaseCheckpointInterval = time.Second
	}
	if c.MaxScanPage == 0 {
		c.MaxScanPage = 1000
	}
	if c.MaxPageBytes == 0 {
		c.MaxPageBytes = 4 << 20
	}
	if c.MaxKeysReply == 0 {
		c.MaxKeysReply = 100000
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 1024
	}
	if c.HistoryRevisions == 0 {
		c.HistoryRevisions = 100000
	}
	if c.HistoryAge == 0 {
		c.HistoryAge = time.Hour
	}
	if c.HistoryCompactEvery <= 0 {
		c.HistoryCompactEvery = 10 * time.Second
	}
	if c.MaxWatchers <= 0 {
		c.MaxWatchers = 10000
	}
	if c.MaxWatchersPerConn <= 0 {
		c.MaxWatchersPerConn = 1000
	}
	if c.MaxWatchersPerIdentity == 0 {
		c.MaxWatchersPerIdentity = min(1000, c.MaxWatchers)
	}
	if c.MaxKeepAliveStreamsPerIdentity == 0 {
		c.MaxKeepAliveStreamsPerIdentity = 256
	}
	if c.MaxConcurrentCatchUps == 0 {
		c.MaxConcurrentCatchUps = 32
	}
	if c.MaxWatchMemory == 0 {
		c.MaxWatchMemory = 256 << 20
	}
	if c.WatchBuffer <= 0 {
		c.WatchBuffer = 1024
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 256
	}
	if c.RedisIdleTimeout == 0 {
		c.RedisIdleTimeout = 5 * time.Minute
	}
	if c.RedisWriteTimeout == 0 {
		c.RedisWriteTimeout = 30 * time.Second
	}
	defDur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defDur(&c.HTTPReadHeaderTimeout, 5*time.Second)
	defDur(&c.HTTPReadTimeout, 30*time.Second)
	defDur(&c.HTTPWriteTimeout, 2*time.Minute)
	defDur(&c.HTTPIdleTimeout, 2*time.Minute)
	if c.HTTPMaxHeaderBytes == 0 {
		c.HTTPMaxHeaderBytes = 64 << 10
	}
	defDur(&c.GRPCMaxConnIdle, 5*time.Minute)
	defDur(&c.GRPCKeepaliveTime, time.Minute)
	defDur(&c.GRPCKeepaliveTimeout, 20*time.Second)
	defDur(&c.GRPCKeepaliveMinTime, 5*time.Second)
	if c.RaftMaxConns == 0 {
		c.RaftMaxConns = 16384
	}
	if c.RaftMaxConnsPerIP == 0 {
		c.RaftMaxConnsPerIP = 4096
	}
	defDur(&c.RaftHandshakeTimeout, 5*time.Second)
	if c.RedisMaxBulk == 0 {
		c.RedisMaxBulk = max(c.Limits.MaxValueSize, keys.MaxRedisFieldLen)
	}
	if c.RedisMaxArgs == 0 {
		c.RedisMaxArgs = 16384
	}
	if c.RedisMaxCommandBytes == 0 {
		c.RedisMaxCommandBytes = min(2*c.RedisMaxBulk+64<<10, maxRedisEntryLimit)
	}
	if c.RedisMaxMultiCommands == 0 {
		c.RedisMaxMultiCommands = fsm.MaxRedisTxCmds
	}
	if c.RedisMaxMultiBytes == 0 {
		c.RedisMaxMultiBytes = min(2*c.Limits.MaxValueSize+64<<10, maxRedisEntryLimit)
	}
	if c.BlockCacheSize == 0 {
		c.BlockCacheSize = 32 << 20
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = 4 << 20
	}
	if c.LogStore == "" {
		c.LogStore = LogStorePebble
	}
	if c.Testing.Dial == nil {
		d := &net.Dialer{}
		c.Testing.Dial = d.DialContext
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("cluster: invalid config")

// Validate reports the first invalid field of c (after WithDefaults).
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	if !transport.ValidNodeID(c.ID) {
		return bad("id %q: want 1-64 letters, digits, '.', '_' or '-'", c.ID)
	}
	if c.DataDir == "" {
		return bad("data dir is empty")
	}
	for name, a := range map[string]string{"raft": c.RaftAddr, "grpc": c.GRPCAddr, "gossip": c.GossipAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("%s address %q: %v", name, a, err)
		}
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return bad("http address %q: %v", c.HTTPAddr, err)
		}
	}
	if lo, hi := c.protocolRange(); lo < 1 || lo > hi || c.Testing.IncarnationGrace < 0 {
		return bad("protocol versions %d..%d, incarnation grace %v: want 1 <= min <= max and a grace >= 0", lo, hi, c.Testing.IncarnationGrace)
	}
	if c.BlockCacheSize < 1<<20 || c.BlockCacheSize > 64<<30 {
		return bad("block cache size %d: want 1 MiB..64 GiB", c.BlockCacheSize)
	}
	if c.MemTableSize < 256<<10 || c.MemTableSize > 1<<30 {
		return bad("memtable size %d: want 256 KiB..1 GiB", c.MemTableSize)
	}
	if c.WALMinSyncInterval < 0 || c.WALMinSyncInterval > raftlog.MaxMinSyncInterval {
		return bad("WAL min sync interval %v: want 0..%v", c.WALMinSyncInterval, raftlog.MaxMinSyncInterval)
	}
	if c.WALMinSyncInterval > 0 && c.LogStore == LogStoreBolt {
		return bad("WAL min sync interval %v: only the %q log store has one", c.WALMinSyncInterval, LogStorePebble)
	}
	if c.RedisAddr != "" {
		if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
			return bad("redis address %q: %v", c.RedisAddr, err)
		}
	}
	if c.BootstrapExpect < 0 || (c.BootstrapExpect == 0 && len(c.Join) == 0) {
		return bad("bootstrap-expect %d: want >= 1 (or 0 with join addresses: wait to be admitted)", c.BootstrapExpect)
	}
	if c.DeadNodeTimeout < time.Second || c.ReconcileInterval < 10*time.Millisecond {
		return bad("dead node timeout %v (want >= 1s), reconcile interval %v (want >= 10ms)", c.DeadNodeTimeout, c.ReconcileInterval)
	}
	if err := errors.Join(gossip.ValidLabel(c.Zone), gossip.ValidLabel(c.Host)); err != nil {
		return bad("zone or host %v", err)
	}
	if _, err := placement.ParseIsolation(c.IsolationLevel); err != nil {
		return bad("%v", err)
	}
	if c.Shards < 0 || c.Shards > shard.MaxShards {
		return bad("shards %d: want 1..%d, or 0 for automatic", c.Shards, shard.MaxShards)
	}
	if err := c.bootstrapPolicy().Validate(); err != nil {
		return bad("%v", err)
	}
	if c.PolicyInterval < 10*time.Millisecond || c.PolicyCooldown < 0 {
		return bad("policy interval %v (want >= 10ms), cooldown %v (want >= 0)", c.PolicyInterval, c.PolicyCooldown)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > 7 {
		return bad("replication factor %d: want 1..7", c.ReplicationFactor)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return bad("election timeout %v is below heartbeat timeout %v", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("leader lease %v exceeds heartbeat timeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.QuietAfter < 0 || c.QuietAfter > 0 && c.QuietAfter <= c.CommitTimeout {
		return bad("quiet after %v: want 0 (off) or above the commit timeout %v", c.QuietAfter, c.CommitTimeout)
	}
	if c.QuietAfter > 0 && (c.QuietTimeout < c.HeartbeatTimeout || c.QuietTimeout < c.ElectionTimeout) {
		return bad("quiet timeout %v is below the heartbeat (%v) or election (%v) timeout", c.QuietTimeout, c.HeartbeatTimeout, c.ElectionTimeout)
	}
	if err := c.replicaConfig(0).ValidateRaft(); err != nil {
		return bad("raft: %v", err)
	}
	if c.GossipProfile != "lan" && c.GossipProfile != "local" {
		return bad("gossip profile %q: want lan or local", c.GossipProfile)
	}
	if l := c.Limits; l.MaxKeySize > maxKeySizeLimit || l.MaxValueSize > maxValueSizeLimit || l.MaxBatchOps > maxBatchOpsLimit {
		return bad("limits %+v: keys at most %d bytes, values %d, batches %d ops", l, maxKeySizeLimit, maxValueSizeLimit, maxBatchOpsLimit)
	}
	if c.LogStore != LogStorePebble && c.LogStore != LogStoreBolt {
		return bad("log store %q: want %s or %s", c.LogStore, LogStorePebble, LogStoreBolt)
	}
	if c.MaxLeasesPerShard < 1 || c.MaxLeasesPerShard > 10_000_000 {
		return bad("max leases per shard %d: want 1..10000000", c.MaxLeasesPerShard)
	}
	if c.MaxKeysPerLease < 1 || c.MaxKeysPerLease > fsm.MaxLeaseKeysBound {
		return bad("max keys per lease %d: want 1..%d", c.MaxKeysPerLease, fsm.MaxLeaseKeysBound)
	}
	if c.LeaseCheckpointInterval < 10*time.Millisecond || c.LeaseCheckpointInterval > time.Minute {
		return bad("lease checkpoint interval %v: want 10ms..1m", c.LeaseCheckpointInterval)
	}
	if c.MaxScanPage < 1 || c.MaxScanPage > maxScanPageLimit {
		return bad("max scan page %d: want 1..%d", c.MaxScanPage, maxScanPageLimit)
	}
	if c.MaxPageBytes < minPageBytes || c.MaxPageBytes > maxPageBytesLimit {
		return bad("max page bytes %d: want %d..%d", c.MaxPageBytes, minPageBytes, maxPageBytesLimit)
	}
	if c.MaxKeysReply < 1 || c.MaxKeysReply > maxKeysReplyLimit {
		return bad("max keys reply %d: want 1..%d", c.MaxKeysReply, maxKeysReplyLimit)
	}
	if c.RequestTimeout < 10*time.Millisecond || c.RequestTimeout > time.Hour {
		return bad("request timeout %v: want 10ms..1h", c.RequestTimeout)
	}
	if c.HistoryRevisions < 0 && c.HistoryAge < 0 {
		return bad("history: a count (history-revisions) or an age (history-age) must bound it")
	}
	if c.MaxWatchersPerConn > c.MaxWatchers {
		return bad("max watchers per connection %d over the node's %d", c.MaxWatchersPerConn, c.MaxWatchers)
	}
	if c.MaxWatchersPerIdentity < 1 || c.MaxWatchersPerIdentity > c.MaxWatchers {
		return bad("max watchers per identity %d: want 1..%d (max watchers)", c.MaxWatchersPerIdentity, c.MaxWatchers)
	}
	if c.MaxKeepAliveStreamsPerIdentity < 1 || c.MaxKeepAliveStreamsPerIdentity > maxStreamsLimit {
		return bad("max keep-alive streams per identity %d: want 1..%d", c.MaxKeepAliveStreamsPerIdentity, maxStreamsLimit)
	}
	if c.MaxConcurrentCatchUps < 1 || c.MaxConcurrentCatchUps > maxCatchUpsLimit {
		return bad("max concurrent catch-ups %d: want 1..%d", c.MaxConcurrentCatchUps, maxCatchUpsLimit)
	}
	if c.MaxWatchMemory < 4<<20 || c.MaxWatchMemory > 1<<40 {
		return bad("max watch memory %d: want 4 MiB..1 TiB", c.MaxWatchMemory)
	}
	if c.MaxConcurrentStreams > maxStreamsLimit {
		return bad("max concurrent streams %d: want 1..%d", c.MaxConcurrentStreams, maxStreamsLimit)
	}
	if c.MaxConnsPerIP < 1 || c.MaxConnsPerIP > maxConnsPerIPLimit {
		return bad("max connections per IP %d: want 1..%d", c.MaxConnsPerIP, maxConnsPerIPLimit)
	}
	if c.RedisIdleTimeout < time.Second || c.RedisIdleTimeout > 24*time.Hour {
		return bad("redis idle timeout %v: want 1s..24h", c.RedisIdleTimeout)
	}
	if c.RedisWriteTimeout < 100*time.Millisecond || c.RedisWriteTimeout > time.Hour {
		return bad("redis write timeout %v: want 100ms..1h", c.RedisWriteTimeout)
	}
	for _, d := range []struct {
		name     string
		v        time.Duration
		min, max time.Duration
	}{
		{"http read header timeout", c.HTTPReadHeaderTimeout, 100 * time.Millisecond, time.Hour},
		{"http read timeout", c.HTTPReadTimeout, 100 * time.Millisecond, time.Hour},
		{"http write timeout", c.HTTPWriteTimeout, time.Second, 24 * time.Hour},
		{"http idle timeout", c.HTTPIdleTimeout, 100 * time.Millisecond, 24 * time.Hour},
		{"grpc max connection idle", c.GRPCMaxConnIdle, 100 * time.Millisecond, 24 * time.Hour},
		{"grpc keepalive time", c.GRPCKeepaliveTime, time.Second, 24 * time.Hour},
		{"grpc keepalive timeout", c.GRPCKeepaliveTimeout, time.Second, time.Hour},
		{"grpc keepalive min time", c.GRPCKeepaliveMinTime, time.Second, maxKeepaliveMinTime},
		{"raft handshake timeout", c.RaftHandshakeTimeout, 100 * time.Millisecond, time.Minute},
	} {
		if d.v < d.min || d.v > d.max {
			return bad("%s %v: want %v..%v", d.name, d.v, d.min, d.max)
		}
	}
	if c.HTTPMaxHeaderBytes < 4<<10 || c.HTTPMaxHeaderBytes > 1<<20 {
		return bad("http max header bytes %d: want 4096..1048576", c.HTTPMaxHeaderBytes)
	}
	if c.RaftMaxConns < 1 || c.RaftMaxConns > maxConnsPerIPLimit || c.RaftMaxConnsPerIP < 1 || c.RaftMaxConnsPerIP > maxConnsPerIPLimit {
		return bad("raft max connections %d, per IP %d: want 1..%d", c.RaftMaxConns, c.RaftMaxConnsPerIP, maxConnsPerIPLimit)
	}
	if c.RedisMaxBulk < 1<<10 || c.RedisMaxBulk > maxValueSizeLimit {
		return bad("redis max bulk %d: want 1024..%d", c.RedisMaxBulk, maxValueSizeLimit)
	}
	if c.RedisMaxArgs < 16 || c.RedisMaxArgs > 1<<20 {
		return bad("redis max args %d: want 16..%d", c.RedisMaxArgs, 1<<20)
	}
	if c.RedisMaxCommandBytes < 4<<10 || c.RedisMaxCommandBytes > maxRedisEntryLimit {
		return bad("redis max command bytes %d: want 4096..%d", c.RedisMaxCommandBytes, maxRedisEntryLimit)
	}
	if c.RedisMaxMultiCommands < 1 || c.RedisMaxMultiCommands > fsm.MaxRedisTxCmds {
		return bad("redis max multi commands %d: want 1..%d", c.RedisMaxMultiCommands, fsm.MaxRedisTxCmds)
	}
	if c.RedisMaxMultiBytes < 4<<10 || c.RedisMaxMultiBytes > maxRedisEntryLimit {
		return bad("redis max multi bytes %d: want 4096..%d", c.RedisMaxMultiBytes, maxRedisEntryLimit)
	}
	if err := c.TLS.Validate(); err != nil {
		return bad("%v", err)
	}
	if err := gossip.ValidKeys(c.GossipKeys); err != nil {
		return bad("%v", err)
	}
	return c.checkSecure()
}

// ErrInsecure is returned by Validate (wrapping ErrConfig) for a node that
// would listen on a non-loopback address without TLS or gossip encryption.
var ErrInsecure = errors.New("cluster: insecure listener")

// insecureError is one clear line; it matches ErrInsecure and ErrConfig.
type insecureError struct{ msg string }

func (e *insecureError) Error() string   { return e.msg }
func (e *insecureError) Unwrap() []error { return []error{ErrInsecure, ErrConfig} }

// checkSecure refuses non-loopback listeners without TLS (and a gossip
// address without a key) unless Insecure is set, and Auth without TLS on
// any non-loopback listener even with Insecure: without TLS a node's
// identity and a client's token cross the network in the clear, so auth
// there would be a promise the node cannot keep. Each listener follows
// CheckListener.
func (c Config) checkSecure() error {
	listeners := [][2]string{{"grpc", c.GRPCAddr}, {"raft", c.RaftAddr}, {"http", c.HTTPAddr}, {"gossip", c.GossipAddr}, {"redis", c.RedisAddr}}
	if !c.TLS.Enabled() {
		if c.ClusterSecretFile != "" && !c.Auth {
			return errConfigf("cluster secret file %s: only used with --auth without TLS", c.ClusterSecretFile)
		}
	} else if c.ClusterSecretFile != "" {
		return errConfigf("cluster secret file %s: not used with TLS (node certificates prove who a node is); drop --cluster-secret-file", c.ClusterSecretFile)
	}
	for _, l := range listeners {
		if err := c.CheckListener(l[0], l[1]); err != nil {
			return err
		}
	}
	// After the listeners: a listener's refusal says more.
	if !c.TLS.Enabled() && c.Auth && c.ClusterSecretFile == "" && len(c.Join) > 0 {
		return errConfigf("--auth without TLS on a node that joins others (--join) needs --cluster-secret-file: the same secret file on every node (a one-node cluster makes its own)")
	}
	if c.Insecure || !c.TLS.Enabled() {
		return nil
	}
	if c.GossipAddr != "" && !IsLoopback(c.GossipAddr) && len(c.GossipKeys) == 0 {
		return &insecureError{fmt.Sprintf("refusing to gossip on %s unencrypted: set --gossip-key-file (swarmnode certs ca writes one) or pass --insecure", c.GossipAddr)}
	}
	return nil
}

// CheckListener is the node's rule for one of its listeners, what (a name
// for the message: "grpc", "redis", "etcd") on addr ("" is no listener):
// off loopback it needs TLS, or Insecure; with Auth it needs TLS even with
// Insecure (tokens and node credentials would cross the network in the
// clear). The error matches ErrInsecure and ErrConfig. Validate applies
// it to the node's own listeners; a front with a listener of its own
// (etcdfront) applies it to its address.
func (c Config) CheckListener(what, addr string) error {
	if addr == "" || c.TLS.Enabled() || IsLoopback(addr) {
		return nil
	}
	if c.Auth {
		return &insecureError{fmt.Sprintf("refusing --auth without TLS on %s (%s), even with --insecure: tokens and node credentials would cross the network in the clear; set --tls-ca, --tls-cert and --tls-key or listen on loopback", addr, what)}
	}
	if !c.Insecure {
		return &insecureError{fmt.Sprintf("refusing to listen on %s (%s) without TLS: set --tls-ca, --tls-cert and --tls-key (swarmnode certs makes them) or pass --insecure", addr, what)}
	}
	return nil
}

func errConfigf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
}

// cacheCapacity is the size of the node's Pebble cache: BlockCacheSize for
// blocks plus the memtables Pebble charges against it (each store reserves
// its memtables from its cache): one per shard replica and the meta
// replica's, and the shared Raft log store's. Without them the memtables
// took the whole default cache, and every read missed (measured: 0 bytes
// of blocks cached, 17k hits against 520k misses in a ledger load).
// Shards is the count at bootstrap; a node of a cluster with more shards
// than its own setting holds less in blocks.
func (c Config) cacheCapacity() int64 {
	n := c.BlockCacheSize + int64(c.BootstrapShards()+1)*int64(c.MemTableSize)
	if c.LogStore == LogStorePebble {
		n += raftlog.DefaultMemTableSize
	}
	return n
}

// IsLoopback reports whether a listen address binds loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReplyLimits are the bounds of a Redis read that lists keys (KEYS, SCAN).
func (c Config) ReplyLimits() fsm.ReplyLimits {
	return fsm.ReplyLimits{MaxKeys: c.MaxKeysReply, MaxBytes: c.MaxPageBytes}
}

// defaultHost is the machine's hostname as a host label: the hostname, or
// its first DNS label when it is longer than a label may be; "" when
// there is none that makes a valid label.
func defaultHost() string {
	h, _ := os.Hostname()
	if len(h) > gossip.MaxLabel {
		h, _, _ = strings.Cut(h, ".")
	}
	if gossip.ValidLabel(h) != nil {
		return ""
	}
	return h
}
