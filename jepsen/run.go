package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/cluster/placement"
	"github.com/swarmkv/swarmkv/shard"
)

// Config configures a run.
type Config struct {
	// Driver runs the cluster and injects faults; nil runs without faults
	// (e.g. against a MemDB).
	Driver Driver
	// Connect opens one DB session per worker (and one for setup and the
	// final reads).
	Connect Connect
	// Workloads run side by side, each with WorkersPerWorkload workers.
	Workloads []Workload
	// Nemeses are injected in turn (order shuffled by Seed); empty: none.
	Nemeses []Nemesis
	// Duration of the workload phase. Default 10s.
	Duration time.Duration
	// Interval is the quiet time before each fault; FaultDuration how long
	// each lasts. Defaults 3s and 4s.
	Interval, FaultDuration time.Duration
	// WorkersPerWorkload default 4.
	WorkersPerWorkload int
	// OpTimeout bounds each operation (then it is indeterminate if a
	// write). Default 5s.
	OpTimeout time.Duration
	// RecoveryTimeout bounds the wait for the cluster to be ready again
	// after healing. Default 2m.
	RecoveryTimeout time.Duration
	// Seed seeds every random choice of the run.
	Seed uint64
	// OutDir receives the report (history.json, summary.txt,
	// summary.json, visualizations); "" writes none.
	OutDir string
	// Logger receives progress; default discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Interval == 0 {
		c.Interval = 3 * time.Second
	}
	if c.FaultDuration == 0 {
		c.FaultDuration = 4 * time.Second
	}
	if c.WorkersPerWorkload == 0 {
		c.WorkersPerWorkload = 4
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 5 * time.Second
	}
	if c.RecoveryTimeout == 0 {
		c.RecoveryTimeout = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = discardLogger()
	}
	return c
}

// Fault is one injected fault, with times like the history's.
type Fault struct {
	Nemesis     string `json:"nemesis"`
	Description string `json:"description,omitempty"`
	Start       int64  `json:"start_ns"`
	End         int64  `json:"end_ns"`
	Error       string `json:"error,omitempty"`
}

// Result is the outcome of a run.
type Result struct {
	Driver   string        `json:"driver"`
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration_ns"`
	History  History       `json:"-"`
	Faults   []Fault       `json:"faults"`
	// Skipped names nemeses the driver does not support.
	Skipped  []string  `json:"skipped_nemeses,omitempty"`
	Verdicts []Verdict `json:"verdicts"`
	// Valid is true when no checker found an anomaly.
	Valid bool `json:"valid"`
	// Counts are ops per "workload f" and outcome.
	Counts map[string]map[Outcome]int `json:"ops"`
	// Moves are the splits and merges of the split-merge nemesis.
	Moves []MoveRecord `json:"moves,omitempty"`
	// Unavailability is each shard's longest wait for a successful
	// register operation during a fault (unavail.go), by the slot map
	// read once the cluster is healed (a key moved by a split or merge
	// counts for its final shard); none without faults, register
	// workload or a driver that gives the map (UnavailabilityError says
	// why).
	Unavailability      []ShardGap `json:"unavailability,omitempty"`
	UnavailabilityError string     `json:"unavailability_error,omitempty"`
	// Error says why the run could not be completed (recovery or final
	// reads failed); the result then has no verdicts.
	Error string `json:"error,omitempty"`
}

// MoveCounts sums the run's moves by kind and outcome.
func (r *Result) MoveCounts() MoveCounts { return countMoves(r.Moves) }

