package fsm

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

func account(n int, balance, credits, usage int64) *records.Account {
	return &records.Account{UserID: acct(n), BalanceCents: balance, LifetimeCreditsCents: credits,
		LifetimeUsageCents: usage, CreatedAt: 1, UpdatedAt: 1}
}

func txRec(accN, txN int, typ records.TransactionType, amount int64) *records.CreditTransaction {
	return &records.CreditTransaction{TransactionID: txid(txN), UserID: acct(accN), AmountCents: amount,
		TransactionType: typ, Description: "test", CreatedAt: 3}
}

func creditTx(accN, txN int, amount int64) *records.CreditTransaction {
	return txRec(accN, txN, records.TxPurchase, amount)
}

func usageEvent(accN, evN int) *records.UsageEvent {
	return &records.UsageEvent{EventID: eventID(evN), UserID: acct(accN), Resource: "llm_tokens", Quantity: 10, CostCents: 7, CreatedAt: 4}
}

func putAccountCmd(a *records.Account) *Command { return &Command{Op: OpPutAccount, Account: a} }

func addCreditsCmd(accN, txN int, amount, now int64) *Command {
	return &Command{Op: OpAddCredits, AccountID: ptr(acct(accN)), Amount: &amount, Time: now, Tx: creditTx(accN, txN, amount)}
}

func processUsageCmd(accN, evN, txN int, amount, now int64) *Command {
	return &Command{Op: OpProcessUsage, Event: usageEvent(accN, evN), Tx: txRec(accN, txN, records.TxUsage, amount), Time: now}
}

func updateBalanceCmd(accN, txN int, delta, now int64) *Command {
	return &Command{Op: OpUpdateBalance, AccountID: ptr(acct(accN)), Amount: &delta, Time: now, Tx: txRec(accN, txN, records.TxAdjustment, delta)}
}

// stored returns tx as the state machine stores it after a balance op.
func stored(tx *records.CreditTransaction, balanceAfter int64, eventID string) *records.CreditTransaction {
	c := *tx
	c.BalanceAfterCents = balanceAfter
	if eventID != "" {
		c.EventID = eventID
	}
	return &c
}

// txWrites are the writes of storing tx: the record and the index entry.
func txWrites(t testing.TB, tx *records.CreditTransaction) []kvw {
	return []kvw{setw(keys.Transaction(tx.TransactionID), enc(t, tx)), setw(keys.TransactionByUser(tx.UserID, tx.TransactionID), nil)}
}

