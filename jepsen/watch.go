package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/client"
)

// Watch is the watch workload. Workers put and delete keys under a few
// routing keys, each key written by one worker only, one write after the
// other, with values unique to the run (a delete only of a key the worker
// last put with an acknowledgement; after an indeterminate write the
// worker retires the key for a fresh one, so a key's writes are all
// determinate but possibly its last); a tenth of the puts go to keys
// outside the watched prefix. Watchers (Options.Watchers sessions, every
// other one with client.WithAnyReplica so that followers may serve it)
// follow each routing key's watched prefix with client.Watch from before
// the first write until after the last one (they are the workload's
// Background: they run through every fault and the healing, reconnecting
// as the client does). Final writes a fence to each routing key and waits
// until every watcher has seen it (at most watchCatchUp), so that every
// acknowledged write must have been seen. The checker proves, for each
// watcher and routing key:
//
//   - revisions strictly increase while a shard serves the watch (no
//     message repeated or out of order), and no event comes at or below
//     a progress notification's revision;
//   - no event outside the prefix, no value never written, no value of a
//     write that failed, and no value seen twice (no duplicate);
//   - each key's events are exactly its writer's writes in the writer's
//     order: every acknowledged one (no gap), an indeterminate one at most
//     once;
//   - commit order: no write is seen after one that was invoked after it
//     was acknowledged (real-time order within the routing key);
//   - the watch never ended with an error (it must reconnect).
//
// Its verdict counts the events seen, the writes acknowledged and
// indeterminate, the reconnects, the messages served by followers and the
// shard changes followed (slot moves).
type Watch struct {
	runID    string
	rks      [][]byte
	watchers int
	next     atomic.Int64 // last value written

	mu     sync.Mutex
	keys   map[[2]int]*watchKey // (worker, routing key index) -> its key
	fences map[int]string       // routing key index -> acknowledged fence value
	fenceN int

	bg struct {
		once    sync.Once
		cancel  context.CancelFunc
		wg      sync.WaitGroup
		dbs     []DB
		streams []*watchStream
	}
}

// watchPrefix is the prefix the watchers follow; keys written outside it
// start with "u".
const watchPrefix = "k"

// watchPause spaces a worker's writes (the watchers' logs stay small in
// long runs).
const watchPause = 25 * time.Millisecond

// watchCatchUp bounds Final's wait for the watchers to see the fences.
var watchCatchUp = time.Minute

type watchKey struct {
	gen     int
	present bool // the last write was an acknowledged put
}

// WatchIn is a watch write's input: a put of Value (or a delete) of Key
// under the workload's routing key RK.
type WatchIn struct {
	RK    int    `json:"rk"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// WatchStream is what one watcher received on one routing key.
type WatchStream struct {
	Watcher    int        `json:"watcher"`
	RK         int        `json:"rk"`
	AnyReplica bool       `json:"any_replica,omitempty"`
	Msgs       []WatchMsg `json:"msgs"`
	// Err is the error that ended the watch ("" if it ran until stopped).
	Err string `json:"err,omitempty"`
}

// WatchMsg is one message of a watch: the events of one revision of a
// shard, or a progress notification.
type WatchMsg struct {
	At         int64     `json:"at_ns"`
	Shard      uint32    `json:"shard"`
	Revision   uint64    `json:"rev"`
	Progress   bool      `json:"progress,omitempty"`
	Follower   bool      `json:"follower,omitempty"`
	Reconnects int       `json:"reconnects,omitempty"`
	Events     []WatchEv `json:"events,omitempty"`
}

// WatchEv is one event: a put of Value, or a delete, of Key.
type WatchEv struct {
	Delete bool   `json:"delete,omitempty"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
}

// watchStream is a WatchStream being received.
type watchStream struct {
	mu    sync.Mutex
	s     WatchStream
	seen  map[string]bool // values seen
	first chan struct{}   // closed at the first message (or the end)
	ended bool
}