// Run sets the workloads up, runs them for cfg.Duration while the nemeses
// inject faults, heals everything, waits for the cluster, does the final
// reads, checks, and writes the report. An error means the run could not
// be completed (setup, recovery or final reads failed; after a failed
// recovery or final read the Result, written as the report, has what
// happened until then and no verdicts); anomalies are reported in the
// Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	log := cfg.Logger
	rec := NewRecorder()
	res := &Result{Seed: cfg.Seed, Valid: true}
	if cfg.Driver != nil {
		res.Driver = cfg.Driver.Name()
	}
	if cfg.OutDir != "" {
		if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
			return nil, err
		}
	}

	setupDB, err := cfg.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("jepsen: connect: %w", err)
	}
	for _, w := range cfg.Workloads {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := w.Setup(sctx, setupDB)
		cancel()
		if err != nil {
			setupDB.Close()
			return nil, err
		}
	}
	setupDB.Close()
	for _, w := range cfg.Workloads {
		b, ok := w.(Background)
		if !ok {
			continue
		}
		defer b.Stop()
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := b.Start(sctx, cfg.Connect, rec)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("jepsen: %s: %w", w.Name(), err)
		}
	}

	// Workload phase.
	log.Info("jepsen: running", "duration", cfg.Duration, "workloads", len(cfg.Workloads), "nemeses", len(cfg.Nemeses))
	start := time.Now()
	runCtx, stopRun := context.WithTimeout(ctx, cfg.Duration)
	defer stopRun()
	var wg sync.WaitGroup
	stride := cfg.WorkersPerWorkload * len(cfg.Workloads)
	var dbs []DB
	for wi, wl := range cfg.Workloads {
		for i := range cfg.WorkersPerWorkload {
			id := wi*cfg.WorkersPerWorkload + i
			db, err := cfg.Connect(ctx)
			if err != nil {
				stopRun()
				wg.Wait()
				return nil, fmt.Errorf("jepsen: connect worker %d: %w", id, err)
			}
			dbs = append(dbs, db)
			w := newWorker(id, stride, db, rec, cfg.Seed, cfg.OpTimeout)
			wg.Add(1)
			go func() {
				defer wg.Done()
				wl.Run(runCtx, w)
			}()
		}
	}
	var faults []Fault
	var skipped []string
	var nemWG sync.WaitGroup
	env := &Env{Driver: cfg.Driver, Rng: rand.New(rand.NewPCG(cfg.Seed, 0xfa17)), Rec: rec}
	if cfg.Driver != nil && len(cfg.Nemeses) > 0 {
		nemWG.Add(1)
		go func() {
			defer nemWG.Done()
			faults, skipped = schedule(runCtx, cfg, env)
		}()
	}
	wg.Wait()
	workEnd := rec.Now() // the end of the workload phase: no probe after it
	nemWG.Wait()
	for _, db := range dbs {
		db.Close()
	}
	res.Faults, res.Skipped = faults, skipped
	res.Moves = env.moves.records()
	// incomplete reports a run that could not be completed: what happened
	// until then (operations, faults, moves), no verdicts.
	incomplete := func(err error) (*Result, error) {
		res.Valid, res.Error = false, err.Error()
		res.Duration = time.Since(start)
		res.History = rec.History()
		res.Counts = res.History.Counts()
		if cfg.OutDir != "" {
			if werr := res.write(cfg.OutDir); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		return res, err
	}

	// Heal and recover.
	if cfg.Driver != nil {
		rctx, cancel := context.WithTimeout(ctx, cfg.RecoveryTimeout)
		err := healAll(rctx, cfg.Driver)
		if err == nil {
			err = waitReady(rctx, cfg.Driver, cfg.Driver.Nodes())
		}
		cancel()
		if err != nil {
			return incomplete(fmt.Errorf("jepsen: recovery: %w", err))
		}
		log.Info("jepsen: cluster healed and ready")
	}
	// Every move must end once the cluster is healed.
	var movesLeft []placement.Move
	var movesErr error
	if rs, ok := cfg.Driver.(Resharding); ok && env.moves != nil {
		rctx, cancel := context.WithTimeout(ctx, cfg.RecoveryTimeout)
		movesLeft, movesErr = waitNoMoves(rctx, rs)
		cancel()
	}

	// The slot map, for the unavailability by shard.
	var slots []shard.ID
	if rs, ok := cfg.Driver.(Resharding); ok && len(res.Faults) > 0 {
		rctx, cancel := context.WithTimeout(ctx, cfg.RecoveryTimeout)
		var err error
		if slots, err = slotsOf(rctx, rs); err != nil {
			res.UnavailabilityError = err.Error()
		}
		cancel()
	}

	// Final reads.
	finalDB, err := cfg.Connect(ctx)
	if err != nil {
		return incomplete(fmt.Errorf("jepsen: connect for final reads: %w", err))
	}
	fw := newWorker(stride, stride+1, finalDB, rec, cfg.Seed, cfg.OpTimeout)
	for _, wl := range cfg.Workloads {
		fctx, cancel := context.WithTimeout(ctx, cfg.RecoveryTimeout)
		err := wl.Final(fctx, fw)
		cancel()
		if err != nil {
			finalDB.Close()
			return incomplete(fmt.Errorf("jepsen: %s: %w", wl.Name(), err))
		}
	}
	finalDB.Close()
	res.Duration = time.Since(start)

	// Check.
	res.History = rec.History()
	res.Counts = res.History.Counts()
	if slots != nil {
		res.Unavailability = Unavailability(res.History, res.Faults, workEnd, RegisterShardOf(slots))
	}
	for _, wl := range cfg.Workloads {
		v := wl.Check(res.History, cfg.OutDir)
		res.Valid = res.Valid && v.Valid
		res.Verdicts = append(res.Verdicts, v)
		log.Info("jepsen: verdict", "checker", v.Checker, "valid", v.Valid, "anomalies", len(v.Anomalies))
	}
	if env.moves != nil {
		v := checkMoves(res.Moves, movesLeft, movesErr)
		res.Valid = res.Valid && v.Valid
		res.Verdicts = append(res.Verdicts, v)
		log.Info("jepsen: verdict", "checker", v.Checker, "valid", v.Valid, "moves", res.MoveCounts().String())
	}
	if cfg.OutDir != "" {
		if err := res.write(cfg.OutDir); err != nil {
			return res, err
		}
	}
	return res, nil
}

