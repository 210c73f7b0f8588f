package fsm

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// This file holds the reference model of the registry and billing ops (a
// literal transcription of their documented semantics over the model's Go
// map) and the random generator of such commands.

// Small id spaces, so that random commands collide: the same agent id for
// two users, duplicate events, retried transaction ids, missing records.
func uid(n int) keys.UserID     { return keys.UserID(idBytes(0x10, n, 32)) }
func aid(n int) keys.AgentID    { return keys.AgentID(idBytes(0xa0, n, 32)) }
func sid(n int) keys.SessionID  { return keys.SessionID(idBytes(0x50, n, 16)) }
func acct(n int) keys.AccountID { return keys.AccountID(idBytes(0x60, n, 16)) }
func eventID(n int) string      { return fmt.Sprintf("evt-%d", n) }
func ptr[T any](v T) *T         { return &v }
func eventKey(id string) []byte { k, _ := keys.UsageEvent(id); return k } // ids are validated
func idBytes(tag byte, i, n int) []byte { // tag, zeros, i
	b := make([]byte, n)
	b[0], b[n-1] = tag, byte(i)
	return b
}

// txid is a ULID whose millisecond timestamp is n, so ids sort by n.
func txid(n int) keys.TransactionID {
	var id keys.TransactionID
	id[4], id[5], id[15] = byte(n>>8), byte(n), 0x77
	return id
}

// applyRecordOp is the model of a validated registry or billing command:
// it returns the new balance for balance ops, or a rejection, and changes
// m.kv only when it succeeds.
func (m *model) applyRecordOp(c *Command) (int64, error) {
	kv := m.kv
	get := func(k []byte) ([]byte, bool) { v, ok := kv[string(k)]; return v, ok }
	set := func(k, v []byte) { kv[string(k)] = append([]byte{}, v...) }
	del := func(k []byte) { delete(kv, string(k)) }
	enc := func(r any) []byte {
		b, err := encMode.Marshal(r)
		if err != nil {
			panic(err)
		}
		return b
	}
	if c.TxID != nil { // the directory: reserve before the op, keep only if it succeeds
		var owner keys.AccountID
		if c.Op == OpReserveTx {
			owner = *c.AccountID
		} else {
			owner = c.Tx.UserID
		}
		dirKey := keys.TxDirectory(*c.TxID)
		held, ok := get(dirKey)
		if ok && !bytes.Equal(held, owner[:]) {
			return 0, errTxReserved(c.Op, *c.TxID)
		}
		if c.Op == OpReserveTx {
			set(dirKey, owner[:])
			return 0, nil
		}
		bal, err := m.applyRecordOp(&Command{Op: c.Op, AccountID: c.AccountID, Amount: c.Amount, Time: c.Time, Tx: c.Tx, Event: c.Event})
		if err == nil {
			set(dirKey, owner[:])
		}
		return bal, err
	}
	switch c.Op {
	case OpPutAgent:
		a := c.Agent
		if owner, ok := get(keys.AgentOwner(a.AgentID)); ok && !bytes.Equal(owner, a.UserID[:]) {
			return 0, errAgentOwned()
		}
		var old records.AgentRecord
		found, err := modelRecord(m, keys.Agent(a.UserID, a.AgentID), &old)
		if err != nil {
			return 0, err
		}
		if found {
			del(keys.AgentByStatus(byte(old.Status), a.UserID, a.AgentID))
		}
		set(keys.Agent(a.UserID, a.AgentID), enc(a))
		set(keys.AgentByStatus(byte(a.Status), a.UserID, a.AgentID), nil)
		set(keys.AgentOwner(a.AgentID), a.UserID[:])
	case OpDeleteAgent:
		u, a := *c.UserID, *c.AgentID
		var old records.AgentRecord
		found, err := modelRecord(m, keys.Agent(u, a), &old)
		if err != nil || !found {
			return 0, orNotFound(err)
		}
		del(keys.Agent(u, a))
		del(keys.AgentByStatus(byte(old.Status), u, a))
		if owner, ok := get(keys.AgentOwner(a)); ok && bytes.Equal(owner, u[:]) {
			del(keys.AgentOwner(a))
		}
	case OpUpdateAgentStatus:
		u, a := *c.UserID, *c.AgentID
		var rec records.AgentRecord
		found, err := modelRecord(m, keys.Agent(u, a), &rec)
		if err != nil || !found {
			return 0, orNotFound(err)
		}
		del(keys.AgentByStatus(byte(rec.Status), u, a))
		rec.Status, rec.UpdatedAt = records.AgentState(*c.Status), c.Time
		set(keys.Agent(u, a), enc(&rec))
		set(keys.AgentByStatus(byte(rec.Status), u, a), nil)
	case OpPutSession:
		s := c.Session
		var old records.SessionRecord
		found, err := modelRecord(m, keys.Session(s.SessionID), &old)
		if err != nil {
			return 0, err
		}
		if found {
			del(keys.SessionByAgent(old.AgentID, s.SessionID))
		}
		set(keys.Session(s.SessionID), enc(s))
		set(keys.SessionByAgent(s.AgentID, s.SessionID), nil)
	case OpUpdateSessionStatus:
		var rec records.SessionRecord
		found, err := modelRecord(m, keys.Session(*c.SessionID), &rec)
		if err != nil || !found {
			return 0, orNotFound(err)
		}
		if c.UserID != nil && rec.UserID != *c.UserID {
			return 0, orNotFound(nil)
		}
		rec.Status = records.SessionStatus(*c.Status)
		if rec.Status != records.SessionActive && rec.ClosedAt == nil {
			rec.ClosedAt = ptr(c.Time)
		}
		set(keys.Session(*c.SessionID), enc(&rec))
	case OpPutUser:
		set(keys.User(c.User.UserID), enc(c.User))
	case OpPutAccount:
		set(keys.Account(c.Account.UserID), enc(c.Account))
	case OpDeleteAccount:
		if _, ok := get(keys.Account(*c.AccountID)); !ok {
			return 0, ErrNotFound
		}
		del(keys.Account(*c.AccountID))
	case OpPutTransaction:
		if err := m.putTx(c.Tx, enc); err != nil {
			return 0, err
		}
	case OpPutUsageEvent:
		set(eventKey(c.Event.EventID), enc(c.Event))
	case OpUpdateBalance, OpProcessUsage, OpAddCredits:
		return m.balanceOp(c, enc)
	default:
		panic(fmt.Sprintf("model: op %s", c.Op))
	}
	return 0, nil
}

