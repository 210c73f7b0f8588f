package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpSetGuildPool stores a guild's pool selection (see its doc in
// command.go).
func init() {
	commands.register(OpSetGuildPool, &commandSpec{
		name:       "set_guild_pool",
		fields:     fGuildID | fPoolID | fActor | fTime,
		routingKey: poolsRoutingKey,
		run:        runSetGuildPool,
	})
}

func runSetGuildPool(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.setGuildPool(c.GuildID, c.PoolID, c.Actor, c.Time)
}

func (ch *change) setGuildPool(guild, pool, actor string, now int64) error {
	p, err := ch.getPool(pool)
	if err != nil {
		return err
	}
	if !p.UsableBy(actor) {
		return reject(ErrPermissionDenied)
	}
	return putRecord(ch, keys.GuildSettings(guild), &records.GuildSettings{GuildID: guild, SelectedPoolID: pool, UpdatedAt: now})
}
