package jepsen

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/swarmkv/swarmkv/client"
)

// Register is the register workload: reads, writes and compare-and-sets
// on many single-key registers, each under its own routing key so that
// they spread over every shard. Values are unique integers (0 = absent).
// The checker runs porcupine on each key's history (a history is
// linearizable iff each key's is) and writes porcupine's HTML
// visualization of every key that is not linearizable.
type Register struct {
	runID     string
	keys      int
	opsPerKey int
	next      atomic.Int64 // last value written

	mu    sync.Mutex
	slots []regSlot
	used  map[string]bool // every key ever handed out
}

type regSlot struct {
	gen  int
	ops  int
	last int64 // a value recently seen in the key, for CAS
}

// RegIn is a register operation's input.
type RegIn struct {
	Key   string `json:"key"`
	Value int64  `json:"value,omitempty"` // write, cas: the new value
	From  int64  `json:"from,omitempty"`  // cas: the expected value (0: absent)
}

// RegOut is a register operation's output.
type RegOut struct {
	Value   int64 `json:"value,omitempty"`   // read: the value seen (0: absent)
	Applied bool  `json:"applied,omitempty"` // cas: whether it applied
}

// NewRegister returns the workload with keys registers live at once, each
// retired after opsPerKey operations.
func NewRegister(runID string, keys, opsPerKey int) *Register {
	o := WorkloadOptions{Keys: keys, OpsPerKey: opsPerKey}.withDefaults()
	return &Register{runID: runID, keys: o.Keys, opsPerKey: o.OpsPerKey, slots: make([]regSlot, o.Keys), used: map[string]bool{}}
}

func (r *Register) Name() string { return "register" }

func (r *Register) Setup(context.Context, DB) error { return nil }

var regField = []byte("v")

func (r *Register) keyName(slot, gen int) string {
	return fmt.Sprintf("jr-%s-%d-%d", r.runID, slot, gen)
}

// pick chooses a key for one operation and returns it with a value
// recently seen in it.
func (r *Register) pick(w *Worker) (string, int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := w.Rng.IntN(len(r.slots))
	sl := &r.slots[s]
	if sl.ops >= r.opsPerKey {
		sl.gen, sl.ops, sl.last = sl.gen+1, 0, 0
	}
	sl.ops++
	k := r.keyName(s, sl.gen)
	r.used[k] = true
	return k, s, sl.last
}

func (r *Register) saw(slot int, key string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keyName(slot, r.slots[slot].gen) == key {
		r.slots[slot].last = v
	}
}

func parseVal(b []byte) (int64, error) {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("register holds %q, not a value this workload writes", b)
	}
	return v, nil
}

func (r *Register) Run(ctx context.Context, w *Worker) {
	for ctx.Err() == nil {
		key, slot, last := r.pick(w)
		rk := []byte(key)
		switch p := w.Rng.IntN(100); {
		case p < 50:
			op := w.Do(ctx, "register", "read", RegIn{Key: key}, func(ctx context.Context) (Outcome, any, error) {
				b, err := w.DB.Get(ctx, rk, regField)
				if errors.Is(err, client.ErrNotFound) {
					return OK, RegOut{}, nil
				}
				if err != nil {
					return readOutcome(err), nil, err
				}
				v, err := parseVal(b)
				if err != nil {
					return OK, RegOut{Value: -1}, err
				}
				return OK, RegOut{Value: v}, nil
			})
			if out, ok := op.Output.(RegOut); ok && op.Outcome == OK {
				r.saw(slot, key, out.Value)
			}
		case p < 85:
			v := r.next.Add(1)
			w.Do(ctx, "register", "write", RegIn{Key: key, Value: v}, func(ctx context.Context) (Outcome, any, error) {
				err := w.DB.Put(ctx, rk, regField, []byte(strconv.FormatInt(v, 10)))
				return writeOutcome(err), nil, err
			})
		default:
			v := r.next.Add(1)
			w.Do(ctx, "register", "cas", RegIn{Key: key, Value: v, From: last}, func(ctx context.Context) (Outcome, any, error) {
				var old []byte
				if last != 0 {
					old = []byte(strconv.FormatInt(last, 10))
				}
				applied, err := w.DB.CAS(ctx, rk, regField, old, []byte(strconv.FormatInt(v, 10)))
				if err != nil {
					return writeOutcome(err), nil, err
				}
				return OK, RegOut{Applied: applied}, nil
			})
		}
	}
}