// NewWatch returns the workload over opts.WatchKeys routing keys with
// opts.Watchers watchers.
func NewWatch(runID string, opts WorkloadOptions) *Watch {
	o := opts.withDefaults()
	w := &Watch{runID: runID, watchers: o.Watchers, keys: map[[2]int]*watchKey{}, fences: map[int]string{}}
	for i := range o.WatchKeys {
		w.rks = append(w.rks, []byte(fmt.Sprintf("jw-%s-%d", runID, i)))
	}
	return w
}

func (wl *Watch) Name() string { return "watch" }

func (wl *Watch) Setup(context.Context, DB) error { return nil }

// Start starts the watchers and returns once each of their watches has
// delivered its first message (it follows the changes from then on).
func (wl *Watch) Start(ctx context.Context, connect Connect, rec *Recorder) error {
	bctx, cancel := context.WithCancel(context.Background())
	wl.bg.cancel = cancel
	for i := range wl.watchers {
		db, err := connect(ctx)
		if err != nil {
			return fmt.Errorf("watcher %d: connect: %w", i, err)
		}
		wl.bg.dbs = append(wl.bg.dbs, db)
		for r := range wl.rks {
			s := &watchStream{s: WatchStream{Watcher: i, RK: r, AnyReplica: i%2 == 1}, seen: map[string]bool{}, first: make(chan struct{})}
			wl.bg.streams = append(wl.bg.streams, s)
			wl.bg.wg.Add(1)
			go func() {
				defer wl.bg.wg.Done()
				wl.follow(bctx, db, rec, s)
			}()
		}
	}
	for _, s := range wl.bg.streams {
		select {
		case <-s.first:
		case <-ctx.Done():
			return fmt.Errorf("watcher %d, routing key %d: no first message: %w", s.s.Watcher, s.s.RK, ctx.Err())
		}
	}
	return nil
}

// follow receives one watch until ctx ends or the watch ends with an
// error. A watch whose start (revision 0) is compacted away starts again
// after the oldest retained revision (before any write of the run).
func (wl *Watch) follow(ctx context.Context, db DB, rec *Recorder, s *watchStream) {
	defer s.end("")
	var after uint64
	for {
		restart := false
		for r := range db.Watch(ctx, wl.rks[s.s.RK], []byte(watchPrefix), after, s.s.AnyReplica) {
			if r.Err != nil {
				var ce *client.CompactedError
				if errors.As(r.Err, &ce) && after == 0 && !s.started() {
					after, restart = ce.Oldest, true
					break
				}
				s.end(r.Err.Error())
				return
			}
			s.add(rec.Now(), r)
		}
		if !restart || ctx.Err() != nil {
			return
		}
	}
}

func (s *watchStream) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.s.Msgs) > 0
}

func (s *watchStream) add(at int64, r client.WatchResponse) {
	m := WatchMsg{At: at, Shard: uint32(r.Shard), Revision: r.Revision, Progress: r.Progress, Follower: r.Follower, Reconnects: r.Reconnects}
	for _, e := range r.Events {
		m.Events = append(m.Events, WatchEv{Delete: e.Type == client.EventDelete, Key: string(e.Key), Value: string(e.Value)})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.s.Msgs) == 0 {
		close(s.first)
	}
	s.s.Msgs = append(s.s.Msgs, m)
	for _, e := range m.Events {
		if !e.Delete {
			s.seen[e.Value] = true
		}
	}
}

// end records why the watch ended (first call wins; "" when stopped).
func (s *watchStream) end(err string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended, s.s.Err = true, err
	if len(s.s.Msgs) == 0 {
		close(s.first)
	}
}

// done reports whether the watch saw value or ended.
func (s *watchStream) done(value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended || s.seen[value]
}

// Stop ends the watchers and closes their sessions.
func (wl *Watch) Stop() {
	wl.bg.once.Do(func() {
		if wl.bg.cancel != nil {
			wl.bg.cancel()
		}
		wl.bg.wg.Wait()
		for _, db := range wl.bg.dbs {
			db.Close()
		}
	})
}

// Streams returns what the watchers received so far.
func (wl *Watch) Streams() []WatchStream {
	var out []WatchStream
	for _, s := range wl.bg.streams {
		s.mu.Lock()
		c := s.s
		c.Msgs = append([]WatchMsg(nil), s.s.Msgs...)
		s.mu.Unlock()
		out = append(out, c)
	}
	return out
}

