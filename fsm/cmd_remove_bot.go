package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
)

// OpRemoveBot deletes a bot (see its doc in command.go).
func init() {
	commands.register(OpRemoveBot, &commandSpec{
		name:       "remove_bot",
		fields:     fBotID | fActor,
		routingKey: poolsRoutingKey,
		run:        runRemoveBot,
	})
}

func runRemoveBot(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.removeBot(c.BotID, c.Actor)
}

func (ch *change) removeBot(agentID, actor string) error {
	b, err := ch.getBot(agentID)
	if err != nil {
		return err
	}
	if ok, err := ch.mayManage(b, actor); err != nil || !ok {
		return orDenied(err)
	}
	ch.del(keys.Bot(agentID))
	ch.del(keys.BotByPool(b.PoolID, agentID))
	return nil
}
