package cluster

import (
	"errors"

	"github.com/swarmkv/swarmkv/keys"
)

// poolsRoutingKey is keys.PoolsRoutingKey, the namespace every
// pool-catalogue entity routes by; the leader of its shard ensures the
// default pool (replica.EnsureDefaultPool).
var poolsRoutingKey = []byte(keys.PoolsRoutingKey)

// ErrNoTokenKeys: the node has no Config.TokenKeys, so it can neither seal
// nor open bot tokens. Answered with codes.FailedPrecondition.
var ErrNoTokenKeys = errNoTokenKeys

var errNoTokenKeys = errors.New("cluster: no token key ring configured")
