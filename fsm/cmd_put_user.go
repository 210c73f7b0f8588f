package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
)

// OpPutUser upserts a user (see its doc in command.go).
func init() {
	commands.register(OpPutUser, &commandSpec{
		name:       "put_user",
		fields:     fUser,
		routingKey: routingKeyPutUser,
		run:        runPutUser,
	})
}

func routingKeyPutUser(c *Command) []byte {
	return c.User.UserID[:]
}

func runPutUser(ch *change, c *Command) (int64, int, error) {
	return 0, 0, putRecord(ch, keys.User(c.User.UserID), c.User)
}
