package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/cluster/gossip"
	"github.com/swarmkv/swarmkv/etcdfront"
	"github.com/swarmkv/swarmkv/internal/faultnet"
	"github.com/swarmkv/swarmkv/secrets"
	"github.com/swarmkv/swarmkv/server"
)

// tokenKeysEnv holds the agent pools' bot-token key ring inline, the same
// text as a --token-keys-file.
const tokenKeysEnv = "SWARM_TOKEN_KEYS"

// serveOptions are the values of serve's flags: the node's Config and
// the flags that are not Config fields as they are.
type serveOptions struct {
	cfg                                 cluster.Config
	join, logLevel, keysFile, gossipKey string
	maxStreams                          uint
	cacheMiB                            int64
	memtableKiB                         uint64
	faults                              bool
	maxShardSize                        sizeValue // 0: off (Config.MaxShardBytes -1)
	gcPercent                           int       // 0: $GOGC, else defaultGCPercent
	// etcd is the etcd front's config (off without an address), its
	// request bound set from etcdMaxRequest.
	etcd           etcdfront.Config
	etcdMaxRequest sizeValue
}

// defaultGCPercent is the node's Go GC target (GOGC) unless --gc-percent or
// GOGC says otherwise. A static build (CGO_ENABLED=0, as released) keeps
// Pebble's block cache and memtables on the Go heap, where they count as
// live data: at Go's default of 100 the heap grows to twice them before a
// collection, and the largest node's RSS reached 2.0-2.1x etcd's. At 50 it
// reached 1.6x, with throughput within the host's spread (the cache's
// blocks hold no pointers, so marking them is cheap): docs/performance-log.md,
// round 14.
const defaultGCPercent = 50

// gcPercent is the GC target the node runs with: flag when set (10..1000),
// else GOGC from the environment when set (the runtime applied it), else
// defaultGCPercent. apply says whether to set it (the runtime has not).
func gcPercent(flag int, env string) (percent int, apply bool, err error) {
	switch {
	case flag != 0:
		if flag < 10 || flag > 1000 {
			return 0, false, fmt.Errorf("serve: --gc-percent %d: want 10..1000 (0: GOGC, else %d)", flag, defaultGCPercent)
		}
		return flag, true, nil
	case env != "":
		return 0, false, nil
	}
	return defaultGCPercent, true, nil
}

