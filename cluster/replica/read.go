package replica

import (
	"context"

	"github.com/swarmkv/swarmkv/fsm"
)

// Consistency is what a read asks of the replica's state.
type Consistency uint8

const (
	// Linearizable: the replica, as its shard's leader, confirms its
	// leadership and applies every entry committed before the read
	// (ReadBarrier) first.
	Linearizable Consistency = iota
	// Stale: the replica answers from its state as it is, leader or not;
	// it may be behind the leader.
	Stale
)

// Read reads r's state machine at consistency c: after the read barrier
// for a linearizable read, fn runs on a view of the state fenced on the
// slot of routing key rk (fsm.FSM.Read; nil rk: a shard-addressed read,
// not fenced). It returns ReadBarrier's errors, fsm.FSM.Read's (a
// *fsm.MovedError for a slot the shard does not own or lost during the
// read) or fn's.
func (r *Replica) Read(ctx context.Context, c Consistency, rk []byte, fn func(fsm.View) error) error {
	if c == Linearizable {
		if err := r.ReadBarrier(ctx); err != nil {
			return err
		}
	}
	return r.fsm.Read(rk, fn)
}

// ReadKey is Read of the one key key: a copy of its value, fsm.ErrNotFound
// when absent (fsm.FSM.ReadKey: fenced the same way, without a view).
func (r *Replica) ReadKey(ctx context.Context, c Consistency, rk, key []byte) ([]byte, error) {
	if c == Linearizable {
		if err := r.ReadBarrier(ctx); err != nil {
			return nil, err
		}
	}
	return r.fsm.ReadKey(rk, key)
}