// balanceOp models the three ops that move money, with big-number-free
// overflow checks written out longhand.
func (m *model) balanceOp(c *Command, enc func(any) []byte) (int64, error) {
	var id keys.AccountID
	tx := *c.Tx
	var prev records.CreditTransaction
	recorded, err := modelRecord(m, keys.Transaction(tx.TransactionID), &prev)
	if err != nil {
		return 0, err
	}
	// retry: prev was recorded by this very operation (all but the balance
	// after and the creation time agree).
	retry := func(eventID string) bool {
		p := prev
		p.BalanceAfterCents, p.CreatedAt = 0, 0
		want := tx
		want.BalanceAfterCents, want.CreatedAt, want.EventID = 0, 0, eventID
		return p == want
	}
	switch c.Op {
	case OpProcessUsage:
		id = c.Event.UserID
		if _, dup := m.kv[string(eventKey(c.Event.EventID))]; dup {
			if recorded && prev.TransactionType == records.TxUsage && retry(c.Event.EventID) {
				return prev.BalanceAfterCents, nil
			}
			return 0, &DuplicateEventError{EventID: c.Event.EventID}
		}
		if recorded {
			return 0, errTxExists(c.Op, tx.TransactionID)
		}
		tx.EventID = c.Event.EventID
	default:
		id = *c.AccountID
		if recorded && retry(tx.EventID) {
			return prev.BalanceAfterCents, nil
		}
		if recorded {
			return 0, errTxExists(c.Op, tx.TransactionID)
		}
	}
	var a records.Account
	found, err := modelRecord(m, keys.Account(id), &a)
	if err != nil || !found {
		return 0, orNotFound(err)
	}
	// delta is the signed change of the balance.
	delta := tx.AmountCents
	if c.Op == OpProcessUsage {
		delta = -tx.AmountCents
	}
	if delta < 0 && a.BalanceCents+delta < 0 {
		return 0, &InsufficientCreditsError{Balance: a.BalanceCents, Required: -delta}
	}
	if delta > 0 && a.BalanceCents > math.MaxInt64-delta {
		return 0, errOverflow(c.Op, "balance")
	}
	if delta > 0 && a.LifetimeCreditsCents > math.MaxInt64-delta {
		return 0, errOverflow(c.Op, "lifetime credits")
	}
	if delta < 0 && a.LifetimeUsageCents > math.MaxInt64+delta {
		return 0, errOverflow(c.Op, "lifetime usage")
	}
	a.BalanceCents += delta
	if delta > 0 {
		a.LifetimeCreditsCents += delta
	} else {
		a.LifetimeUsageCents -= delta
	}
	a.UpdatedAt = c.Time
	tx.BalanceAfterCents = a.BalanceCents
	if err := m.putTx(&tx, enc); err != nil {
		return 0, err
	}
	m.kv[string(keys.Account(id))] = enc(&a)
	if c.Op == OpProcessUsage {
		m.kv[string(eventKey(c.Event.EventID))] = enc(c.Event)
	}
	return a.BalanceCents, nil
}

