package keys

import (
	"errors"
	"fmt"
)

// Agent pool tables (seed 004). Their ids are strings (Discord snowflakes,
// "pool_..." names) of 1..MaxStringIDLen bytes of printable ASCII, pool ids
// at most MaxPoolIDLen; see ValidateStringID. Every entity of these tables
// lives in the one shard of the namespace key "pools".
const (
	// TablePools holds agent pools (seed table "agent_pools").
	//
	//	+------+----------------------------+
	//	| 0x30 | pool_id (1..MaxPoolIDLen)  |
	//	+------+----------------------------+
	//	0      1
	TablePools byte = 0x30

	// TableBots holds registered bots (seed table "agent_bots"), keyed by
	// agent id, which is unique across pools.
	//
	//	+------+-----------------------------+
	//	| 0x31 | agent_id (1..MaxStringIDLen)|
	//	+------+-----------------------------+
	//	0      1
	TableBots byte = 0x31

	// TableBotsByPool indexes bots by pool. The value is empty. The length
	// byte keeps pool ids prefix-free: the bots of pool "ab" never
	// interleave with those of pool "a" (whose agent ids may start with
	// "b"), and BotsByPoolPrefix bounds exactly one pool's bots.
	//
	//	+------+--------+---------------+-----------------------------+
	//	| 0x32 | n (u8) | pool_id (n)   | agent_id (1..MaxStringIDLen)|
	//	+------+--------+---------------+-----------------------------+
	//	0      1        2               2+n
	TableBotsByPool byte = 0x32

	// TableRunners holds agent runners (seed table "agent_runners").
	//
	//	+------+-------------------------------+
	//	| 0x33 | runner_id (1..MaxStringIDLen) |
	//	+------+-------------------------------+
	//	0      1
	TableRunners byte = 0x33

	// TableGuildSettings holds per-guild settings (seed table
	// "guild_settings"): the guild's selected pool.
	//
	//	+------+------------------------------+
	//	| 0x34 | guild_id (1..MaxStringIDLen) |
	//	+------+------------------------------+
	//	0      1
	TableGuildSettings byte = 0x34
)

// Limits on string ids.
const (
	// MaxPoolIDLen is the longest pool id, in bytes.
	MaxPoolIDLen = 64
	// MaxStringIDLen is the longest agent, runner, guild or user id, in
	// bytes.
	MaxStringIDLen = 128
)

// ErrInvalidID is returned, wrapped with detail, by ValidateStringID.
var ErrInvalidID = errors.New("keys: invalid id")

// ValidateStringID returns an error wrapping ErrInvalidID unless id is 1..max
// bytes of printable ASCII (0x21..0x7e: no space, no control bytes). kind
// names the id in the message ("pool_id"); the message never quotes an id
// that is too long or holds other bytes.
func ValidateStringID(kind, id string, max int) error {
	if len(id) == 0 {
		return fmt.Errorf("%w: %s is empty", ErrInvalidID, kind)
	}
	if len(id) > max {
		return fmt.Errorf("%w: %s is %d bytes, max %d", ErrInvalidID, kind, len(id), max)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: %s has byte 0x%02x at %d, want printable ASCII 0x21..0x7e", ErrInvalidID, kind, c, i)
		}
	}
	return nil
}

// stringKey returns t | id.
func stringKey(t byte, id string) []byte {
	k := make([]byte, 0, 1+len(id))
	k = append(k, t)
	return append(k, id...)
}

// The encoders below do not validate their ids: callers check ids from
// outside with ValidateStringID first. A key built from an id that
// ValidateStringID rejects is one that no decoder accepts.

// Pool returns the pools key 0x30 | pool_id.
func Pool(id string) []byte { return stringKey(TablePools, id) }

// Bot returns the bots key 0x31 | agent_id.
func Bot(agentID string) []byte { return stringKey(TableBots, agentID) }

// Runner returns the runners key 0x33 | runner_id.
func Runner(id string) []byte { return stringKey(TableRunners, id) }

// GuildSettings returns the guild_settings key 0x34 | guild_id.
func GuildSettings(guildID string) []byte { return stringKey(TableGuildSettings, guildID) }

// BotByPool returns the index key 0x32 | len(pool_id) u8 | pool_id |
// agent_id.
//
// BotByPool panics if poolID is longer than 255 bytes, which the length
// byte cannot express: a programming error, since pool ids from outside are
// checked with ValidateStringID (at most MaxPoolIDLen bytes) first.
func BotByPool(poolID, agentID string) []byte {
	k := BotsByPoolPrefix(poolID)
	return append(k, agentID...)
}

// BotsByPoolPrefix returns 0x32 | len(pool_id) u8 | pool_id, the prefix of
// the index entries of every bot of the pool and of no other pool's. Like
// BotByPool, it panics if poolID is longer than 255 bytes.
func BotsByPoolPrefix(poolID string) []byte {
	if len(poolID) > 0xff {
		panic(fmt.Sprintf("keys: BotsByPoolPrefix: pool id of %d bytes, max 255", len(poolID)))
	}
	k := make([]byte, 0, 2+len(poolID)+MaxStringIDLen)
	k = append(k, TableBotsByPool, byte(len(poolID)))
	return append(k, poolID...)
}

// decodeStringKey returns the id of a key t | id whose id passes
// ValidateStringID with max.
func decodeStringKey(k []byte, t byte, kind string, max int) (string, error) {
	if err := checkTable(k, t); err != nil {
		return "", err
	}
	id := string(k[1:])
	if err := ValidateStringID(kind, id, max); err != nil {
		return "", malformed(t, "%v", err)
	}
	return id, nil
}

// DecodePool returns the pool id of a pools key produced by Pool.
func DecodePool(k []byte) (string, error) {
	return decodeStringKey(k, TablePools, "pool_id", MaxPoolIDLen)
}

// DecodeBot returns the agent id of a bots key produced by Bot.
func DecodeBot(k []byte) (string, error) {
	return decodeStringKey(k, TableBots, "agent_id", MaxStringIDLen)
}

// DecodeRunner returns the runner id of a runners key produced by Runner.
func DecodeRunner(k []byte) (string, error) {
	return decodeStringKey(k, TableRunners, "runner_id", MaxStringIDLen)
}

// DecodeGuildSettings returns the guild id of a guild_settings key
// produced by GuildSettings.
func DecodeGuildSettings(k []byte) (string, error) {
	return decodeStringKey(k, TableGuildSettings, "guild_id", MaxStringIDLen)
}

// DecodeBotByPool returns the ids of an index key produced by BotByPool.
func DecodeBotByPool(k []byte) (poolID, agentID string, err error) {
	if err := checkTable(k, TableBotsByPool); err != nil {
		return "", "", err
	}
	if len(k) < 2 {
		return "", "", malformed(TableBotsByPool, "key has %d bytes, want at least 2", len(k))
	}
	n := int(k[1])
	end := 2 + n
	if len(k) < end {
		return "", "", malformed(TableBotsByPool, "pool id length %d exceeds the %d bytes left", n, len(k)-2)
	}
	poolID, agentID = string(k[2:end]), string(k[end:])
	if err := ValidateStringID("pool_id", poolID, MaxPoolIDLen); err != nil {
		return "", "", malformed(TableBotsByPool, "%v", err)
	}
	if err := ValidateStringID("agent_id", agentID, MaxStringIDLen); err != nil {
		return "", "", malformed(TableBotsByPool, "%v", err)
	}
	return poolID, agentID, nil
}
