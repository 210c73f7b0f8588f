package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/shard"
)

// The default limits and the configurable caps (as api's validator tests
// use them).
var (
	valDefaults = fsm.Limits{}.WithDefaults()
	valCaps     = fsm.Limits{MaxKeySize: maxKeySizeLimit, MaxValueSize: maxValueSizeLimit, MaxBatchOps: maxBatchOpsLimit}
)

func TestConfigValidate(t *testing.T) {
	base := func() Config { return Config{ID: "n1", DataDir: t.TempDir()} }
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		want  string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"id of 64 characters", func(c *Config) { c.ID = strings.Repeat("a", 64) }, ""},
		{"id with dots and dashes", func(c *Config) { c.ID = "node-1.dc_2" }, ""},
		{"no http", func(c *Config) { c.HTTPAddr = "" }, ""},
		{"zero shards default to 8", func(c *Config) { c.Shards = 0 }, ""},
		{"max shards", func(c *Config) { c.Shards = shard.MaxShards }, ""},
		{"one shard", func(c *Config) { c.Shards = 1 }, ""},
		{"zero bootstrap-expect defaults to 1", func(c *Config) { c.BootstrapExpect = 0 }, ""},
		{"replication factor 7", func(c *Config) { c.ReplicationFactor = 7 }, ""},
		{"election equals heartbeat", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = 200*time.Millisecond, 200*time.Millisecond }, ""},
		{"raft's minimum timings", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 5*time.Millisecond, 5*time.Millisecond, 5*time.Millisecond
			c.CommitTimeout, c.SnapshotInterval = time.Millisecond, 5*time.Millisecond
		}, ""},
		{"limits at the caps", func(c *Config) { c.Limits = valCaps }, ""},
		{"local gossip", func(c *Config) { c.GossipProfile = "local" }, ""},
		{"port 0", func(c *Config) {
			c.RaftAddr, c.GRPCAddr, c.GossipAddr, c.HTTPAddr = ":0", ":0", ":0", ":0"
			c.Insecure = true
		}, ""},

		{"watchers per identity over the node's", func(c *Config) { c.MaxWatchers, c.MaxWatchersPerConn, c.MaxWatchersPerIdentity = 10, 10, 11 }, "max watchers per identity 11: want 1..10"},
		{"negative watchers per identity", func(c *Config) { c.MaxWatchersPerIdentity = -1 }, "max watchers per identity -1"},
		{"keep-alive streams per identity 0 after defaults", func(c *Config) { c.MaxKeepAliveStreamsPerIdentity = -3 }, "max keep-alive streams per identity -3"},
		{"watch memory below 4 MiB", func(c *Config) { c.MaxWatchMemory = 1 << 20 }, "max watch memory 1048576"},
		{"catch-ups over the cap", func(c *Config) { c.MaxConcurrentCatchUps = 5000 }, "max concurrent catch-ups 5000: want 1..4096"},
		{"empty id", func(c *Config) { c.ID = "" }, `id ""`},
		{"id with a space", func(c *Config) { c.ID = "n 1" }, `id "n 1"`},
		{"id starting with a dash", func(c *Config) { c.ID = "-n1" }, `id "-n1"`},
		{"id with a slash", func(c *Config) { c.ID = "a/b" }, `id "a/b"`},
		{"id of 65 characters", func(c *Config) { c.ID = strings.Repeat("a", 65) }, "want 1-64 letters"},
		{"empty data dir", func(c *Config) { c.DataDir = "" }, "data dir is empty"},
		{"raft address without port", func(c *Config) { c.RaftAddr = "127.0.0.1" }, `raft address "127.0.0.1"`},
		{"grpc address garbage", func(c *Config) { c.GRPCAddr = "nope" }, `grpc address "nope"`},
		{"gossip address too many colons", func(c *Config) { c.GossipAddr = "1:2:3" }, `gossip address "1:2:3"`},
		{"http address without port", func(c *Config) { c.HTTPAddr = "localhost" }, `http address "localhost"`},
		{"negative bootstrap-expect", func(c *Config) { c.BootstrapExpect = -1 }, "bootstrap-expect -1: want >= 1"},
		{"negative shards", func(c *Config) { c.Shards = -1 }, "shards -1: want 1..256"},
		{"257 shards", func(c *Config) { c.Shards = 257 }, "shards 257: want 1..256"},
		{"replication factor 8", func(c *Config) { c.ReplicationFactor = 8 }, "replication factor 8: want 1..7"},
		{"negative replication factor", func(c *Config) { c.ReplicationFactor = -3 }, "replication factor -3: want 1..7"},
		{"election below heartbeat", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = time.Second, 500*time.Millisecond }, "election timeout 500ms is below heartbeat timeout 1s"},
		{"lease over heartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * time.Second }, "leader lease 2s exceeds heartbeat timeout 1s"},
		{"quiet groups", func(c *Config) { c.QuietAfter, c.QuietTimeout = 10*time.Second, 10*time.Second }, ""},
		{"quiet after the commit timeout", func(c *Config) { c.QuietAfter = 500 * time.Millisecond }, "quiet after 500ms: want 0 (off) or above the commit timeout 500ms"},
		{"negative quiet after", func(c *Config) { c.QuietAfter = -time.Second }, "quiet after -1s"},
		{"quiet timeout below the election timeout", func(c *Config) {
			c.QuietAfter, c.QuietTimeout, c.ElectionTimeout = 10*time.Second, 2*time.Second, 3*time.Second
		}, "quiet timeout 2s is below the heartbeat (1s) or election (3s) timeout"},
		{"unknown gossip profile", func(c *Config) { c.GossipProfile = "wan" }, `gossip profile "wan": want lan or local`},
		{"key size over the cap", func(c *Config) { c.Limits.MaxKeySize = maxKeySizeLimit + 1 }, "keys at most 8192 bytes"},
		{"value size over the cap", func(c *Config) { c.Limits.MaxValueSize = maxValueSizeLimit + 1 }, "values 67108864"},
		{"batch ops over the cap", func(c *Config) { c.Limits.MaxBatchOps = maxBatchOpsLimit + 1 }, "batches 65536 ops"},
		{"negative scan page", func(c *Config) { c.MaxScanPage = -1 }, "max scan page -1: want 1..100000"},
		{"negative lease cap", func(c *Config) { c.MaxLeasesPerShard = -1 }, "max leases per shard -1: want 1..10000000"},
		{"lease checkpoint too often", func(c *Config) { c.LeaseCheckpointInterval = time.Millisecond }, "lease checkpoint interval 1ms: want 10ms..1m"},
		{"page bytes too small", func(c *Config) { c.MaxPageBytes = 4095 }, "max page bytes 4095: want 4096..268435456"},
		{"keys reply too large", func(c *Config) { c.MaxKeysReply = 10000001 }, "max keys reply 10000001: want 1..10000000"},
		{"request timeout too long", func(c *Config) { c.RequestTimeout = 2 * time.Hour }, "request timeout 2h0m0s: want 10ms..1h"},
		{"negative conns per ip", func(c *Config) { c.MaxConnsPerIP = -1 }, "max connections per IP -1"},
		{"streams too many", func(c *Config) { c.MaxConcurrentStreams = 1<<20 + 1 }, "max concurrent streams 1048577"},
		{"http read header timeout too short", func(c *Config) { c.HTTPReadHeaderTimeout = time.Millisecond }, "http read header timeout 1ms: want 100ms..1h0m0s"},
		{"http idle timeout negative", func(c *Config) { c.HTTPIdleTimeout = -time.Second }, "http idle timeout -1s"},
		{"http write timeout too long", func(c *Config) { c.HTTPWriteTimeout = 25 * time.Hour }, "http write timeout 25h0m0s"},
		{"http header bytes too many", func(c *Config) { c.HTTPMaxHeaderBytes = 2 << 20 }, "http max header bytes 2097152: want 4096..1048576"},
		{"grpc idle too short", func(c *Config) { c.GRPCMaxConnIdle = time.Millisecond }, "grpc max connection idle 1ms"},
		{"grpc keepalive min time over the client's", func(c *Config) { c.GRPCKeepaliveMinTime = 20 * time.Second }, "grpc keepalive min time 20s: want 1s..15s"},
		{"raft conns negative", func(c *Config) { c.RaftMaxConns = -1 }, "raft max connections -1"},
		{"raft conns per IP too many", func(c *Config) { c.RaftMaxConnsPerIP = 1<<20 + 1 }, "per IP 1048577"},
		{"raft handshake timeout too long", func(c *Config) { c.RaftHandshakeTimeout = time.Hour }, "raft handshake timeout 1h0m0s"},
		{"block cache too small", func(c *Config) { c.BlockCacheSize = 1000 }, "block cache size 1000: want 1 MiB..64 GiB"},
		{"memtable too small", func(c *Config) { c.MemTableSize = 1000 }, "memtable size 1000: want 256 KiB..1 GiB"},
		{"memtable too large", func(c *Config) { c.MemTableSize = 2 << 30 }, "memtable size 2147483648"},
		{"wal min sync interval negative", func(c *Config) { c.WALMinSyncInterval = -time.Millisecond }, "WAL min sync interval -1ms: want 0..10ms"},
		{"wal min sync interval too long", func(c *Config) { c.WALMinSyncInterval = 11 * time.Millisecond }, "WAL min sync interval 11ms"},
		{"wal min sync interval with bolt", func(c *Config) { c.WALMinSyncInterval = time.Millisecond; c.LogStore = LogStoreBolt }, `WAL min sync interval 1ms: only the "pebble" log store has one`},
		{"redis write timeout too short", func(c *Config) { c.RedisWriteTimeout = time.Millisecond }, "redis write timeout 1ms"},
		{"redis max bulk too small", func(c *Config) { c.RedisMaxBulk = 100 }, "redis max bulk 100: want 1024..67108864"},
		{"redis max args too few", func(c *Config) { c.RedisMaxArgs = 3 }, "redis max args 3: want 16..1048576"},
		{"redis max command bytes too many", func(c *Config) { c.RedisMaxCommandBytes = 1 << 30 }, "redis max command bytes 1073741824: want 4096..134217728"},
		{"redis max multi commands too many", func(c *Config) { c.RedisMaxMultiCommands = 5000 }, "redis max multi commands 5000: want 1..4096"},
		{"redis max multi bytes negative", func(c *Config) { c.RedisMaxMultiBytes = -1 }, "redis max multi bytes -1"},
		{"redis bounds of the largest values", func(c *Config) { c.Limits.MaxValueSize = maxValueSizeLimit }, ""},
		// hashicorp/raft refuses timings under 5ms (commit timeout under
		// 1ms) when a replica starts; Validate must refuse them first, or
		// the node starts, logs "bootstrap failed" and never gets ready.
		{"heartbeat below raft's minimum", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = time.Millisecond, time.Millisecond }, "invalid config"},
		{"default lease below raft's minimum", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = 8*time.Millisecond, 8*time.Millisecond }, "invalid config"},
		{"commit timeout below raft's minimum", func(c *Config) { c.CommitTimeout = 500 * time.Microsecond }, "invalid config"},
		{"negative snapshot interval", func(c *Config) { c.SnapshotInterval = -time.Second }, "invalid config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.tweak(&c)
			err := c.WithDefaults().Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want ErrConfig containing %q", err, tc.want)
			}
		})
	}
}

