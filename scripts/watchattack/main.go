// Command watchattack reproduces the watch and keep-alive attacks of
// issue 37 (items 7, 8, 9) against one node on loopback, and reports the
// node's peak RSS and the CPU it used during each (docs/security.md,
// "What a read-only client can do"). It is bounded in count and time, and
// refuses any address that is not loopback. scripts/watch-attack.sh runs
// it against fresh nodes of two binaries.
//
//	go run ./scripts/watchattack -addr 127.0.0.1:17100 -pid PID -phase list
//
// Phases:
//
//	list     64 values of 1 MiB under one routing key, then 6 parallel
//	         list-watches of them, 3 rounds
//	catchup  64 values of 1 MiB of other routing keys (one shard's
//	         history), one write of the victim, then 1,200 watches of the
//	         victim from revision 0 over 10 connections; a refusal with a
//	         retry hint is retried after it, as the Go client does
//	streams  10,000 watches over 10 connections (as many as the node
//	         takes), then 40 keep-alive streams on each connection, each
//	         keeping 1,024 keep-alives of one lease in flight, for 10 s
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/rpc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:17100", "the node's gRPC address (loopback only)")
	pid := flag.Int("pid", 0, "the node's process id, for its RSS and CPU")
	phase := flag.String("phase", "list", "list, catchup or streams")
	rssCap := flag.Int64("rss-cap-mib", 4096, "kill the node if its RSS passes this (MiB), so a run cannot exhaust the machine")
	watches := flag.Int("watches", 1200, "catchup: watches from revision 0")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fmt.Fprintln(os.Stderr, "watchattack: loopback addresses only")
		os.Exit(2)
	}
	if *pid <= 0 {
		fmt.Fprintln(os.Stderr, "watchattack: -pid is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conns := make([]*grpc.ClientConn, 10)
	for i := range conns {
		if conns[i], err = grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(4<<20))); err != nil {
			fmt.Fprintln(os.Stderr, "watchattack:", err)
			os.Exit(1)
		}
		defer conns[i].Close()
	}
	m := startMeter(*pid, *rssCap<<20)
	var report string
	switch *phase {
	case "list":
		report, err = listPhase(ctx, conns, m)
	case "catchup":
		report, err = catchupPhase(ctx, conns, m, *watches)
	case "streams":
		report, err = streamsPhase(ctx, conns, m)
	default:
		err = fmt.Errorf("unknown phase %q", *phase)
	}
	peak, cpu, wall := m.stop()
	fmt.Printf("phase %s: node RSS before %d MiB, peak %d MiB; node CPU %.1f s in %.1f s; %s\n",
		*phase, m.before>>20, peak>>20, cpu.Seconds(), wall.Seconds(), report)
	if m.killed.Load() {
		fmt.Printf("phase %s: node killed at the RSS cap of %d MiB\n", *phase, *rssCap)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchattack:", err)
		os.Exit(1)
	}
}

// meter samples a process's RSS every 20 ms and its CPU time.
type meter struct {
	pid          int
	before       int64
	cpu0         time.Duration
	start        time.Time
	peak         atomic.Int64
	killed       atomic.Bool
	done         chan struct{}
	wg           sync.WaitGroup
	measureStart atomic.Int64 // unix ns: CPU and peak count from here (after the writes)
}

func startMeter(pid int, capBytes int64) *meter {
	m := &meter{pid: pid, done: make(chan struct{})}
	m.reset()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				r := rss(pid)
				if r > m.peak.Load() {
					m.peak.Store(r)
				}
				if r > capBytes && !m.killed.Swap(true) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}()
	return m
}

// reset starts the measure now (the setup writes are not counted).
func (m *meter) reset() {
	m.before = rss(m.pid)
	m.peak.Store(m.before)
	m.cpu0 = cpuTime(m.pid)
	m.start = time.Now()
}

func (m *meter) stop() (peak int64, cpu, wall time.Duration) {
	close(m.done)
	m.wg.Wait()
	return m.peak.Load(), cpuTime(m.pid) - m.cpu0, time.Since(m.start)
}

func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond // USER_HZ 100
}