func TestBillingOps(t *testing.T) {
	const near = math.MaxInt64 - 10
	funded := []*Command{putAccountCmd(account(0, 1000, 1500, 500))}
	after := func(balance, credits, usage, at int64) *records.Account {
		a := account(0, balance, credits, usage)
		a.UpdatedAt = at
		return a
	}
	evKey := func(n int) []byte { k, _ := keys.UsageEvent(eventID(n)); return k }
	acc0 := keys.Account(acct(0))

	runOpCases(t, []opCase{
		{name: "put account", cmd: putAccountCmd(account(0, 5, 5, 0)),
			writes: func(t testing.TB) []kvw { return []kvw{setw(acc0, enc(t, account(0, 5, 5, 0)))} }},
		{name: "put account overwrites", setup: funded, cmd: putAccountCmd(account(0, 0, 0, 0)),
			writes: func(t testing.TB) []kvw { return []kvw{setw(acc0, enc(t, account(0, 0, 0, 0)))} }},
		{name: "delete account", setup: append(funded, addCreditsCmd(0, 1, 5, 9)), cmd: &Command{Op: OpDeleteAccount, AccountID: ptr(acct(0))},
			writes: func(t testing.TB) []kvw { return []kvw{delw(acc0)} }}, // transactions stay
		{name: "delete account missing", cmd: &Command{Op: OpDeleteAccount, AccountID: ptr(acct(0))}, err: ErrNotFound},

		{name: "update balance credit", setup: funded, cmd: updateBalanceCmd(0, 1, 250, 60), balance: 1250,
			writes: func(t testing.TB) []kvw {
				return append(txWrites(t, stored(updateBalanceCmd(0, 1, 250, 60).Tx, 1250, "")), setw(acc0, enc(t, after(1250, 1750, 500, 60))))
			}},
		{name: "update balance debit", setup: funded, cmd: updateBalanceCmd(0, 1, -1000, 60), balance: 0,
			writes: func(t testing.TB) []kvw {
				return append(txWrites(t, stored(updateBalanceCmd(0, 1, -1000, 60).Tx, 0, "")), setw(acc0, enc(t, after(0, 1500, 1500, 60))))
			}},
		{name: "update balance insufficient", setup: funded, cmd: updateBalanceCmd(0, 1, -1001, 60),
			err: &InsufficientCreditsError{Balance: 1000, Required: 1001}},
		{name: "update balance missing", cmd: updateBalanceCmd(0, 1, 5, 60), err: ErrNotFound},
		{name: "update balance retry", setup: append(funded, updateBalanceCmd(0, 1, -250, 60), addCreditsCmd(0, 2, 100, 61)),
			cmd: updateBalanceCmd(0, 1, -250, 62), balance: 750},
		{name: "update balance retry with another amount", setup: append(funded, updateBalanceCmd(0, 1, -250, 60)),
			cmd: updateBalanceCmd(0, 1, -251, 61), err: ErrAlreadyExists},
		{name: "update balance under a charge's transaction id", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: updateBalanceCmd(0, 2, -300, 71), err: ErrAlreadyExists},
		{name: "update balance tx id of another account", setup: append(funded, putAccountCmd(account(1, 0, 0, 0)), addCreditsCmd(1, 1, 500, 80)),
			cmd: updateBalanceCmd(0, 1, 500, 81), err: ErrAlreadyExists},
		{name: "update balance overflow", setup: []*Command{putAccountCmd(account(0, near, near, 0))},
			cmd: updateBalanceCmd(0, 1, 11, 60), err: ErrInvalidCommand},
		{name: "update balance lifetime credits overflow", setup: []*Command{putAccountCmd(account(0, 5, near, near-5))},
			cmd: updateBalanceCmd(0, 1, 11, 60), err: ErrInvalidCommand},
		{name: "update balance lifetime usage overflow", setup: []*Command{putAccountCmd(account(0, 100, 0, near))},
			cmd: updateBalanceCmd(0, 1, -100, 60), err: ErrInvalidCommand},

		{name: "put transaction", cmd: &Command{Op: OpPutTransaction, Tx: creditTx(0, 1, 5)},
			writes: func(t testing.TB) []kvw { return txWrites(t, creditTx(0, 1, 5)) }},
		{name: "put transaction replaces one of its account", setup: []*Command{{Op: OpPutTransaction, Tx: creditTx(0, 1, 5)}},
			cmd:    &Command{Op: OpPutTransaction, Tx: creditTx(0, 1, 6)},
			writes: func(t testing.TB) []kvw { return txWrites(t, creditTx(0, 1, 6)) }},
		{name: "put transaction never replaces another account's", setup: []*Command{{Op: OpPutTransaction, Tx: creditTx(0, 1, 5)}},
			cmd: &Command{Op: OpPutTransaction, Tx: creditTx(1, 1, 5)}, err: ErrAlreadyExists},
		{name: "put transaction never replaces another account's charge", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: &Command{Op: OpPutTransaction, Tx: txRec(1, 2, records.TxUsage, 300)}, err: ErrAlreadyExists},
		{name: "put usage event", cmd: &Command{Op: OpPutUsageEvent, Event: usageEvent(0, 1)},
			writes: func(t testing.TB) []kvw { return []kvw{setw(evKey(1), enc(t, usageEvent(0, 1)))} }},

		{name: "process usage", setup: funded, cmd: processUsageCmd(0, 1, 2, 300, 70), balance: 700,
			writes: func(t testing.TB) []kvw {
				return append(txWrites(t, stored(processUsageCmd(0, 1, 2, 300, 70).Tx, 700, eventID(1))),
					setw(acc0, enc(t, after(700, 1500, 800, 70))), setw(evKey(1), enc(t, usageEvent(0, 1))))
			}},
		{name: "process usage exact balance", setup: funded, cmd: processUsageCmd(0, 1, 2, 1000, 70), balance: 0,
			writes: func(t testing.TB) []kvw {
				return append(txWrites(t, stored(processUsageCmd(0, 1, 2, 1000, 70).Tx, 0, eventID(1))),
					setw(acc0, enc(t, after(0, 1500, 1500, 70))), setw(evKey(1), enc(t, usageEvent(0, 1))))
			}},
		{name: "process usage retried with its transaction id", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: processUsageCmd(0, 1, 2, 300, 71), balance: 700},
		{name: "process usage duplicate event", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: processUsageCmd(0, 1, 3, 300, 71), err: &DuplicateEventError{EventID: eventID(1)}},
		{name: "process usage event stored by put_usage_event", setup: append(funded, &Command{Op: OpPutUsageEvent, Event: usageEvent(0, 1)}),
			cmd: processUsageCmd(0, 1, 3, 300, 71), err: &DuplicateEventError{EventID: eventID(1)}},
		{name: "process usage duplicate before missing account", setup: []*Command{{Op: OpPutUsageEvent, Event: usageEvent(0, 1)}},
			cmd: processUsageCmd(0, 1, 3, 300, 71), err: &DuplicateEventError{EventID: eventID(1)}},
		{name: "process usage new event under a recorded transaction id", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: processUsageCmd(0, 3, 2, 300, 71), err: ErrAlreadyExists},
		{name: "process usage new event under another account's transaction id",
			setup: append(funded, putAccountCmd(account(1, 500, 500, 0)), processUsageCmd(1, 1, 2, 300, 70)),
			cmd:   processUsageCmd(0, 3, 2, 300, 71), err: ErrAlreadyExists},
		{name: "process usage under a credit's transaction id", setup: append(funded, addCreditsCmd(0, 2, 500, 70)),
			cmd: processUsageCmd(0, 3, 2, 300, 71), err: ErrAlreadyExists},
		{name: "process usage under an adjustment's transaction id", setup: append(funded, updateBalanceCmd(0, 2, -5, 70)),
			cmd: processUsageCmd(0, 3, 2, 300, 71), err: ErrAlreadyExists},
		{name: "process usage retried with another amount", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: processUsageCmd(0, 1, 2, 301, 71), err: &DuplicateEventError{EventID: eventID(1)}},
		{name: "process usage missing account", cmd: processUsageCmd(0, 1, 2, 300, 70), err: ErrNotFound},
		{name: "process usage insufficient", setup: funded, cmd: processUsageCmd(0, 1, 2, 1001, 70),
			err: &InsufficientCreditsError{Balance: 1000, Required: 1001}},
		{name: "process usage lifetime usage overflow", setup: []*Command{putAccountCmd(account(0, 100, 0, near))},
			cmd: processUsageCmd(0, 1, 2, 100, 70), err: ErrInvalidCommand},

		{name: "add credits", setup: funded, cmd: addCreditsCmd(0, 1, 500, 80), balance: 1500,
			writes: func(t testing.TB) []kvw {
				return append(txWrites(t, stored(creditTx(0, 1, 500), 1500, "")), setw(acc0, enc(t, after(1500, 2000, 500, 80))))
			}},
		{name: "add credits retry", setup: append(funded, addCreditsCmd(0, 1, 500, 80), processUsageCmd(0, 1, 2, 100, 81)),
			cmd: addCreditsCmd(0, 1, 500, 82), balance: 1500},
		{name: "add credits tx id of another account", setup: append(funded, putAccountCmd(account(1, 0, 0, 0)), addCreditsCmd(1, 1, 500, 80)),
			cmd: addCreditsCmd(0, 1, 500, 81), err: ErrAlreadyExists},
		{name: "add credits retry with another amount", setup: append(funded, addCreditsCmd(0, 1, 500, 80)),
			cmd: addCreditsCmd(0, 1, 501, 81), err: ErrAlreadyExists},
		{name: "add credits under a charge's transaction id", setup: append(funded, processUsageCmd(0, 1, 2, 300, 70)),
			cmd: addCreditsCmd(0, 2, 300, 81), err: ErrAlreadyExists},
		{name: "add credits missing account", cmd: addCreditsCmd(0, 1, 500, 80), err: ErrNotFound},
		{name: "add credits balance overflow", setup: []*Command{putAccountCmd(account(0, near, near, 0))},
			cmd: addCreditsCmd(0, 1, 11, 80), err: ErrInvalidCommand},
		{name: "add credits lifetime overflow", setup: []*Command{putAccountCmd(account(0, 0, near, near))},
			cmd: addCreditsCmd(0, 1, 11, 80), err: ErrInvalidCommand},
		{name: "add credits to the limit", setup: []*Command{putAccountCmd(account(0, near, near, 0))},
			cmd: addCreditsCmd(0, 1, 10, 80), balance: math.MaxInt64,
			writes: func(t testing.TB) []kvw {
				a := after(math.MaxInt64, math.MaxInt64, 0, 80)
				return append(txWrites(t, stored(creditTx(0, 1, 10), math.MaxInt64, "")), setw(acc0, enc(t, a)))
			}},
	})
}