// schedule injects the nemeses in turn until ctx ends: wait Interval,
// start one, hold it FaultDuration, stop it.
func schedule(ctx context.Context, cfg Config, env *Env) ([]Fault, []string) {
	rng, rec := env.Rng, env.Rec
	nems := append([]Nemesis(nil), cfg.Nemeses...)
	rng.Shuffle(len(nems), func(i, j int) { nems[i], nems[j] = nems[j], nems[i] })
	var faults []Fault
	var skipped []string
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// Stops use their own context: they must run after ctx ends.
	stopCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	skipSleep := false
	for i := 0; len(nems) > 0; i++ {
		if !skipSleep && !sleep(cfg.Interval) {
			break
		}
		skipSleep = false
		n := nems[i%len(nems)]
		f := Fault{Nemesis: n.Name(), Start: rec.Now()}
		sctx, cancel := stopCtx()
		desc, err := n.Start(sctx, env)
		cancel()
		f.Description = desc
		if errors.Is(err, ErrUnsupported) {
			cfg.Logger.Info("jepsen: nemesis not supported by the driver, skipped", "nemesis", n.Name(), "err", err)
			skipped = append(skipped, n.Name())
			nems = slices_delete(nems, i%len(nems))
			i--
			skipSleep = true
			sctx, cancel := stopCtx()
			_ = n.Stop(sctx, env)
			cancel()
			continue
		}
		if err != nil {
			f.Error = err.Error()
		}
		cfg.Logger.Info("jepsen: fault", "nemesis", n.Name(), "what", desc, "err", err)
		sleep(cfg.FaultDuration)
		sctx, cancel = stopCtx()
		if err := n.Stop(sctx, env); err != nil {
			f.Error = strings.TrimPrefix(f.Error+"; stop: "+err.Error(), "; ")
		}
		cancel()
		if r, ok := n.(interface{ Result() string }); ok && r.Result() != "" {
			f.Description += "; " + r.Result()
		}
		f.End = rec.Now()
		faults = append(faults, f)
	}
	return faults, skipped
}

func slices_delete(s []Nemesis, i int) []Nemesis {
	return append(s[:i:i], s[i+1:]...)
}

