package fsm

import (
	"bytes"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpPutAgent upserts an agent (see its doc in command.go).
func init() {
	commands.register(OpPutAgent, &commandSpec{
		name:       "put_agent",
		fields:     fAgent,
		routingKey: routingKeyPutAgent,
		run:        runPutAgent,
	})
}

func routingKeyPutAgent(c *Command) []byte {
	return c.Agent.UserID[:]
}

func runPutAgent(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.putAgent(c.Agent)
}

func (ch *change) putAgent(a *records.AgentRecord) error {
	ownerKey := keys.AgentOwner(a.AgentID)
	owner, found, err := ch.get(ownerKey)
	if err != nil {
		return err
	}
	if found && !bytes.Equal(owner, a.UserID[:]) {
		return reject(errAgentOwned())
	}
	key := keys.Agent(a.UserID, a.AgentID)
	var old records.AgentRecord
	exists, err := getRecord(ch, key, &old)
	if err != nil {
		return err
	}
	if exists && old.Status != a.Status {
		ch.del(keys.AgentByStatus(byte(old.Status), a.UserID, a.AgentID))
	}
	if err := putRecord(ch, key, a); err != nil {
		return err
	}
	ch.set(keys.AgentByStatus(byte(a.Status), a.UserID, a.AgentID), nil)
	ch.set(ownerKey, a.UserID[:])
	return nil
}