func (wl *Watch) key(worker, rk int) *watchKey {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	k := wl.keys[[2]int{worker, rk}]
	if k == nil {
		k = &watchKey{}
		wl.keys[[2]int{worker, rk}] = k
	}
	return k
}

func (wl *Watch) Run(ctx context.Context, w *Worker) {
	for ctx.Err() == nil {
		r := w.Rng.IntN(len(wl.rks))
		rk := wl.rks[r]
		st := wl.key(w.ID, r) // only this worker uses it
		key := fmt.Sprintf("%s%d.%d", watchPrefix, w.ID, st.gen)
		switch p := w.Rng.IntN(100); {
		case p < 10:
			// Outside the watched prefix: no watcher may see it.
			in := WatchIn{RK: r, Key: fmt.Sprintf("u%d", w.ID), Value: strconv.FormatInt(wl.next.Add(1), 10)}
			w.Do(ctx, "watch", "put", in, func(ctx context.Context) (Outcome, any, error) {
				err := w.DB.Put(ctx, rk, []byte(in.Key), []byte(in.Value))
				return writeOutcome(err), nil, err
			})
		case p < 40 && st.present:
			op := w.Do(ctx, "watch", "delete", WatchIn{RK: r, Key: key}, func(ctx context.Context) (Outcome, any, error) {
				err := w.DB.Delete(ctx, rk, []byte(key))
				return writeOutcome(err), nil, err
			})
			wl.wrote(st, op.Outcome, false)
		default:
			in := WatchIn{RK: r, Key: key, Value: strconv.FormatInt(wl.next.Add(1), 10)}
			op := w.Do(ctx, "watch", "put", in, func(ctx context.Context) (Outcome, any, error) {
				err := w.DB.Put(ctx, rk, []byte(key), []byte(in.Value))
				return writeOutcome(err), nil, err
			})
			wl.wrote(st, op.Outcome, true)
		}
		sleepCtx(ctx, watchPause)
	}
}

