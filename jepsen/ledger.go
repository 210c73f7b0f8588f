package jepsen

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"lukechampine.com/blake3"
)

// Ledger is the billing workload: credits (AddCredits) and usage charges
// (ProcessUsage) on a few accounts, with the client's own retries reusing
// the same transaction and event ids, deliberate re-submissions of charged
// events under a new transaction id (which must be refused), deliberate
// re-uses of an acknowledged credit's or charge's transaction id by a new
// credit or charge, on any account (which must be refused: a transaction id
// names one ledger entry), and balance reads. After healing it reads every account, its whole transaction
// listing and the usage events, and checks:
//
//   - every transaction listed was issued by the workload, once, and is
//     listed as its first issuer wrote it (account, type, amount, event):
//     a re-use never replaces it;
//   - every acknowledged credit or charge is listed, no refused one is,
//     and an indeterminate one may or may not be;
//   - every usage event is charged at most once, an acknowledged one
//     exactly once, and a re-submission or re-use never;
//   - balance = credits − charges of the listed transactions, and the
//     account's lifetime credit and usage totals agree;
//   - no balance, observed or recorded, is ever negative.
type Ledger struct {
	runID    string
	accounts []keys.AccountID
	nextEv   atomic.Int64

	mu      sync.Mutex
	charged []ledgerEvent // events acknowledged as charged, for re-submission
	acked   []ledgerTx    // acknowledged credits and charges, for re-use

	final struct {
		sync.Mutex
		acct map[keys.AccountID]*records.Account
		txs  map[keys.AccountID][]*records.CreditTransaction
		has  map[string]bool // event -> HasUsageEvent
	}
}

type ledgerTx struct {
	acct int
	id   keys.TransactionID
}

type ledgerEvent struct {
	acct int
	id   string
}

// LedgerIn is a ledger operation's input.
type LedgerIn struct {
	Account int    `json:"account"`
	Amount  int64  `json:"amount,omitempty"`
	Tx      string `json:"tx,omitempty"`
	Event   string `json:"event,omitempty"`
}

// LedgerOut is a ledger operation's output.
type LedgerOut struct {
	Balance  int64 `json:"balance"`
	Attempts int   `json:"attempts,omitempty"`
}

// NewLedger returns the workload over n accounts.
func NewLedger(runID string, n int) *Ledger {
	n = WorkloadOptions{Accounts: n}.withDefaults().Accounts
	l := &Ledger{runID: runID}
	for i := range n {
		sum := blake3.Sum256([]byte(fmt.Sprintf("jepsen-ledger-%s-%d", runID, i)))
		var id keys.AccountID
		copy(id[:], sum[:])
		l.accounts = append(l.accounts, id)
	}
	return l
}

func (l *Ledger) Name() string { return "ledger" }

// Setup creates every account with a zero balance.
func (l *Ledger) Setup(ctx context.Context, db DB) error {
	now := time.Now().UnixMilli()
	for _, id := range l.accounts {
		a := &records.Account{UserID: id, CreatedAt: now, UpdatedAt: now}
		if err := retryFinal(ctx, func(ctx context.Context) error { return db.PutAccount(ctx, a) }); err != nil {
			return fmt.Errorf("ledger setup: %w", err)
		}
	}
	return nil
}

// retries is how many attempts a credit or charge gets (the client retries
// inside each attempt too); each reuses the transaction and event ids.
const ledgerAttempts = 3

