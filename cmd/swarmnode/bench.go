package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

const benchLong = `A load generator. Runs --total operations, or for --duration when given, over --clients
concurrent callers sharing --conns client connections. Prints a progress line
every second and at the end throughput and latency percentiles (--json for
machine-readable output).

lease-keepalive grants --leases leases of --lease-ttl first (spread over
--routing-keys), then each caller renews them in turn as fast as it can (an
operation is one keep-alive, on the client's shared keep-alive stream, or a
KeepAliveOnce call with --keepalive-call once); the leases are revoked at the
end. watch starts --watchers watchers first (watcher i on routing key
i mod --routing-keys, from now), then runs the put workload on the keys they
watch: it reports the puts and the events delivered to all watchers (events/s
up to the last one, and the delay from a put's sending to each delivery).
--watchers 0 runs the same puts without watchers, for comparison.`

type benchConfig struct {
	workload    string
	endpoints   []string
	client      client.Config // endpoints and credentials
	clients     int
	conns       int
	total       int
	duration    time.Duration
	keySize     int
	valueSize   int
	keySpace    int
	routingKeys int
	readRatio   float64
	stale       bool
	accounts    int
	asJSON      bool
	leases      int
	leaseTTL    time.Duration
	kaCall      string
	watchers    int
	keyTag      []byte // watch: the run's first 4 bytes of every key (the watchers' prefix)
	progress    bool
	opTimeout   time.Duration
}

// BenchResult is what a run reports (also its --json form).
type BenchResult struct {
	Workload   string  `json:"workload"`
	Clients    int     `json:"clients"`
	Conns      int     `json:"conns"`
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"ops_per_sec"`
	MeanMs     float64 `json:"mean_ms"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	FirstError string  `json:"first_error,omitempty"`
	// lease-keepalive: the leases renewed (ops are keep-alives).
	Leases int `json:"leases,omitempty"`
	// watch: the watchers, the events they received (all of them, up to
	// the last one after the puts ended), the events the acknowledged
	// puts made (a put of routing key r makes one per watcher of r),
	// events per second from the start to the last event, and the delay
	// from a put's sending to its delivery to a watcher.
	Watchers       int     `json:"watchers,omitempty"`
	Events         int64   `json:"events,omitempty"`
	EventsExpected int64   `json:"events_expected,omitempty"`
	EventsPerSec   float64 `json:"events_per_sec,omitempty"`
	EventMeanMs    float64 `json:"event_mean_ms,omitempty"`
	EventP99Ms     float64 `json:"event_p99_ms,omitempty"`
}

// benchFlags are bench's flags.
type benchFlags struct {
	c                     benchConfig
	endpoints, cpuProfile string
	unary                 bool
	conn                  *connFlags
}

func newBenchCmd() *cobra.Command {
	f := &benchFlags{}
	g := group("bench", "load generator", benchLong, "workload", "workload", []verb{
		{"put", "Put of random keys (key size, value size, key space)", 0, 0},
		{"get", "Get of keys written by a prefill (linearizable, or --stale)", 0, 0},
		{"mixed", "Get with probability --read-ratio, else Put", 0, 0},
		{"ledger", "ProcessUsage over --accounts accounts funded by a prefill", 0, 0},
		{"lease-keepalive", "keep-alives of --leases leases granted first", 0, 0},
		{"watch", "Put of keys --watchers watchers follow; events delivered", 0, 0},
	}, f.run)
	fs, c := g.PersistentFlags(), &f.c
	fs.StringVar(&f.endpoints, "endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of nodes")
	f.conn = addConnFlags(fs)
	fs.IntVar(&c.clients, "clients", 100, "concurrent callers")
	fs.IntVar(&c.conns, "conns", 4, "client connections (callers share them round-robin)")
	fs.IntVar(&c.total, "total", 100000, "operations to run (ignored with --duration)")
	fs.DurationVar(&c.duration, "duration", 0, "run for this long instead of --total")
	fs.IntVar(&c.keySize, "key-size", 8, "key size in bytes")
	fs.IntVar(&c.valueSize, "value-size", 256, "value size in bytes")
	fs.IntVar(&c.keySpace, "key-space", 100000, "distinct keys")
	fs.IntVar(&c.routingKeys, "routing-keys", 1000, "distinct routing keys (users) the keys spread over")
	fs.Float64Var(&c.readRatio, "read-ratio", 0.9, "mixed: fraction of reads")
	fs.BoolVar(&c.stale, "stale", false, "reads from any replica")
	fs.IntVar(&c.accounts, "accounts", 10000, "ledger: accounts")
	fs.IntVar(&c.leases, "leases", 10000, "lease-keepalive: leases granted and kept alive")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 100*time.Second, "lease-keepalive: the leases' TTL (etcd's benchmark grants 100 s)")
	fs.StringVar(&c.kaCall, "keepalive-call", "stream", "lease-keepalive: stream (the client's shared keep-alive stream, as KeepAlive renews) or once (a KeepAliveOnce call)")
	fs.IntVar(&c.watchers, "watchers", 100, "watch: watchers (0: the puts alone)")
	fs.BoolVar(&c.asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&c.progress, "progress", true, "print a progress line every second (to stderr)")
	fs.DurationVar(&c.opTimeout, "op-timeout", 10*time.Second, "deadline of one operation")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the load tool to `FILE` (go tool pprof)")
	fs.BoolVar(&f.unary, "unary", false, "send every call as its own unary gRPC call instead of pipelining the calls to a node over one stream")
	return g
}