// applyAll applies cmds from index first on, in runs of the given size
// (0: one run), and returns the results.
func applyAll(t testing.TB, f *FSM, first uint64, run int, cmds []*Command) []*Result {
	t.Helper()
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		logs[i] = cmdLog(first+uint64(i), mustEncode(t, c))
	}
	if run <= 0 {
		run = len(logs)
	}
	var out []*Result
	for len(logs) > 0 {
		n := min(run, len(logs))
		for _, r := range f.ApplyBatch(logs[:n]) {
			out = append(out, r.(*Result))
		}
		logs = logs[n:]
	}
	return out
}

func getAccount(t testing.TB, f *FSM, n int) *records.Account {
	t.Helper()
	v, err := f.Get(keys.Account(acct(n)))
	if err != nil {
		t.Fatal(err)
	}
	var a records.Account
	if err := records.Decode(v, &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

// TestProcessUsageChargesOnce: an event processed several times, in one run
// and across runs, is charged once.
func TestProcessUsageChargesOnce(t *testing.T) {
	for _, run := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			f := mustOpen(t, testConfig(1, t.TempDir()), nil)
			cmds := []*Command{putAccountCmd(account(0, 1000, 1000, 0))}
			for i := range 5 {
				cmds = append(cmds, processUsageCmd(0, 1, 10+i, 100, int64(10+i)))
			}
			res := applyAll(t, f, 1, run, cmds)
			if res[1].Err != nil || res[1].Balance != 900 {
				t.Fatalf("first charge: %+v", res[1])
			}
			for _, r := range res[2:] {
				checkErr(t, r.Err, &DuplicateEventError{EventID: eventID(1)})
			}
			if a := getAccount(t, f, 0); a.BalanceCents != 900 || a.LifetimeUsageCents != 100 {
				t.Fatalf("account %+v", a)
			}
			if n, _ := f.Count(keys.TablePrefix(keys.TableTransactions), keys.PrefixEnd(keys.TablePrefix(keys.TableTransactions))); n != 1 {
				t.Fatalf("%d transactions, want 1", n)
			}
		})
	}
}

