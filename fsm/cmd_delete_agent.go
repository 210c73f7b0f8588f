package fsm

import (
	"bytes"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpDeleteAgent deletes an agent and its index entries (see its doc in
// command.go).
func init() {
	commands.register(OpDeleteAgent, &commandSpec{
		name:       "delete_agent",
		fields:     fUserID | fAgentID,
		routingKey: routingKeyDeleteAgent,
		run:        runDeleteAgent,
	})
}

func routingKeyDeleteAgent(c *Command) []byte {
	return c.UserID[:]
}

func runDeleteAgent(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.deleteAgent(*c.UserID, *c.AgentID)
}

func (ch *change) deleteAgent(u keys.UserID, a keys.AgentID) error {
	key := keys.Agent(u, a)
	var old records.AgentRecord
	if err := getFound(ch, key, &old); err != nil {
		return err
	}
	ownerKey := keys.AgentOwner(a)
	owner, found, err := ch.get(ownerKey)
	if err != nil {
		return err
	}
	ch.del(key)
	ch.del(keys.AgentByStatus(byte(old.Status), u, a))
	if found && bytes.Equal(owner, u[:]) {
		ch.del(ownerKey)
	}
	return ch.setLease(key, 0)
}
