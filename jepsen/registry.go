package jepsen

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"lukechampine.com/blake3"
)

// Registry is the agent registry workload: agents are created with a
// status and change status concurrently, while workers read them and list
// them by status. It checks that records and indexes agree:
//
//   - during the run, every agent a status listing returns has that status;
//   - after healing, every acknowledged agent exists and no refused one
//     does; each agent's status is the value of a write that was not
//     overwritten in real time by a later acknowledged write; each agent
//     is listed under its status and no other; the by-user listing and
//     count match the records.
type Registry struct {
	runID string
	users []keys.UserID

	mu     sync.Mutex
	agents []regAgent // created (acknowledged or indeterminate)
	n      int

	final struct {
		sync.Mutex
		get      map[keys.AgentID]*records.AgentRecord // nil: not found
		byStatus map[records.AgentState][]*records.AgentRecord
		byUser   map[int][]*records.AgentRecord
		count    map[int]int
	}
}

type regAgent struct {
	user int
	id   keys.AgentID
}

// RegistryIn is a registry operation's input.
type RegistryIn struct {
	User   int    `json:"user"`
	Agent  string `json:"agent,omitempty"`
	Status int    `json:"status"`
}

// RegistryOut is a registry operation's output.
type RegistryOut struct {
	Status int  `json:"status,omitempty"`
	Found  bool `json:"found,omitempty"`
	Listed int  `json:"listed,omitempty"`
	// Mismatched lists agents a status listing returned with another
	// status.
	Mismatched []Listed `json:"mismatched,omitempty"`
}

// Listed is an agent as a listing returned it.
type Listed struct {
	Agent  string `json:"agent"`
	Status int    `json:"status"`
}

const agentStates = 6 // records.AgentPending..AgentFailed

// NewRegistry returns the workload over n users.
func NewRegistry(runID string, n int) *Registry {
	n = WorkloadOptions{Users: n}.withDefaults().Users
	r := &Registry{runID: runID}
	for i := range n {
		sum := blake3.Sum256([]byte(fmt.Sprintf("jepsen-registry-%s-%d", runID, i)))
		r.users = append(r.users, keys.UserID(sum))
	}
	return r
}

func (r *Registry) Name() string { return "registry" }

func (r *Registry) Setup(context.Context, DB) error { return nil }

func (r *Registry) userIndex(u keys.UserID) int {
	for i, x := range r.users {
		if x == u {
			return i
		}
	}
	return -1
}

