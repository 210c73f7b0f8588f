package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpUpdateSessionStatus sets a session's status (see its doc in command.go).
func init() {
	commands.register(OpUpdateSessionStatus, &commandSpec{
		name:       "update_session_status",
		fields:     fSessionID | fStatus | fTime,
		optional:   fUserID,
		routingKey: routingKeyUpdateSessionStatus,
		run:        runUpdateSessionStatus,
		rule:       ruleUpdateSessionStatus,
		recordKey:  recordKeyUpdateSessionStatus,
	})
}

func routingKeyUpdateSessionStatus(c *Command) []byte {
	if c.UserID != nil {
		return c.UserID[:]
	}
	return nil // the slot of the session it touches is checked when it writes
}

func runUpdateSessionStatus(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.updateSessionStatus(*c.SessionID, c.UserID, records.SessionStatus(*c.Status), c.Time)
}

func ruleUpdateSessionStatus(c *Command) error {
	if st := records.SessionStatus(*c.Status); !st.Valid() {
		return fmt.Errorf("status: %s is not a valid session status", st)
	}
	return nil
}

func recordKeyUpdateSessionStatus(c *Command) []byte {
	return keys.Session(*c.SessionID)
}

func (ch *change) updateSessionStatus(id keys.SessionID, owner *keys.UserID, st records.SessionStatus, now int64) error {
	key := keys.Session(id)
	var rec records.SessionRecord
	exists, err := getRecord(ch, key, &rec)
	if err != nil {
		return err
	}
	if !exists || (owner != nil && rec.UserID != *owner) {
		return reject(ErrNotFound)
	}
	rec.Status = st
	if st != records.SessionActive && rec.ClosedAt == nil {
		rec.ClosedAt = &now
	}
	return putRecord(ch, key, &rec)
}
