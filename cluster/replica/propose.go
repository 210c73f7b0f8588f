package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/fsm"
)

// Propose validates cmd against the apply-time limits (Config.Limits; so
// bad input costs no Raft round), encodes it and proposes it to r's group,
// which r must lead, coalesced with concurrent proposals when its op
// allows (fsm.Op.Coalescable). It returns the state machine's result once
// applied; a deterministic rejection by the state machine (Result.Err) is
// returned as the error. Otherwise ErrNotLeader (nothing proposed),
// ErrOutcomeUnknown (leadership lost after proposing), ErrClosed, or the
// context's error.
//
// Propose takes cmd: the caller must not modify it, or anything it refers
// to, afterwards, since the state machine applies a coalescable command
// from cmd itself (fsm.Own), possibly after Propose has returned.
func (r *Replica) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	r.touch()
	if err := cmd.Validate(r.limits); err != nil {
		return nil, err
	}
	if r.admit != nil {
		if err := r.admit(cmd); err != nil {
			return nil, err
		}
	}
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	var res *fsm.Result
	if cmd.Op.Coalescable() {
		res, err = r.proposeCoalesced(ctx, cmd, data)
	} else {
		res, err = r.apply(ctx, data)
	}
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res, nil
}

// apply proposes cmd and waits for its result. It returns ErrNotLeader when
// the replica is not leader (nothing proposed), ErrOutcomeUnknown when
// leadership was lost after proposing, or the context's error if it ends
// before the proposal is handed to Raft.
//
// Once handed to Raft, a proposal cannot be withdrawn; apply waits (await)
// for its outcome, the context, or the replica's close.
func (r *Replica) apply(ctx context.Context, data []byte) (*fsm.Result, error) {
	if r.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	f := r.raft.Apply(data, timeout)
	if err := r.await(ctx, f); err != nil {
		return nil, err
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok || res == nil {
		return nil, fmt.Errorf("cluster: shard %d: unexpected apply response %T", r.id, f.Response())
	}
	return res, nil
}

// Proposal coalescing. Every Raft entry costs encoding, a transport send
// to each follower, a future and an FSM apply step, so concurrent
// proposals of one replica are carried by one entry (fsm.OpMulti) instead
// of one entry each.
const (
	// maxCoalesceCmds and maxCoalesceBytes bound one coalesced entry (the
	// state machine's own bounds, fsm.MaxMultiCmds and MaxMultiBytes, are
	// higher). A single larger command is proposed alone.
	maxCoalesceCmds  = 256
	maxCoalesceBytes = 256 << 10
	// maxEntriesInFlight is how many entries of the coalescer may wait for
	// commit at once. While they do, new proposals queue, and the next
	// entry takes them all. 1 gave larger entries (5.5 commands per entry
	// at 100 clients on 8 shards, vs 3.6 with 2) and less CPU per write
	// (docs/performance-log.md, round 3); a lone proposal still waits for
	// nothing.
	maxEntriesInFlight = 1
)

// proposal is one command waiting in the coalescing queue.
type proposal struct {
	ctx  context.Context
	cmd  *fsm.Command         // validated; handed to the state machine (fsm.Own)
	data []byte               // fsm.EncodeCommand's bytes
	out  chan proposalOutcome // cap 1; receives exactly one outcome
}

type proposalOutcome struct {
	res *fsm.Result
	err error
}

// proposeCoalesced queues data (an encoded, validated, coalescable
// command) for proposeLoop and waits for its result, the context or the
// replica's close, with apply's contract: ErrNotLeader when nothing was
// proposed because the replica is not leader, ErrOutcomeUnknown when
// leadership was lost after proposing. A proposal whose context ends while
// it still queues is dropped, never proposed.
func (r *Replica) proposeCoalesced(ctx context.Context, cmd *fsm.Command, data []byte) (*fsm.Result, error) {
	if r.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &proposal{ctx: ctx, cmd: cmd, data: data, out: make(chan proposalOutcome, 1)}
	r.props.Lock()
	r.props.queue = append(r.props.queue, p)
	r.props.Unlock()
	select {
	case r.propSignal <- struct{}{}:
	default:
	}
	select {
	case o := <-p.out:
		return o.res, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return nil, ErrClosed
	}
}

// proposeLoop hands queued proposals to Raft: whenever fewer than
// maxEntriesInFlight of its entries wait for commit, it takes what is
// queued (up to maxCoalesceCmds commands and maxCoalesceBytes) and
// proposes it as one entry: the command itself when it is alone, else an
// fsm.OpMulti. So under load each entry carries every proposal that
// arrived while the previous ones were in flight, and a lone proposal
// waits for nothing.
func (r *Replica) proposeLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case <-r.propSignal:
		}
		for {
			select {
			case r.inflight <- struct{}{}:
			case <-r.done:
				return
			}
			batch := r.takeProposals()
			if len(batch) == 0 {
				<-r.inflight
				break
			}
			r.submit(batch)
		}
	}
}

