package fsm

import (
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// OpPutUsageEvent upserts a usage event (see its doc in command.go).
func init() {
	commands.register(OpPutUsageEvent, &commandSpec{
		name:       "put_usage_event",
		fields:     fEvent,
		routingKey: routingKeyPutUsageEvent,
		run:        runPutUsageEvent,
	})
}

func routingKeyPutUsageEvent(c *Command) []byte {
	return c.Event.UserID[:]
}

func runPutUsageEvent(ch *change, c *Command) (int64, int, error) {
	return 0, 0, ch.putUsageEvent(c.Event)
}

func (ch *change) putUsageEvent(e *records.UsageEvent) error {
	key, err := keys.UsageEvent(e.EventID)
	if err != nil { // Validate bounds the id: unreachable
		return reject(fmt.Errorf("%w: op %s: %w", ErrInvalidCommand, OpPutUsageEvent, err))
	}
	return putRecord(ch, key, e)
}
