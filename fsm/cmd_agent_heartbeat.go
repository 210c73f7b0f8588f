package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpAgentHeartbeat sets an agent's last heartbeat and may attach it to a
// lease (see its doc in command.go).
func init() {
	commands.register(OpAgentHeartbeat, &commandSpec{
		name:       "agent_heartbeat",
		fields:     fUserID | fAgentID | fTime,
		optional:   fLeaseID,
		since:      VersionLeases,
		routingKey: routingKeyAgentHeartbeat,
		run:        runAgentHeartbeat,
		rule:       ruleAgentHeartbeat,
		recordKey:  recordKeyAgentHeartbeat,
	})
}

func routingKeyAgentHeartbeat(c *Command) []byte {
	return c.UserID[:]
}

func runAgentHeartbeat(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.agentHeartbeat(*c.UserID, *c.AgentID, c.Time, c.LeaseID)
}

func ruleAgentHeartbeat(c *Command) error {
	if c.LeaseID == 0 {
		return nil
	}
	return validateAttach(c.LeaseID, keys.Agent(*c.UserID, *c.AgentID))
}

func recordKeyAgentHeartbeat(c *Command) []byte {
	return keys.Agent(*c.UserID, *c.AgentID)
}

// agentHeartbeat sets the agent's last_heartbeat_at and, with a lease,
// attaches the agent to it.
func (ch *change) agentHeartbeat(u keys.UserID, a keys.AgentID, now int64, lease uint64) error {
	key := keys.Agent(u, a)
	var rec records.AgentRecord
	if err := getFound(ch, key, &rec); err != nil {
		return err
	}
	rec.LastHeartbeatAt = &now
	if err := putRecord(ch, key, &rec); err != nil {
		return err
	}
	if lease == 0 {
		return nil
	}
	return ch.setLease(key, lease)
}