func (f *benchFlags) run(ctx context.Context, workload string, _ []string, stdout, stderr io.Writer) error {
	c := f.c
	c.workload = workload
	var err error
	c.endpoints = strings.Split(f.endpoints, ",")
	if c.client, err = f.conn.clientConfig(f.endpoints); err != nil {
		return err
	}
	c.client.Unary = f.unary
	if err := c.validate(); err != nil {
		return usageError{err}
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := runBench(ctx, c, stderr)
	if err != nil {
		return err
	}
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "workload %s: %d clients over %d conns\n", res.Workload, res.Clients, res.Conns)
	fmt.Fprintf(stdout, "  ops        %d in %.2fs, %d errors\n", res.Ops, res.Seconds, res.Errors)
	fmt.Fprintf(stdout, "  throughput %.0f ops/s\n", res.Throughput)
	fmt.Fprintf(stdout, "  latency    mean %.3fms  p50 %.3fms  p90 %.3fms  p99 %.3fms  p99.9 %.3fms  max %.3fms\n",
		res.MeanMs, res.P50Ms, res.P90Ms, res.P99Ms, res.P999Ms, res.MaxMs)
	if res.Leases > 0 {
		fmt.Fprintf(stdout, "  leases     %d (ops are keep-alives)\n", res.Leases)
	}
	if res.Workload == "watch" {
		fmt.Fprintf(stdout, "  watchers   %d: %d events of %d expected, %.0f events/s; delivery mean %.3fms  p99 %.3fms\n",
			res.Watchers, res.Events, res.EventsExpected, res.EventsPerSec, res.EventMeanMs, res.EventP99Ms)
	}
	if res.FirstError != "" {
		fmt.Fprintf(stdout, "  first error: %s\n", res.FirstError)
	}
	return nil
}

func (c benchConfig) validate() error {
	switch c.workload {
	case "put", "get", "mixed", "ledger", "lease-keepalive", "watch":
	default:
		return fmt.Errorf("bench: unknown workload %q", c.workload)
	}
	switch {
	case c.clients < 1 || c.clients > 100000:
		return fmt.Errorf("bench: --clients %d: want 1..100000", c.clients)
	case c.conns < 1 || c.conns > c.clients:
		return fmt.Errorf("bench: --conns %d: want 1..clients", c.conns)
	case c.duration == 0 && c.total < 1:
		return fmt.Errorf("bench: --total %d: want >= 1", c.total)
	case c.duration < 0:
		return fmt.Errorf("bench: --duration %v is negative", c.duration)
	case c.keySize < 4 || c.keySize > 4096:
		return fmt.Errorf("bench: --key-size %d: want 4..4096", c.keySize)
	case c.valueSize < 0 || c.valueSize > 1<<20:
		return fmt.Errorf("bench: --value-size %d: want 0..1048576", c.valueSize)
	case c.keySpace < 1:
		return fmt.Errorf("bench: --key-space %d: want >= 1", c.keySpace)
	case c.routingKeys < 1:
		return fmt.Errorf("bench: --routing-keys %d: want >= 1", c.routingKeys)
	case c.readRatio < 0 || c.readRatio > 1:
		return fmt.Errorf("bench: --read-ratio %v: want 0..1", c.readRatio)
	case c.accounts < 1:
		return fmt.Errorf("bench: --accounts %d: want >= 1", c.accounts)
	case c.leases < 1 || c.leases > 1000000:
		return fmt.Errorf("bench: --leases %d: want 1..1000000", c.leases)
	case c.leaseTTL < client.MinLeaseTTL || c.leaseTTL > client.MaxLeaseTTL:
		return fmt.Errorf("bench: --lease-ttl %v: want %v..%v", c.leaseTTL, client.MinLeaseTTL, client.MaxLeaseTTL)
	case c.kaCall != "stream" && c.kaCall != "once":
		return fmt.Errorf("bench: --keepalive-call %q: want stream or once", c.kaCall)
	case c.watchers < 0 || c.watchers > 100000:
		return fmt.Errorf("bench: --watchers %d: want 0..100000", c.watchers)
	case c.workload == "watch" && c.keySize < 8:
		return fmt.Errorf("bench: --key-size %d: watch wants at least 8 (a 4-byte run tag, then the key number)", c.keySize)
	}
	return nil
}