// TestBootstrapShape: --shards 0 bootstraps one shard per NodesPerShard
// bootstrap nodes (at least one) with the count rule on; --shards N
// bootstraps N with it off; a negative MaxShardBytes turns the size rule
// off; bad policy values are refused.
func TestBootstrapShape(t *testing.T) {
	for _, tc := range []struct {
		shards, expect, per int
		maxBytes            int64
		want                int
		policy              placement.ShardPolicy
	}{
		{0, 1, 0, 0, 1, placement.ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 1 << 30}},
		{0, 3, 0, 0, 1, placement.ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 1 << 30}},
		{0, 6, 0, 0, 2, placement.ShardPolicy{Auto: true, NodesPerShard: 3, MaxShardBytes: 1 << 30}},
		{0, 7, 2, -1, 3, placement.ShardPolicy{Auto: true, NodesPerShard: 2}},
		{8, 3, 0, 0, 8, placement.ShardPolicy{NodesPerShard: 3, MaxShardBytes: 1 << 30}},
		{1, 6, 0, 5 << 20, 1, placement.ShardPolicy{NodesPerShard: 3, MaxShardBytes: 5 << 20}},
	} {
		c := Config{ID: "n1", DataDir: "d", Shards: tc.shards, BootstrapExpect: tc.expect, NodesPerShard: tc.per, MaxShardBytes: tc.maxBytes}.WithDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if got := c.BootstrapShards(); got != tc.want {
			t.Errorf("%+v: %d shards at bootstrap, want %d", tc, got, tc.want)
		}
		if got := c.bootstrapPolicy(); got != tc.policy {
			t.Errorf("%+v: policy %+v, want %+v", tc, got, tc.policy)
		}
	}
	for _, c := range []Config{
		{Shards: -1}, {NodesPerShard: -1}, {NodesPerShard: 1001}, {MaxShardLoad: -1},
		{PolicyInterval: time.Millisecond}, {PolicyCooldown: -time.Second},
	} {
		c.ID, c.DataDir = "n1", "d"
		if err := c.WithDefaults().Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Validate = %v, want ErrConfig", c, err)
		}
	}
}

