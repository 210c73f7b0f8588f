package fsm

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/swarmkv/swarmkv/keys"
)

// field is a set of Command's optional fields, one bit each.
type field uint32

const (
	fBatch field = 1 << iota
	fAgent
	fSession
	fUser
	fAccount
	fTx
	fEvent
	fUserID
	fAgentID
	fSessionID
	fAccountID
	fStatus
	fAmount
	fTime
	fPool
	fBot
	fRunner
	fActor
	fPoolID
	fBotID
	fGuildID
	fCascade
	fRedis
	fMulti
	fMove
	fHistory
	fLease
	fLeaseID
	fTxID
	fEtcd
	fEtcdCompact

	fLast = fEtcdCompact // the highest bit
)

// fieldNames are the CBOR names of the fields, in bit order.
var fieldNames = [...]string{"batch", "agent", "session", "user", "account", "tx", "event",
	"user_id", "agent_id", "session_id", "account_id", "status", "amount", "time",
	"pool", "bot", "runner", "actor", "pool_id", "bot_id", "guild_id", "cascade", "redis", "multi", "move", "history", "lease", "lease_id", "tx_id", "etcd", "etcd_compact"}

// first names the lowest field in the set.
func (f field) first() string { return fieldNames[bits.TrailingZeros32(uint32(f))] }

// fields returns the set of fields c carries.
func (c *Command) fields() field {
	var f field
	for _, p := range [...]struct {
		present bool
		bit     field
	}{
		{c.Batch != nil, fBatch}, {c.Agent != nil, fAgent}, {c.Session != nil, fSession},
		{c.User != nil, fUser}, {c.Account != nil, fAccount}, {c.Tx != nil, fTx},
		{c.Event != nil, fEvent}, {c.UserID != nil, fUserID}, {c.AgentID != nil, fAgentID},
		{c.SessionID != nil, fSessionID}, {c.AccountID != nil, fAccountID},
		{c.Status != nil, fStatus}, {c.Amount != nil, fAmount}, {c.Time != 0, fTime},
		{c.Pool != nil, fPool}, {c.Bot != nil, fBot}, {c.Runner != nil, fRunner},
		{c.Actor != "", fActor}, {c.PoolID != "", fPoolID}, {c.BotID != "", fBotID},
		{c.GuildID != "", fGuildID}, {c.Cascade, fCascade}, {c.Redis != nil, fRedis},
		{c.Multi != nil, fMulti}, {c.Move != nil, fMove}, {c.History != nil, fHistory},
		{c.Lease != nil, fLease}, {c.LeaseID != 0, fLeaseID}, {c.TxID != nil, fTxID},
		{c.Etcd != nil, fEtcd}, {c.EtcdCompact != nil, fEtcdCompact},
	} {
		if p.present {
			f |= p.bit
		}
	}
	return f
}

// validateRecords runs Validate on every record c carries.
func (c *Command) validateRecords() error {
	for _, r := range [...]struct {
		name string
		rec  interface{ Validate() error }
		nil  bool
	}{
		{"agent", c.Agent, c.Agent == nil}, {"session", c.Session, c.Session == nil},
		{"user", c.User, c.User == nil}, {"account", c.Account, c.Account == nil},
		{"tx", c.Tx, c.Tx == nil}, {"event", c.Event, c.Event == nil},
		{"pool", c.Pool, c.Pool == nil}, {"bot", c.Bot, c.Bot == nil},
		{"runner", c.Runner, c.Runner == nil},
	} {
		if r.nil {
			continue
		}
		if err := r.rec.Validate(); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return nil
}

// validateRecordCmd is the validate of a registry, billing or pool op (a
// spec with run): every record c carries passes its own Validate, its
// string ids are well formed, a TxID equals its Tx's id, and the op's own
// rule holds.
func validateRecordCmd(c *Command, _ Limits) error {
	if err := c.validateRecords(); err != nil {
		return fmt.Errorf("%w: op %s: %w", ErrInvalidCommand, c.Op, err)
	}
	if err := c.validateIDs(); err != nil {
		return fmt.Errorf("%w: op %s: %s", ErrInvalidCommand, c.Op, err)
	}
	if rule := c.Op.spec().rule; rule != nil {
		if err := rule(c); err != nil {
			return fmt.Errorf("%w: op %s: %s", ErrInvalidCommand, c.Op, err)
		}
	}
	return nil
}

// validateIDs checks the string id fields c carries and that a TxID
// equals its Tx's id.
func (c *Command) validateIDs() error {
	if err := c.validateStringIDs(); err != nil {
		return err
	}
	if c.TxID != nil && c.Tx != nil && *c.TxID != c.Tx.TransactionID {
		return errors.New("tx_id differs from tx: transaction_id")
	}
	return nil
}

// validateStringIDs checks the string id fields c carries.
func (c *Command) validateStringIDs() error {
	for _, id := range [...]struct {
		kind, id string
		max      int
	}{
		{"actor", c.Actor, keys.MaxStringIDLen}, {"pool_id", c.PoolID, keys.MaxPoolIDLen},
		{"bot_id", c.BotID, keys.MaxStringIDLen}, {"guild_id", c.GuildID, keys.MaxStringIDLen},
	} {
		if id.id == "" { // absent; the field set says whether that is allowed
			continue
		}
		if err := keys.ValidateStringID(id.kind, id.id, id.max); err != nil {
			return err
		}
	}
	return nil
}