// keyOf returns the routing key and key of key number i.
func (c benchConfig) keyOf(i int) (rk, key []byte) {
	rk = fmt.Appendf(nil, "bench-user-%d", i%c.routingKeys)
	key = make([]byte, c.keySize)
	copy(key, c.keyTag)
	binary.BigEndian.PutUint32(key[c.keySize-4:], uint32(i))
	return rk, key
}

func accountOf(i int) keys.AccountID {
	var a keys.AccountID
	copy(a[:], "bench-acct")
	binary.BigEndian.PutUint32(a[12:], uint32(i))
	return a
}

// op runs one operation of the workload with caller-local randomness.
type op func(ctx context.Context, cl *client.Client, rng *mrand.Rand, seq int64) error

func (c benchConfig) op(value []byte, runID string) op {
	var reads []client.ReadOption
	if c.stale {
		reads = append(reads, client.Stale())
	}
	put := func(ctx context.Context, cl *client.Client, rng *mrand.Rand) error {
		rk, k := c.keyOf(rng.IntN(c.keySpace))
		return cl.Put(ctx, rk, k, value)
	}
	get := func(ctx context.Context, cl *client.Client, rng *mrand.Rand) error {
		rk, k := c.keyOf(rng.IntN(c.keySpace))
		_, err := cl.Get(ctx, rk, k, reads...)
		if errors.Is(err, client.ErrNotFound) {
			err = nil // a mixed run reads keys not yet written
		}
		return err
	}
	switch c.workload {
	case "put":
		return func(ctx context.Context, cl *client.Client, rng *mrand.Rand, _ int64) error { return put(ctx, cl, rng) }
	case "get":
		return func(ctx context.Context, cl *client.Client, rng *mrand.Rand, _ int64) error { return get(ctx, cl, rng) }
	case "mixed":
		return func(ctx context.Context, cl *client.Client, rng *mrand.Rand, _ int64) error {
			if rng.Float64() < c.readRatio {
				return get(ctx, cl, rng)
			}
			return put(ctx, cl, rng)
		}
	}
	return func(ctx context.Context, cl *client.Client, rng *mrand.Rand, seq int64) error {
		acct := accountOf(rng.IntN(c.accounts))
		now := time.Now()
		ev := &records.UsageEvent{EventID: fmt.Sprintf("bench-%s-%d", runID, seq), UserID: acct,
			Resource: "bench", Quantity: 1, CostCents: 1, CreatedAt: now.UnixMilli()}
		tx := &records.CreditTransaction{TransactionID: client.NewTransactionIDFor(now, acct), UserID: acct, AmountCents: 1,
			TransactionType: records.TxUsage, CreatedAt: now.UnixMilli()}
		_, err := cl.Billing().ProcessUsage(ctx, ev, tx)
		return err
	}
}

// prefill writes what the workload reads: every key for get, funded
// accounts for ledger.
func (c benchConfig) prefill(ctx context.Context, cls []*client.Client, value []byte, stderr io.Writer) error {
	var n int
	var fill func(ctx context.Context, cl *client.Client, i int) error
	switch c.workload {
	case "get":
		n = c.keySpace
		fill = func(ctx context.Context, cl *client.Client, i int) error {
			rk, k := c.keyOf(i)
			return cl.Put(ctx, rk, k, value)
		}
	case "ledger":
		n = c.accounts
		fill = func(ctx context.Context, cl *client.Client, i int) error {
			a := accountOf(i)
			now := time.Now()
			if err := cl.Billing().PutAccount(ctx, &records.Account{UserID: a, CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli()}); err != nil {
				return err
			}
			tx := &records.CreditTransaction{TransactionID: client.NewTransactionIDFor(now, a), UserID: a,
				AmountCents: 1 << 40, TransactionType: records.TxGrant, CreatedAt: now.UnixMilli()}
			_, err := cl.Billing().AddCredits(ctx, a, 1<<40, tx)
			return err
		}
	default:
		return nil
	}
	fmt.Fprintf(stderr, "prefill: %d items\n", n)
	if err := c.inParallel(ctx, cls, n, fill); err != nil {
		return fmt.Errorf("prefill %w", err)
	}
	return nil
}

