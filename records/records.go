// Package records defines the stored record types of the agent registry
// (seed 000), the billing ledger (seed 001) and the agent pools (seed 004,
// pools.go), with the seeds' field names, and their CBOR encoding. It is pure data: no I/O. The state machine stores
// these encodings under the keys/ layouts; the client API speaks these types.
//
// Usage:
//
//	a := &records.AgentRecord{AgentID: aid, UserID: uid, Name: "scout",
//		Status: records.AgentRunning, CreatedAt: nowMs, UpdatedAt: nowMs}
//	b, err := records.Encode(a)
//	var back records.AgentRecord
//	err = records.Decode(b, &back)
//
// Encoding: deterministic CBOR (fxamacker/cbor/v2 core deterministic mode),
// each struct a map keyed by the seed's snake_case field names; fixed-width
// ids are byte strings of their width, the pool records' string ids text
// strings; optional fields (Option<i64> in the seeds) are omitted when
// absent. Timestamps are Unix milliseconds, fixed by the
// proposer before a command enters the Raft log.
package records

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"

	"github.com/swarmkv/swarmkv/keys"
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("records: invalid record")

// ErrMalformed is wrapped by every decode error.
var ErrMalformed = errors.New("records: malformed record")

// Limits on string fields.
const (
	MaxNameLen        = 256
	MaxEmailLen       = 320
	MaxDescriptionLen = 1024
	MaxRuntimeLen     = 64
	MaxResourceLen    = 128
)

// AgentState is the lifecycle state of an agent, stored as one byte (the
// seed's `status: u8`, and the first byte of an agents_by_status key).
type AgentState uint8

// Agent states. The seed leaves the enumeration open; these are the values
// swarmkv defines, once, for every client.
const (
	AgentPending      AgentState = 0 // created, not yet scheduled
	AgentProvisioning AgentState = 1 // resources being allocated
	AgentRunning      AgentState = 2 // serving
	AgentStopping     AgentState = 3 // shutting down
	AgentStopped      AgentState = 4 // stopped, can be started again
	AgentFailed       AgentState = 5 // crashed or failed to start
)

var agentStateNames = [...]string{"pending", "provisioning", "running", "stopping", "stopped", "failed"}

// Valid reports whether s is a defined state.
func (s AgentState) Valid() bool { return int(s) < len(agentStateNames) }

func (s AgentState) String() string {
	if s.Valid() {
		return agentStateNames[s]
	}
	return fmt.Sprintf("agent_state(%d)", uint8(s))
}

