package replica

import (
	"context"
	"errors"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/internal/retry"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// EnsureDefaultPool is the pools shard's OnReady hook: once this replica,
// as a new leader, has applied its leadership no-op, it proposes
// OpEnsureDefaultPool (create pool_goot27, public, owned by "system"; or
// make it public) unless the local state, complete at that point, already
// has it public. A shard that does not own the pools slot (it moved, or is
// frozen for a move) gets *fsm.MovedError and stops: no retry loop. A failed proposal is retried with backoff while the
// replica stays ready in the same term; a deterministic rejection by the
// state machine is logged and not retried. It returns when the replica
// closes.
func EnsureDefaultPool(r *Replica) {
	term := r.readyTerm.Load()
	backoff := retry.Options{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Backoff()
	for term != 0 && r.readyTerm.Load() == term {
		done, err := proposeDefaultPool(r)
		if done {
			return
		}
		wait := backoff.Next()
		r.log.Warn("ensuring the default pool failed, retrying", "pool", records.DefaultPoolID, "err", err, "in", wait)
		select {
		case <-r.done:
			return
		case <-time.After(wait):
		}
	}
}

// proposeDefaultPool makes one attempt; done is false when it should be
// retried.
func proposeDefaultPool(r *Replica) (done bool, err error) {
	if b, err := r.fsm.Get(keys.Pool(records.DefaultPoolID)); err == nil {
		var p records.Pool
		if records.Decode(b, &p) == nil && p.Visibility == records.VisibilityPublic {
			return true, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpEnsureDefaultPool, Time: time.Now().UnixMilli()})
	var moved *fsm.MovedError
	switch {
	case err == nil:
	case errors.As(err, &moved):
		// The pools slot moved (or is moving) to another shard: the pool
		// record moves with the data, and the new owner's leader ensures
		// it. Nothing to do here, and nothing to retry.
		r.log.Info("default pool not ensured here: the pools slot is not owned by this shard", "pool", records.DefaultPoolID, "err", err)
		return true, nil
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrClosed),
		errors.Is(err, context.DeadlineExceeded):
		return false, err // the proposal did not (or may not) apply: retry
	default:
		// A deterministic rejection by the state machine: retrying cannot help.
		r.log.Error("state machine rejected ensuring the default pool", "pool", records.DefaultPoolID, "err", err)
		return true, err
	}
	r.log.Info("default pool ensured", "pool", records.DefaultPoolID, "index", res.Index)
	return true, nil
}
