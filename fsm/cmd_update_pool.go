package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpUpdatePool replaces a pool's name, visibility and meta (see its doc in
// command.go).
func init() {
	commands.register(OpUpdatePool, &commandSpec{
		name:       "update_pool",
		fields:     fPool | fActor | fTime,
		routingKey: poolsRoutingKey,
		run:        runUpdatePool,
		recordKey:  recordKeyUpdatePool,
	})
}

func runUpdatePool(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.updatePool(c.Pool, c.Actor, c.Time)
}

func recordKeyUpdatePool(c *Command) []byte {
	return keys.Pool(c.Pool.PoolID)
}

func (ch *change) updatePool(upd *records.Pool, actor string, now int64) error {
	p, err := ch.getPool(upd.PoolID)
	if err != nil {
		return err
	}
	if p.OwnerUserID != actor || (p.PoolID == records.DefaultPoolID && upd.Visibility != records.VisibilityPublic) {
		return reject(ErrPermissionDenied)
	}
	p.Name, p.Visibility, p.Meta, p.UpdatedAt = upd.Name, upd.Visibility, upd.Meta, now
	return putRecord(ch, keys.Pool(p.PoolID), p)
}
