package records

import (
	"fmt"
	"math"

	"github.com/swarmkv/swarmkv/keys"
)

// Validate checks an agent record's fields.
func (a *AgentRecord) Validate() error {
	if err := checkString("name", a.Name, MaxNameLen, true); err != nil {
		return err
	}
	if !a.Status.Valid() {
		return fmt.Errorf("%w: %s", ErrInvalid, a.Status)
	}
	if err := checkString("spec.runtime_version", a.Spec.RuntimeVersion, MaxRuntimeLen, false); err != nil {
		return err
	}
	if err := checkTime("created_at", a.CreatedAt); err != nil {
		return err
	}
	if err := checkTime("updated_at", a.UpdatedAt); err != nil {
		return err
	}
	if a.LastHeartbeatAt != nil {
		return checkTime("last_heartbeat_at", *a.LastHeartbeatAt)
	}
	return nil
}

// Validate checks a session record's fields.
func (s *SessionRecord) Validate() error {
	if !s.Status.Valid() {
		return fmt.Errorf("%w: %s", ErrInvalid, s.Status)
	}
	if err := checkTime("created_at", s.CreatedAt); err != nil {
		return err
	}
	if s.ClosedAt != nil {
		return checkTime("closed_at", *s.ClosedAt)
	}
	return nil
}

// Validate checks a user record's fields.
func (u *UserRecord) Validate() error {
	if err := checkString("email", u.Email, MaxEmailLen, false); err != nil {
		return err
	}
	if err := checkTime("created_at", u.CreatedAt); err != nil {
		return err
	}
	return checkTime("last_seen_at", u.LastSeenAt)
}

// Validate checks an account's fields: balance and lifetime statistics are
// never negative.
func (a *Account) Validate() error {
	switch {
	case a.BalanceCents < 0:
		return fmt.Errorf("%w: balance_cents %d is negative", ErrInvalid, a.BalanceCents)
	case a.LifetimeCreditsCents < 0 || a.LifetimeUsageCents < 0:
		return fmt.Errorf("%w: lifetime statistics are negative", ErrInvalid)
	}
	if err := checkTime("created_at", a.CreatedAt); err != nil {
		return err
	}
	return checkTime("updated_at", a.UpdatedAt)
}

// Validate checks a transaction's fields: a known type, a positive amount
// (any non-zero amount for an adjustment), bounded description.
func (t *CreditTransaction) Validate() error {
	if !t.TransactionType.Valid() {
		return fmt.Errorf("%w: %s", ErrInvalid, t.TransactionType)
	}
	switch {
	case t.TransactionType == TxAdjustment && (t.AmountCents == 0 || t.AmountCents == math.MinInt64):
		return fmt.Errorf("%w: adjustment amount_cents %d", ErrInvalid, t.AmountCents)
	case t.TransactionType != TxAdjustment && t.AmountCents <= 0:
		return fmt.Errorf("%w: amount_cents %d must be positive for %s", ErrInvalid, t.AmountCents, t.TransactionType)
	}
	if err := checkString("description", t.Description, MaxDescriptionLen, false); err != nil {
		return err
	}
	if err := checkString("event_id", t.EventID, keys.MaxEventIDLen, false); err != nil {
		return err
	}
	return checkTime("created_at", t.CreatedAt)
}

// Validate checks a usage event's fields.
func (e *UsageEvent) Validate() error {
	if err := checkString("event_id", e.EventID, keys.MaxEventIDLen, true); err != nil {
		return err
	}
	if err := checkString("agent_id", e.AgentID, 256, false); err != nil {
		return err
	}
	if err := checkString("resource", e.Resource, MaxResourceLen, false); err != nil {
		return err
	}
	switch {
	case e.Quantity < 0:
		return fmt.Errorf("%w: quantity %d is negative", ErrInvalid, e.Quantity)
	case e.CostCents < 0:
		return fmt.Errorf("%w: cost_cents %d is negative", ErrInvalid, e.CostCents)
	}
	return checkTime("created_at", e.CreatedAt)
}
