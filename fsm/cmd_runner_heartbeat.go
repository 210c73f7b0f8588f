package fsm

import (
	"github.com/swarmkv/swarmkv/keys"
)

// OpRunnerHeartbeat upserts a runner, attached to a lease or to none (see
// its doc in command.go).
func init() {
	commands.register(OpRunnerHeartbeat, &commandSpec{
		name:       "runner_heartbeat",
		fields:     fRunner,
		optional:   fLeaseID,
		sinceOf:    runnerHeartbeatSince,
		routingKey: poolsRoutingKey,
		run:        runRunnerHeartbeat,
		rule:       ruleRunnerHeartbeat,
	})
}

func runRunnerHeartbeat(ch *change, c *Command) (int64, int, error) {
	key := keys.Runner(c.Runner.RunnerID)
	if err := putRecord(ch, key, c.Runner); err != nil {
		return 0, 0, err
	}
	return 0, 0, ch.setLease(key, c.LeaseID)
}

func ruleRunnerHeartbeat(c *Command) error {
	if c.LeaseID == 0 {
		return nil
	}
	return validateAttach(c.LeaseID, keys.Runner(c.Runner.RunnerID))
}

// runnerHeartbeatSince: a runner attached to a lease needs VersionLeases.
func runnerHeartbeatSince(c *Command) int {
	if c.LeaseID != 0 {
		return VersionLeases
	}
	return 1
}