// submit runs call up to ledgerAttempts times while its outcome is unknown.
func submit(ctx context.Context, call func(ctx context.Context) (int64, error)) (Outcome, any, error) {
	var err error
	for attempt := 1; attempt <= ledgerAttempts; attempt++ {
		var bal int64
		bal, err = call(ctx)
		o := writeOutcome(err)
		var de *client.DuplicateEventError
		if attempt > 1 && errors.As(err, &de) {
			// A retry told the event is processed: by an earlier attempt,
			// or not at all by us; the history cannot tell.
			return Info, LedgerOut{Attempts: attempt}, err
		}
		if o != Info {
			return o, LedgerOut{Balance: bal, Attempts: attempt}, err
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return Info, LedgerOut{Attempts: ledgerAttempts}, err
}

func (l *Ledger) Run(ctx context.Context, w *Worker) {
	for ctx.Err() == nil {
		ai := w.Rng.IntN(len(l.accounts))
		acct := l.accounts[ai]
		now := time.Now()
		switch p := w.Rng.IntN(100); {
		case p < 28:
			amt := 100 + w.Rng.Int64N(900)
			tx := &records.CreditTransaction{TransactionID: client.NewTransactionID(now), UserID: acct, AmountCents: amt,
				TransactionType: records.TxPurchase, Description: "jepsen credit", CreatedAt: now.UnixMilli()}
			op := w.Do(ctx, "ledger", "credit", LedgerIn{Account: ai, Amount: amt, Tx: hex.EncodeToString(tx.TransactionID[:])},
				func(ctx context.Context) (Outcome, any, error) {
					return submit(ctx, func(ctx context.Context) (int64, error) { return w.DB.AddCredits(ctx, acct, amt, tx) })
				})
			l.ack(op, ai, tx.TransactionID)
		case p < 75:
			cost := 1 + w.Rng.Int64N(400)
			ev := fmt.Sprintf("jl-%s-%d", l.runID, l.nextEv.Add(1))
			op, id := l.charge(ctx, w, ai, ev, cost, "charge", nil)
			if op.Outcome == OK {
				l.mu.Lock()
				l.charged = append(l.charged, ledgerEvent{acct: ai, id: ev})
				l.mu.Unlock()
			}
			l.ack(op, ai, id)
		case p < 80:
			l.mu.Lock()
			if len(l.charged) == 0 {
				l.mu.Unlock()
				continue
			}
			e := l.charged[w.Rng.IntN(len(l.charged))]
			l.mu.Unlock()
			l.charge(ctx, w, e.acct, e.id, 1+w.Rng.Int64N(400), "recharge", nil)
		case p < 85:
			l.mu.Lock()
			if len(l.acked) == 0 {
				l.mu.Unlock()
				continue
			}
			orig := l.acked[w.Rng.IntN(len(l.acked))]
			l.mu.Unlock()
			if w.Rng.IntN(2) == 0 {
				ai = orig.acct // its own account: always refused
			}
			l.reuse(ctx, w, ai, orig.id)
		default:
			w.Do(ctx, "ledger", "balance", LedgerIn{Account: ai}, func(ctx context.Context) (Outcome, any, error) {
				a, err := w.DB.GetAccount(ctx, acct)
				if err != nil {
					return Fail, nil, err
				}
				return OK, LedgerOut{Balance: a.BalanceCents}, nil
			})
		}
	}
}

// ack remembers the transaction id of an acknowledged credit or charge for
// re-use.
func (l *Ledger) ack(op Op, ai int, id keys.TransactionID) {
	if op.Outcome == OK {
		l.mu.Lock()
		l.acked = append(l.acked, ledgerTx{acct: ai, id: id})
		l.mu.Unlock()
	}
}

// reuseDescription marks the transactions of re-uses, which are never
// the exact retry of the operation that recorded their id.
const reuseDescription = "jepsen re-use"

// reuse submits, on account ai, a new credit or a charge of a new event
// under transaction id id, acknowledged for another operation. Transaction
// ids are unique across the cluster (the transaction-id directory, issue
// 37 item 11), so it must be refused (ErrAlreadyExists) and change
// nothing, on the original's account or any other, on whatever shard.
func (l *Ledger) reuse(ctx context.Context, w *Worker, ai int, id keys.TransactionID) {
	acct := l.accounts[ai]
	amt := 1 + w.Rng.Int64N(400)
	if w.Rng.IntN(2) == 0 {
		ev := fmt.Sprintf("jl-%s-%d", l.runID, l.nextEv.Add(1))
		l.charge(ctx, w, ai, ev, amt, "reuse", &id)
		return
	}
	now := time.Now()
	tx := &records.CreditTransaction{TransactionID: id, UserID: acct, AmountCents: amt,
		TransactionType: records.TxGrant, Description: reuseDescription, CreatedAt: now.UnixMilli()}
	w.Do(ctx, "ledger", "reuse", LedgerIn{Account: ai, Amount: amt, Tx: hex.EncodeToString(id[:])},
		func(ctx context.Context) (Outcome, any, error) {
			return submit(ctx, func(ctx context.Context) (int64, error) { return w.DB.AddCredits(ctx, acct, amt, tx) })
		})
}

// charge processes usage event ev of cost on account ai as a new
// transaction, or under transaction id *id (a re-use).
func (l *Ledger) charge(ctx context.Context, w *Worker, ai int, ev string, cost int64, f string, id *keys.TransactionID) (Op, keys.TransactionID) {
	acct := l.accounts[ai]
	now := time.Now()
	e := &records.UsageEvent{EventID: ev, UserID: acct, Resource: "jepsen", Quantity: 1, CostCents: cost, CreatedAt: now.UnixMilli()}
	tx := &records.CreditTransaction{TransactionID: client.NewTransactionID(now), UserID: acct, AmountCents: cost,
		TransactionType: records.TxUsage, Description: "jepsen usage", EventID: ev, CreatedAt: now.UnixMilli()}
	if id != nil {
		tx.TransactionID, tx.Description = *id, reuseDescription
	}
	op := w.Do(ctx, "ledger", f, LedgerIn{Account: ai, Amount: cost, Tx: hex.EncodeToString(tx.TransactionID[:]), Event: ev},
		func(ctx context.Context) (Outcome, any, error) {
			return submit(ctx, func(ctx context.Context) (int64, error) { return w.DB.ProcessUsage(ctx, e, tx) })
		})
	return op, tx.TransactionID
}

// maxEventProbes bounds the HasUsageEvent reads of the final phase.
const maxEventProbes = 2000

// Final reads every account, its transactions, and whether each charged
// or refused event is recorded (up to maxEventProbes events).
func (l *Ledger) Final(ctx context.Context, w *Worker) error {
	l.final.Lock()
	defer l.final.Unlock()
	l.final.acct = map[keys.AccountID]*records.Account{}
	l.final.txs = map[keys.AccountID][]*records.CreditTransaction{}
	l.final.has = map[string]bool{}
	for ai, id := range l.accounts {
		err := retryFinal(ctx, func(ctx context.Context) error {
			op := w.Do(ctx, "ledger", "final-account", LedgerIn{Account: ai}, func(ctx context.Context) (Outcome, any, error) {
				a, err := w.DB.GetAccount(ctx, id)
				if err != nil {
					return Fail, nil, err
				}
				l.final.acct[id] = a
				return OK, LedgerOut{Balance: a.BalanceCents}, nil
			})
			if op.Outcome != OK {
				return errors.New(op.Error)
			}
			txs, err := w.DB.ListTransactions(ctx, id)
			if err != nil {
				return err
			}
			l.final.txs[id] = txs
			return nil
		})
		if err != nil {
			return fmt.Errorf("final read of account %d: %w", ai, err)
		}
	}
	probes := 0
	for _, op := range w.Rec.History().Of("ledger") {
		in, _ := op.Input.(LedgerIn)
		if (op.F != "charge" && (op.F != "reuse" || in.Event == "")) || probes >= maxEventProbes {
			continue
		}
		probes++
		err := retryFinal(ctx, func(ctx context.Context) error {
			ok, err := w.DB.HasUsageEvent(ctx, l.accounts[in.Account], in.Event)
			if err == nil {
				l.final.has[in.Event] = ok
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("final read of usage event %s: %w", in.Event, err)
		}
	}
	return nil
}

func (l *Ledger) Check(h History, _ string) Verdict {
	v := Verdict{Checker: "ledger", Valid: true}
	h = h.Of("ledger")
	l.final.Lock()
	defer l.final.Unlock()
	if l.final.acct == nil {
		v.anomaly("no final reads")
		return v
	}
	issued := map[string]Op{} // tx hex -> the credit or charge that issued it
	for _, op := range h {
		in, _ := op.Input.(LedgerIn)
		if out, ok := op.Output.(LedgerOut); ok && op.Outcome == OK && out.Balance < 0 {
			v.anomaly("op %d %s: balance %d is negative", op.Index, op.F, out.Balance)
		}
		switch {
		case in.Tx == "", op.F == "reuse":
		default:
			issued[in.Tx] = op
		}
	}
	events := map[string]int{} // event -> listed usage transactions
	for ai, id := range l.accounts {
		a := l.final.acct[id]
		txs := l.final.txs[id]
		var credits, usage int64
		seen := map[string]bool{}
		for _, t := range txs {
			tid := hex.EncodeToString(t.TransactionID[:])
			if seen[tid] {
				v.anomaly("account %d: transaction %s listed twice", ai, tid)
				continue
			}
			seen[tid] = true
			op, ok := issued[tid]
			if ok && op.Input.(LedgerIn).Account != ai && t.Description == reuseDescription {
				// Transaction ids are unique across the cluster: a re-use
				// on another account never takes effect, wherever the
				// two accounts live.
				v.anomaly("account %d: transaction %s of %s op %d (account %d) was re-used by another account (%s %d, event %q)",
					ai, tid, op.F, op.Index, op.Input.(LedgerIn).Account, t.TransactionType, t.AmountCents, t.EventID)
			} else if !ok {
				v.anomaly("account %d: transaction %s (%s %d) was never issued", ai, tid, t.TransactionType, t.AmountCents)
			} else {
				in := op.Input.(LedgerIn)
				switch {
				case op.Outcome == Fail:
					v.anomaly("account %d: %s transaction %s was refused (%s) but is listed", ai, op.F, tid, op.Error)
				case t.Description == reuseDescription:
					v.anomaly("account %d: transaction %s of %s op %d was overwritten by a re-use of its id (%s %d, event %q)",
						ai, tid, op.F, op.Index, t.TransactionType, t.AmountCents, t.EventID)
				case in.Account != ai || in.Amount != t.AmountCents:
					v.anomaly("account %d: transaction %s listed with amount %d, issued %d on account %d", ai, tid, t.AmountCents, in.Amount, in.Account)
				case (op.F == "credit") != t.TransactionType.Credit() || t.EventID != in.Event:
					v.anomaly("account %d: transaction %s listed as %s of event %q, issued by %s op %d of event %q",
						ai, tid, t.TransactionType, t.EventID, op.F, op.Index, in.Event)
				case op.F == "recharge":
					v.anomaly("account %d: event %s charged again by re-submission %s (op %d)", ai, in.Event, tid, op.Index)
				}
			}
			if t.BalanceAfterCents < 0 {
				v.anomaly("account %d: transaction %s left balance %d", ai, tid, t.BalanceAfterCents)
			}
			switch {
			case t.TransactionType.Credit():
				credits += t.AmountCents
			case t.TransactionType == records.TxUsage:
				usage += t.AmountCents
				events[t.EventID]++
			default:
				v.anomaly("account %d: transaction %s of unexpected type %s", ai, tid, t.TransactionType)
			}
		}
		v.count("transactions-listed", len(txs))
		if a.BalanceCents != credits-usage {
			v.anomaly("account %d: balance %d, but listed credits %d - charges %d = %d", ai, a.BalanceCents, credits, usage, credits-usage)
		}
		if a.LifetimeCreditsCents != credits || a.LifetimeUsageCents != usage {
			v.anomaly("account %d: lifetime credits/usage %d/%d, listed %d/%d", ai, a.LifetimeCreditsCents, a.LifetimeUsageCents, credits, usage)
		}
		if a.BalanceCents < 0 {
			v.anomaly("account %d: final balance %d is negative", ai, a.BalanceCents)
		}
		for tid, op := range issued {
			if op.Outcome == OK && op.Input.(LedgerIn).Account == ai && !seen[tid] && op.F != "recharge" {
				v.anomaly("account %d: acknowledged %s %s (op %d) is not listed", ai, op.F, tid, op.Index)
			}
		}
	}
	for ev, n := range events {
		if n > 1 {
			v.anomaly("usage event %s charged %d times", ev, n)
		}
	}
	for _, op := range h {
		in, _ := op.Input.(LedgerIn)
		if op.F == "recharge" {
			v.count("recharges-"+string(op.Outcome), 1)
			if op.Outcome == OK {
				v.anomaly("re-submission of charged event %s under a new transaction was acknowledged (op %d)", in.Event, op.Index)
			}
		}
		if op.F == "reuse" {
			orig, _ := issued[in.Tx].Input.(LedgerIn)
			same := orig.Account == in.Account
			v.count(fmt.Sprintf("reuses-%s-account-%s", map[bool]string{true: "same", false: "other"}[same], op.Outcome), 1)
			switch {
			case op.Outcome == OK:
				v.anomaly("re-use of transaction id %s by a new operation on the %s account was acknowledged (op %d)",
					in.Tx, map[bool]string{true: "same", false: "other"}[same], op.Index)
			case in.Event != "" && l.final.has[in.Event]:
				v.anomaly("re-use of transaction id %s (op %d): its usage event %s is recorded", in.Tx, op.Index, in.Event)
			case in.Event != "" && events[in.Event] > 0:
				v.anomaly("re-use of transaction id %s (op %d): its usage event %s is charged", in.Tx, op.Index, in.Event)
			}
		}
		if op.F != "charge" {
			continue
		}
		v.count("charges-"+string(op.Outcome), 1)
		has, probed := l.final.has[in.Event]
		switch {
		case op.Outcome == OK && events[in.Event] != 1:
			v.anomaly("acknowledged charge of event %s (op %d) is charged %d times", in.Event, op.Index, events[in.Event])
		case op.Outcome == OK && probed && !has:
			v.anomaly("acknowledged charge of event %s (op %d): usage event not recorded", in.Event, op.Index)
		case op.Outcome == Fail && probed && has:
			v.anomaly("refused charge of event %s (op %d, %s): usage event recorded", in.Event, op.Index, op.Error)
		}
	}
	return v
}
