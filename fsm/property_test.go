package fsm

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// ledger follows the money from the commands that succeeded, independently
// of the state machine's stored state.
type ledger struct {
	bal map[keys.AccountID]int64 // each account's balance
	// txs holds each transaction as it must be stored: a transaction id,
	// once recorded, keeps its transaction (only PutTransaction may
	// replace it, and only with one of the same account).
	txs      map[keys.TransactionID]records.CreditTransaction
	opened   big.Int // balances of PutAccount
	credited big.Int // AddCredits and positive UpdateBalance
	charged  big.Int // ProcessUsage and negative UpdateBalance
	removed  big.Int // balances overwritten or deleted
}

func newLedger() *ledger {
	return &ledger{bal: map[keys.AccountID]int64{}, txs: map[keys.TransactionID]records.CreditTransaction{}}
}

func addBig(z *big.Int, v int64) { z.Add(z, big.NewInt(v)) }

// observe accounts for command c with result r.
func (l *ledger) observe(t *testing.T, c *Command, r *Result) {
	t.Helper()
	if r == nil || r.Err != nil {
		return
	}
	move := func(id keys.AccountID, delta int64) {
		l.bal[id] += delta
		if delta > 0 {
			addBig(&l.credited, delta)
		} else {
			addBig(&l.charged, -delta)
		}
		if r.Balance != l.bal[id] {
			t.Fatalf("index %d %s: Result.Balance %d, ledger %d", r.Index, c.Op, r.Balance, l.bal[id])
		}
	}
	// A balance op whose transaction id is recorded succeeds only as the
	// exact retry of the op that recorded it: it moves no money and
	// answers the balance recorded then.
	if prev, ok := l.txs[idOf(c)]; ok && (c.Op == OpUpdateBalance || c.Op == OpProcessUsage || c.Op == OpAddCredits) {
		if r.Balance != prev.BalanceAfterCents || prev.UserID != c.Tx.UserID || prev.AmountCents != c.Tx.AmountCents ||
			prev.TransactionType != c.Tx.TransactionType {
			t.Fatalf("index %d %s: success over recorded transaction %x (%+v): balance %d, not an exact retry",
				r.Index, c.Op, prev.TransactionID, prev, r.Balance)
		}
		return
	}
	switch c.Op {
	case OpPutAccount:
		addBig(&l.removed, l.bal[c.Account.UserID])
		addBig(&l.opened, c.Account.BalanceCents)
		l.bal[c.Account.UserID] = c.Account.BalanceCents
	case OpDeleteAccount:
		addBig(&l.removed, l.bal[*c.AccountID])
		delete(l.bal, *c.AccountID)
	case OpPutTransaction:
		if prev, ok := l.txs[c.Tx.TransactionID]; ok && prev.UserID != c.Tx.UserID {
			t.Fatalf("index %d: put_transaction replaced account %x's transaction %x", r.Index, prev.UserID, prev.TransactionID)
		}
		l.txs[c.Tx.TransactionID] = *c.Tx
	case OpUpdateBalance:
		move(*c.AccountID, *c.Amount)
	case OpProcessUsage:
		move(c.Event.UserID, -c.Tx.AmountCents)
	case OpAddCredits:
		move(*c.AccountID, *c.Amount)
	}
	switch c.Op {
	case OpUpdateBalance, OpProcessUsage, OpAddCredits:
		tx := *c.Tx
		tx.BalanceAfterCents = r.Balance
		if c.Op == OpProcessUsage {
			tx.EventID = c.Event.EventID
		}
		l.txs[tx.TransactionID] = tx
	}
}

// idOf is the transaction id c carries, or the zero id.
func idOf(c *Command) keys.TransactionID {
	if c.Tx == nil {
		return keys.TransactionID{}
	}
	return c.Tx.TransactionID
}

// TestRecordInvariants applies long seeded random sequences of registry
// and billing commands in random runs and checks, after every chunk, that
// records and indexes agree and that money is conserved.
func TestRecordInvariants(t *testing.T) {
	n, chunk := 4000, 250
	if testing.Short() {
		n = 1000
	}
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 77))
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		l := newLedger()
		succeeded := 0
		for first := 1; first <= n; first += chunk {
			cmds := make([]*Command, chunk)
			logs := make([]*raft.Log, chunk)
			for i := range cmds {
				cmds[i] = genRecordCmd(rng)
				logs[i] = cmdLog(uint64(first+i), mustEncode(t, cmds[i]))
			}
			for i, r := range applyRuns(t, f, logs, rng) {
				res := r.(*Result)
				if res.Err == nil {
					succeeded++
				}
				l.observe(t, cmds[i], res)
			}
			checkInvariants(t, f, l)
		}
		if succeeded < n/3 {
			t.Fatalf("seed %d: only %d of %d commands succeeded", seed, succeeded, n)
		}
	}
}

type userAgent struct {
	u keys.UserID
	a keys.AgentID
}