// putTx stores a transaction, unless its id holds another account's. It
// checks before it writes, so an error leaves kv unchanged.
func (m *model) putTx(tx *records.CreditTransaction, enc func(any) []byte) error {
	var old records.CreditTransaction
	found, err := modelRecord(m, keys.Transaction(tx.TransactionID), &old)
	if err != nil {
		return err
	}
	if found && old.UserID != tx.UserID {
		return errTxExists(OpPutTransaction, tx.TransactionID)
	}
	m.kv[string(keys.Transaction(tx.TransactionID))] = enc(tx)
	m.kv[string(keys.TransactionByUser(tx.UserID, tx.TransactionID))] = []byte{}
	return nil
}

func modelRecord[R interface {
	records.Record
	Validate() error
}](m *model, key []byte, r R) (bool, error) {
	v, ok := m.kv[string(key)]
	if !ok {
		return false, nil
	}
	return true, decodeStored(key, v, r)
}

func orNotFound(err error) error {
	if err != nil {
		return err
	}
	return ErrNotFound
}

// genRecordCmd returns a random registry or billing command over small id
// spaces: mostly valid, some invalid (Validate rejects them).
func genRecordCmd(rng *rand.Rand) *Command {
	pick := func(n int) int { return rng.IntN(n) }
	now := 1 + rng.Int64N(1e12)
	credit := []records.TransactionType{records.TxPurchase, records.TxRefund, records.TxGrant}
	amount := func(max int64) int64 {
		if pick(15) == 0 {
			return math.MaxInt64 - rng.Int64N(1000) // overflows
		}
		return 1 + rng.Int64N(max)
	}
	tx := func(acc keys.AccountID, typ records.TransactionType, amt int64) *records.CreditTransaction {
		return &records.CreditTransaction{TransactionID: txid(pick(64)), UserID: acc, AmountCents: amt,
			TransactionType: typ, BalanceAfterCents: rng.Int64N(5), Description: "d", CreatedAt: now}
	}
	var c *Command
	switch op := pick(15); op {
	case 0, 1:
		c = &Command{Op: OpPutAgent, Agent: genAgent(rng, now)}
	case 2:
		c = &Command{Op: OpDeleteAgent, UserID: ptr(uid(pick(3))), AgentID: ptr(aid(pick(4)))}
	case 3:
		c = &Command{Op: OpUpdateAgentStatus, UserID: ptr(uid(pick(3))), AgentID: ptr(aid(pick(4))),
			Status: ptr(uint8(pick(6))), Time: now}
	case 4:
		c = &Command{Op: OpPutSession, Session: genSession(rng, now)}
	case 5:
		c = &Command{Op: OpUpdateSessionStatus, SessionID: ptr(sid(pick(4))), Status: ptr(uint8(pick(4))), Time: now}
		if rng.IntN(2) == 0 {
			c.UserID = ptr(uid(pick(3))) // the owner check: sometimes the right user, sometimes not
		}
	case 6:
		c = &Command{Op: OpPutUser, User: &records.UserRecord{UserID: uid(pick(3)), Email: "u@x", CreatedAt: now, LastSeenAt: now}}
	case 7:
		c = &Command{Op: OpPutAccount, Account: genAccount(rng, acct(pick(3)), now)}
	case 8:
		c = &Command{Op: OpDeleteAccount, AccountID: ptr(acct(pick(3)))}
		if pick(3) != 0 { // accounts mostly exist
			c = &Command{Op: OpPutAccount, Account: genAccount(rng, acct(pick(3)), now)}
		}
	case 9:
		acc, d := acct(pick(3)), amount(3000)
		if pick(2) == 0 {
			d = -d
		}
		c = &Command{Op: OpUpdateBalance, AccountID: &acc, Amount: &d, Time: now, Tx: tx(acc, records.TxAdjustment, d)}
	case 10:
		acc := acct(pick(3))
		typ := records.TransactionType(pick(5))
		amt := 1 + rng.Int64N(100)
		if typ == records.TxAdjustment && pick(2) == 0 {
			amt = -amt
		}
		c = &Command{Op: OpPutTransaction, Tx: tx(acc, typ, amt)}
	case 11:
		c = &Command{Op: OpPutUsageEvent, Event: genEvent(rng, now, 16)}
	case 12, 13:
		e := genEvent(rng, now, 256)
		c = &Command{Op: OpProcessUsage, Event: e, Tx: tx(e.UserID, records.TxUsage, amount(2000)), Time: now}
	default:
		acc, amt := acct(pick(3)), amount(5000)
		c = &Command{Op: OpAddCredits, AccountID: &acc, Amount: &amt, Time: now, Tx: tx(acc, credit[pick(3)], amt)}
	}
	if c.Tx != nil && c.Op != OpPutTransaction && pick(3) == 0 {
		c = reusedTxCmd(c.Op, pick(12), now)
	}
	switch pick(6) { // the transaction-id directory (VersionHardening)
	case 0:
		if c.Tx != nil {
			c.TxID = ptr(c.Tx.TransactionID) // reserve in the same change
		}
	case 1:
		// a reservation, of the account a reused id goes with or another
		c = &Command{Op: OpReserveTx, AccountID: ptr(acct(pick(3))), TxID: ptr(txid(pick(12)))}
	}
	if pick(12) == 0 {
		breakCommand(rng, c)
	}
	return c
}

