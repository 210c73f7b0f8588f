package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

// Outcome is how an operation completed, in Jepsen's terms.
type Outcome string

const (
	// Pending: invoked, not completed yet (only while a run is going).
	Pending Outcome = "pending"
	// OK: the operation took effect (or, for a read, observed its output).
	OK Outcome = "ok"
	// Fail: the operation definitely did not take effect.
	Fail Outcome = "fail"
	// Info: indeterminate; the operation may or may not have taken effect,
	// at any time from its invocation on (ErrOutcomeUnknown, timeouts,
	// broken connections).
	Info Outcome = "info"
)

// Op is one operation of a history: its invocation and completion.
// Times are nanoseconds since the start of the run on the monotonic clock.
type Op struct {
	Index    int    `json:"index"`
	Workload string `json:"workload"`
	// Process is the logical client. After an indeterminate (info)
	// operation its worker continues as a new process, as in Jepsen, so a
	// process never has two operations in flight.
	Process  int     `json:"process"`
	F        string  `json:"f"`
	Input    any     `json:"input,omitempty"`
	Output   any     `json:"output,omitempty"`
	Outcome  Outcome `json:"outcome"`
	Error    string  `json:"error,omitempty"`
	Invoke   int64   `json:"invoke_ns"`
	Complete int64   `json:"complete_ns"`
}

// Recorder collects the operations of a run. Safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    struct {
		sync.Mutex
		ops []*Op
	}
}

// NewRecorder starts a history whose times count from now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now returns the nanoseconds since the start of the history (monotonic).
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Invoke records the invocation of f by process and returns the op to
// complete.
func (r *Recorder) Invoke(workload string, process int, f string, input any) *Op {
	op := &Op{Workload: workload, Process: process, F: f, Input: input, Outcome: Pending}
	r.mu.Lock()
	op.Invoke = r.Now()
	op.Index = len(r.mu.ops)
	r.mu.ops = append(r.mu.ops, op)
	r.mu.Unlock()
	return op
}

// Complete records op's completion.
func (r *Recorder) Complete(op *Op, outcome Outcome, output any, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Complete = r.Now()
	op.Outcome = outcome
	op.Output = output
	if err != nil {
		op.Error = err.Error()
	}
}

// History returns a copy of the operations recorded so far, in invocation
// order. Ops still pending are returned as Info completing at the end.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Now()
	h := make(History, len(r.mu.ops))
	for i, op := range r.mu.ops {
		h[i] = *op
		if h[i].Outcome == Pending {
			h[i].Outcome, h[i].Complete = Info, now
		}
	}
	return h
}

// History is a list of operations in invocation order.
type History []Op

// Of returns the operations of one workload.
func (h History) Of(workload string) History {
	var out History
	for _, op := range h {
		if op.Workload == workload {
			out = append(out, op)
		}
	}
	return out
}

// End is the latest completion time in h.
func (h History) End() int64 {
	var end int64
	for _, op := range h {
		end = max(end, op.Complete, op.Invoke)
	}
	return end
}

// WriteJSON writes h to path as a JSON array.
func (h History) WriteJSON(path string) error {
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Counts returns, per "workload f", the number of ops by outcome.
func (h History) Counts() map[string]map[Outcome]int {
	out := map[string]map[Outcome]int{}
	for _, op := range h {
		k := op.Workload + " " + op.F
		if out[k] == nil {
			out[k] = map[Outcome]int{}
		}
		out[k][op.Outcome]++
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// writeOutcome classifies the error of a write: nil is OK; errors that
// say the write was not executed are Fail; anything else (outcome unknown,
// timeouts, unavailability that may hide a sent request) is Info. A
// deadline wins over the error it wraps: "deadline exceeded after n
// attempts; last error: not leader" does not say the first attempt failed.
func writeOutcome(err error) Outcome {
	var ic *client.InsufficientCreditsError
	var de *client.DuplicateEventError
	var nl *client.NotLeaderError
	switch {
	case err == nil:
		return OK
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, client.ErrOutcomeUnknown):
		// The client gave up after several attempts: the error names the
		// last attempt's failure, but an earlier attempt may have been
		// applied.
		return Info
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrNotFound),
		errors.Is(err, client.ErrAlreadyExists), errors.Is(err, client.ErrPermissionDenied),
		errors.As(err, &ic), errors.As(err, &de), errors.As(err, &nl):
		return Fail
	}
	return Info
}

// readOutcome classifies the error of a read: a read has no effect, so any
// error is Fail. ErrNotFound is an OK read of nothing.
func readOutcome(err error) Outcome {
	if err == nil || errors.Is(err, client.ErrNotFound) {
		return OK
	}
	return Fail
}

// opContext bounds one operation.
func opContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