// checkInvariants checks the indexes against the records, and the
// accounts against the ledger.
func checkInvariants(t *testing.T, f *FSM, l *ledger) {
	t.Helper()
	agents := map[userAgent]records.AgentState{}
	byStatus := map[userAgent][]records.AgentState{}
	owners := map[keys.AgentID]keys.UserID{}
	sessions := map[keys.SessionID]keys.AgentID{}
	sessionIndex := map[keys.SessionID][]keys.AgentID{}
	txs := map[keys.TransactionID]keys.AccountID{}
	stored := map[keys.TransactionID]records.CreditTransaction{}
	txIndex := map[keys.TransactionID][]keys.AccountID{}
	balances := map[keys.AccountID]int64{}
	var total big.Int
	for _, kv := range mustDump(t, f) {
		k, v := kv.Key, kv.Value
		switch k[0] {
		case keys.TableAgents:
			u, a, _ := keys.DecodeAgent(k)
			var r records.AgentRecord
			mustDecode(t, k, v, &r)
			if r.UserID != u || r.AgentID != a {
				t.Fatalf("agent record under %x holds other ids", k)
			}
			agents[userAgent{u, a}] = r.Status
		case keys.TableAgentsByStatus:
			s, u, a, _ := keys.DecodeAgentByStatus(k)
			byStatus[userAgent{u, a}] = append(byStatus[userAgent{u, a}], records.AgentState(s))
		case keys.TableAgentOwners:
			a, _ := keys.DecodeAgentOwner(k)
			owners[a] = keys.UserID(v)
		case keys.TableSessions:
			var r records.SessionRecord
			mustDecode(t, k, v, &r)
			sessions[r.SessionID] = r.AgentID
		case keys.TableSessionsByAgent:
			a, s, _ := keys.DecodeSessionByAgent(k)
			sessionIndex[s] = append(sessionIndex[s], a)
		case keys.TableTransactions:
			var r records.CreditTransaction
			mustDecode(t, k, v, &r)
			txs[r.TransactionID] = r.UserID
			stored[r.TransactionID] = r
		case keys.TableTransactionsByUser:
			u, id, _ := keys.DecodeTransactionByUser(k)
			txIndex[id] = append(txIndex[id], u)
		case keys.TableAccounts:
			var r records.Account
			mustDecode(t, k, v, &r)
			if r.BalanceCents != r.LifetimeCreditsCents-r.LifetimeUsageCents {
				t.Fatalf("account %x: balance %d != credits %d - usage %d", r.UserID, r.BalanceCents, r.LifetimeCreditsCents, r.LifetimeUsageCents)
			}
			balances[r.UserID] = r.BalanceCents
			addBig(&total, r.BalanceCents)
		}
	}
	for ua, st := range agents {
		if got := byStatus[ua]; len(got) != 1 || got[0] != st {
			t.Fatalf("agent %x/%x in status %s has status index entries %v", ua.u[:2], ua.a[:2], st, got)
		}
		if owners[ua.a] != ua.u {
			t.Fatalf("agent %x/%x: owner entry %x", ua.u[:2], ua.a[:2], owners[ua.a])
		}
	}
	for ua := range byStatus {
		if _, ok := agents[ua]; !ok {
			t.Fatalf("status index entry without an agent: %x/%x", ua.u[:2], ua.a[:2])
		}
	}
	for a, u := range owners {
		if _, ok := agents[userAgent{u, a}]; !ok {
			t.Fatalf("owner entry %x -> %x without an agent record", a[:2], u[:2])
		}
	}
	for s, a := range sessions {
		if got := sessionIndex[s]; len(got) != 1 || got[0] != a {
			t.Fatalf("session %x of agent %x has index entries %x", s[:2], a[:2], got)
		}
	}
	for s := range sessionIndex {
		if _, ok := sessions[s]; !ok {
			t.Fatalf("session index entry without a session: %x", s)
		}
	}
	for id, u := range txs {
		if got := txIndex[id]; len(got) != 1 || got[0] != u {
			t.Fatalf("transaction %x of %x has index entries %x", id, u, got)
		}
		want, ok := l.txs[id]
		if !ok {
			t.Fatalf("transaction %x not stored by a successful command", id)
		}
		if stored[id] != want {
			t.Fatalf("transaction %x is %+v, the command that recorded it stored %+v", id, stored[id], want)
		}
	}
	for id := range txIndex {
		if _, ok := txs[id]; !ok {
			t.Fatalf("transaction index entry without a transaction: %x", id)
		}
	}
	if len(txs) != len(l.txs) {
		t.Fatalf("%d transactions stored, ledger has %d", len(txs), len(l.txs))
	}
	if len(balances) != len(l.bal) {
		t.Fatalf("%d accounts stored, ledger has %d", len(balances), len(l.bal))
	}
	for id, b := range l.bal {
		if balances[id] != b {
			t.Fatalf("account %x: balance %d, ledger %d", id, balances[id], b)
		}
	}
	// Conservation: what is in the accounts is what came in minus what went out.
	var want big.Int
	want.Add(&l.opened, &l.credited)
	want.Sub(&want, &l.charged)
	want.Sub(&want, &l.removed)
	if total.Cmp(&want) != 0 {
		t.Fatalf("sum of balances %s, want opened %s + credited %s - charged %s - removed %s = %s",
			&total, &l.opened, &l.credited, &l.charged, &l.removed, &want)
	}
}

func mustDecode[R interface {
	records.Record
	Validate() error
}](t *testing.T, k, v []byte, r R) {
	t.Helper()
	if err := decodeStored(k, v, r); err != nil {
		t.Fatal(err)
	}
}
