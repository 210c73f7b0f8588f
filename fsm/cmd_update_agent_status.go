package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpUpdateAgentStatus sets an agent's status (see its doc in command.go).
func init() {
	commands.register(OpUpdateAgentStatus, &commandSpec{
		name:       "update_agent_status",
		fields:     fUserID | fAgentID | fStatus | fTime,
		routingKey: routingKeyUpdateAgentStatus,
		run:        runUpdateAgentStatus,
		rule:       ruleUpdateAgentStatus,
		recordKey:  recordKeyUpdateAgentStatus,
	})
}

func routingKeyUpdateAgentStatus(c *Command) []byte {
	return c.UserID[:]
}

func runUpdateAgentStatus(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.updateAgentStatus(*c.UserID, *c.AgentID, records.AgentState(*c.Status), c.Time)
}

func ruleUpdateAgentStatus(c *Command) error {
	if st := records.AgentState(*c.Status); !st.Valid() {
		return fmt.Errorf("status: %s is not a valid agent state", st)
	}
	return nil
}

func recordKeyUpdateAgentStatus(c *Command) []byte {
	return keys.Agent(*c.UserID, *c.AgentID)
}

func (ch *change) updateAgentStatus(u keys.UserID, a keys.AgentID, st records.AgentState, now int64) error {
	key := keys.Agent(u, a)
	var rec records.AgentRecord
	if err := getFound(ch, key, &rec); err != nil {
		return err
	}
	if rec.Status != st {
		ch.del(keys.AgentByStatus(byte(rec.Status), u, a))
	}
	rec.Status, rec.UpdatedAt = st, now
	if err := putRecord(ch, key, &rec); err != nil {
		return err
	}
	ch.set(keys.AgentByStatus(byte(st), u, a), nil)
	return nil
}
