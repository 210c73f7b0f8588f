package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpEnsureDefaultPool creates the default pool, or makes it public (see its
// doc in command.go).
func init() {
	commands.register(OpEnsureDefaultPool, &commandSpec{
		name:       "ensure_default_pool",
		fields:     fTime,
		routingKey: poolsRoutingKey,
		run:        runEnsureDefaultPool,
	})
}

func runEnsureDefaultPool(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.ensureDefaultPool(c.Time)
}

func (ch *change) ensureDefaultPool(now int64) error {
	var p records.Pool
	found, err := getRecord(ch, keys.Pool(records.DefaultPoolID), &p)
	switch {
	case err != nil:
		return err
	case !found:
		p = records.Pool{PoolID: records.DefaultPoolID, OwnerUserID: records.SystemUserID,
			Name: records.DefaultPoolName, Visibility: records.VisibilityPublic, CreatedAt: now, UpdatedAt: now}
	case p.Visibility == records.VisibilityPublic:
		return nil // already as it should be: write nothing
	default:
		p.Visibility, p.UpdatedAt = records.VisibilityPublic, now
	}
	return putRecord(ch, keys.Pool(records.DefaultPoolID), &p)
}