// Final reads every key used once more.
func (r *Register) Final(ctx context.Context, w *Worker) error {
	r.mu.Lock()
	var ks []string
	for k := range r.used {
		ks = append(ks, k)
	}
	r.mu.Unlock()
	sort.Strings(ks)
	for _, k := range ks {
		err := retryFinal(ctx, func(ctx context.Context) error {
			op := w.Do(ctx, "register", "read", RegIn{Key: k}, func(ctx context.Context) (Outcome, any, error) {
				b, err := w.DB.Get(ctx, []byte(k), regField)
				if errors.Is(err, client.ErrNotFound) {
					return OK, RegOut{}, nil
				}
				if err != nil {
					return Fail, nil, err
				}
				v, err := parseVal(b)
				if err != nil {
					return OK, RegOut{Value: -1}, err
				}
				return OK, RegOut{Value: v}, nil
			})
			if op.Outcome != OK {
				return errors.New(op.Error)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("final read of %s: %w", k, err)
		}
	}
	return nil
}

// regPorcIn is the input porcupine sees: the op and whether its outcome is
// unknown.
type regPorcIn struct {
	F       string
	In      RegIn
	Unknown bool
}

// registerModel is a single register holding an int64 (0: absent).
var registerModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		s := state.(int64)
		in := input.(regPorcIn)
		switch in.F {
		case "read":
			return output.(RegOut).Value == s, s
		case "write":
			return true, in.In.Value
		case "cas":
			if in.Unknown {
				// If it took effect it was when the register held From;
				// otherwise the linearization puts it after everything.
				if s == in.In.From {
					return true, in.In.Value
				}
				return true, s
			}
			applied := output.(RegOut).Applied
			if applied != (s == in.In.From) {
				return false, s
			}
			if applied {
				return true, in.In.Value
			}
			return true, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regPorcIn)
		suffix := ""
		if in.Unknown {
			suffix = " (info)"
		}
		switch in.F {
		case "read":
			return fmt.Sprintf("read() -> %d", output.(RegOut).Value)
		case "write":
			return fmt.Sprintf("write(%d)%s", in.In.Value, suffix)
		default:
			if in.Unknown {
				return fmt.Sprintf("cas(%d, %d) -> ?", in.In.From, in.In.Value)
			}
			return fmt.Sprintf("cas(%d, %d) -> %v", in.In.From, in.In.Value, output.(RegOut).Applied)
		}
	},
	DescribeState: func(state any) string { return strconv.FormatInt(state.(int64), 10) },
}

// CheckTimeout bounds the linearizability search of one key.
var CheckTimeout = 20 * time.Second

// Check runs porcupine per key. Failed operations did not happen and are
// dropped; indeterminate writes and CAS may take effect at any time after
// their invocation, so they return at the end of the history.
func (r *Register) Check(h History, dir string) Verdict {
	v := Verdict{Checker: "register", Valid: true}
	h = h.Of("register")
	end := h.End() + 1
	byKey := map[string][]porcupine.Operation{}
	procs := map[int]int{}
	for _, op := range h {
		in, ok := op.Input.(RegIn)
		if !ok {
			v.anomaly("op %d: input %T", op.Index, op.Input)
			continue
		}
		if op.Outcome == Fail {
			continue
		}
		if out, ok := op.Output.(RegOut); ok && out.Value < 0 {
			v.anomaly("op %d: read of %s saw a value this workload never writes: %s", op.Index, in.Key, op.Error)
			continue
		}
		cid, ok := procs[op.Process]
		if !ok {
			cid = len(procs)
			procs[op.Process] = cid
		}
		p := porcupine.Operation{ClientId: cid, Input: regPorcIn{F: op.F, In: in}, Call: op.Invoke, Output: op.Output, Return: op.Complete}
		if op.Outcome == Info {
			if op.F == "read" {
				continue
			}
			p.Input = regPorcIn{F: op.F, In: in, Unknown: true}
			p.Return = end
			p.Output = RegOut{}
		}
		if p.Output == nil {
			p.Output = RegOut{}
		}
		byKey[in.Key] = append(byKey[in.Key], p)
	}
	keys := sortedKeys(byKey)
	v.count("keys", len(keys))
	for _, k := range keys {
		ops := byKey[k]
		v.count("ops", len(ops))
		res, info := porcupine.CheckOperationsVerbose(registerModel, ops, CheckTimeout)
		switch res {
		case porcupine.Ok:
		case porcupine.Unknown:
			v.Unknown = true
			v.count("keys-unknown", 1)
		case porcupine.Illegal:
			v.anomaly("key %s: not linearizable (%d ops)", k, len(ops))
			if dir != "" {
				path := filepath.Join(dir, "register-"+k+".html")
				if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
					v.Anomalies = append(v.Anomalies, fmt.Sprintf("visualize %s: %v", k, err))
				} else {
					v.Files = append(v.Files, path)
				}
			}
		}
	}
	return v
}
