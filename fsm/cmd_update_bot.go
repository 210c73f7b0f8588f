package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpUpdateBot replaces a bot's fields, may move it to another pool (see its
// doc in command.go).
func init() {
	commands.register(OpUpdateBot, &commandSpec{
		name:       "update_bot",
		fields:     fBot | fActor | fTime,
		routingKey: poolsRoutingKey,
		run:        runUpdateBot,
		recordKey:  recordKeyUpdateBot,
	})
}

func runUpdateBot(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.updateBot(c.Bot, c.Actor, c.Time)
}

func recordKeyUpdateBot(c *Command) []byte {
	return keys.Bot(c.Bot.AgentID)
}

func (ch *change) updateBot(upd *records.Bot, actor string, now int64) error {
	old, err := ch.getBot(upd.AgentID)
	if err != nil {
		return err
	}
	if ok, err := ch.mayManage(old, actor); err != nil || !ok {
		return orDenied(err)
	}
	if upd.PoolID != old.PoolID {
		p, err := ch.getPool(upd.PoolID)
		if err != nil {
			return err
		}
		if !p.UsableBy(actor) {
			return reject(ErrPermissionDenied)
		}
		ch.del(keys.BotByPool(old.PoolID, old.AgentID))
		ch.set(keys.BotByPool(upd.PoolID, old.AgentID), nil)
	}
	b := *upd
	b.OwnerUserID, b.CreatedAt, b.UpdatedAt = old.OwnerUserID, old.CreatedAt, now
	if b.Token.IsZero() {
		b.Token = old.Token
	}
	return putRecord(ch, keys.Bot(b.AgentID), &b)
}