// reusedTxCmd returns balance op op with transaction id txid(n) and the
// account, amount, description and event that n always goes with: the same
// op and n again is an exact retry (only the time differs), another op with
// n, or a random command drawing txid(n), reuses the id across operations.
func reusedTxCmd(op Op, n int, now int64) *Command {
	acc, amt := acct(n%3), int64(1+n*37)
	tx := &records.CreditTransaction{TransactionID: txid(n), UserID: acc, AmountCents: amt, Description: "r", CreatedAt: now}
	switch op {
	case OpUpdateBalance:
		if n%2 == 0 {
			amt = -amt
		}
		tx.AmountCents, tx.TransactionType = amt, records.TxAdjustment
		return &Command{Op: op, AccountID: &acc, Amount: &amt, Time: now, Tx: tx}
	case OpProcessUsage:
		tx.TransactionType = records.TxUsage
		e := &records.UsageEvent{EventID: eventID(n), UserID: acc, AgentID: "a", Resource: "llm_tokens", Quantity: 1, CostCents: amt, CreatedAt: now}
		return &Command{Op: op, Event: e, Tx: tx, Time: now}
	default:
		tx.TransactionType = []records.TransactionType{records.TxPurchase, records.TxRefund, records.TxGrant}[n%3]
		return &Command{Op: OpAddCredits, AccountID: &acc, Amount: &amt, Time: now, Tx: tx}
	}
}

