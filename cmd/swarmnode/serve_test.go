package main

import (
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"reflect"
	"testing"

	"github.com/swarmkv/swarmkv/cluster"
	"github.com/swarmkv/swarmkv/etcdfront"
)

// TestServeFlagDefaults: every serve flag that sets a Config field has
// the default cluster.Config{}.WithDefaults() gives it, taken from there
// and not written again: the flags are also built from a Config whose
// every number and string differs, and must follow it. A flag that is in
// neither table fails the test, so a new one gets classified.
func TestServeFlagDefaults(t *testing.T) {
	fromConfig := map[string]func(c cluster.Config) any{
		"raft-addr":                 func(c cluster.Config) any { return c.RaftAddr },
		"grpc-addr":                 func(c cluster.Config) any { return c.GRPCAddr },
		"gossip-addr":               func(c cluster.Config) any { return c.GossipAddr },
		"dead-node-timeout":         func(c cluster.Config) any { return c.DeadNodeTimeout },
		"shards":                    func(c cluster.Config) any { return c.Shards },
		"nodes-per-shard":           func(c cluster.Config) any { return c.NodesPerShard },
		"max-shard-size":            func(c cluster.Config) any { return formatSize(uint64(c.MaxShardBytes)) },
		"max-shard-load":            func(c cluster.Config) any { return c.MaxShardLoad },
		"policy-interval":           func(c cluster.Config) any { return c.PolicyInterval },
		"policy-cooldown":           func(c cluster.Config) any { return c.PolicyCooldown },
		"replication-factor":        func(c cluster.Config) any { return c.ReplicationFactor },
		"max-value-size":            func(c cluster.Config) any { return c.Limits.MaxValueSize },
		"max-key-size":              func(c cluster.Config) any { return c.Limits.MaxKeySize },
		"max-batch-ops":             func(c cluster.Config) any { return c.Limits.MaxBatchOps },
		"max-scan-page":             func(c cluster.Config) any { return c.MaxScanPage },
		"max-keys-reply":            func(c cluster.Config) any { return c.MaxKeysReply },
		"max-page-bytes":            func(c cluster.Config) any { return c.MaxPageBytes },
		"request-timeout":           func(c cluster.Config) any { return c.RequestTimeout },
		"max-concurrent-streams":    func(c cluster.Config) any { return c.MaxConcurrentStreams },
		"max-conns-per-ip":          func(c cluster.Config) any { return c.MaxConnsPerIP },
		"history-revisions":         func(c cluster.Config) any { return c.HistoryRevisions },
		"history-age":               func(c cluster.Config) any { return c.HistoryAge },
		"history-compact-every":     func(c cluster.Config) any { return c.HistoryCompactEvery },
		"max-watchers":              func(c cluster.Config) any { return c.MaxWatchers },
		"max-watchers-per-conn":     func(c cluster.Config) any { return c.MaxWatchersPerConn },
		"watch-buffer":              func(c cluster.Config) any { return c.WatchBuffer },
		"redis-idle-timeout":        func(c cluster.Config) any { return c.RedisIdleTimeout },
		"redis-write-timeout":       func(c cluster.Config) any { return c.RedisWriteTimeout },
		"http-read-header-timeout":  func(c cluster.Config) any { return c.HTTPReadHeaderTimeout },
		"http-read-timeout":         func(c cluster.Config) any { return c.HTTPReadTimeout },
		"http-write-timeout":        func(c cluster.Config) any { return c.HTTPWriteTimeout },
		"http-idle-timeout":         func(c cluster.Config) any { return c.HTTPIdleTimeout },
		"http-max-header-bytes":     func(c cluster.Config) any { return c.HTTPMaxHeaderBytes },
		"grpc-max-conn-idle":        func(c cluster.Config) any { return c.GRPCMaxConnIdle },
		"grpc-keepalive-time":       func(c cluster.Config) any { return c.GRPCKeepaliveTime },
		"grpc-keepalive-timeout":    func(c cluster.Config) any { return c.GRPCKeepaliveTimeout },
		"grpc-keepalive-min-time":   func(c cluster.Config) any { return c.GRPCKeepaliveMinTime },
		"raft-max-conns":            func(c cluster.Config) any { return c.RaftMaxConns },
		"raft-max-conns-per-ip":     func(c cluster.Config) any { return c.RaftMaxConnsPerIP },
		"raft-handshake-timeout":    func(c cluster.Config) any { return c.RaftHandshakeTimeout },
		"redis-max-args":            func(c cluster.Config) any { return c.RedisMaxArgs },
		"redis-max-multi-commands":  func(c cluster.Config) any { return c.RedisMaxMultiCommands },
		"block-cache-mib":           func(c cluster.Config) any { return c.BlockCacheSize >> 20 },
		"memtable-kib":              func(c cluster.Config) any { return c.MemTableSize >> 10 },
		"wal-min-sync-interval":     func(c cluster.Config) any { return c.WALMinSyncInterval },
		"log-store":                 func(c cluster.Config) any { return c.LogStore },
		"snapshot-threshold":        func(c cluster.Config) any { return c.SnapshotThreshold },
		"snapshot-interval":         func(c cluster.Config) any { return c.SnapshotInterval },
		"heartbeat-timeout":         func(c cluster.Config) any { return c.HeartbeatTimeout },
		"election-timeout":          func(c cluster.Config) any { return c.ElectionTimeout },
		"commit-timeout":            func(c cluster.Config) any { return c.CommitTimeout },
		"quiet-after":               func(c cluster.Config) any { return c.QuietAfter },
		"quiet-timeout":             func(c cluster.Config) any { return c.QuietTimeout },
		"gossip-profile":            func(c cluster.Config) any { return c.GossipProfile },
		"max-leases-per-shard":      func(c cluster.Config) any { return c.MaxLeasesPerShard },
		"max-keys-per-lease":        func(c cluster.Config) any { return c.MaxKeysPerLease },
		"lease-checkpoint-interval": func(c cluster.Config) any { return c.LeaseCheckpointInterval },

		// Streams per identity, catch-ups (issue 37).
		"max-watchers-per-identity":          func(c cluster.Config) any { return c.MaxWatchersPerIdentity },
		"max-keepalive-streams-per-identity": func(c cluster.Config) any { return c.MaxKeepAliveStreamsPerIdentity },
		"max-watch-memory":                   func(c cluster.Config) any { return c.MaxWatchMemory },
		"max-concurrent-catchups":            func(c cluster.Config) any { return c.MaxConcurrentCatchUps },

		// Failure domains (issue 41).
		"zone":            func(c cluster.Config) any { return c.Zone },
		"host":            func(c cluster.Config) any { return c.Host },
		"isolation-level": func(c cluster.Config) any { return c.IsolationLevel },
	}
	// The flags whose default is the command line's own: fields
	// WithDefaults leaves empty (id, data dir, HTTP address: Config has no
	// default), derives from other fields at start (0), or that are not
	// Config fields.
	cliOnly := map[string]string{
		"id": "node1", "data-dir": "./data", "http-addr": "127.0.0.1:7102", "redis-addr": "",
		"raft-advertise": "", "grpc-advertise": "", "gossip-advertise": "", "join": "",
		"bootstrap-expect": "0", "redis-max-bulk": "0", "redis-max-command-bytes": "0", "redis-max-multi-bytes": "0",
		"log-level": "info", "token-keys-file": "", "tls-ca": "", "tls-cert": "", "tls-key": "",
		"gossip-key-file": "", "insecure": "false", "fault-injection": "false", "auth": "false",
		"cluster-secret-file": "", "gc-percent": "0",
		// The etcd front's own settings (etcdfront.Config's defaults).
		"etcd-addr": "", "etcd-namespace": etcdfront.DefaultNamespace, "etcd-max-txn-ops": fmt.Sprint(etcdfront.DefaultMaxTxnOps),
		"etcd-max-request-bytes": formatSize(etcdfront.DefaultMaxRequestBytes),
		"etcd-max-watchers":      fmt.Sprint(etcdfront.DefaultMaxWatchers), "etcd-max-watchers-per-conn": fmt.Sprint(etcdfront.DefaultMaxWatchersPerConn),
		"etcd-watch-progress-interval": etcdfront.DefaultWatchProgressInterval.String(), "etcd-watch-send-timeout": etcdfront.DefaultWatchSendTimeout.String(),
	}
	d := cluster.Config{}.WithDefaults()
	shifted := d
	shift(reflect.ValueOf(&shifted).Elem())
	if shifted.Shards == d.Shards || shifted.LogStore == d.LogStore {
		t.Fatal("shift changed nothing")
	}
	for name, c := range map[string]cluster.Config{"WithDefaults": d, "shifted": shifted} {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		serveFlags(fs, c, false)
		seen := map[string]bool{}
		fs.VisitAll(func(f *pflag.Flag) {
			seen[f.Name] = true
			if get, ok := fromConfig[f.Name]; ok {
				if want := fmt.Sprint(get(c)); f.DefValue != want {
					t.Errorf("%s: --%s defaults to %s, want %s (the Config's)", name, f.Name, f.DefValue, want)
				}
			} else if want, ok := cliOnly[f.Name]; !ok {
				t.Errorf("--%s is in neither table of this test", f.Name)
			} else if f.DefValue != want {
				t.Errorf("%s: --%s defaults to %q, want %q", name, f.Name, f.DefValue, want)
			}
		})
		for n := range fromConfig {
			if !seen[n] {
				t.Errorf("no flag --%s", n)
			}
		}
		for n := range cliOnly {
			if !seen[n] {
				t.Errorf("no flag --%s", n)
			}
		}
	}
}

// shift changes every settable number (doubled, or 3 when 0) and string
// (suffixed) of v, recursively.
func shift(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				shift(v.Field(i))
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(max(2*v.Int(), 3))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(max(2*v.Uint(), 3))
	case reflect.String:
		v.SetString(v.String() + "x")
	}
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		flag    int
		env     string
		want    int
		apply   bool
		wantErr bool
	}{
		{flag: 0, env: "", want: defaultGCPercent, apply: true},
		{flag: 0, env: "200", apply: false}, // the runtime applied GOGC
		{flag: 0, env: "off", apply: false},
		{flag: 80, env: "", want: 80, apply: true},
		{flag: 80, env: "200", want: 80, apply: true}, // the flag wins
		{flag: 5, wantErr: true},
		{flag: 2000, wantErr: true},
		{flag: -1, wantErr: true},
	} {
		got, apply, err := gcPercent(tc.flag, tc.env)
		if (err != nil) != tc.wantErr || got != tc.want || apply != tc.apply {
			t.Errorf("gcPercent(%d, %q) = %d, %v, %v; want %d, %v, error %v", tc.flag, tc.env, got, apply, err, tc.want, tc.apply, tc.wantErr)
		}
	}
}
