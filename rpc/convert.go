package rpc

import (
	"errors"
	"fmt"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// ErrBadID is wrapped when an id in a message has the wrong length.
var ErrBadID = errors.New("rpc: bad id")

// Conversions between the wire messages and records' types, shared by the
// server (cluster) and the client. FromProto functions check id widths; the
// record's own Validate checks the rest.

func fixed(dst []byte, src []byte, field string) error {
	if len(src) != len(dst) {
		return fmt.Errorf("%w: %s is %d bytes, want %d", ErrBadID, field, len(src), len(dst))
	}
	copy(dst, src)
	return nil
}

// UserIDFromBytes parses a 32-byte registry user id.
func UserIDFromBytes(b []byte) (id keys.UserID, err error) {
	return id, fixed(id[:], b, "user_id")
}

// AgentIDFromBytes parses a 32-byte agent id.
func AgentIDFromBytes(b []byte) (id keys.AgentID, err error) {
	return id, fixed(id[:], b, "agent_id")
}

// SessionIDFromBytes parses a 16-byte session id.
func SessionIDFromBytes(b []byte) (id keys.SessionID, err error) {
	return id, fixed(id[:], b, "session_id")
}

// AccountIDFromBytes parses a 16-byte billing user id (UUID).
func AccountIDFromBytes(b []byte) (id keys.AccountID, err error) {
	return id, fixed(id[:], b, "user_id")
}

// TransactionIDFromBytes parses a 16-byte transaction id (ULID).
func TransactionIDFromBytes(b []byte) (id keys.TransactionID, err error) {
	return id, fixed(id[:], b, "transaction_id")
}

// AgentToProto converts an agent record.
func AgentToProto(a *records.AgentRecord) *Agent {
	return &Agent{
		AgentId: a.AgentID[:], UserId: a.UserID[:], Name: a.Name, Status: uint32(a.Status),
		Spec:      &AgentSpec{CpuMillicores: a.Spec.CPUMillicores, MemoryMb: a.Spec.MemoryMB, RuntimeVersion: a.Spec.RuntimeVersion},
		CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, LastHeartbeatAt: a.LastHeartbeatAt,
	}
}

// AgentFromProto converts and checks an agent message.
func AgentFromProto(p *Agent) (*records.AgentRecord, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: agent is missing", records.ErrInvalid)
	}
	a := &records.AgentRecord{Name: p.GetName(), CreatedAt: p.GetCreatedAt(), UpdatedAt: p.GetUpdatedAt()}
	if err := fixed(a.AgentID[:], p.GetAgentId(), "agent_id"); err != nil {
		return nil, err
	}
	if err := fixed(a.UserID[:], p.GetUserId(), "user_id"); err != nil {
		return nil, err
	}
	if p.GetStatus() > 255 {
		return nil, fmt.Errorf("%w: status %d", records.ErrInvalid, p.GetStatus())
	}
	a.Status = records.AgentState(p.GetStatus())
	if s := p.GetSpec(); s != nil {
		a.Spec = records.AgentSpecRecord{CPUMillicores: s.GetCpuMillicores(), MemoryMB: s.GetMemoryMb(), RuntimeVersion: s.GetRuntimeVersion()}
	}
	if p.LastHeartbeatAt != nil {
		v := p.GetLastHeartbeatAt()
		a.LastHeartbeatAt = &v
	}
	return a, a.Validate()
}

// SessionToProto converts a session record.
func SessionToProto(s *records.SessionRecord) *Session {
	return &Session{SessionId: s.SessionID[:], AgentId: s.AgentID[:], UserId: s.UserID[:],
		Status: uint32(s.Status), CreatedAt: s.CreatedAt, ClosedAt: s.ClosedAt}
}

// SessionFromProto converts and checks a session message.
func SessionFromProto(p *Session) (*records.SessionRecord, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: session is missing", records.ErrInvalid)
	}
	s := &records.SessionRecord{CreatedAt: p.GetCreatedAt()}
	if err := fixed(s.SessionID[:], p.GetSessionId(), "session_id"); err != nil {
		return nil, err
	}
	if err := fixed(s.AgentID[:], p.GetAgentId(), "agent_id"); err != nil {
		return nil, err
	}
	if err := fixed(s.UserID[:], p.GetUserId(), "user_id"); err != nil {
		return nil, err
	}
	if p.GetStatus() > 255 {
		return nil, fmt.Errorf("%w: status %d", records.ErrInvalid, p.GetStatus())
	}
	s.Status = records.SessionStatus(p.GetStatus())
	if p.ClosedAt != nil {
		v := p.GetClosedAt()
		s.ClosedAt = &v
	}
	return s, s.Validate()
}

