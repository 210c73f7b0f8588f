// Command controller is the reconciling controller of seed 004 in small:
// it keeps a live view of the cluster's runners and bots through
// list-then-watch (c.Pools().ListWatchRunners and ListWatchBots: typed
// events, no polling), prints every change as it comes ("runner r1 up",
// "runner r1 gone", "bot b1 registered in pool p") and a summary every
// --summary, and stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
//
//	go run ./examples/controller --endpoints 127.0.0.1:17100,127.0.0.1:27100
//
// A runner that stops heartbeating disappears by itself: its heartbeats
// are keep-alives of a lease (Pools.StartRunner), and when the lease
// expires the runner is deleted, which the watch reports. To try it
// without a fleet, the same program plays a runner with --runner ID: it
// heartbeats on a lease of --ttl until interrupted (then it revokes the
// lease: the runner is gone at once) or killed (the runner is gone
// within the TTL plus the shard leader's bound). See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of one or more nodes")
	pool := flag.String("pool", "", "follow the bots of this pool only (default: every pool)")
	summary := flag.Duration("summary", 30*time.Second, "interval of the summary line (0: none)")
	caFile := flag.String("tls-ca", os.Getenv("SWARM_TLS_CA"), "cluster CA file: talk TLS (also SWARM_TLS_CA)")
	certFile := flag.String("tls-cert", os.Getenv("SWARM_TLS_CERT"), "client certificate file (also SWARM_TLS_CERT)")
	keyFile := flag.String("tls-key", os.Getenv("SWARM_TLS_KEY"), "client certificate key file (also SWARM_TLS_KEY)")
	token := flag.String("token", "", "bearer token from swarmnode token create (better: SWARM_TOKEN)")
	runner := flag.String("runner", "", "play a runner with this id instead of the controller: heartbeat until interrupted")
	ttl := flag.Duration("ttl", 5*time.Second, "--runner: the lease TTL (2s..24h); heartbeats every third of it")
	meta := flag.String("meta", "", "--runner: the runner's meta JSON")
	flag.Parse()

	cfg := client.Config{Token: *token}
	if cfg.Token == "" {
		cfg.Token = os.Getenv("SWARM_TOKEN")
	}
	for _, e := range strings.Split(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Endpoints = append(cfg.Endpoints, e)
		}
	}
	if *caFile != "" {
		tc, err := client.LoadTLS(*caFile, *certFile, *keyFile)
		if err != nil {
			fatal(2, "controller: %v", err)
		}
		cfg.TLS = tc
	} else if *certFile != "" || *keyFile != "" {
		fatal(2, "controller: --tls-cert and --tls-key need --tls-ca")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.New(cctx, cfg)
	cancel()
	if err != nil {
		fatal(2, "controller: connect to %v: %v", cfg.Endpoints, err)
	}
	defer c.Close()

	if *runner != "" {
		if err := runRunner(ctx, c, *runner, *meta, *ttl); err != nil {
			c.Close()
			fatal(1, "runner %s: %v", *runner, err)
		}
		return
	}
	ctl := &Controller{Pools: c.Pools(), Pool: *pool, Summary: *summary, Log: logLine}
	logLine(fmt.Sprintf("controller: watching runners and bots (pool %q) through %v", *pool, cfg.Endpoints))
	if err := ctl.Run(ctx); err != nil {
		c.Close()
		fatal(1, "controller: %v", err)
	}
	logLine("controller: stopped; " + ctl.SummaryLine())
}

// runRunner heartbeats as runner id until ctx ends, then revokes its
// lease (the runner is deleted at once).
func runRunner(ctx context.Context, c *client.Client, id, meta string, ttl time.Duration) error {
	ka, err := c.Pools().StartRunner(ctx, id, meta, ttl)
	if err != nil {
		return err
	}
	logLine(fmt.Sprintf("runner %s: heartbeating on lease %s (TTL %v)", id, ka.Lease(), ttl))
	select {
	case <-ctx.Done():
	case <-ka.Done():
		return ka.Err()
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ka.Close(rctx); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	logLine(fmt.Sprintf("runner %s: stopped, lease revoked", id))
	return nil
}

func logLine(line string) { fmt.Printf("%s %s\n", time.Now().Format("15:04:05.000"), line) }

func fatal(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(code)
}