// takeProposals removes from the queue the proposals of the next entry,
// dropping those whose context has ended.
func (r *Replica) takeProposals() []*proposal {
	r.props.Lock()
	defer r.props.Unlock()
	q := r.props.queue
	var batch []*proposal
	size, i := 0, 0
	for ; i < len(q) && len(batch) < maxCoalesceCmds; i++ {
		p := q[i]
		if p.ctx.Err() != nil {
			continue // its caller has returned
		}
		if len(batch) > 0 && size+len(p.data) > maxCoalesceBytes {
			break
		}
		batch = append(batch, p)
		size += len(p.data)
	}
	rest := q[i:]
	clear(q[:i])
	if len(rest) == 0 {
		r.props.queue = q[:0]
	} else {
		r.props.queue = append(q[:0], rest...)
	}
	return batch
}

// submit proposes batch as one entry and answers every proposal of it from
// a goroutine (waitFuture) that waits for the entry's future and then
// frees the in-flight slot proposeLoop took. The entry's commands go to
// the state machine's fsm.Own, so that when this replica applies the
// entry as its leader it does not decode what it has just encoded.
func (r *Replica) submit(batch []*proposal) {
	data, cmd, subs := batch[0].data, batch[0].cmd, []*fsm.Command(nil)
	if len(batch) > 1 {
		cmd = &fsm.Command{Op: fsm.OpMulti, Multi: make([][]byte, len(batch))}
		subs = make([]*fsm.Command, len(batch))
		for i, p := range batch {
			cmd.Multi[i], subs[i] = p.data, p.cmd
		}
		var err error
		if data, err = fsm.EncodeCommand(cmd); err != nil {
			<-r.inflight
			answerAll(batch, nil, err)
			return
		}
	}
	own := r.fsm.Own()
	own.Add(data, cmd, subs)
	timeout := 10 * time.Second
	for _, p := range batch {
		if dl, ok := p.ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(dl))
		}
	}
	f := r.raft.Apply(data, max(timeout, time.Millisecond))
	r.propEntries.Add(1)
	r.propCmds.Add(uint64(len(batch)))
	r.waitFuture(f, func(err error) {
		own.Remove(data)
		<-r.inflight
		if err != nil {
			answerAll(batch, nil, applyError(err))
			return
		}
		switch resp := f.Response().(type) {
		case []*fsm.Result:
			if len(resp) != len(batch) {
				answerAll(batch, nil, fmt.Errorf("cluster: shard %d: %d results for %d coalesced commands", r.id, len(resp), len(batch)))
				return
			}
			for i, p := range batch {
				p.out <- proposalOutcome{res: resp[i]}
			}
		case *fsm.Result:
			if resp == nil {
				answerAll(batch, nil, fmt.Errorf("cluster: shard %d: nil apply response", r.id))
				return
			}
			// The lone command's result, or the whole OpMulti's rejection
			// (a storage error): every command gets it.
			answerAll(batch, resp, nil)
		default:
			answerAll(batch, nil, fmt.Errorf("cluster: shard %d: unexpected apply response %T", r.id, resp))
		}
	})
}

func answerAll(batch []*proposal, res *fsm.Result, err error) {
	for _, p := range batch {
		p.out <- proposalOutcome{res: res, err: err}
	}
}