func TestConfigWithDefaults(t *testing.T) {
	c := Config{ID: "n1", DataDir: "d"}.WithDefaults()
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"raft addr", c.RaftAddr, "127.0.0.1:7101"},
		{"grpc addr", c.GRPCAddr, "127.0.0.1:7100"},
		{"gossip addr", c.GossipAddr, "127.0.0.1:7103"},
		{"http addr stays empty", c.HTTPAddr, ""},
		{"gossip profile", c.GossipProfile, "lan"},
		{"bootstrap expect", c.BootstrapExpect, 1},
		{"shards: automatic", c.Shards, 0},
		{"bootstrap shards of one node", c.BootstrapShards(), 1},
		{"nodes per shard", c.NodesPerShard, 3},
		{"max shard bytes", c.MaxShardBytes, int64(1 << 30)},
		{"max shard load: off", c.MaxShardLoad, 0.0},
		{"policy interval", c.PolicyInterval, 10 * time.Second},
		{"policy cooldown", c.PolicyCooldown, 2 * time.Minute},
		{"replication factor", c.ReplicationFactor, 3},
		{"heartbeat", c.HeartbeatTimeout, time.Second},
		{"election", c.ElectionTimeout, time.Second},
		{"lease", c.LeaderLeaseTimeout, 500 * time.Millisecond},
		{"commit", c.CommitTimeout, 500 * time.Millisecond},
		{"quiet groups: off", c.QuietAfter, time.Duration(0)},
		{"quiet timeout", c.QuietTimeout, 10 * time.Second},
		{"snapshot threshold", c.SnapshotThreshold, uint64(8192)},
		{"snapshot interval", c.SnapshotInterval, 30 * time.Second},
		{"trailing logs", c.TrailingLogs, uint64(10240)},
		{"limits", c.Limits, valDefaults},
		{"max scan page", c.MaxScanPage, 1000},
		{"max leases per shard", c.MaxLeasesPerShard, 100000},
		{"lease checkpoint interval", c.LeaseCheckpointInterval, time.Second},
		{"max page bytes", c.MaxPageBytes, 4 << 20},
		{"max keys reply", c.MaxKeysReply, 100000},
		{"block cache", c.BlockCacheSize, int64(32 << 20)},
		{"memtable", c.MemTableSize, uint64(4 << 20)},
		{"dial set", c.Testing.Dial != nil, true},
		{"logger set", c.Logger != nil, true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// A shard group replicates with the configured commit timeout; the
	// meta group with at most metaCommitTimeout.
	if got := c.replicaConfig(3).Raft.CommitTimeout; got != c.CommitTimeout {
		t.Errorf("shard group commit timeout %v, want %v", got, c.CommitTimeout)
	}
	if got := c.replicaConfig(metaShardID).Raft.CommitTimeout; got != metaCommitTimeout {
		t.Errorf("meta group commit timeout %v, want %v", got, metaCommitTimeout)
	}
	fast := c
	fast.CommitTimeout = 5 * time.Millisecond
	if got := fast.replicaConfig(metaShardID).Raft.CommitTimeout; got != fast.CommitTimeout {
		t.Errorf("meta group commit timeout %v with a configured %v, want the lower", got, fast.CommitTimeout)
	}
	// Set fields are kept; the lease follows the heartbeat.
	c = Config{HeartbeatTimeout: 300 * time.Millisecond, Shards: 3, GossipProfile: "local"}.WithDefaults()
	if c.LeaderLeaseTimeout != 150*time.Millisecond || c.Shards != 3 || c.GossipProfile != "local" {
		t.Errorf("WithDefaults changed set fields: lease %v, shards %d, profile %q", c.LeaderLeaseTimeout, c.Shards, c.GossipProfile)
	}
}