// wrote updates a key's state after a write: an indeterminate write
// retires the key.
func (wl *Watch) wrote(st *watchKey, o Outcome, put bool) {
	switch o {
	case OK:
		st.present = put
	case Info:
		st.gen, st.present = st.gen+1, false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Final writes a fence (a put of a fresh key) to each routing key until
// one is acknowledged, waits until every watcher has seen its fences or
// ended (at most watchCatchUp), then stops the watchers.
func (wl *Watch) Final(ctx context.Context, w *Worker) error {
	defer wl.Stop()
	for r, rk := range wl.rks {
		for {
			wl.mu.Lock()
			wl.fenceN++
			in := WatchIn{RK: r, Key: fmt.Sprintf("%sfence.%d", watchPrefix, wl.fenceN), Value: strconv.FormatInt(wl.next.Add(1), 10)}
			wl.mu.Unlock()
			op := w.Do(ctx, "watch", "fence", in, func(ctx context.Context) (Outcome, any, error) {
				err := w.DB.Put(ctx, rk, []byte(in.Key), []byte(in.Value))
				return writeOutcome(err), nil, err
			})
			if op.Outcome == OK {
				wl.mu.Lock()
				wl.fences[r] = in.Value
				wl.mu.Unlock()
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("fence of routing key %d: %w", r, ctx.Err())
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	deadline := time.Now().Add(watchCatchUp)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		for _, s := range wl.bg.streams {
			wl.mu.Lock()
			f := wl.fences[s.s.RK]
			wl.mu.Unlock()
			all = all && s.done(f)
		}
		if all {
			break
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return nil
}

// Check judges the writes of h against what the watchers received; with
// anomalies it writes every stream to dir/watch-streams.json.
func (wl *Watch) Check(h History, dir string) Verdict {
	streams := wl.Streams()
	v := CheckWatch(h.Of("watch"), streams)
	v.count("watchers", wl.watchers)
	if !v.Valid && dir != "" {
		path := filepath.Join(dir, "watch-streams.json")
		if b, err := json.Marshal(streams); err == nil && os.WriteFile(path, b, 0o644) == nil {
			v.Files = append(v.Files, path)
		}
	}
	return v
}

type watchWrite struct {
	op  Op
	in  WatchIn
	del bool
}

type watchKeyID struct {
	rk  int
	key string
}

// watchObs is one observed event of a stream.
type watchObs struct {
	msg  int
	rev  uint64
	ev   WatchEv
	w    *watchWrite // the write it is, once matched
	skip bool        // already reported (a duplicate)
}

// CheckWatch judges the watch workload's writes (h: put, delete and fence
// ops, in invocation order) against the streams the watchers received.
func CheckWatch(h History, streams []WatchStream) Verdict {
	v := Verdict{Checker: "watch", Valid: true}
	byKey := map[watchKeyID][]*watchWrite{}
	byValue := map[string]*watchWrite{}
	for _, op := range h {
		in, ok := op.Input.(WatchIn)
		if !ok {
			v.anomaly("op %d: input %T", op.Index, op.Input)
			continue
		}
		w := &watchWrite{op: op, in: in, del: op.F == "delete"}
		switch op.Outcome {
		case OK:
			v.count("writes-acked", 1)
		case Info:
			v.count("writes-info", 1)
		default:
			v.count("writes-failed", 1)
		}
		if !w.del {
			byValue[in.Value] = w
		}
		if op.Outcome != Fail && strings.HasPrefix(in.Key, watchPrefix) {
			id := watchKeyID{in.RK, in.Key}
			byKey[id] = append(byKey[id], w)
		}
	}
	v.count("streams", len(streams))
	for _, s := range streams {
		checkStream(&v, s, byKey, byValue)
	}
	return v
}

func checkStream(v *Verdict, s WatchStream, byKey map[watchKeyID][]*watchWrite, byValue map[string]*watchWrite) {
	who := fmt.Sprintf("watcher %d, routing key %d", s.Watcher, s.RK)
	if s.Err != "" {
		v.anomaly("%s: the watch ended with an error: %s", who, s.Err)
	}
	// Revisions are compared within each stretch of messages from one
	// shard: a shard id can come back after a merge removed it, with a
	// log of its own.
	lastEv := map[uint32]uint64{}   // shard -> last event revision
	lastProg := map[uint32]uint64{} // shard -> last progress revision
	seenAt := map[string]uint64{}   // value -> revision it was seen at
	lastDelete := map[string]uint64{}
	var obs []*watchObs
	perKey := map[string][]*watchObs{}
	reconnects := 0
	var shard uint32
	for mi, m := range s.Msgs {
		reconnects = max(reconnects, m.Reconnects)
		if m.Follower {
			v.count("follower-messages", 1)
		}
		if shard != 0 && m.Shard != shard {
			v.count("shard-changes", 1)
			delete(lastEv, m.Shard)
			delete(lastProg, m.Shard)
		}
		shard = m.Shard
		if m.Progress && len(m.Events) == 0 {
			lastProg[m.Shard] = max(lastProg[m.Shard], m.Revision)
			continue
		}
		if last, ok := lastEv[m.Shard]; ok && m.Revision <= last {
			v.anomaly("%s: revision %d of shard %d after revision %d: repeated or out of order", who, m.Revision, m.Shard, last)
		} else if p := lastProg[m.Shard]; m.Revision <= p {
			v.anomaly("%s: events at revision %d of shard %d after a progress notification at %d (nothing changed up to it)", who, m.Revision, m.Shard, p)
		}
		lastEv[m.Shard] = max(lastEv[m.Shard], m.Revision)
		for _, e := range m.Events {
			v.count("events", 1)
			o := &watchObs{msg: mi, rev: m.Revision, ev: e}
			obs = append(obs, o)
			if !strings.HasPrefix(e.Key, watchPrefix) {
				v.anomaly("%s: event for key %q outside the watched prefix %q (revision %d)", who, e.Key, watchPrefix, m.Revision)
				o.skip = true
				continue
			}
			if e.Delete {
				if r, ok := lastDelete[e.Key]; ok {
					v.anomaly("%s: key %s deleted twice in a row (revisions %d and %d): a duplicate event, or the put between them lost", who, e.Key, r, m.Revision)
					o.skip = true
				}
				lastDelete[e.Key] = m.Revision
			} else {
				delete(lastDelete, e.Key)
				w := byValue[e.Value]
				switch {
				case w == nil:
					v.anomaly("%s: put %s=%s at revision %d: a value never written", who, e.Key, e.Value, m.Revision)
					o.skip = true
				case w.in.Key != e.Key || w.in.RK != s.RK:
					v.anomaly("%s: put %s=%s at revision %d: the value was written to key %s of routing key %d", who, e.Key, e.Value, m.Revision, w.in.Key, w.in.RK)
					o.skip = true
				case w.op.Outcome == Fail:
					v.anomaly("%s: put %s=%s at revision %d: the write failed (op %d)", who, e.Key, e.Value, m.Revision, w.op.Index)
					o.skip = true
				}
				if r, ok := seenAt[e.Value]; ok {
					v.anomaly("%s: duplicate event: put %s=%s seen at revision %d and again at %d", who, e.Key, e.Value, r, m.Revision)
					o.skip = true
				}
				seenAt[e.Value] = m.Revision
			}
			perKey[e.Key] = append(perKey[e.Key], o)
		}
	}
	v.count("reconnects", reconnects)

	// Each key's events against its writer's writes, in order.
	var keys []string
	for id := range byKey {
		if id.rk == s.RK {
			keys = append(keys, id.key)
		}
	}
	for k := range perKey {
		if _, ok := byKey[watchKeyID{s.RK, k}]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		matchKey(v, who, k, byKey[watchKeyID{s.RK, k}], perKey[k])
	}

	// Commit order: a write seen after one invoked after it was
	// acknowledged was committed out of real-time order.
	var latest *watchWrite
	for _, o := range obs {
		if o.w == nil {
			continue
		}
		if latest != nil && o.w.op.Outcome == OK && latest.op.Invoke > o.w.op.Complete {
			v.anomaly("%s: %s (acknowledged at %s) seen at revision %d after %s, invoked later (at %s)", who,
				o.w, secs(o.w.op.Complete), o.rev, latest, secs(latest.op.Invoke))
		}
		if latest == nil || o.w.op.Invoke > latest.op.Invoke {
			latest = o.w
		}
	}
}

func (w *watchWrite) String() string {
	if w.del {
		return fmt.Sprintf("delete %s (op %d)", w.in.Key, w.op.Index)
	}
	return fmt.Sprintf("put %s=%s (op %d)", w.in.Key, w.in.Value, w.op.Index)
}

func secs(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// matchKey matches the events seen of one key (obs, in stream order) to
// its writes (ws: in the writer's order, failed ones left out): each event
// is the next write of its kind in order; the writes skipped over must be
// indeterminate (else a gap), and so must the writes never seen.
func matchKey(v *Verdict, who, key string, ws []*watchWrite, obs []*watchObs) {
	i := 0
	missed := func(to int, before string) {
		for ; i < to; i++ {
			if ws[i].op.Outcome == OK {
				v.anomaly("%s: gap: acknowledged %s never observed%s", who, ws[i], before)
			}
		}
	}
	for _, o := range obs {
		if o.skip {
			continue
		}
		j := i
		for ; j < len(ws); j++ {
			if ws[j].del == o.ev.Delete && (o.ev.Delete || ws[j].in.Value == o.ev.Value) {
				break
			}
		}
		if j == len(ws) {
			if o.ev.Delete {
				v.anomaly("%s: delete of %s at revision %d matches no write of it after the ones seen before", who, key, o.rev)
			} else {
				v.anomaly("%s: put %s=%s at revision %d out of its writer's order (seen after later writes of the key)", who, key, o.ev.Value, o.rev)
			}
			continue
		}
		missed(j, fmt.Sprintf(" (the watch went on with revision %d)", o.rev))
		o.w = ws[j]
		i = j + 1
	}
	missed(len(ws), "")
}
