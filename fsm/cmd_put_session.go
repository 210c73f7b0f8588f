package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpPutSession upserts a session (see its doc in command.go).
func init() {
	commands.register(OpPutSession, &commandSpec{
		name:       "put_session",
		fields:     fSession,
		routingKey: routingKeyPutSession,
		run:        runPutSession,
	})
}

func routingKeyPutSession(c *Command) []byte {
	return c.Session.UserID[:]
}

func runPutSession(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.putSession(c.Session)
}

func (ch *change) putSession(s *records.SessionRecord) error {
	key := keys.Session(s.SessionID)
	var old records.SessionRecord
	exists, err := getRecord(ch, key, &old)
	if err != nil {
		return err
	}
	if exists && old.AgentID != s.AgentID {
		ch.del(keys.SessionByAgent(old.AgentID, s.SessionID))
	}
	if err := putRecord(ch, key, s); err != nil {
		return err
	}
	ch.set(keys.SessionByAgent(s.AgentID, s.SessionID), nil)
	return nil
}