// serveFlags defines serve's flags on fs. Every flag that sets a Config
// field WithDefaults fills takes its default from d (the caller passes
// cluster.Config{}.WithDefaults(); TestServeFlagDefaults passes another),
// so a default is written once, in cluster/config.go. The RESP front is
// off for `serve` unless asked for; the no-argument embedded node serves
// it on 127.0.0.1:7104.
func serveFlags(fs *pflag.FlagSet, d cluster.Config, embedded bool) *serveOptions {
	o := &serveOptions{}
	cfg := &o.cfg
	fs.StringVar(&cfg.ID, "id", "node1", "stable node id (never reuse one for another data dir)")
	fs.StringVar(&cfg.DataDir, "data-dir", "./data", "data directory")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", d.RaftAddr, "Raft listen address, shared by every shard replica")
	fs.StringVar(&cfg.RaftAdvertise, "raft-advertise", "", "Raft address peers dial (default: raft-addr)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", d.GRPCAddr, "gRPC client API address")
	fs.StringVar(&cfg.GRPCAdvertise, "grpc-advertise", "", "gRPC address given to clients (default: grpc-addr)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7102", "HTTP address of the admin API, /healthz, /readyz, /metrics and /debug/pprof (empty: off)")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", d.GossipAddr, "memberlist gossip address (TCP and UDP)")
	redisDefault := ""
	if embedded {
		redisDefault = "127.0.0.1:7104"
	}
	fs.StringVar(&cfg.RedisAddr, "redis-addr", redisDefault, "Redis protocol (RESP2/RESP3) address of the asset catalogue front (empty: off; default off for serve, 127.0.0.1:7104 for the no-argument node)")
	// The etcd front's settings are its own (etcdfront.Config), their
	// defaults its WithDefaults'.
	ed := etcdfront.Config{}.WithDefaults()
	etcdDefault := ""
	if embedded {
		etcdDefault = "127.0.0.1:2379"
	}
	fs.StringVar(&o.etcd.Addr, "etcd-addr", etcdDefault, "etcd v3 API address (etcdctl, go.etcd.io/etcd/client/v3; docs/etcd.md) (empty: off; default off for serve, 127.0.0.1:2379 for the no-argument node)")
	fs.StringVar(&o.etcd.Namespace, "etcd-namespace", ed.Namespace, "etcd namespace of calls that name none (one namespace: one shard, one revision sequence)")
	fs.IntVar(&o.etcd.MaxTxnOps, "etcd-max-txn-ops", ed.MaxTxnOps, "most compares, and operations per branch, of an etcd txn (etcd's --max-txn-ops)")
	o.etcdMaxRequest = sizeValue(ed.MaxRequestBytes)
	fs.Var(&o.etcdMaxRequest, "etcd-max-request-bytes", "largest etcd write request (etcd's --max-request-bytes; at most 8MiB)")
	fs.IntVar(&o.etcd.MaxWatchers, "etcd-max-watchers", ed.MaxWatchers, "most etcd watchers the node serves; a watch create over it is refused")
	fs.IntVar(&o.etcd.MaxWatchersPerConn, "etcd-max-watchers-per-conn", ed.MaxWatchersPerConn, "most etcd watchers one client connection may hold")
	fs.DurationVar(&o.etcd.WatchProgressInterval, "etcd-watch-progress-interval", ed.WatchProgressInterval, "progress notification interval of etcd watchers that ask for them (etcd's --experimental-watch-progress-notify-interval)")
	fs.DurationVar(&o.etcd.WatchSendTimeout, "etcd-watch-send-timeout", ed.WatchSendTimeout, "end an etcd watch stream whose client reads nothing for this long (the official client resumes it)")
	fs.StringVar(&cfg.GossipAdvertise, "gossip-advertise", "", "gossip address peers use (default: gossip-addr)")
	fs.StringVar(&o.join, "join", "", "comma-separated gossip addresses of nodes to join")
	fs.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "number of nodes that bootstrap the cluster together (0: 1 without --join; with --join, wait to be admitted by swarmnode join)")
	fs.StringVar(&cfg.Zone, "zone", d.Zone, "failure-domain zone of this node (an availability zone, a rack; empty: its own zone); replicas of a shard go to distinct zones (docs/operations.md, Failure domains)")
	fs.StringVar(&cfg.Host, "host", d.Host, "failure-domain host of this node (default: the hostname); never two replicas of a shard on one host while hosts suffice")
	fs.StringVar(&cfg.IsolationLevel, "isolation-level", d.IsolationLevel, "zone, host or none: a new replica never goes next to one in the same zone (host) beyond its share; with zone, a lost zone's replicas wait for it instead of stacking in the others")
	fs.DurationVar(&cfg.DeadNodeTimeout, "dead-node-timeout", d.DeadNodeTimeout, "replace the replicas of a node gossip reports dead for this long")
	fs.IntVar(&cfg.Shards, "shards", d.Shards, "shards (Raft groups) at bootstrap: 0 automatic (max(1, bootstrap nodes / --nodes-per-shard), and the policy\n"+
		"splits and merges as members come and go); N: N shards, the count rule off (the size and load rules stay)")
	fs.IntVar(&cfg.NodesPerShard, "nodes-per-shard", d.NodesPerShard, "automatic shards: one shard per this many active members (recorded at bootstrap; swarmnode shards policy changes it)")
	o.maxShardSize = sizeValue(max(d.MaxShardBytes, 0))
	fs.Var(&o.maxShardSize, "max-shard-size", "split a shard whose leader's store uses more disk space, e.g. 1GiB, 512MiB (0: off; recorded at bootstrap)")
	fs.Float64Var(&cfg.MaxShardLoad, "max-shard-load", d.MaxShardLoad, "split a shard applying more commands per second (0: off; recorded at bootstrap)")
	fs.DurationVar(&cfg.PolicyInterval, "policy-interval", d.PolicyInterval, "how often the meta leader evaluates the shard policy")
	fs.DurationVar(&cfg.PolicyCooldown, "policy-cooldown", d.PolicyCooldown, "least time between a slot move and the next one the policy plans")
	fs.IntVar(&cfg.ReplicationFactor, "replication-factor", d.ReplicationFactor, "voters per shard (fewer when the cluster is smaller)")
	fs.IntVar(&cfg.Limits.MaxValueSize, "max-value-size", d.Limits.MaxValueSize, "largest value accepted, in bytes (at most 64 MiB)")
	fs.IntVar(&cfg.Limits.MaxKeySize, "max-key-size", d.Limits.MaxKeySize, "largest key accepted, in bytes (at most 8192)")
	fs.IntVar(&cfg.Limits.MaxBatchOps, "max-batch-ops", d.Limits.MaxBatchOps, "most guards and mutations in one batch (at most 65536)")
	fs.IntVar(&cfg.MaxScanPage, "max-scan-page", d.MaxScanPage, "most items in one scan or list page (at most 100000)")
	fs.IntVar(&cfg.MaxLeasesPerShard, "max-leases-per-shard", d.MaxLeasesPerShard, "most leases one shard holds; grants over it are refused")
	fs.IntVar(&cfg.MaxKeysPerLease, "max-keys-per-lease", d.MaxKeysPerLease, "most keys (kv keys, runners, agents) one lease holds; attachments over it are refused (1..1000000)")
	fs.DurationVar(&cfg.LeaseCheckpointInterval, "lease-checkpoint-interval", d.LeaseCheckpointInterval, "how often a shard leader checkpoints the remaining TTLs of leases not kept alive")
	fs.IntVar(&cfg.MaxKeysReply, "max-keys-reply", d.MaxKeysReply, "most keys a RESP KEYS may answer; a larger result is refused with an error pointing to SCAN (1..10000000)")
	fs.IntVar(&cfg.MaxPageBytes, "max-page-bytes", d.MaxPageBytes, "largest encoded size of one scan or list page, and of a KEYS reply, in bytes (4096..268435456; a page holds at least one item)")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", d.RequestTimeout, "deadline of a gRPC call sent without one, and of each RESP command (10ms..1h)")
	fs.UintVar(&o.maxStreams, "max-concurrent-streams", uint(d.MaxConcurrentStreams), "most concurrent calls on one gRPC connection (1..1048576)")
	fs.Int64Var(&cfg.HistoryRevisions, "history-revisions", d.HistoryRevisions, "watch history: revisions each shard keeps (-1: no count bound)")
	fs.DurationVar(&cfg.HistoryAge, "history-age", d.HistoryAge, "watch history: age each shard keeps (-1s: no age bound)")
	fs.DurationVar(&cfg.HistoryCompactEvery, "history-compact-every", d.HistoryCompactEvery, "how often a shard leader compacts the watch history")
	fs.IntVar(&cfg.MaxWatchers, "max-watchers", d.MaxWatchers, "most watches this node serves")
	fs.IntVar(&cfg.MaxWatchersPerConn, "max-watchers-per-conn", d.MaxWatchersPerConn, "most watches of one client connection")
	fs.IntVar(&cfg.MaxWatchersPerIdentity, "max-watchers-per-identity", d.MaxWatchersPerIdentity, "most watches of one identity (token, certificate; without auth, client IP) over all its connections (1..max-watchers)")
	fs.IntVar(&cfg.MaxKeepAliveStreamsPerIdentity, "max-keepalive-streams-per-identity", d.MaxKeepAliveStreamsPerIdentity, "most lease keep-alive streams of one identity (token, certificate; without auth, client IP) (1..1048576)")
	fs.Int64Var(&cfg.MaxWatchMemory, "max-watch-memory", d.MaxWatchMemory, "bytes of watch messages the node's watches hold at once (list and catch-up pages, messages being sent); one identity holds at most a quarter, more wait (4 MiB..1 TiB)")
	fs.IntVar(&cfg.MaxConcurrentCatchUps, "max-concurrent-catchups", d.MaxConcurrentCatchUps, "most watches reading history at once to catch up; more wait 250ms, then are refused with a retry hint (1..4096)")
	fs.IntVar(&cfg.WatchBuffer, "watch-buffer", d.WatchBuffer, "revisions buffered per watcher; a watcher that falls further behind is cancelled (it resumes)")
	fs.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", d.MaxConnsPerIP, "most open connections from one client IP, on each of the gRPC and RESP listeners (1..1048576)")
	fs.DurationVar(&cfg.RedisIdleTimeout, "redis-idle-timeout", d.RedisIdleTimeout, "close a RESP connection idle this long (1s..24h)")
	fs.DurationVar(&cfg.RedisWriteTimeout, "redis-write-timeout", d.RedisWriteTimeout, "disconnect a RESP client that takes longer to accept a reply (100ms..1h)")
	fs.DurationVar(&cfg.HTTPReadHeaderTimeout, "http-read-header-timeout", d.HTTPReadHeaderTimeout, "admin HTTP: most time to read a request's headers (100ms..1h)")
	fs.DurationVar(&cfg.HTTPReadTimeout, "http-read-timeout", d.HTTPReadTimeout, "admin HTTP: most time to read a whole request (100ms..1h)")
	fs.DurationVar(&cfg.HTTPWriteTimeout, "http-write-timeout", d.HTTPWriteTimeout, "admin HTTP: most time to write a response, CPU profiles included (1s..24h)")
	fs.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", d.HTTPIdleTimeout, "admin HTTP: close a keep-alive connection idle this long (100ms..24h)")
	fs.IntVar(&cfg.HTTPMaxHeaderBytes, "http-max-header-bytes", d.HTTPMaxHeaderBytes, "admin HTTP: largest request header, in bytes (4096..1048576)")
	fs.DurationVar(&cfg.GRPCMaxConnIdle, "grpc-max-conn-idle", d.GRPCMaxConnIdle, "close (GOAWAY) a gRPC connection without a call for this long (100ms..24h)")
	fs.DurationVar(&cfg.GRPCKeepaliveTime, "grpc-keepalive-time", d.GRPCKeepaliveTime, "ping a gRPC client silent this long (1s..24h)")
	fs.DurationVar(&cfg.GRPCKeepaliveTimeout, "grpc-keepalive-timeout", d.GRPCKeepaliveTimeout, "close a gRPC connection whose ping is not answered within this (1s..1h)")
	fs.DurationVar(&cfg.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", d.GRPCKeepaliveMinTime, "least interval between a client's keepalive pings; faster ones get GOAWAY too_many_pings (1s..15s; the Go client pings every 30s)")
	fs.IntVar(&cfg.RaftMaxConns, "raft-max-conns", d.RaftMaxConns, "most open connections on the Raft port (1..1048576)")
	fs.IntVar(&cfg.RaftMaxConnsPerIP, "raft-max-conns-per-ip", d.RaftMaxConnsPerIP, "most open connections on the Raft port from one IP (1..1048576; a peer opens about five per Raft group it shares)")
	fs.DurationVar(&cfg.RaftHandshakeTimeout, "raft-handshake-timeout", d.RaftHandshakeTimeout, "most time a Raft connection may take for its TLS handshake and header (100ms..1m)")
	// 0 below: derived from other flags by WithDefaults.
	fs.IntVar(&cfg.RedisMaxBulk, "redis-max-bulk", 0, "largest argument of a RESP command, in bytes, refused as its header arrives (0: max(--max-value-size, 2 KiB); 1024..64 MiB)")
	fs.IntVar(&cfg.RedisMaxArgs, "redis-max-args", d.RedisMaxArgs, "most arguments of a RESP command (16..1048576)")
	fs.IntVar(&cfg.RedisMaxCommandBytes, "redis-max-command-bytes", 0, "largest RESP command on the wire, in bytes (0: 2 × --redis-max-bulk + 64 KiB; 4096..128 MiB)")
	fs.IntVar(&cfg.RedisMaxMultiCommands, "redis-max-multi-commands", d.RedisMaxMultiCommands, "most commands a MULTI block queues (1..4096)")
	fs.IntVar(&cfg.RedisMaxMultiBytes, "redis-max-multi-bytes", 0, "most bytes of the commands a MULTI block queues, so of one Redis log entry (0: 2 × --max-value-size + 64 KiB; 4096..128 MiB)")
	fs.Int64Var(&o.cacheMiB, "block-cache-mib", d.BlockCacheSize>>20, "Pebble block cache for table blocks, shared by every local store, in MiB (1..65536; the node adds the memtables, which Pebble charges against the cache)")
	fs.IntVar(&o.gcPercent, "gc-percent", 0, fmt.Sprintf("Go GC target, as GOGC (10..1000; 0: GOGC from the environment, else %d, which keeps the Pebble memory on the Go heap from doubling)", defaultGCPercent))
	fs.Uint64Var(&o.memtableKiB, "memtable-kib", uint64(d.MemTableSize>>10), "Pebble memtable size of each shard replica, in KiB (256..1048576)")
	fs.DurationVar(&cfg.WALMinSyncInterval, "wal-min-sync-interval", d.WALMinSyncInterval, "least time between two fsyncs of the Raft log store's WAL: appends arriving sooner wait and share the next fsync (0: sync at once; at most 10ms; pebble log store)")
	fs.StringVar(&cfg.LogStore, "log-store", d.LogStore, "Raft log store: pebble (one per node, shared by every shard) or bolt (raft-boltdb per replica); a data dir keeps the one it was created with")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", d.SnapshotThreshold, "log entries between snapshots")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", d.SnapshotInterval, "how often replicas check the snapshot threshold")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", d.HeartbeatTimeout, "Raft heartbeat timeout")
	fs.DurationVar(&cfg.ElectionTimeout, "election-timeout", d.ElectionTimeout, "Raft election timeout")
	fs.DurationVar(&cfg.CommitTimeout, "commit-timeout", d.CommitTimeout, "how long an idle shard leader waits before telling followers the commit index\n"+
		"(bounds how stale a follower's reads of an idle shard are; the meta group uses at most 50ms)")
	fs.DurationVar(&cfg.QuietAfter, "quiet-after", d.QuietAfter, "quiet groups: a shard group idle this long (no request, no live lease) slows its Raft timers to --quiet-timeout\n"+
		"and wakes on its first request (0: off; above --commit-timeout; docs/architecture.md, \"Quiet groups\")")
	fs.DurationVar(&cfg.QuietTimeout, "quiet-timeout", d.QuietTimeout, "a quiet group's heartbeat and election timeout (lease half of it): a node failure moves a quiet group's\n"+
		"leader within about twice this plus an election")
	fs.StringVar(&cfg.GossipProfile, "gossip-profile", d.GossipProfile, "memberlist timing: lan or local")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.keysFile, "token-keys-file", "", "`PATH` of the key ring that encrypts agent-pool bot tokens: one key_id:base64(32-byte key) per line,\n"+
		"the first seals new tokens, the others stay readable (rotate by prepending a key); '#' comments.\n"+
		"Every node needs the same ring. "+tokenKeysEnv+" may hold the same text instead. Without a ring,\n"+
		"registering bots fails")
	fs.StringVar(&cfg.TLS.CAFile, "tls-ca", "", "cluster CA file (PEM): TLS 1.3 on every listener, mTLS between nodes, client authentication on")
	fs.StringVar(&cfg.TLS.CertFile, "tls-cert", "", "this node's certificate (PEM, SAN URI swarmkv://node/<id>; made by swarmnode certs node); re-read when it changes")
	fs.StringVar(&cfg.TLS.KeyFile, "tls-key", "", "this node's key (PEM); re-read when it changes")
	fs.StringVar(&o.gossipKey, "gossip-key-file", "", "`PATH` of the gossip keyring: base64 16/24/32-byte keys, one per line, the first encrypts (swarmnode certs ca writes one)")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "allow non-loopback listen addresses without TLS and gossip encryption")
	fs.BoolVar(&o.faults, "fault-injection", false, "test clusters only: serve PUT /debug/faults (admin API), which delays, drops and cuts this node's Raft traffic (make jepsen)")
	fs.BoolVar(&cfg.Auth, "auth", false, "require client authentication (tokens) even without TLS (always on with TLS); without TLS loopback listeners only")
	fs.StringVar(&cfg.ClusterSecretFile, "cluster-secret-file", "", "`PATH` of the cluster secret for --auth without TLS: at least 32 random bytes (head -c 32 /dev/urandom | base64),\n"+
		"mode 0600, the same file on every node; node-to-node calls and Raft connections prove they know it.\n"+
		"Needed by nodes that --join others; a lone node makes <data-dir>/cluster-secret")
	return o
}

