package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/swarmkv/swarmkv/cluster"
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       cluster.Config
		join      string
		logLevel  string
		maxValue  int
		snapEvery time.Duration
	)
	fs.StringVar(&cfg.ID, "id", "node1", "stable node id (never reuse one for another data dir)")
	fs.StringVar(&cfg.DataDir, "data-dir", "./data", "data directory")
	fs.StringVar(&cfg.RaftAddr, "raft-addr", "127.0.0.1:7101", "Raft listen address, shared by every shard replica")
	fs.StringVar(&cfg.RaftAdvertise, "raft-advertise", "", "Raft address peers dial (default: raft-addr)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:7100", "gRPC client API address")
	fs.StringVar(&cfg.GRPCAdvertise, "grpc-advertise", "", "gRPC address given to clients (default: grpc-addr)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7102", "HTTP address for /healthz and /readyz (empty: off)")
	fs.StringVar(&cfg.GossipAddr, "gossip-addr", "127.0.0.1:7103", "memberlist gossip address (TCP and UDP)")
	fs.StringVar(&cfg.GossipAdvertise, "gossip-advertise", "", "gossip address peers use (default: gossip-addr)")
	fs.StringVar(&join, "join", "", "comma-separated gossip addresses of nodes to join")
	fs.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 1, "number of nodes that bootstrap the cluster together")
	fs.IntVar(&cfg.Shards, "shards", 8, "number of shards (Raft groups), fixed at bootstrap")
	fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 3, "voters per shard (fewer when the cluster is smaller)")
	fs.IntVar(&maxValue, "max-value-size", 1<<20, "largest value accepted, in bytes")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	fs.DurationVar(&snapEvery, "snapshot-interval", 30*time.Second, "how often replicas check the snapshot threshold")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", time.Second, "Raft heartbeat timeout")
	fs.DurationVar(&cfg.ElectionTimeout, "election-timeout", time.Second, "Raft election timeout")
	fs.StringVar(&cfg.GossipProfile, "gossip-profile", "lan", "memberlist timing: lan or local")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))}
	}
	if err := envDefaults(fs); err != nil {
		return err
	}
	logger, err := newLogger(stderr, logLevel)
	if err != nil {
		return err
	}
	if join != "" {
		for _, j := range strings.Split(join, ",") {
			if j = strings.TrimSpace(j); j != "" {
				cfg.Join = append(cfg.Join, j)
			}
		}
	}
	cfg.Limits.MaxValueSize = maxValue
	cfg.SnapshotInterval = snapEvery
	cfg.Logger = logger
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usageError{err}
	}

	node, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	a := node.Addrs()
	fmt.Fprintf(stdout, "swarmnode %s: node %s serving\n  grpc   %s\n  http   %s\n  raft   %s\n  gossip %s\n  data   %s\n",
		version, cfg.ID, a.GRPCAddr, a.HTTPAddr, a.RaftAddr, a.GossipAddr, cfg.DataDir)
	<-ctx.Done()
	fmt.Fprintln(stdout, "swarmnode: shutting down")
	return node.Close()
}