func (r *Registry) Run(ctx context.Context, w *Worker) {
	for ctx.Err() == nil {
		p := w.Rng.IntN(100)
		r.mu.Lock()
		var a regAgent
		have := len(r.agents) > 0
		if have {
			a = r.agents[w.Rng.IntN(len(r.agents))]
		}
		r.mu.Unlock()
		st := records.AgentState(w.Rng.IntN(agentStates))
		switch {
		case p < 15 || !have:
			r.mu.Lock()
			r.n++
			sum := blake3.Sum256([]byte(fmt.Sprintf("jepsen-agent-%s-%d", r.runID, r.n)))
			r.mu.Unlock()
			a = regAgent{user: w.Rng.IntN(len(r.users)), id: keys.AgentID(sum)}
			now := time.Now().UnixMilli()
			rec := &records.AgentRecord{AgentID: a.id, UserID: r.users[a.user], Name: "jepsen", Status: st, CreatedAt: now, UpdatedAt: now}
			op := w.Do(ctx, "registry", "create", RegistryIn{User: a.user, Agent: hex.EncodeToString(a.id[:]), Status: int(st)},
				func(ctx context.Context) (Outcome, any, error) {
					err := w.DB.PutAgent(ctx, rec)
					return writeOutcome(err), nil, err
				})
			if op.Outcome != Fail {
				r.mu.Lock()
				r.agents = append(r.agents, a)
				r.mu.Unlock()
			}
		case p < 65:
			w.Do(ctx, "registry", "status", RegistryIn{User: a.user, Agent: hex.EncodeToString(a.id[:]), Status: int(st)},
				func(ctx context.Context) (Outcome, any, error) {
					err := w.DB.UpdateAgentStatus(ctx, r.users[a.user], a.id, st)
					return writeOutcome(err), nil, err
				})
		case p < 85:
			w.Do(ctx, "registry", "get", RegistryIn{User: a.user, Agent: hex.EncodeToString(a.id[:])},
				func(ctx context.Context) (Outcome, any, error) {
					rec, err := w.DB.GetAgent(ctx, r.users[a.user], a.id)
					if errors.Is(err, client.ErrNotFound) {
						return OK, RegistryOut{}, nil
					}
					if err != nil {
						return Fail, nil, err
					}
					return OK, RegistryOut{Found: true, Status: int(rec.Status)}, nil
				})
		default:
			w.Do(ctx, "registry", "list", RegistryIn{Status: int(st)}, func(ctx context.Context) (Outcome, any, error) {
				l, err := w.DB.ListAgentsByStatus(ctx, st)
				if err != nil {
					return Fail, nil, err
				}
				out := RegistryOut{}
				for _, rec := range l {
					if r.userIndex(rec.UserID) < 0 {
						continue // another run's agent
					}
					out.Listed++
					if rec.Status != st {
						out.Mismatched = append(out.Mismatched, Listed{Agent: hex.EncodeToString(rec.AgentID[:]), Status: int(rec.Status)})
					}
				}
				return OK, out, nil
			})
		}
	}
}

func (r *Registry) Final(ctx context.Context, w *Worker) error {
	r.final.Lock()
	defer r.final.Unlock()
	r.final.get = map[keys.AgentID]*records.AgentRecord{}
	r.final.byStatus = map[records.AgentState][]*records.AgentRecord{}
	r.final.byUser = map[int][]*records.AgentRecord{}
	r.final.count = map[int]int{}
	// Every agent ever attempted, including refused creates.
	ids := map[keys.AgentID]int{}
	for _, op := range w.Rec.History().Of("registry") {
		in, _ := op.Input.(RegistryIn)
		if op.F == "create" {
			var id keys.AgentID
			b, _ := hex.DecodeString(in.Agent)
			copy(id[:], b)
			ids[id] = in.User
		}
	}
	for id, u := range ids {
		err := retryFinal(ctx, func(ctx context.Context) error {
			rec, err := w.DB.GetAgent(ctx, r.users[u], id)
			if errors.Is(err, client.ErrNotFound) {
				r.final.get[id] = nil
				return nil
			}
			r.final.get[id] = rec
			return err
		})
		if err != nil {
			return fmt.Errorf("final get agent: %w", err)
		}
	}
	for s := range records.AgentState(agentStates) {
		err := retryFinal(ctx, func(ctx context.Context) (err error) {
			var all []*records.AgentRecord
			all, err = w.DB.ListAgentsByStatus(ctx, s)
			var ours []*records.AgentRecord
			for _, rec := range all {
				if r.userIndex(rec.UserID) >= 0 {
					ours = append(ours, rec)
				}
			}
			r.final.byStatus[s] = ours
			return err
		})
		if err != nil {
			return fmt.Errorf("final list by status: %w", err)
		}
	}
	for ui, u := range r.users {
		err := retryFinal(ctx, func(ctx context.Context) (err error) {
			if r.final.byUser[ui], err = w.DB.ListAgentsByUser(ctx, u); err != nil {
				return err
			}
			r.final.count[ui], err = w.DB.CountAgentsByUser(ctx, u)
			return err
		})
		if err != nil {
			return fmt.Errorf("final list by user: %w", err)
		}
	}
	return nil
}

