package fsm

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
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

	fLast = fTxID // the highest bit
)

// fieldNames are the CBOR names of the fields, in bit order.
var fieldNames = [...]string{"batch", "agent", "session", "user", "account", "tx", "event",
	"user_id", "agent_id", "session_id", "account_id", "status", "amount", "time",
	"pool", "bot", "runner", "actor", "pool_id", "bot_id", "guild_id", "cascade", "redis", "multi", "move", "history", "lease", "lease_id", "tx_id"}

// first names the lowest field in the set.
func (f field) first() string { return fieldNames[bits.TrailingZeros32(uint32(f))] }

// opSpec is an op's name, the fields it requires and those it may carry.
type opSpec struct {
	name     string
	fields   field
	optional field
}

var opSpecs = map[Op]opSpec{
	OpBatch:               {"batch", fBatch, 0},
	OpNoop:                {"noop", 0, 0},
	OpMulti:               {"multi", fMulti, 0},
	OpPutAgent:            {"put_agent", fAgent, 0},
	OpDeleteAgent:         {"delete_agent", fUserID | fAgentID, 0},
	OpUpdateAgentStatus:   {"update_agent_status", fUserID | fAgentID | fStatus | fTime, 0},
	OpPutSession:          {"put_session", fSession, 0},
	OpUpdateSessionStatus: {"update_session_status", fSessionID | fStatus | fTime, fUserID},
	OpPutUser:             {"put_user", fUser, 0},
	OpAgentHeartbeat:      {"agent_heartbeat", fUserID | fAgentID | fTime, fLeaseID},
	OpPutAccount:          {"put_account", fAccount, 0},
	OpDeleteAccount:       {"delete_account", fAccountID, 0},
	OpUpdateBalance:       {"update_balance", fAccountID | fAmount | fTime | fTx, fTxID},
	OpPutTransaction:      {"put_transaction", fTx, fTxID},
	OpPutUsageEvent:       {"put_usage_event", fEvent, 0},
	OpProcessUsage:        {"process_usage", fEvent | fTx | fTime, fTxID},
	OpAddCredits:          {"add_credits", fAccountID | fAmount | fTx | fTime, fTxID},
	OpReserveTx:           {"reserve_tx", fAccountID | fTxID, 0},
	OpEnsureDefaultPool:   {"ensure_default_pool", fTime, 0},
	OpCreatePool:          {"create_pool", fPool, 0},
	OpUpdatePool:          {"update_pool", fPool | fActor | fTime, 0},
	OpDeletePool:          {"delete_pool", fPoolID | fActor, fCascade},
	OpRegisterBot:         {"register_bot", fBot | fActor, 0},
	OpUpdateBot:           {"update_bot", fBot | fActor | fTime, 0},
	OpRemoveBot:           {"remove_bot", fBotID | fActor, 0},
	OpRunnerHeartbeat:     {"runner_heartbeat", fRunner, fLeaseID},
	OpSetGuildPool:        {"set_guild_pool", fGuildID | fPoolID | fActor | fTime, 0},
	OpRedis:               {"redis", fRedis, 0},
	OpRedisMulti:          {"redis_multi", fRedis, 0},
	OpFreezeSlots:         {"freeze_slots", fMove, 0},
	OpUnfreezeSlots:       {"unfreeze_slots", fMove, 0},
	OpIngestSlots:         {"ingest_slots", fMove, 0},
	OpAdoptSlots:          {"adopt_slots", fMove, 0},
	OpDropSlots:           {"drop_slots", fMove, 0},
	OpRestrictSlots:       {"restrict_slots", fMove, 0},
	OpSyncSlots:           {"sync_slots", fMove, 0},
	OpLeaseGrant:          {"lease_grant", fLease | fTime, 0},
	OpLeaseRevoke:         {"lease_revoke", fLease | fTime, 0},
	OpLeaseExpire:         {"lease_expire", fLease | fTime, 0},
	OpLeaseCheckpoint:     {"lease_checkpoint", fLease, 0},
	OpCompactHistory:      {"compact_history", fHistory | fTime, 0},
}

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

// validateOp checks the rules that tie an op's fields together. It runs
// after the field set and the records were checked.
func (c *Command) validateOp() error {
	if err := c.validateStringIDs(); err != nil {
		return err
	}
	if c.TxID != nil && c.Tx != nil && *c.TxID != c.Tx.TransactionID {
		return errors.New("tx_id differs from tx: transaction_id")
	}
	switch c.Op {
	case OpAgentHeartbeat:
		if c.LeaseID != 0 {
			if err := validateAttach(c.LeaseID, keys.Agent(*c.UserID, *c.AgentID)); err != nil {
				return err
			}
		}
	case OpRunnerHeartbeat:
		if c.LeaseID != 0 {
			if err := validateAttach(c.LeaseID, keys.Runner(c.Runner.RunnerID)); err != nil {
				return err
			}
		}
	case OpRegisterBot:
		switch {
		case c.Bot.OwnerUserID != c.Actor:
			return errors.New("bot: owner_user_id differs from actor")
		case c.Bot.Token.IsZero():
			return errors.New("bot: token is required")
		}
	case OpUpdateAgentStatus:
		if st := records.AgentState(*c.Status); !st.Valid() {
			return fmt.Errorf("status: %s is not a valid agent state", st)
		}
	case OpUpdateSessionStatus:
		if st := records.SessionStatus(*c.Status); !st.Valid() {
			return fmt.Errorf("status: %s is not a valid session status", st)
		}
	case OpUpdateBalance:
		switch amt := *c.Amount; {
		case amt == 0 || amt == math.MinInt64:
			return fmt.Errorf("amount %d: want a non-zero delta above math.MinInt64", amt)
		case c.Tx.TransactionType != records.TxAdjustment:
			return fmt.Errorf("tx: type %s, want adjustment", c.Tx.TransactionType)
		case c.Tx.AmountCents != amt:
			return fmt.Errorf("tx: amount_cents %d differs from amount %d", c.Tx.AmountCents, amt)
		case c.Tx.UserID != *c.AccountID:
			return errors.New("tx: user_id differs from account_id")
		}
	case OpProcessUsage:
		switch {
		case c.Tx.TransactionType != records.TxUsage:
			return fmt.Errorf("tx: type %s, want usage", c.Tx.TransactionType)
		case c.Tx.UserID != c.Event.UserID:
			return errors.New("tx: user_id differs from the event's user_id")
		case c.Tx.EventID != "" && c.Tx.EventID != c.Event.EventID:
			return errors.New("tx: event_id differs from the event's event_id")
		}
		// Tx.Validate already requires AmountCents > 0 for a usage charge.
	case OpAddCredits:
		switch amt := *c.Amount; {
		case amt <= 0:
			return fmt.Errorf("amount %d: want a positive amount", amt)
		case !c.Tx.TransactionType.Credit():
			return fmt.Errorf("tx: type %s is not a credit", c.Tx.TransactionType)
		case c.Tx.AmountCents != amt:
			return fmt.Errorf("tx: amount_cents %d differs from amount %d", c.Tx.AmountCents, amt)
		case c.Tx.UserID != *c.AccountID:
			return errors.New("tx: user_id differs from account_id")
		}
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
