package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpCreatePool stores a new pool (see its doc in command.go).
func init() {
	commands.register(OpCreatePool, &commandSpec{
		name:       "create_pool",
		fields:     fPool,
		routingKey: poolsRoutingKey,
		run:        runCreatePool,
	})
}

func runCreatePool(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.createPool(c.Pool)
}

func (ch *change) createPool(p *records.Pool) error {
	found, err := ch.has(keys.Pool(p.PoolID))
	switch {
	case err != nil:
		return err
	case found:
		return reject(ErrAlreadyExists)
	case p.PoolID == records.DefaultPoolID: // reserved for OpEnsureDefaultPool
		return reject(ErrPermissionDenied)
	}
	return putRecord(ch, keys.Pool(p.PoolID), p)
}