// UserToProto converts a user record.
func UserToProto(u *records.UserRecord) *User {
	return &User{UserId: u.UserID[:], Email: u.Email, CreatedAt: u.CreatedAt, LastSeenAt: u.LastSeenAt}
}

// UserFromProto converts and checks a user message.
func UserFromProto(p *User) (*records.UserRecord, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: user is missing", records.ErrInvalid)
	}
	u := &records.UserRecord{Email: p.GetEmail(), CreatedAt: p.GetCreatedAt(), LastSeenAt: p.GetLastSeenAt()}
	if err := fixed(u.UserID[:], p.GetUserId(), "user_id"); err != nil {
		return nil, err
	}
	return u, u.Validate()
}

// AccountToProto converts an account.
func AccountToProto(a *records.Account) *Account {
	return &Account{UserId: a.UserID[:], BalanceCents: a.BalanceCents, LifetimeCreditsCents: a.LifetimeCreditsCents,
		LifetimeUsageCents: a.LifetimeUsageCents, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

// AccountFromProto converts and checks an account message.
func AccountFromProto(p *Account) (*records.Account, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: account is missing", records.ErrInvalid)
	}
	a := &records.Account{BalanceCents: p.GetBalanceCents(), LifetimeCreditsCents: p.GetLifetimeCreditsCents(),
		LifetimeUsageCents: p.GetLifetimeUsageCents(), CreatedAt: p.GetCreatedAt(), UpdatedAt: p.GetUpdatedAt()}
	if err := fixed(a.UserID[:], p.GetUserId(), "user_id"); err != nil {
		return nil, err
	}
	return a, a.Validate()
}

// TransactionToProto converts a transaction.
func TransactionToProto(t *records.CreditTransaction) *CreditTransaction {
	return &CreditTransaction{TransactionId: t.TransactionID[:], UserId: t.UserID[:], AmountCents: t.AmountCents,
		TransactionType: uint32(t.TransactionType), BalanceAfterCents: t.BalanceAfterCents, Description: t.Description,
		EventId: t.EventID, CreatedAt: t.CreatedAt}
}

// TransactionFromProto converts and checks a transaction message.
func TransactionFromProto(p *CreditTransaction) (*records.CreditTransaction, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: transaction is missing", records.ErrInvalid)
	}
	t := &records.CreditTransaction{AmountCents: p.GetAmountCents(), BalanceAfterCents: p.GetBalanceAfterCents(),
		Description: p.GetDescription(), EventID: p.GetEventId(), CreatedAt: p.GetCreatedAt()}
	if err := fixed(t.TransactionID[:], p.GetTransactionId(), "transaction_id"); err != nil {
		return nil, err
	}
	if err := fixed(t.UserID[:], p.GetUserId(), "user_id"); err != nil {
		return nil, err
	}
	if p.GetTransactionType() > 255 {
		return nil, fmt.Errorf("%w: transaction_type %d", records.ErrInvalid, p.GetTransactionType())
	}
	t.TransactionType = records.TransactionType(p.GetTransactionType())
	return t, t.Validate()
}

// UsageEventToProto converts a usage event.
func UsageEventToProto(e *records.UsageEvent) *UsageEvent {
	return &UsageEvent{EventId: e.EventID, UserId: e.UserID[:], AgentId: e.AgentID, Resource: e.Resource,
		Quantity: e.Quantity, CostCents: e.CostCents, CreatedAt: e.CreatedAt}
}

// UsageEventFromProto converts and checks a usage event message.
func UsageEventFromProto(p *UsageEvent) (*records.UsageEvent, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: usage event is missing", records.ErrInvalid)
	}
	e := &records.UsageEvent{EventID: p.GetEventId(), AgentID: p.GetAgentId(), Resource: p.GetResource(),
		Quantity: p.GetQuantity(), CostCents: p.GetCostCents(), CreatedAt: p.GetCreatedAt()}
	if err := fixed(e.UserID[:], p.GetUserId(), "user_id"); err != nil {
		return nil, err
	}
	return e, e.Validate()
}
