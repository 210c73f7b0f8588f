package jepsen

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// Workload generates operations, records them, and judges the history.
type Workload interface {
	// Name is the workload's name in histories and reports.
	Name() string
	// Setup prepares the data the workload needs (before any fault).
	Setup(ctx context.Context, db DB) error
	// Run performs operations as worker w until ctx ends.
	Run(ctx context.Context, w *Worker)
	// Final reads the quiescent state after every fault is healed, as
	// operations of w (they are part of the history).
	Final(ctx context.Context, w *Worker) error
	// Check judges the workload's operations of h; it may write files
	// (e.g. visualizations) into dir.
	Check(h History, dir string) Verdict
}

// Background is implemented by a workload with clients of its own that
// live through the whole run, faults and healing included (the watch
// workload's watchers): Run calls Start after every Setup and before the
// workers start, with the run's Connect and Recorder (ctx bounds Start
// itself, not what it starts), and Stop when the run ends (after the
// checks, or on any error), which must end and join everything Start
// started; Stop is idempotent. Final may rely on them still running.
type Background interface {
	Start(ctx context.Context, connect Connect, rec *Recorder) error
	Stop()
}

// Worker is one client of a workload: its DB session, its process id and
// its random source.
type Worker struct {
	ID        int
	DB        DB
	Rec       *Recorder
	Rng       *rand.Rand
	OpTimeout time.Duration
	// stride is the number of workers; a worker's processes are
	// ID, ID+stride, ID+2*stride, ...
	stride  int
	process int
}

func newWorker(id, stride int, db DB, rec *Recorder, seed uint64, opTimeout time.Duration) *Worker {
	return &Worker{ID: id, DB: db, Rec: rec, Rng: rand.New(rand.NewPCG(seed, uint64(id))),
		OpTimeout: opTimeout, stride: stride, process: id}
}

// Do invokes f with input, runs it under the op timeout, and completes the
// op with the outcome and output run returns. After an Info outcome the
// worker becomes a new process.
func (w *Worker) Do(ctx context.Context, workload, f string, input any, run func(ctx context.Context) (Outcome, any, error)) Op {
	op := w.Rec.Invoke(workload, w.process, f, input)
	octx, cancel := opContext(ctx, w.OpTimeout)
	outcome, output, err := run(octx)
	cancel()
	w.Rec.Complete(op, outcome, output, err)
	if outcome == Info {
		w.process += w.stride
	}
	return *op
}

// Verdict is a checker's judgement.
type Verdict struct {
	Checker string `json:"checker"`
	// Valid is false when the checker found an anomaly.
	Valid bool `json:"valid"`
	// Unknown is set when the checker could not decide (e.g. the
	// linearizability search timed out); not an anomaly.
	Unknown   bool           `json:"unknown,omitempty"`
	Anomalies []string       `json:"anomalies,omitempty"`
	Stats     map[string]int `json:"stats,omitempty"`
	Files     []string       `json:"files,omitempty"`
}

// maxAnomalies bounds the anomalies a verdict lists (the count is in
// Stats["anomalies"]).
const maxAnomalies = 50

func (v *Verdict) anomaly(format string, args ...any) {
	v.Valid = false
	if v.Stats == nil {
		v.Stats = map[string]int{}
	}
	v.Stats["anomalies"]++
	if len(v.Anomalies) < maxAnomalies {
		v.Anomalies = append(v.Anomalies, fmt.Sprintf(format, args...))
	}
}

func (v *Verdict) count(stat string, n int) {
	if v.Stats == nil {
		v.Stats = map[string]int{}
	}
	v.Stats[stat] += n
}

func (v Verdict) String() string {
	var b strings.Builder
	state := "VALID"
	switch {
	case !v.Valid:
		state = "ANOMALY"
	case v.Unknown:
		state = "UNKNOWN (no anomaly found)"
	}
	fmt.Fprintf(&b, "%-10s %s", v.Checker, state)
	if len(v.Stats) > 0 {
		var parts []string
		for _, k := range sortedKeys(v.Stats) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v.Stats[k]))
		}
		fmt.Fprintf(&b, "  (%s)", strings.Join(parts, " "))
	}
	for _, a := range v.Anomalies {
		fmt.Fprintf(&b, "\n    - %s", a)
	}
	for _, f := range v.Files {
		fmt.Fprintf(&b, "\n    file: %s", f)
	}
	return b.String()
}

// WorkloadNames lists the workloads New accepts.
var WorkloadNames = []string{"register", "ledger", "registry", "watch", "lease"}

// NewWorkload returns the workload called name; runID makes its keys and
// ids unique to the run, so runs can share a cluster.
func NewWorkload(name, runID string, opts WorkloadOptions) (Workload, error) {
	switch name {
	case "register":
		return NewRegister(runID, opts.Keys, opts.OpsPerKey), nil
	case "ledger":
		return NewLedger(runID, opts.Accounts), nil
	case "registry":
		return NewRegistry(runID, opts.Users), nil
	case "watch":
		return NewWatch(runID, opts), nil
	case "lease":
		return NewLease(runID, opts), nil
	}
	return nil, fmt.Errorf("jepsen: unknown workload %q (want %s)", name, strings.Join(WorkloadNames, ", "))
}

// WorkloadOptions size the workloads.
type WorkloadOptions struct {
	// Keys is the number of registers in use at once (default 24);
	// OpsPerKey is how many operations a register gets before it is
	// retired for a fresh one (default 150), which bounds the
	// linearizability search per key.
	Keys, OpsPerKey int
	// Accounts is the number of ledger accounts (default 6).
	Accounts int
	// Users is the number of registry users (default 4).
	Users int
	// WatchKeys is the number of routing keys the watch workload writes
	// and follows (default 6); Watchers the number of its watchers, each
	// following every one of them, every other one through any replica
	// (default 4).
	WatchKeys, Watchers int
	// LeaseTTL is the TTL of the lease workload's leases (default 2s,
	// the least a swarmkv lease may have); LeaseBound the time past TTL
	// within which a lease no longer kept alive must be gone once the
	// cluster is healed (default DefaultLeaseBound).
	LeaseTTL, LeaseBound time.Duration
}

func (o WorkloadOptions) withDefaults() WorkloadOptions {
	if o.Keys == 0 {
		o.Keys = 24
	}
	if o.OpsPerKey == 0 {
		o.OpsPerKey = 150
	}
	if o.Accounts == 0 {
		o.Accounts = 6
	}
	if o.Users == 0 {
		o.Users = 4
	}
	if o.WatchKeys == 0 {
		o.WatchKeys = 6
	}
	if o.Watchers == 0 {
		o.Watchers = 4
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.LeaseBound == 0 {
		o.LeaseBound = DefaultLeaseBound
	}
	return o
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// retryFinal runs read until it succeeds or ctx ends (final reads happen
// after healing, but leaders may still be settling).
func retryFinal(ctx context.Context, read func(ctx context.Context) error) error {
	var err error
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = read(rctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
