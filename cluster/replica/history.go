package replica

import (
	"context"
	"time"

	"github.com/swarmkv/swarmkv/fsm"
)

// historyLoop, on the leader, proposes an OpCompactHistory every period
// (when the shard applied anything since the last one): the retention and
// the leader's clock travel in the command, so every replica compacts its
// watch history the same way (fsm/history.go). Its timer runs only while
// the replica is a ready leader: a follower's loop sleeps until
// watchLeadership signals a leadership (histSignal). It returns when the
// replica closes.
func (r *Replica) historyLoop(ret fsm.HistoryRetention, every time.Duration) {
	defer r.wg.Done()
	if ret.MaxRevisions == 0 && ret.MaxAgeMs <= 0 || every <= 0 {
		return
	}
	t := time.NewTimer(every)
	t.Stop()
	defer t.Stop()
	var last uint64
	for {
		if r.ReadyTerm() != 0 {
			t.Reset(every)
		} else {
			t.Stop()
		}
		select {
		case <-r.done:
			return
		case <-r.histSignal:
			continue // a new leadership: arm the timer from now
		case <-t.C:
		}
		r.histPasses.Add(1)
		applied := r.fsm.AppliedIndex()
		if !r.IsLeader() || r.ReadyTerm() == 0 || applied <= last+1 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		res, err := r.Propose(ctx, &fsm.Command{Op: fsm.OpCompactHistory, Time: time.Now().UnixMilli(), History: &ret})
		cancel()
		switch {
		case err != nil:
			r.log.Debug("history compaction not proposed", "err", err)
		case res.Err != nil:
			r.log.Warn("history compaction refused", "err", res.Err)
		default:
			last = res.Index
		}
	}
}