// TestProcessUsageNoOverdraft: of 2N charges against an account funded for
// N, exactly N succeed, whether they arrive in one run, one per run, or in
// random runs.
func TestProcessUsageNoOverdraft(t *testing.T) {
	const n, cost = 50, 37
	for _, run := range []int{0, 1, 7} {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			f := mustOpen(t, testConfig(1, t.TempDir()), nil)
			cmds := []*Command{putAccountCmd(account(0, 0, 0, 0)), addCreditsCmd(0, 0, n*cost, 5)}
			for i := range 2 * n {
				cmds = append(cmds, processUsageCmd(0, i, 1+i, cost, int64(10+i)))
			}
			res := applyAll(t, f, 1, run, cmds)
			ok, short := 0, 0
			for i, r := range res[2:] {
				var ie *InsufficientCreditsError
				switch {
				case r.Err == nil:
					ok++
					if want := int64((n - ok) * cost); r.Balance != want {
						t.Fatalf("charge %d: balance %d, want %d", i, r.Balance, want)
					}
				case errors.As(r.Err, &ie) && ie.Balance == 0 && ie.Required == cost:
					short++
				default:
					t.Fatalf("charge %d: %v", i, r.Err)
				}
			}
			if ok != n || short != n {
				t.Fatalf("%d charges succeeded and %d were short, want %d each", ok, short, n)
			}
			if a := getAccount(t, f, 0); a.BalanceCents != 0 || a.LifetimeUsageCents != n*cost || a.LifetimeCreditsCents != n*cost {
				t.Fatalf("account %+v", a)
			}
		})
	}
}