// healAll removes every fault: network, delays, drops, pauses, kills.
func healAll(ctx context.Context, d Driver) error {
	err := errors.Join(d.Heal(ctx), ignoreUnsupported(d.SetDelay(ctx, 0)), ignoreUnsupported(d.SetDropRate(ctx, 0)))
	for _, n := range d.Nodes() {
		err = errors.Join(err, d.Resume(ctx, n), d.Start(ctx, n))
	}
	return err
}

func ignoreUnsupported(err error) error {
	if errors.Is(err, ErrUnsupported) {
		return nil
	}
	return err
}

// write writes history.json, summary.json and summary.txt into dir.
func (r *Result) write(dir string) error {
	if err := r.History.WriteJSON(filepath.Join(dir, "history.json")); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(r.Summary()), 0o644)
}

// Summary is the human-readable report: operations by type and outcome,
// faults with their times, and the checkers' verdicts.
func (r *Result) Summary() string {
	var b strings.Builder
	verdict := "VALID: no anomalies"
	switch {
	case r.Error != "":
		verdict = "INCOMPLETE: " + r.Error
	case !r.Valid:
		verdict = "INVALID: anomalies found"
	}
	fmt.Fprintf(&b, "swarmkv jepsen run: driver %s, seed %d, %v\n%s\n\n", r.Driver, r.Seed, r.Duration.Round(time.Millisecond), verdict)
	fmt.Fprintf(&b, "Operations (ok = took effect, fail = definitely did not, info = indeterminate):\n")
	fmt.Fprintf(&b, "  %-26s %8s %8s %8s %8s\n", "workload op", "total", "ok", "fail", "info")
	var tot [4]int
	for _, k := range sortedKeys(r.Counts) {
		c := r.Counts[k]
		n := c[OK] + c[Fail] + c[Info]
		fmt.Fprintf(&b, "  %-26s %8d %8d %8d %8d\n", k, n, c[OK], c[Fail], c[Info])
		tot[0] += n
		tot[1] += c[OK]
		tot[2] += c[Fail]
		tot[3] += c[Info]
	}
	fmt.Fprintf(&b, "  %-26s %8d %8d %8d %8d\n\n", "all", tot[0], tot[1], tot[2], tot[3])
	fmt.Fprintf(&b, "Faults (%d):\n", len(r.Faults))
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %8.1fs - %8.1fs  %-18s %s", float64(f.Start)/1e9, float64(f.End)/1e9, f.Nemesis, f.Description)
		if f.Error != "" {
			fmt.Fprintf(&b, "  [error: %s]", f.Error)
		}
		b.WriteString("\n")
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(&b, "  not supported by this driver: %s\n", strings.Join(r.Skipped, ", "))
	}
	if len(r.Moves) > 0 {
		fmt.Fprintf(&b, "\nMoves: %s\n", r.MoveCounts())
		for _, m := range r.Moves {
			fmt.Fprintf(&b, "  %8.1fs - %8.1fs  %s\n", float64(m.Start)/1e9, float64(m.End)/1e9, m)
		}
	}
	if len(r.Unavailability) > 0 || r.UnavailabilityError != "" {
		fmt.Fprintf(&b, "\nUnavailability (longest wait of a register operation for its shard during a fault, by shard):\n")
		var worst ShardGap
		for _, g := range r.Unavailability {
			fmt.Fprintf(&b, "  %s\n", g)
			if g.Gap() > worst.Gap() {
				worst = g
			}
		}
		if len(r.Unavailability) > 0 {
			fmt.Fprintf(&b, "  longest: %v (shard %d)\n", worst.Gap().Round(time.Millisecond), worst.Shard)
		}
		if r.UnavailabilityError != "" {
			fmt.Fprintf(&b, "  not measured: %s\n", r.UnavailabilityError)
		}
	}
	fmt.Fprintf(&b, "\nCheckers:\n")
	for _, v := range r.Verdicts {
		fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(v.String(), "\n", "\n  "))
	}
	return b.String()
}
