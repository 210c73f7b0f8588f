package fsm

import (
	"errors"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpRegisterBot stores a bot in a pool (see its doc in command.go).
func init() {
	commands.register(OpRegisterBot, &commandSpec{
		name:       "register_bot",
		fields:     fBot | fActor,
		routingKey: poolsRoutingKey,
		run:        runRegisterBot,
		rule:       ruleRegisterBot,
		recordKey:  recordKeyRegisterBot,
	})
}

func runRegisterBot(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.registerBot(c.Bot, c.Actor)
}

func ruleRegisterBot(c *Command) error {
	switch {
	case c.Bot.OwnerUserID != c.Actor:
		return errors.New("bot: owner_user_id differs from actor")
	case c.Bot.Token.IsZero():
		return errors.New("bot: token is required")
	}
	return nil
}

func recordKeyRegisterBot(c *Command) []byte {
	return keys.Bot(c.Bot.AgentID)
}

func (ch *change) registerBot(b *records.Bot, actor string) error {
	p, err := ch.getPool(b.PoolID)
	if err != nil {
		return err
	}
	if !p.UsableBy(actor) {
		return reject(ErrPermissionDenied)
	}
	taken, err := ch.has(keys.Bot(b.AgentID))
	if err != nil {
		return err
	}
	if taken {
		return reject(ErrAlreadyExists)
	}
	if err := putRecord(ch, keys.Bot(b.AgentID), b); err != nil {
		return err
	}
	ch.set(keys.BotByPool(b.PoolID, b.AgentID), nil)
	return nil
}
