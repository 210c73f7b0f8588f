package fsm

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// Agent pool operations (seed 004). Every entity they touch lives in the
// one shard of the namespace key "pools", so each rule that crosses
// entities (agent ids unique across pools, no pool deleted under its bots,
// the bots_by_pool index) is checked and kept by one atomic command.
//
// Invariants, checked by the tests after long random sequences: every bot
// has exactly one bots_by_pool entry, under its pool; every bots_by_pool
// entry has its bot; every bot's pool exists.

// PoolNotEmptyError is the Result.Err of an OpDeletePool without Cascade
// of a pool that still holds bots. Nothing was written.
type PoolNotEmptyError struct {
	PoolID string
	Bots   int // the number of bots in the pool
}

func (e *PoolNotEmptyError) Error() string {
	return fmt.Sprintf("fsm: pool %q is not empty: %d bots", e.PoolID, e.Bots)
}

// poolsRoutingKey is the slot derivation of every pool op: the pools
// namespace lives in the slot of keys.PoolsRoutingKey.
func poolsRoutingKey(*Command) []byte { return []byte(keys.PoolsRoutingKey) }

// getPool reads a pool; absent is a rejection with ErrNotFound.
func (ch *change) getPool(id string) (*records.Pool, error) {
	var p records.Pool
	if err := getFound(ch, keys.Pool(id), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// getBot reads a bot; absent is a rejection with ErrNotFound.
func (ch *change) getBot(agentID string) (*records.Bot, error) {
	var b records.Bot
	if err := getFound(ch, keys.Bot(agentID), &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// mayManage reports whether actor may change or remove bot b: it
// contributed b, or it owns b's pool.
func (ch *change) mayManage(b *records.Bot, actor string) (bool, error) {
	if b.OwnerUserID == actor {
		return true, nil
	}
	var p records.Pool
	found, err := getRecord(ch, keys.Pool(b.PoolID), &p)
	if err != nil {
		return false, err
	}
	return found && p.OwnerUserID == actor, nil
}

// botsOfPool returns the agent ids of pool's bots_by_pool entries, in key
// order, as the run's batch sees them.
func (ch *change) botsOfPool(pool string) ([]string, error) {
	prefix := keys.BotsByPoolPrefix(pool)
	it, err := ch.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var ids []string
	for ok := it.First(); ok; ok = it.Next() {
		ids = append(ids, string(it.Key()[len(prefix):]))
	}
	return ids, it.Close()
}

// orDenied returns err, or a rejection with ErrPermissionDenied if err is
// nil.
func orDenied(err error) error {
	if err != nil {
		return err
	}
	return reject(ErrPermissionDenied)
}