func (r *Registry) Check(h History, _ string) Verdict {
	v := Verdict{Checker: "registry", Valid: true}
	h = h.Of("registry")
	r.final.Lock()
	defer r.final.Unlock()
	if r.final.get == nil {
		v.anomaly("no final reads")
		return v
	}
	writes := map[string][]Op{} // agent -> create and status ops not refused
	created := map[string]Outcome{}
	for _, op := range h {
		in, _ := op.Input.(RegistryIn)
		switch op.F {
		case "create", "status":
			if op.F == "create" {
				created[in.Agent] = op.Outcome
			}
			if op.Outcome != Fail {
				writes[in.Agent] = append(writes[in.Agent], op)
			}
		}
	}
	// A status listing reads each page's index entries and their records
	// from one view of the shard (fsm.FSM.Read, docs/architecture.md, "The
	// read seam"), so an agent listed under s has status s: another status
	// is an anomaly, a torn read if some write had set it before the
	// listing ended (counted too), a status no write set otherwise.
	for _, op := range h {
		out, ok := op.Output.(RegistryOut)
		if op.F != "list" || !ok {
			continue
		}
		for _, m := range out.Mismatched {
			explained := false
			for _, w := range writes[m.Agent] {
				if w.Input.(RegistryIn).Status == m.Status && w.Invoke <= op.Complete {
					explained = true
					break
				}
			}
			if explained {
				v.count("list-torn-reads", 1)
				v.anomaly("op %d: listing of status %d returned agent %s with status %d: torn between the index and the record", op.Index, op.Input.(RegistryIn).Status, m.Agent, m.Status)
			} else {
				v.anomaly("op %d: listing of status %d returned agent %s with status %d, which no write had set", op.Index, op.Input.(RegistryIn).Status, m.Agent, m.Status)
			}
		}
	}
	found := 0
	for id, rec := range r.final.get {
		aid := hex.EncodeToString(id[:])
		switch {
		case rec == nil && created[aid] == OK:
			v.anomaly("agent %s: acknowledged create, but the agent is missing", aid)
		case rec != nil && created[aid] == Fail:
			v.anomaly("agent %s: refused create, but the agent exists", aid)
		}
		if rec == nil {
			continue
		}
		found++
		// The final status must come from a write not overwritten in
		// real time: no acknowledged write invoked after it completed.
		ws := writes[aid]
		ok := false
		for _, w := range ws {
			if w.Input.(RegistryIn).Status != int(rec.Status) {
				continue
			}
			done := w.Complete
			if w.Outcome == Info {
				done = math.MaxInt64
			}
			overwritten := false
			for _, later := range ws {
				if later.Outcome == OK && later.Invoke > done {
					overwritten = true
					break
				}
			}
			if !overwritten {
				ok = true
				break
			}
		}
		if !ok {
			v.anomaly("agent %s: final status %d is not the value of any write that could be last (%d writes)", aid, rec.Status, len(ws))
		}
		// The status index lists it under its status, and only there.
		for s, l := range r.final.byStatus {
			n := 0
			for _, x := range l {
				if x.AgentID == id {
					n++
				}
			}
			switch {
			case s == rec.Status && n != 1:
				v.anomaly("agent %s: status %d, listed %d times under it", aid, rec.Status, n)
			case s != rec.Status && n > 0:
				v.anomaly("agent %s: status %d, but listed under status %d", aid, rec.Status, s)
			}
		}
	}
	for s, l := range r.final.byStatus {
		for _, x := range l {
			if rec, ok := r.final.get[x.AgentID]; !ok || rec == nil {
				v.anomaly("status %d lists agent %s, which does not exist", s, hex.EncodeToString(x.AgentID[:]))
			}
		}
	}
	for ui := range r.users {
		want := 0
		for _, rec := range r.final.get {
			if rec != nil && r.userIndex(rec.UserID) == ui {
				want++
			}
		}
		if got := len(r.final.byUser[ui]); got != want {
			v.anomaly("user %d: %d agents listed by user, %d records", ui, got, want)
		}
		if got := r.final.count[ui]; got != want {
			v.anomaly("user %d: count %d, %d records", ui, got, want)
		}
	}
	v.count("agents", found)
	return v
}