// TestAddCreditsRetryAppliesOnce: AddCredits retried with the same
// transaction id credits once and reports the balance of the first apply.
func TestAddCreditsRetryAppliesOnce(t *testing.T) {
	for _, run := range []int{0, 1} {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			f := mustOpen(t, testConfig(1, t.TempDir()), nil)
			res := applyAll(t, f, 1, run, []*Command{
				putAccountCmd(account(0, 100, 100, 0)),
				addCreditsCmd(0, 1, 50, 10),
				processUsageCmd(0, 1, 2, 30, 11),
				addCreditsCmd(0, 1, 50, 12), // retry
				addCreditsCmd(0, 1, 50, 13), // retry
			})
			for i, want := range []int64{0, 150, 120, 150, 150} {
				if res[i].Err != nil || res[i].Balance != want {
					t.Fatalf("entry %d: %+v, want balance %d", i+1, res[i], want)
				}
			}
			if a := getAccount(t, f, 0); a.BalanceCents != 120 || a.LifetimeCreditsCents != 150 || a.UpdatedAt != 11 {
				t.Fatalf("account %+v", a)
			}
		})
	}
}

// BenchmarkProcessUsage applies runs of 64 usage charges against 16
// accounts: the billing hot path (decode, validate, three reads, four writes).
func BenchmarkProcessUsage(b *testing.B) {
	f := mustOpen(b, testConfig(1, b.TempDir()), nil)
	var setup []*Command
	for i := range 16 {
		setup = append(setup, putAccountCmd(account(i, 1<<60, 1<<60, 0)))
	}
	applyAll(b, f, 1, 0, setup)
	index := uint64(len(setup))
	const run = 64
	logs := make([]*raft.Log, run)
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		for j := range logs {
			index++
			c := processUsageCmd(j%16, 0, 0, 3, int64(index))
			c.Event.EventID = fmt.Sprintf("evt-%d", index)
			c.Tx.TransactionID = txid(int(index))
			c.Tx.TransactionID[0] = byte(index >> 16)
			logs[j] = cmdLog(index, mustEncode(b, c))
		}
		for _, r := range f.ApplyBatch(logs) {
			if r.(*Result).Err != nil {
				b.Fatal(r.(*Result).Err)
			}
		}
	}
}

// TestTransactionIDReuseNeverLosesACharge is the ledger hole of issue 22:
// a ProcessUsage with a new event but a recorded transaction id replaced
// the earlier charge, so the listing lost it while the balance kept it.
// Now every charge that moved money stays listed with its amount, and
// UpdateBalance, like AddCredits, applies a transaction id once.
func TestTransactionIDReuseNeverLosesACharge(t *testing.T) {
	for _, run := range []int{0, 1} {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			f := mustOpen(t, testConfig(1, t.TempDir()), nil)
			res := applyAll(t, f, 1, run, []*Command{
				putAccountCmd(account(0, 1000, 1000, 0)),
				processUsageCmd(0, 1, 7, 300, 10), // charge, tx 7
				processUsageCmd(0, 2, 7, 50, 11),  // another event, same tx id
				updateBalanceCmd(0, 8, -100, 12),  // adjustment, tx 8
				updateBalanceCmd(0, 8, -100, 13),  // its retry
				addCreditsCmd(0, 7, 300, 14),      // a credit over the charge's id
				updateBalanceCmd(0, 7, 300, 15),   // an adjustment over it
			})
			wantBal := []int64{0, 700, 0, 600, 600, 0, 0}
			for i, r := range res {
				wantErr := i == 2 || i == 5 || i == 6
				if wantErr != (r.Err != nil) || (wantErr && !errors.Is(r.Err, ErrAlreadyExists)) || r.Balance != wantBal[i] {
					t.Fatalf("entry %d: %+v (err %v), want balance %d, AlreadyExists %v", i+1, r, r.Err, wantBal[i], wantErr)
				}
			}
			if a := getAccount(t, f, 0); a.BalanceCents != 600 || a.LifetimeUsageCents != 400 {
				t.Fatalf("account %+v", a)
			}
			prefix := keys.TransactionByUserPrefix(acct(0))
			kvs, err := f.ScanReverse(prefix, keys.PrefixEnd(prefix), 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			var listed int64
			for _, kv := range kvs {
				_, id, err := keys.DecodeTransactionByUser(kv.Key)
				if err != nil {
					t.Fatal(err)
				}
				v, err := f.Get(keys.Transaction(id))
				if err != nil {
					t.Fatal(err)
				}
				var tx records.CreditTransaction
				if err := records.Decode(v, &tx); err != nil {
					t.Fatal(err)
				}
				if tx.TransactionType == records.TxUsage {
					listed += tx.AmountCents
					if tx.EventID != eventID(1) || tx.BalanceAfterCents != 700 {
						t.Errorf("charge %+v, want event 1's with balance after 700", tx)
					}
				} else {
					listed -= tx.AmountCents // the adjustment, negative
				}
			}
			if len(kvs) != 2 || listed != 400 {
				t.Fatalf("%d transactions listed, charging %d cents; want 2 charging 400 (the balance's usage)", len(kvs), listed)
			}
		})
	}
}

