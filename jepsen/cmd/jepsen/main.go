// Command jepsen runs swarmkv's Jepsen-style test: concurrent clients
// record a history of register, ledger, registry, watch and lease
// operations while a nemesis injects faults, then checkers judge the
// history (jepsen/doc.go lists what each checks). It writes a
// report folder and exits 1 on any anomaly (2 on bad usage, 3 when the run
// could not complete).
//
//	make cluster-up && go run ./jepsen/cmd/jepsen --driver docker --duration 10m --nemesis all
//	go run ./jepsen/cmd/jepsen --driver inproc --duration 1m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/swarmkv/swarmkv/jepsen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("jepsen", flag.ContinueOnError)
	driver := fs.String("driver", "docker", "inproc (nodes in this process) or docker (the docker-compose.cluster.yml cluster)")
	duration := fs.Duration("duration", time.Minute, "length of the workload phase")
	nemesis := fs.String("nemesis", "all", "comma-separated nemeses, injected one at a time (a+b: a and b together, e.g. split-merge+kill), all, or none; known: "+strings.Join(jepsen.NemesisNames(), ", "))
	interval := fs.Duration("interval", 5*time.Second, "quiet time before each fault")
	faultFor := fs.Duration("fault-duration", 10*time.Second, "how long each fault lasts")
	workloads := fs.String("workloads", strings.Join(jepsen.WorkloadNames, ","), "comma-separated workloads")
	workers := fs.Int("workers", 4, "clients per workload")
	keys := fs.Int("keys", 24, "register workload: registers live at once")
	opsPerKey := fs.Int("ops-per-key", 150, "register workload: operations per register before it is retired")
	watchKeys := fs.Int("watch-keys", 6, "watch workload: routing keys written and watched")
	watchers := fs.Int("watchers", 4, "watch workload: watchers, each following every routing key (every other one served by any replica)")
	leaseTTL := fs.Duration("lease-ttl", 2*time.Second, "lease workload: TTL of the leases (at least 2s)")
	leaseBound := fs.Duration("lease-bound", jepsen.DefaultLeaseBound, "lease workload: time past the TTL within which a lease no longer kept alive must be gone once the cluster is healed")
	opTimeout := fs.Duration("op-timeout", 5*time.Second, "timeout of one operation")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of every random choice")
	out := fs.String("out", "", "report folder (default jepsen-report/<time>)")
	nodes := fs.String("nodes", "n1,n2,n3", "docker: node ids (containers <container-prefix><id>, ports <i><D>100/<i><D>102 or by --port-base)")
	portDigit := fs.Int("port-digit", 7, "docker: D in the published ports, the compose file's SWARMKV_PORT_DIGIT")
	portBase := fs.Int("port-base", 0, "docker: when not 0, node nI publishes gRPC on port-base+100*I and HTTP on port-base+100*I+2 instead (docker-compose.zones.yml: 32000)")
	prefix := fs.String("container-prefix", "swarmkv-", "docker: node nI's container is <prefix>nI (docker-compose.zones.yml: swarmkv-zones-)")
	network := fs.String("network", "swarmkv-net", "docker: the nodes' network (docker-compose.zones.yml: swarmkv-zones-net)")
	services := fs.String("services", "n1,n2,n3,n4,n5", "docker: every node the compose file defines (docker-compose.zones.yml: n1,n2,n3,n4,n5,n6)")
	project := fs.String("project", "swarmkv", "docker: the compose project, which names the volumes <project>_<id>-data")
	compose := fs.String("compose", "docker-compose -f docker-compose.cluster.yml -p swarmkv --profile spare", "docker: the compose command that (re)creates nodes n1..n5 for the membership nemeses (project swarmkv: volumes swarmkv_<id>-data)")
	dataDir := fs.String("data-dir", "", "inproc: folder for the nodes' data (default a temporary folder)")
	verbose := fs.Bool("v", false, "log the nodes too (inproc)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if *out == "" {
		*out = filepath.Join("jepsen-report", time.Now().Format("20060102-150405"))
	}
	nems, err := jepsen.Nemeses(*nemesis)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	runID := runIDOf(*seed, time.Now())
	var wls []jepsen.Workload
	for _, name := range strings.Split(*workloads, ",") {
		w, err := jepsen.NewWorkload(strings.TrimSpace(name), runID, jepsen.WorkloadOptions{Keys: *keys, OpsPerKey: *opsPerKey,
			WatchKeys: *watchKeys, Watchers: *watchers, LeaseTTL: *leaseTTL, LeaseBound: *leaseBound})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		wls = append(wls, w)
	}

	var drv jepsen.Driver
	switch *driver {
	case "docker":
		drv, err = jepsen.NewDocker(ctx, jepsen.DockerConfig{Nodes: strings.Split(*nodes, ","), Services: strings.Split(*services, ","),
			PortDigit: *portDigit, PortBase: *portBase, ContainerPrefix: *prefix, Network: *network,
			Compose: strings.Fields(*compose), Project: *project})
	case "inproc":
		dir := *dataDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "swarmkv-jepsen-"); err != nil {
				break
			}
			defer os.RemoveAll(dir)
		}
		cfg := jepsen.InProcConfig{Dir: dir, Seed: int64(*seed)}
		if *verbose {
			cfg.Logger = log
		}
		drv, err = jepsen.NewInProc(ctx, cfg)
	default:
		fmt.Fprintf(os.Stderr, "jepsen: unknown driver %q\n", *driver)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen:", err)
		return 3
	}
	defer drv.Close()

	res, err := jepsen.Run(ctx, jepsen.Config{
		Driver: drv, Connect: jepsen.DriverConnect(drv, time.Second),
		Workloads: wls, Nemeses: nems, Duration: *duration, Interval: *interval, FaultDuration: *faultFor,
		WorkersPerWorkload: *workers, OpTimeout: *opTimeout, Seed: *seed, OutDir: *out, Logger: log,
	})
	if res != nil {
		fmt.Print(res.Summary())
		fmt.Printf("\nreport: %s\n", *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen:", err)
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 3
	}
	if !res.Valid {
		return 1
	}
	return 0
}

// runIDOf names a run's keys, routing keys and accounts: the seed (which
// also draws the schedule) and the start time. The checkers assume that
// no other run wrote the run's keys; the seed alone repeated them when the
// same seed ran again on a cluster that kept the first run's data (every
// checker then reported the first run's values as anomalies).
func runIDOf(seed uint64, start time.Time) string {
	return fmt.Sprintf("%x-%x", seed&0xffffffff, uint64(start.UnixNano())&0xffffffffff)
}
