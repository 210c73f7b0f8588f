package cluster

import "errors"

// PoolsRoutingKey is the namespace key every pool-catalogue entity (pools,
// bots, the by-pool index, runners, guild settings) routes by, so they all
// live in one shard and each cross-entity rule is one atomic state machine
// command. See docs/architecture.md, "Agent pools (seed 004)". The leader
// of that shard ensures the default pool (replica.EnsureDefaultPool).
const PoolsRoutingKey = "pools"

var poolsRoutingKey = []byte(PoolsRoutingKey)

// ErrNoTokenKeys: the node has no Config.TokenKeys, so it can neither seal
// nor open bot tokens. Answered with codes.FailedPrecondition.
var ErrNoTokenKeys = errNoTokenKeys

var errNoTokenKeys = errors.New("cluster: no token key ring configured")