// ParseAgentState parses a state name ("running") as String prints it.
func ParseAgentState(name string) (AgentState, error) {
	for i, n := range agentStateNames {
		if n == name {
			return AgentState(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown agent state %q", ErrInvalid, name)
}

// SessionStatus is the state of a session, stored as one byte.
type SessionStatus uint8

// Session statuses (the seed leaves them open).
const (
	SessionActive  SessionStatus = 0 // open
	SessionClosed  SessionStatus = 1 // closed normally (closed_at set)
	SessionExpired SessionStatus = 2 // timed out (closed_at set)
	SessionFailed  SessionStatus = 3 // ended by an error (closed_at set)
)

var sessionStatusNames = [...]string{"active", "closed", "expired", "failed"}

// Valid reports whether s is a defined status.
func (s SessionStatus) Valid() bool { return int(s) < len(sessionStatusNames) }

func (s SessionStatus) String() string {
	if s.Valid() {
		return sessionStatusNames[s]
	}
	return fmt.Sprintf("session_status(%d)", uint8(s))
}

// ParseSessionStatus parses a status name.
func ParseSessionStatus(name string) (SessionStatus, error) {
	for i, n := range sessionStatusNames {
		if n == name {
			return SessionStatus(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown session status %q", ErrInvalid, name)
}

// AgentSpecRecord is the seed's agent resource spec.
type AgentSpecRecord struct {
	CPUMillicores  uint32 `cbor:"cpu_millicores" json:"cpu_millicores"`
	MemoryMB       uint32 `cbor:"memory_mb" json:"memory_mb"`
	RuntimeVersion string `cbor:"runtime_version" json:"runtime_version"`
}

// AgentRecord is stored in `agents` under user_id | agent_id.
type AgentRecord struct {
	AgentID         keys.AgentID    `cbor:"agent_id" json:"agent_id"`
	UserID          keys.UserID     `cbor:"user_id" json:"user_id"`
	Name            string          `cbor:"name" json:"name"`
	Status          AgentState      `cbor:"status" json:"status"`
	Spec            AgentSpecRecord `cbor:"spec" json:"spec"`
	CreatedAt       int64           `cbor:"created_at" json:"created_at"`
	UpdatedAt       int64           `cbor:"updated_at" json:"updated_at"`
	LastHeartbeatAt *int64          `cbor:"last_heartbeat_at,omitempty" json:"last_heartbeat_at,omitempty"`
}

// SessionRecord is stored in `sessions` under session_id, in the shard of
// its user.
type SessionRecord struct {
	SessionID keys.SessionID `cbor:"session_id" json:"session_id"`
	AgentID   keys.AgentID   `cbor:"agent_id" json:"agent_id"`
	UserID    keys.UserID    `cbor:"user_id" json:"user_id"`
	Status    SessionStatus  `cbor:"status" json:"status"`
	CreatedAt int64          `cbor:"created_at" json:"created_at"`
	ClosedAt  *int64         `cbor:"closed_at,omitempty" json:"closed_at,omitempty"`
}

// UserRecord is the cached user info stored in `users` under user_id.
type UserRecord struct {
	UserID     keys.UserID `cbor:"user_id" json:"user_id"`
	Email      string      `cbor:"email" json:"email"`
	CreatedAt  int64       `cbor:"created_at" json:"created_at"`
	LastSeenAt int64       `cbor:"last_seen_at" json:"last_seen_at"`
}

// Account is a billing account, stored in `accounts` under user_id (16-byte
// UUID). The seed names balance_cents; the lifetime statistics are swarmkv's
// definition: LifetimeCreditsCents sums every credit (AddCredits, positive
// UpdateBalance), LifetimeUsageCents every charge (ProcessUsage, negative
// UpdateBalance).
type Account struct {
	UserID               keys.AccountID `cbor:"user_id" json:"user_id"`
	BalanceCents         int64          `cbor:"balance_cents" json:"balance_cents"`
	LifetimeCreditsCents int64          `cbor:"lifetime_credits_cents" json:"lifetime_credits_cents"`
	LifetimeUsageCents   int64          `cbor:"lifetime_usage_cents" json:"lifetime_usage_cents"`
	CreatedAt            int64          `cbor:"created_at" json:"created_at"`
	UpdatedAt            int64          `cbor:"updated_at" json:"updated_at"`
}

// TransactionType says what a CreditTransaction did to the balance.
type TransactionType uint8

// Transaction types. The type gives the direction: Purchase, Grant and Refund
// add credits, Usage deducts them (AmountCents > 0 for all four);
// Adjustment (UpdateBalance) carries the signed delta in AmountCents.
const (
	TxPurchase   TransactionType = 0 // credits bought
	TxUsage      TransactionType = 1 // credits charged for a usage event
	TxRefund     TransactionType = 2 // credits returned
	TxGrant      TransactionType = 3 // credits given (promotion, trial)
	TxAdjustment TransactionType = 4 // manual correction; AmountCents is signed
)

var txTypeNames = [...]string{"purchase", "usage", "refund", "grant", "adjustment"}

// Valid reports whether t is a defined type.
func (t TransactionType) Valid() bool { return int(t) < len(txTypeNames) }

// Credit reports whether the type adds credits (AddCredits takes these).
func (t TransactionType) Credit() bool { return t == TxPurchase || t == TxRefund || t == TxGrant }

func (t TransactionType) String() string {
	if t.Valid() {
		return txTypeNames[t]
	}
	return fmt.Sprintf("transaction_type(%d)", uint8(t))
}

// CreditTransaction is stored in `transactions` under its ULID id, and
// indexed in `transactions_by_user` under user_id | transaction_id (ULIDs
// sort by time, so a user's range is in time order).
type CreditTransaction struct {
	TransactionID keys.TransactionID `cbor:"transaction_id" json:"transaction_id"`
	UserID        keys.AccountID     `cbor:"user_id" json:"user_id"`
	// AmountCents is > 0 for every type but TxAdjustment, where it is the
	// signed delta.
	AmountCents     int64           `cbor:"amount_cents" json:"amount_cents"`
	TransactionType TransactionType `cbor:"transaction_type" json:"transaction_type"`
	// BalanceAfterCents is the balance after this transaction; the state
	// machine sets it for ProcessUsage, AddCredits and UpdateBalance.
	BalanceAfterCents int64  `cbor:"balance_after_cents" json:"balance_after_cents"`
	Description       string `cbor:"description" json:"description"`
	// EventID links a usage charge to its usage event.
	EventID   string `cbor:"event_id,omitempty" json:"event_id,omitempty"`
	CreatedAt int64  `cbor:"created_at" json:"created_at"`
}

// UsageEvent is stored in `usage_events` under event_id, in the shard of
// its user; its presence makes ProcessUsage idempotent.
type UsageEvent struct {
	EventID   string         `cbor:"event_id" json:"event_id"`
	UserID    keys.AccountID `cbor:"user_id" json:"user_id"`
	AgentID   string         `cbor:"agent_id,omitempty" json:"agent_id,omitempty"`
	Resource  string         `cbor:"resource" json:"resource"` // what was used, e.g. "llm_tokens"
	Quantity  int64          `cbor:"quantity" json:"quantity"`
	CostCents int64          `cbor:"cost_cents" json:"cost_cents"`
	CreatedAt int64          `cbor:"created_at" json:"created_at"`
}

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	if encMode, err = cbor.CoreDetEncOptions().EncMode(); err != nil {
		panic(err)
	}
	if decMode, err = (cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxArrayElements:  1024,
		MaxMapPairs:       64,
		MaxNestedLevels:   8,
		UTF8:              cbor.UTF8RejectInvalid,
	}).DecMode(); err != nil {
		panic(err)
	}
}

// Record is any of this package's record types.
type Record interface {
	*AgentRecord | *SessionRecord | *UserRecord | *Account | *CreditTransaction | *UsageEvent |
		*Pool | *Bot | *Runner | *GuildSettings
}

// Encode returns the deterministic CBOR encoding of r.
func Encode[R Record](r R) ([]byte, error) {
	return encMode.Marshal(r)
}

// Decode parses b into r, replacing all of *r (fields absent from b end up
// zero, even when r is reused). It is strict: unknown fields, duplicate
// keys, trailing bytes, and any encoding other than the canonical one Encode
// writes (which also catches ids of the wrong width, since CBOR would
// zero-fill a short byte string into a fixed-size array) are errors
// wrapping ErrMalformed.
func Decode[R Record](b []byte, r R) error {
	reset(r)
	rest, err := decMode.UnmarshalFirst(b, r)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(rest))
	}
	canon, err := encMode.Marshal(r)
	if err != nil || !bytes.Equal(canon, b) {
		return fmt.Errorf("%w: not in canonical form (wrong id width or non-deterministic encoding)", ErrMalformed)
	}
	return nil
}

// reset zeroes *r: the CBOR decoder leaves fields that b omits untouched,
// so a reused record would keep, say, an old LastHeartbeatAt.
func reset[R Record](r R) {
	switch p := any(r).(type) {
	case *AgentRecord:
		if p != nil {
			*p = AgentRecord{}
		}
	case *SessionRecord:
		if p != nil {
			*p = SessionRecord{}
		}
	case *UserRecord:
		if p != nil {
			*p = UserRecord{}
		}
	case *Account:
		if p != nil {
			*p = Account{}
		}
	case *CreditTransaction:
		if p != nil {
			*p = CreditTransaction{}
		}
	case *UsageEvent:
		if p != nil {
			*p = UsageEvent{}
		}
	case *Pool:
		if p != nil {
			*p = Pool{}
		}
	case *Bot:
		if p != nil {
			*p = Bot{}
		}
	case *Runner:
		if p != nil {
			*p = Runner{}
		}
	case *GuildSettings:
		if p != nil {
			*p = GuildSettings{}
		}
	}
}

func checkString(field, s string, max int, required bool) error {
	switch {
	case required && s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalid, field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	}
	return nil
}

func checkTime(field string, ms int64) error {
	if ms < 0 {
		return fmt.Errorf("%w: %s is negative", ErrInvalid, field)
	}
	return nil
}