func genAgent(rng *rand.Rand, now int64) *records.AgentRecord {
	a := &records.AgentRecord{AgentID: aid(rng.IntN(4)), UserID: uid(rng.IntN(3)), Name: "agent",
		Status: records.AgentState(rng.IntN(6)), Spec: records.AgentSpecRecord{CPUMillicores: 250, MemoryMB: 128, RuntimeVersion: "v1"},
		CreatedAt: now, UpdatedAt: now}
	if rng.IntN(2) == 0 {
		a.LastHeartbeatAt = ptr(now + 1)
	}
	return a
}

func genSession(rng *rand.Rand, now int64) *records.SessionRecord {
	s := &records.SessionRecord{SessionID: sid(rng.IntN(4)), AgentID: aid(rng.IntN(4)), UserID: uid(rng.IntN(3)),
		Status: records.SessionStatus(rng.IntN(4)), CreatedAt: now}
	if s.Status != records.SessionActive && rng.IntN(2) == 0 {
		s.ClosedAt = ptr(now + 5)
	}
	return s
}

// genAccount returns a consistent account: balance = credits - usage.
func genAccount(rng *rand.Rand, id keys.AccountID, now int64) *records.Account {
	credits := rng.Int64N(10000)
	if rng.IntN(5) == 0 {
		credits = math.MaxInt64 - rng.Int64N(10000) // next credit overflows
	}
	usage := rng.Int64N(credits + 1)
	if rng.IntN(10) == 0 {
		usage = credits - rng.Int64N(min(credits, 50)+1) // little left: charges fall short
	}
	return &records.Account{UserID: id, BalanceCents: credits - usage, LifetimeCreditsCents: credits,
		LifetimeUsageCents: usage, CreatedAt: now, UpdatedAt: now}
}

// genEvent returns an event with one of the first n event ids.
func genEvent(rng *rand.Rand, now int64, n int) *records.UsageEvent {
	return &records.UsageEvent{EventID: eventID(rng.IntN(n)), UserID: acct(rng.IntN(3)), AgentID: "a",
		Resource: "llm_tokens", Quantity: rng.Int64N(1000), CostCents: rng.Int64N(100), CreatedAt: now}
}

// breakCommand makes c invalid in one of several ways.
func breakCommand(rng *rand.Rand, c *Command) {
	switch rng.IntN(6) {
	case 0: // a field the op does not take
		c.SessionID = ptr(sid(0))
		if c.Op == OpUpdateSessionStatus {
			c.SessionID, c.UserID = nil, ptr(uid(0))
		}
	case 1: // a missing field
		c.Agent, c.UserID, c.Session, c.SessionID, c.User, c.Account, c.AccountID, c.Tx = nil, nil, nil, nil, nil, nil, nil, nil
		if c.Op == OpPutUsageEvent {
			c.Event = nil
		}
	case 2: // a time where none is taken, a negative one where one is
		if c.Time == 0 {
			c.Time = 5
		} else {
			c.Time = -c.Time
		}
	case 3: // bad status or amount
		c.Status, c.Amount = ptr(uint8(9)), ptr(int64(0))
		if c.Op == OpPutAgent || c.Op == OpPutSession {
			c.Status, c.Amount = nil, nil
			if c.Agent != nil {
				c.Agent.Status = 9
			} else {
				c.Session.Status = 9
			}
		}
	case 4: // an invalid record
		switch {
		case c.Agent != nil:
			c.Agent.Name = ""
		case c.Tx != nil:
			c.Tx.AmountCents = 0
		case c.Event != nil:
			c.Event.Quantity = -1
		case c.Account != nil:
			c.Account.BalanceCents = -1
		case c.User != nil:
			c.User.Email = string(make([]byte, records.MaxEmailLen+1))
		default:
			c.Op = 99
		}
	default: // fields that disagree
		switch {
		case c.Tx != nil && c.Op != OpPutTransaction:
			c.Tx.UserID = acct(7)
		case c.Tx != nil:
			c.Tx.TransactionType = 7
		default:
			c.Op = OpNoop
		}
	}
}