func runBench(ctx context.Context, c benchConfig, stderr io.Writer) (*BenchResult, error) {
	cls := make([]*client.Client, c.conns)
	for i := range cls {
		cl, err := client.New(ctx, c.client)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		cls[i] = cl
	}
	value := make([]byte, c.valueSize)
	rand.Read(value)
	if err := c.prefill(ctx, cls, value, stderr); err != nil {
		return nil, err
	}
	var runIDb [4]byte
	rand.Read(runIDb[:])
	do := c.op(value, fmt.Sprintf("%x", runIDb))
	var leases []client.LeaseID
	var ws *benchWatchers
	switch c.workload {
	case "lease-keepalive":
		var err error
		if leases, err = c.grantLeases(ctx, cls, stderr); err != nil {
			return nil, err
		}
		defer c.revokeLeases(ctx, cls, leases, stderr)
		do = c.keepAliveOp(leases)
	case "watch":
		c.keyTag = runIDb[:]
		var err error
		if ws, err = c.startWatchers(ctx, cls, stderr); err != nil {
			return nil, err
		}
		defer ws.stop()
		do = ws.putOp(c, len(value))
	}

	runCtx := ctx
	if c.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	var issued, done, errs atomic.Int64
	var firstErr atomic.Value
	hists := make([]*hdrhistogram.Histogram, c.clients)
	start := time.Now()
	stopProgress := make(chan struct{})
	var pwg sync.WaitGroup
	if c.progress {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			last := int64(0)
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					d := done.Load()
					fmt.Fprintf(stderr, "%6.1fs  %9d ops  %8d ops/s  %d errors\n", time.Since(start).Seconds(), d, d-last, errs.Load())
					last = d
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range c.clients {
		hists[w] = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := cls[w%len(cls)]
			rng := mrand.New(mrand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for runCtx.Err() == nil {
				seq := issued.Add(1)
				if c.duration == 0 && seq > int64(c.total) {
					return
				}
				octx, cancel := context.WithTimeout(runCtx, c.opTimeout)
				t0 := time.Now()
				err := do(octx, cl, rng, seq)
				lat := time.Since(t0)
				cancel()
				if err != nil {
					// The run ended mid-operation (by the clock too: an
					// operation can see the run's deadline pass before
					// the run's context reports it).
					if dl, ok := runCtx.Deadline(); runCtx.Err() != nil || ok && !time.Now().Before(dl) {
						return
					}
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				hists[w].RecordValue(max(1, lat.Microseconds()))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	pwg.Wait()
	var watched *BenchResult
	if ws != nil {
		watched = ws.finish(ctx, start)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := hists[0]
	for _, o := range hists[1:] {
		h.Merge(o)
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	res := &BenchResult{Workload: c.workload, Clients: c.clients, Conns: c.conns, Ops: done.Load(), Errors: errs.Load(),
		Seconds: elapsed.Seconds(), Throughput: float64(done.Load()) / elapsed.Seconds(),
		MeanMs: h.Mean() / 1000, P50Ms: ms(h.ValueAtQuantile(50)), P90Ms: ms(h.ValueAtQuantile(90)),
		P99Ms: ms(h.ValueAtQuantile(99)), P999Ms: ms(h.ValueAtQuantile(99.9)), MaxMs: ms(h.Max())}
	if v := firstErr.Load(); v != nil {
		res.FirstError = v.(string)
	}
	if leases != nil {
		res.Leases = len(leases)
	}
	if watched != nil {
		res.Watchers, res.Events, res.EventsExpected, res.EventsPerSec = watched.Watchers, watched.Events, watched.EventsExpected, watched.EventsPerSec
		res.EventMeanMs, res.EventP99Ms = watched.EventMeanMs, watched.EventP99Ms
		if res.FirstError == "" {
			res.FirstError = watched.FirstError
		}
	}
	return res, nil
}