// write puts n values of size bytes under routing keys rkOf(i).
func write(ctx context.Context, cc *grpc.ClientConn, n, size int, rkOf func(int) string) error {
	kv := rpc.NewKVClient(cc)
	val := bytes.Repeat([]byte{'v'}, size)
	for i := range n {
		for {
			_, err := kv.Put(ctx, &rpc.PutRequest{RoutingKey: []byte(rkOf(i)), Key: []byte(fmt.Sprintf("k%03d", i)), Value: val})
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable && status.Code(err) != codes.FailedPrecondition || ctx.Err() != nil {
				return fmt.Errorf("put %d: %w", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func listPhase(ctx context.Context, conns []*grpc.ClientConn, m *meter) (string, error) {
	if err := write(ctx, conns[0], 64, 1<<20, func(int) string { return "victim" }); err != nil {
		return "", err
	}
	m.reset()
	var maxMsg, total atomic.Int64
	var msgs atomic.Int64
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := rpc.NewWatchClient(conns[i]).Watch(ctx, &rpc.WatchRequest{RoutingKey: []byte("victim"), List: true})
				if err != nil {
					errs <- err
					return
				}
				for {
					r, err := st.Recv()
					if err != nil {
						errs <- fmt.Errorf("round %d: %w", round, err)
						return
					}
					n := 0
					for _, e := range r.GetEvents() {
						n += len(e.GetKey()) + len(e.GetValue())
					}
					total.Add(int64(n))
					msgs.Add(1)
					for {
						cur := maxMsg.Load()
						if int64(n) <= cur || maxMsg.CompareAndSwap(cur, int64(n)) {
							break
						}
					}
					if r.GetListDone() {
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return "", err
		}
	}
	return fmt.Sprintf("3 rounds of 6 list-watches: %d MiB in %d messages, largest %.1f MiB", total.Load()>>20, msgs.Load(), float64(maxMsg.Load())/(1<<20)), nil
}

func catchupPhase(ctx context.Context, conns []*grpc.ClientConn, m *meter, watches int) (string, error) {
	if err := write(ctx, conns[0], 64, 1<<20, func(i int) string { return fmt.Sprint("other", i) }); err != nil {
		return "", err
	}
	if err := write(ctx, conns[0], 1, 16, func(int) string { return "victim" }); err != nil {
		return "", err
	}
	m.reset()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var caught, refused, retries atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for i := range watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				st, err := rpc.NewWatchClient(conns[i%len(conns)]).Watch(wctx, &rpc.WatchRequest{RoutingKey: []byte("victim"), ProgressMs: 3600_000})
				if err == nil {
					for {
						var r *rpc.WatchResponse
						if r, err = st.Recv(); err != nil {
							break
						}
						if r.GetCreated() == nil && len(r.GetEvents()) > 0 {
							caught.Add(1)
							<-wctx.Done() // held open until every watch is done
							return
						}
					}
				}
				s, _ := status.FromError(err)
				if pause, ok := retryHint(s); ok {
					retries.Add(1)
					select {
					case <-time.After(pause):
						continue
					case <-wctx.Done():
						return
					}
				}
				if wctx.Err() == nil {
					refused.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				return
			}
		}()
	}
	deadline := time.After(90 * time.Second)
	for caught.Load()+refused.Load() < int64(watches) {
		select {
		case <-deadline:
			stop()
			wg.Wait()
			return fmt.Sprintf("deadline: %d caught up, %d refused", caught.Load(), refused.Load()), errors.New("catch-ups not done in 90 s")
		case <-time.After(50 * time.Millisecond):
		}
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	why := ""
	if e, ok := firstErr.Load().(error); ok {
		why = fmt.Sprintf(" (%v)", e)
	}
	return fmt.Sprintf("%d watches from revision 0: %d caught up in %.1f s, %d refused%s, %d retries after a busy answer",
		watches, caught.Load(), took.Seconds(), refused.Load(), why, retries.Load()), nil
}

func retryHint(s *status.Status) (time.Duration, bool) {
	if s.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range s.Details() {
		if ri, ok := d.(*rpc.RetryInfo); ok {
			return time.Duration(ri.GetRetryAfterMs()) * time.Millisecond, true
		}
	}
	return 0, false
}

func streamsPhase(ctx context.Context, conns []*grpc.ClientConn, m *meter) (string, error) {
	var lease *rpc.LeaseGrantResponse
	for {
		var err error
		lease, err = rpc.NewLeaseClient(conns[0]).Grant(ctx, &rpc.LeaseGrantRequest{RoutingKey: []byte("victim"), TtlMs: 60_000})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable && status.Code(err) != codes.FailedPrecondition || ctx.Err() != nil {
			return "", fmt.Errorf("grant: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // the shard's leader is not ready yet
	}
	m.reset()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var open, refused atomic.Int64
	var wg sync.WaitGroup
	for c := range conns {
		for j := range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := rpc.NewWatchClient(conns[c]).Watch(wctx, &rpc.WatchRequest{RoutingKey: []byte(fmt.Sprint("w", c, "-", j)), ProgressMs: 3600_000})
				if err == nil {
					if _, err = st.Recv(); err == nil {
						open.Add(1)
						for {
							if _, err := st.Recv(); err != nil {
								return
							}
						}
					}
				}
				if wctx.Err() == nil {
					refused.Add(1)
				}
			}()
		}
	}
	waitUntil := time.Now().Add(30 * time.Second)
	for open.Load()+refused.Load() < 10000 && time.Now().Before(waitUntil) {
		time.Sleep(50 * time.Millisecond)
	}
	watchers := fmt.Sprintf("%d watches open, %d refused", open.Load(), refused.Load())
	var kaOpen, kaRefused, kas atomic.Int64
	kctx, kstop := context.WithTimeout(wctx, 10*time.Second)
	defer kstop()
	for c := range conns {
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := rpc.NewLeaseClient(conns[c]).KeepAliveStream(kctx)
				if err != nil {
					return
				}
				credit := make(chan struct{}, 1024)
				go func() {
					for {
						select {
						case credit <- struct{}{}:
						case <-kctx.Done():
							return
						}
						if st.Send(&rpc.LeaseKeepAliveRequest{Id: lease.GetId()}) != nil {
							return
						}
					}
				}()
				first := true
				for {
					if _, err := st.Recv(); err != nil {
						if first && kctx.Err() == nil {
							kaRefused.Add(1)
						}
						return
					}
					if first {
						kaOpen.Add(1)
						first = false
					}
					kas.Add(1)
					select {
					case <-credit:
					default:
					}
				}
			}()
		}
	}
	<-kctx.Done()
	stop()
	wg.Wait()
	return fmt.Sprintf("%s; %d keep-alive streams open, %d refused, %d keep-alives answered in 10 s", watchers, kaOpen.Load(), kaRefused.Load(), kas.Load()), nil
}