// TestBalanceOpsPointReads pins the point reads of the ops that move money
// (docs/performance-log.md, round 11): a charge reads its event, its
// transaction id and its account once each, and nothing more; the id is not
// read again when the transaction is written.
func TestBalanceOpsPointReads(t *testing.T) {
	funded := []*Command{putAccountCmd(account(0, 1000, 1500, 500))}
	charged := append(funded, processUsageCmd(0, 1, 2, 300, 70))
	cases := []struct {
		name    string
		setup   []*Command
		cmd     *Command
		reads   int
		balance int64
		err     error
	}{
		{name: "process usage", setup: funded, cmd: processUsageCmd(0, 1, 2, 300, 70), reads: 3, balance: 700},
		{name: "process usage retried", setup: charged, cmd: processUsageCmd(0, 1, 2, 300, 71), reads: 2, balance: 700},
		{name: "process usage under a recorded transaction id", setup: charged, cmd: processUsageCmd(0, 3, 2, 300, 71), reads: 2, err: ErrAlreadyExists},
		{name: "add credits", setup: funded, cmd: addCreditsCmd(0, 1, 250, 60), reads: 2, balance: 1250},
		{name: "update balance", setup: funded, cmd: updateBalanceCmd(0, 1, -250, 60), reads: 2, balance: 750},
		{name: "put transaction", cmd: &Command{Op: OpPutTransaction, Tx: creditTx(0, 1, 5)}, reads: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := mustOpen(t, testConfig(1, t.TempDir()), nil)
			for i, c := range tc.setup {
				if r := f.Apply(cmdLog(uint64(i+1), mustEncode(t, c))).(*Result); r.Err != nil {
					t.Fatalf("setup %s: %v", c.Op, r.Err)
				}
			}
			b := f.db.NewIndexedBatch()
			defer b.Close()
			ch := &change{b: b}
			c := tc.cmd
			var balance int64
			var err error
			switch c.Op {
			case OpProcessUsage:
				balance, err = ch.processUsage(c.Event, c.Tx, c.Time)
			case OpAddCredits:
				balance, err = ch.addCredits(*c.AccountID, *c.Amount, c.Tx, c.Time)
			case OpUpdateBalance:
				balance, err = ch.updateBalance(*c.AccountID, *c.Amount, c.Tx, c.Time)
			case OpPutTransaction:
				err = ch.putTransaction(c.Tx)
			}
			var rej *rejection
			if errors.As(err, &rej) {
				err = rej.err
			}
			checkErr(t, err, tc.err)
			if balance != tc.balance {
				t.Fatalf("balance %d, want %d", balance, tc.balance)
			}
			if ch.reads != tc.reads {
				t.Fatalf("%d point reads, want %d", ch.reads, tc.reads)
			}
		})
	}
}