func newServeCmd(embedded bool) *cobra.Command {
	c := &cobra.Command{Use: "serve", Short: "start a node (swarmnode serve -h: its flags)", Args: nargs(0, 0)}
	o := serveFlags(c.Flags(), cluster.Config{}.WithDefaults(), embedded)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return serve(c.Context(), o, c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

func serve(ctx context.Context, o *serveOptions, stdout, stderr io.Writer) error {
	cfg := &o.cfg
	logger, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	if o.join != "" {
		for _, j := range strings.Split(o.join, ",") {
			if j = strings.TrimSpace(j); j != "" {
				cfg.Join = append(cfg.Join, j)
			}
		}
	}
	if o.gossipKey != "" {
		if cfg.GossipKeys, err = gossip.LoadKeys(o.gossipKey); err != nil {
			return usageError{err}
		}
	}
	if o.cacheMiB < 1 || o.cacheMiB > 65536 {
		return usageError{fmt.Errorf("serve: --block-cache-mib %d: want 1..65536", o.cacheMiB)}
	}
	if o.memtableKiB < 256 || o.memtableKiB > 1<<20 {
		return usageError{fmt.Errorf("serve: --memtable-kib %d: want 256..1048576", o.memtableKiB)}
	}
	cfg.MaxShardBytes = int64(min(uint64(o.maxShardSize), math.MaxInt64))
	if o.maxShardSize == 0 {
		cfg.MaxShardBytes = -1 // off
	}
	cfg.BlockCacheSize = o.cacheMiB << 20
	cfg.MemTableSize = o.memtableKiB << 10
	gc, setGC, err := gcPercent(o.gcPercent, os.Getenv("GOGC"))
	if err != nil {
		return usageError{err}
	}
	if o.maxStreams == 0 || o.maxStreams > 1<<20 {
		return usageError{fmt.Errorf("serve: --max-concurrent-streams %d: want 1..1048576", o.maxStreams)}
	}
	cfg.MaxConcurrentStreams = uint32(o.maxStreams)
	cfg.Logger = logger
	if o.faults {
		cfg.Testing.Faults = faultnet.NewLocal(time.Now().UnixNano())
		logger.Warn("fault injection on (--fault-injection): PUT /debug/faults can delay, drop and cut this node's Raft traffic; for test clusters only")
	}
	if cfg.TokenKeys, err = tokenKeys(o.keysFile); err != nil {
		return usageError{err}
	}
	if cfg.TokenKeys == nil {
		logger.Warn("no bot-token key ring (--token-keys-file or " + tokenKeysEnv + "): registering agent-pool bots will fail")
	} else {
		logger.Info("bot-token key ring loaded", "active_key", cfg.TokenKeys.ActiveKeyID(), "keys", len(cfg.TokenKeys.KeyIDs()))
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usageError{err}
	}
	if setGC {
		debug.SetGCPercent(gc)
	}

	// Every file and dir the node creates (Pebble's, raft's snapshots) is
	// owner-only, whatever mode the library asks for.
	restrictUmask()
	var opts []server.Option
	if o.etcd.Addr != "" {
		o.etcd.MaxRequestBytes = int(min(uint64(o.etcdMaxRequest), 1<<31))
		opts = append(opts, server.WithEtcd(o.etcd))
	}
	srv, err := server.New(*cfg, opts...)
	if err != nil {
		return err
	}
	a := srv.Node().Addrs()
	fmt.Fprintf(stdout, "swarmnode %s: node %s serving\n  grpc   %s\n  http   %s\n  raft   %s\n  gossip %s\n  redis  %s\n  etcd   %s\n  data   %s\n",
		version, cfg.ID, a.GRPCAddr, a.HTTPAddr, a.RaftAddr, a.GossipAddr, srv.RedisAddr(), srv.EtcdAddr(), cfg.DataDir)
	if waitReady(ctx, srv.Node().Ready, readyHintAfter, stdout) {
		fmt.Fprint(stdout, readyBlock(progName(os.Args[0]), cfg.ID, a.GRPCAddr, srv.HTTPAddr(), srv.RedisAddr(), srv.EtcdAddr(), cfg.TLS.CAFile, cfg.Auth))
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "swarmnode: shutting down")
	return srv.Close()
}

// waitReady polls ready until it returns nil (true) or ctx ends (false).
// When the node is still not ready after hintAfter it prints why, once
// (e.g. waiting to be admitted, or for the other nodes of the bootstrap).
func waitReady(ctx context.Context, ready func() error, hintAfter time.Duration, stdout io.Writer) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	hint := time.Now().Add(hintAfter)
	for {
		err := ready()
		if err == nil {
			return true
		}
		if !hint.IsZero() && !time.Now().Before(hint) {
			fmt.Fprintf(stdout, "swarmnode: not ready yet: %v\n", err)
			hint = time.Time{}
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// readyHintAfter is how long a node may take to be ready before serve
// says what it waits for.
const readyHintAfter = 3 * time.Second

// progName is how the ready block names the binary: as it was run when
// that was a swarmnode (./bin/swarmnode under make run), else swarmnode.
func progName(arg0 string) string {
	if filepath.Base(arg0) == "swarmnode" {
		return arg0
	}
	return "swarmnode"
}

// readyBlock is what serve prints once the node is ready: what to try
// next against it. Empty addresses (an HTTP or RESP front off) are left
// out; with TLS (caFile) the commands name the CA, and with TLS or auth
// it says that clients need a token or a certificate.
func readyBlock(prog, id, grpcAddr, httpAddr, redisAddr, etcdAddr, caFile string, auth bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "swarmnode: node %s ready (every local shard has a leader). Try:\n", id)
	tls, scheme := "", "http"
	if caFile != "" {
		tls, scheme = " --tls-ca "+caFile, "https"
	}
	fmt.Fprintf(&b, "  %s kv put --endpoints %s%s --user alice greeting hello\n", prog, grpcAddr, tls)
	fmt.Fprintf(&b, "  %s kv get --endpoints %s%s --user alice greeting\n", prog, grpcAddr, tls)
	if httpAddr != "" {
		fmt.Fprintf(&b, "  %s status --admin %s%s\n", prog, httpAddr, tls)
		fmt.Fprintf(&b, "  console: %s://%s/ui/   readiness: %s://%s/readyz   metrics: %s://%s/metrics\n",
			scheme, httpAddr, scheme, httpAddr, scheme, httpAddr)
	}
	if redisAddr != "" {
		if host, port, err := net.SplitHostPort(redisAddr); err == nil {
			flags := "-h " + host + " -p " + port
			if caFile != "" {
				flags += " --tls --cacert " + caFile
			}
			fmt.Fprintf(&b, "  redis-cli %s HSET asset:metadata:demo id demo category tool\n", flags)
		}
	}
	if etcdAddr != "" {
		flags := "--endpoints " + etcdAddr
		if caFile != "" {
			flags += " --cacert " + caFile
		}
		fmt.Fprintf(&b, "  etcdctl %s put a b   (docs/etcd.md)\n", flags)
	}
	fmt.Fprintf(&b, "  Go client: client.New(ctx, client.Config{Endpoints: []string{%q}})\n", grpcAddr)
	if auth || caFile != "" {
		b.WriteString("  clients need a token (--token, Redis AUTH) or a client certificate: docs/security.md\n")
	}
	b.WriteString("  docs/getting-started.md has more; Ctrl-C stops the node.\n")
	return b.String()
}

// tokenKeys loads the bot-token key ring from file or, without one, from
// SWARM_TOKEN_KEYS; nil when neither is set. Errors never quote key
// material (package secrets).
func tokenKeys(file string) (*secrets.Ring, error) {
	text, inline := os.LookupEnv(tokenKeysEnv)
	switch {
	case file != "" && inline:
		return nil, fmt.Errorf("token keys: both --token-keys-file and %s are set; use one", tokenKeysEnv)
	case file != "":
		return secrets.LoadRingFile(file)
	case inline:
		r, err := secrets.ParseRing(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tokenKeysEnv, err)
		}
		return r, nil
	}
	return nil, nil
}
