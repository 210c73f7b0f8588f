package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// Billing scenarios of the typed stores; shared helpers are in stores_test.go.

// billingFixture is a billing store on a cluster, with helpers that fail
// the test they are given.
type billingFixture struct {
	ctx context.Context
	b   *client.Billing
	g   *storesIDs
	m   *shard.Map
}

// account creates an account on shard s with balance cents.
func (f *billingFixture) account(t *testing.T, s shard.ID, balance int64) keys.AccountID {
	t.Helper()
	a := &records.Account{UserID: f.g.accountOn(f.m, s), BalanceCents: balance, LifetimeCreditsCents: balance, CreatedAt: storesT0, UpdatedAt: storesT0}
	// PutAccount is not retried by the client on an unknown outcome (a
	// leadership lost under load on a busy machine); this account has no
	// other writer, so sending the same record again is safe here.
	for attempt := 1; ; attempt++ {
		err := f.b.PutAccount(f.ctx, a)
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) || attempt == 5 {
			t.Fatalf("PutAccount: %v", err)
		}
	}
	return a.UserID
}

// putTx stores tx. Like PutAccount, PutTransaction is not retried by the
// client on an unknown outcome (CI saw a leadership lost under load); a
// put of the same record under its own account's id replaces it, so
// sending it again is safe here.
func (f *billingFixture) putTx(t *testing.T, tx *records.CreditTransaction) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := f.b.PutTransaction(f.ctx, tx)
		if err == nil {
			return
		}
		if !errors.Is(err, client.ErrOutcomeUnknown) || attempt == 5 {
			t.Fatalf("PutTransaction: %v", err)
		}
	}
}

func (f *billingFixture) get(t *testing.T, user keys.AccountID) *records.Account {
	t.Helper()
	a, err := f.b.GetAccount(f.ctx, user)
	if err != nil {
		t.Fatalf("GetAccount: %v", err)
	}
	return a
}

func (f *billingFixture) all(t *testing.T, user keys.AccountID) []*records.CreditTransaction {
	t.Helper()
	txs, err := f.b.ListTransactionsByUser(f.ctx, user, 10_000, 0)
	if err != nil {
		t.Fatalf("ListTransactionsByUser: %v", err)
	}
	newestFirst(t, "ListTransactionsByUser", txs)
	return txs
}

func usageOf(user keys.AccountID, eventID string, cost int64) (*records.UsageEvent, *records.CreditTransaction) {
	e := &records.UsageEvent{EventID: eventID, UserID: user, AgentID: "agent-1", Resource: "llm_tokens", Quantity: cost * 10, CostCents: cost, CreatedAt: storesT0}
	t := &records.CreditTransaction{TransactionID: client.NewTransactionID(time.Now()), UserID: user, AmountCents: cost,
		TransactionType: records.TxUsage, Description: "usage " + eventID, EventID: eventID, CreatedAt: storesT0}
	return e, t
}

func purchaseOf(user keys.AccountID, amount int64) *records.CreditTransaction {
	return &records.CreditTransaction{TransactionID: client.NewTransactionID(time.Now()), UserID: user, AmountCents: amount,
		TransactionType: records.TxPurchase, Description: "purchase", CreatedAt: storesT0}
}

// newestFirst fails unless txs are in strictly decreasing id order.
func newestFirst(t *testing.T, what string, txs []*records.CreditTransaction) {
	t.Helper()
	for i := 1; i < len(txs); i++ {
		if bytes.Compare(txs[i-1].TransactionID[:], txs[i].TransactionID[:]) <= 0 {
			t.Errorf("%s: transaction %d is not older than %d", what, i, i-1)
		}
	}
}

func wantInsufficient(t *testing.T, what string, err error, balance, required int64) {
	t.Helper()
	var ic *client.InsufficientCreditsError
	if !errors.As(err, &ic) || ic.Balance != balance || ic.Required != required {
		t.Errorf("%s: got %v, want InsufficientCredits{balance %d, required %d}", what, err, balance, required)
	}
}

func wantDuplicate(t *testing.T, what string, err error, eventID string) {
	t.Helper()
	var de *client.DuplicateEventError
	if !errors.As(err, &de) || de.EventID != eventID {
		t.Errorf("%s: got %v, want DuplicateEvent{%q}", what, err, eventID)
	}
}

// TestStoresBilling runs every method of seed 001's Store trait against a
// 3-node, 8-shard cluster whose pages hold 5 items.
func TestStoresBilling(t *testing.T) {
	tc := newTestCluster(t, 3, 8, storesSmallPages)
	c := tc.client()
	ctx := ctxT(t, 3*time.Minute)
	f := &billingFixture{ctx: ctx, b: c.Billing(), g: newStoresIDs(2), m: c.Map()}
	b, g := f.b, f.g

	t.Run("accounts", func(t *testing.T) {
		a := &records.Account{UserID: g.account(), BalanceCents: 1234, LifetimeCreditsCents: 2000, LifetimeUsageCents: 766, CreatedAt: storesT0, UpdatedAt: storesT0 + 1}
		if err := b.PutAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
		if got := f.get(t, a.UserID); !reflect.DeepEqual(got, a) {
			t.Errorf("GetAccount = %+v, want %+v", got, a)
		}
		a2 := *a
		a2.BalanceCents, a2.UpdatedAt = 7, storesT0+2
		if err := b.PutAccount(ctx, &a2); err != nil {
			t.Fatal(err)
		}
		if got := f.get(t, a.UserID); !reflect.DeepEqual(got, &a2) {
			t.Errorf("GetAccount after replace = %+v, want %+v", got, &a2)
		}
		if err := b.DeleteAccount(ctx, a.UserID); err != nil {
			t.Fatalf("DeleteAccount: %v", err)
		}
		_, err := b.GetAccount(ctx, a.UserID)
		wantErr(t, "GetAccount deleted", err, client.ErrNotFound)
		wantErr(t, "DeleteAccount deleted", b.DeleteAccount(ctx, a.UserID), client.ErrNotFound)
		_, err = b.GetAccount(ctx, g.account(), client.Stale())
		wantErr(t, "stale GetAccount unknown", err, client.ErrNotFound)
	})

	t.Run("update balance", func(t *testing.T) {
		u := f.account(t, 4, 0)
		for _, step := range []struct{ delta, want int64 }{{500, 500}, {-200, 300}} {
			if got, err := b.UpdateBalance(ctx, u, step.delta); err != nil || got != step.want {
				t.Fatalf("UpdateBalance(%d) = %d, %v; want %d", step.delta, got, err, step.want)
			}
		}
		_, err := b.UpdateBalance(ctx, u, -400)
		wantInsufficient(t, "UpdateBalance(-400)", err, 300, 400)
		a := f.get(t, u)
		if a.BalanceCents != 300 || a.LifetimeCreditsCents != 500 || a.LifetimeUsageCents != 200 {
			t.Errorf("account after updates: %+v, want balance 300, lifetime credits 500, usage 200", a)
		}
		txs := f.all(t, u)
		if len(txs) != 2 || txs[0].AmountCents != -200 || txs[0].BalanceAfterCents != 300 ||
			txs[1].AmountCents != 500 || txs[1].BalanceAfterCents != 500 ||
			txs[0].TransactionType != records.TxAdjustment || txs[1].TransactionType != records.TxAdjustment {
			t.Errorf("adjustments: %+v", txs)
		}
		_, err = b.UpdateBalance(ctx, g.account(), 5)
		wantErr(t, "UpdateBalance unknown", err, client.ErrNotFound)
	})

	t.Run("transactions and pages", func(t *testing.T) {
		u, v := f.account(t, 6, 0), f.account(t, 6, 0) // one shard: v's must not show in u's
		var put []*records.CreditTransaction
		for i := range 23 {
			tx := purchaseOf(u, int64(i+1))
			f.putTx(t, tx)
			put = append(put, tx)
		}
		for range 3 {
			f.putTx(t, purchaseOf(v, 1))
		}
		// Replacing a transaction replaces it in place.
		put[4].Description = "replaced"
		f.putTx(t, put[4])
		want := slices.Clone(put)
		slices.Reverse(want)
		if err := sameRecords("all of u", f.all(t, u), want); err != nil {
			t.Error(err)
		}
		if n := len(f.all(t, v)); n != 3 {
			t.Errorf("v has %d transactions, want 3", n)
		}
		n := len(want)
		for _, p := range []struct{ limit, offset int }{{5, 0}, {5, 5}, {5, 20}, {5, 23}, {5, 100}, {0, 0}, {1, 22}, {23, 0}, {7, 3}, {100, 1}} {
			got, err := b.ListTransactionsByUser(ctx, u, p.limit, p.offset)
			if err != nil {
				t.Fatalf("ListTransactionsByUser(%d, %d): %v", p.limit, p.offset, err)
			}
			if err := sameRecords(fmt.Sprintf("limit %d offset %d", p.limit, p.offset), got, want[min(p.offset, n):min(p.offset+p.limit, n)]); err != nil {
				t.Error(err)
			}
		}
		// Cursor pages, read in sequence, equal the offset pages.
		var before *keys.TransactionID
		var walked []*records.CreditTransaction
		for page := 0; ; page++ {
			txs, next, err := b.ListTransactionsPage(ctx, u, before, 5)
			if err != nil {
				t.Fatalf("ListTransactionsPage %d: %v", page, err)
			}
			byOffset, err := b.ListTransactionsByUser(ctx, u, 5, 5*page)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRecords(fmt.Sprintf("cursor page %d", page), txs, byOffset); err != nil {
				t.Error(err)
			}
			walked = append(walked, txs...)
			if next == nil {
				break
			}
			if page > n {
				t.Fatal("cursor pages do not end")
			}
			before = next
		}
		if err := sameRecords("cursor walk", walked, want); err != nil {
			t.Error(err)
		}
		// The server's page size caps a page; more still follow.
		for _, limit := range []int{0, 50} {
			txs, next, err := b.ListTransactionsPage(ctx, u, nil, limit)
			if err != nil || len(txs) != 5 || next == nil || *next != txs[4].TransactionID {
				t.Errorf("ListTransactionsPage(limit %d) = %d items, next %v, %v", limit, len(txs), next, err)
			}
		}
		// Lookups.
		for name, get := range map[string]func() (*records.CreditTransaction, error){
			"GetTransactionOf": func() (*records.CreditTransaction, error) { return b.GetTransactionOf(ctx, u, put[4].TransactionID) },
			"GetTransaction":   func() (*records.CreditTransaction, error) { return b.GetTransaction(ctx, put[4].TransactionID) },
		} {
			if got, err := get(); err != nil || !reflect.DeepEqual(got, put[4]) {
				t.Errorf("%s = %+v, %v", name, got, err)
			}
		}
		_, err := b.GetTransactionOf(ctx, v, put[4].TransactionID)
		wantErr(t, "GetTransactionOf another user", err, client.ErrNotFound)
		_, err = b.GetTransaction(ctx, client.NewTransactionID(time.Now()))
		wantErr(t, "GetTransaction unknown", err, client.ErrNotFound)
	})

	t.Run("usage events", func(t *testing.T) {
		u := f.account(t, 0, 1000)
		e := &records.UsageEvent{EventID: "stored-only", UserID: u, Resource: "cpu_ms", Quantity: 3, CostCents: 9, CreatedAt: storesT0}
		if err := b.PutUsageEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		for name, get := range map[string]func() (*records.UsageEvent, error){
			"GetUsageEventOf": func() (*records.UsageEvent, error) { return b.GetUsageEventOf(ctx, u, e.EventID) },
			"GetUsageEvent":   func() (*records.UsageEvent, error) { return b.GetUsageEvent(ctx, e.EventID) },
		} {
			if got, err := get(); err != nil || !reflect.DeepEqual(got, e) {
				t.Errorf("%s = %+v, %v", name, got, err)
			}
		}
		for name, has := range map[string]func(string) (bool, error){
			"HasUsageEvent":   func(id string) (bool, error) { return b.HasUsageEvent(ctx, id) },
			"HasUsageEventOf": func(id string) (bool, error) { return b.HasUsageEventOf(ctx, u, id) },
		} {
			if ok, err := has(e.EventID); err != nil || !ok {
				t.Errorf("%s(stored) = %t, %v", name, ok, err)
			}
			if ok, err := has("never-seen"); err != nil || ok {
				t.Errorf("%s(unknown) = %t, %v", name, ok, err)
			}
		}
		_, err := b.GetUsageEvent(ctx, "never-seen")
		wantErr(t, "GetUsageEvent unknown", err, client.ErrNotFound)
		_, err = b.GetUsageEventOf(ctx, u, "never-seen")
		wantErr(t, "GetUsageEventOf unknown", err, client.ErrNotFound)
		// A stored event counts as processed.
		_, tx := usageOf(u, e.EventID, 9)
		_, err = b.ProcessUsage(ctx, e, tx)
		wantDuplicate(t, "ProcessUsage of a stored event", err, e.EventID)
		if a := f.get(t, u); a.BalanceCents != 1000 {
			t.Errorf("balance %d, want 1000", a.BalanceCents)
		}
	})

	t.Run("process usage", func(t *testing.T) {
		u := f.account(t, 1, 1000)
		e, tx := usageOf(u, "pu-1", 300)
		if bal, err := b.ProcessUsage(ctx, e, tx); err != nil || bal != 700 {
			t.Fatalf("ProcessUsage = %d, %v; want 700", bal, err)
		}
		stored := *tx
		stored.BalanceAfterCents = 700
		if got, err := b.GetTransaction(ctx, tx.TransactionID); err != nil || !reflect.DeepEqual(got, &stored) {
			t.Errorf("charge = %+v, %v; want %+v", got, err, &stored)
		}
		if got, err := b.GetUsageEvent(ctx, e.EventID); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("event = %+v, %v", got, err)
		}
		if a := f.get(t, u); a.BalanceCents != 700 || a.LifetimeUsageCents != 300 || a.LifetimeCreditsCents != 1000 {
			t.Errorf("account %+v", a)
		}
		// Insufficient credits change nothing.
		e2, tx2 := usageOf(u, "pu-2", 800)
		_, err := b.ProcessUsage(ctx, e2, tx2)
		wantInsufficient(t, "ProcessUsage(800)", err, 700, 800)
		if ok, err := b.HasUsageEvent(ctx, e2.EventID); err != nil || ok {
			t.Errorf("refused event stored: %t, %v", ok, err)
		}
		_, err = b.GetTransaction(ctx, tx2.TransactionID)
		wantErr(t, "refused charge", err, client.ErrNotFound)
		// No account.
		e3, tx3 := usageOf(g.account(), "pu-3", 1)
		_, err = b.ProcessUsage(ctx, e3, tx3)
		wantErr(t, "ProcessUsage without account", err, client.ErrNotFound)
		if ok, err := b.HasUsageEvent(ctx, e3.EventID); err != nil || ok {
			t.Errorf("event without account stored: %t, %v", ok, err)
		}
		// The same event twice is charged once.
		e4, tx4 := usageOf(u, "pu-dup", 100)
		if bal, err := b.ProcessUsage(ctx, e4, tx4); err != nil || bal != 600 {
			t.Fatalf("ProcessUsage = %d, %v; want 600", bal, err)
		}
		// With a new transaction: the seed's DuplicateEvent. With the
		// same one (a retry): the balance the charge recorded.
		_, tx5 := usageOf(u, "pu-dup", 100)
		_, err = b.ProcessUsage(ctx, e4, tx5)
		wantDuplicate(t, "ProcessUsage twice", err, e4.EventID)
		if bal, err := b.ProcessUsage(ctx, e4, tx4); err != nil || bal != 600 {
			t.Errorf("ProcessUsage retried with its transaction = %d, %v; want 600", bal, err)
		}
		if a := f.get(t, u); a.BalanceCents != 600 || a.LifetimeUsageCents != 400 {
			t.Errorf("account after duplicate: %+v", a)
		}
		var usage []string
		for _, x := range f.all(t, u) {
			if x.TransactionType == records.TxUsage {
				usage = append(usage, x.EventID)
			}
		}
		if !slices.Equal(usage, []string{"pu-dup", "pu-1"}) {
			t.Errorf("usage transactions %v, want [pu-dup pu-1]", usage)
		}
	})

	t.Run("transaction id reuse", func(t *testing.T) {
		// A transaction id names one ledger entry: another operation under
		// it is refused with ErrAlreadyExists (issue 22, item 10), and the
		// charge stays listed as the balance recorded it.
		u, v := f.account(t, 2, 1000), f.account(t, 2, 0)
		e, tx := usageOf(u, "reuse-1", 300)
		if bal, err := b.ProcessUsage(ctx, e, tx); err != nil || bal != 700 {
			t.Fatalf("ProcessUsage = %d, %v; want 700", bal, err)
		}
		e2, tx2 := usageOf(u, "reuse-2", 50)
		tx2.TransactionID = tx.TransactionID
		_, err := b.ProcessUsage(ctx, e2, tx2)
		wantErr(t, "ProcessUsage of a new event under a used transaction id", err, client.ErrAlreadyExists)
		cr := purchaseOf(u, 300)
		cr.TransactionID = tx.TransactionID
		_, err = b.AddCredits(ctx, u, 300, cr)
		wantErr(t, "AddCredits under a charge's transaction id", err, client.ErrAlreadyExists)
		other := purchaseOf(v, 5)
		other.TransactionID = tx.TransactionID
		wantErr(t, "PutTransaction of another account under a used id", b.PutTransaction(ctx, other), client.ErrAlreadyExists)
		if ok, err := b.HasUsageEvent(ctx, e2.EventID); err != nil || ok {
			t.Errorf("refused event stored: %t, %v", ok, err)
		}
		stored := *tx
		stored.BalanceAfterCents = 700
		if err := sameRecords("u's transactions", f.all(t, u), []*records.CreditTransaction{&stored}); err != nil {
			t.Error(err)
		}
		if n := len(f.all(t, v)); n != 0 {
			t.Errorf("v has %d transactions, want 0", n)
		}
		if a := f.get(t, u); a.BalanceCents != 700 || a.LifetimeUsageCents != 300 {
			t.Errorf("account %+v", a)
		}
	})

	t.Run("add credits", func(t *testing.T) {
		u := f.account(t, 7, 100)
		tx := purchaseOf(u, 250)
		for i := range 2 {
			if bal, err := b.AddCredits(ctx, u, 250, tx); err != nil || bal != 350 {
				t.Errorf("AddCredits #%d = %d, %v; want 350", i+1, bal, err)
			}
		}
		if a := f.get(t, u); a.BalanceCents != 350 || a.LifetimeCreditsCents != 350 {
			t.Errorf("account %+v, want balance 350, lifetime credits 350", a)
		}
		stored := *tx
		stored.BalanceAfterCents = 350
		if err := sameRecords("credits", f.all(t, u), []*records.CreditTransaction{&stored}); err != nil {
			t.Error(err)
		}
		other := g.account()
		_, err := b.AddCredits(ctx, other, 5, purchaseOf(other, 5))
		wantErr(t, "AddCredits without account", err, client.ErrNotFound)
	})

	t.Run("fan-out lookups", func(t *testing.T) {
		for s := range shard.ID(8) {
			u := f.account(t, s, 10)
			e, tx := usageOf(u, fmt.Sprintf("fan-%d", s), 1)
			if _, err := b.ProcessUsage(ctx, e, tx); err != nil {
				t.Fatal(err)
			}
			if got, err := b.GetTransaction(ctx, tx.TransactionID); err != nil || got.UserID != u || got.EventID != e.EventID {
				t.Errorf("GetTransaction on shard %d = %+v, %v", s, got, err)
			}
			if ok, err := b.HasUsageEvent(ctx, e.EventID); err != nil || !ok {
				t.Errorf("HasUsageEvent on shard %d = %t, %v", s, ok, err)
			}
			if got, err := b.GetUsageEvent(ctx, e.EventID); err != nil || !reflect.DeepEqual(got, e) {
				t.Errorf("GetUsageEvent on shard %d = %+v, %v", s, got, err)
			}
		}
		if ok, err := b.HasUsageEvent(ctx, "fan-none", client.Stale()); err != nil || ok {
			t.Errorf("HasUsageEvent unknown = %t, %v", ok, err)
		}
	})

	t.Run("concurrent usage", func(t *testing.T) {
		storesConcurrentUsage(t, tc, f)
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		storesBillingBadInput(t, c, f)
	})
}

// storesConcurrentUsage: 200 concurrent ProcessUsage calls on one account
// funded for exactly 100 of them: exactly 100 are charged, 100 are refused
// with InsufficientCredits, the balance ends at 0, and the 100 charges are
// listed newest first.
func storesConcurrentUsage(t *testing.T, tc *testCluster, f *billingFixture) {
	const n, cost = 200, 7
	u := f.account(t, 5, (n/2)*cost)
	// A client with a long attempt timeout, so that a slow attempt under
	// -race is not abandoned and retried (a retry of an applied attempt
	// answers DuplicateEvent, which the test counts but does not expect).
	var eps []string
	for _, nd := range tc.nodes {
		eps = append(eps, nd.Addrs().GRPCAddr)
	}
	c, err := client.New(f.ctx, client.Config{Endpoints: eps, AttemptTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := c.Billing()
	events := make([]*records.UsageEvent, n)
	txs := make([]*records.CreditTransaction, n)
	for i := range n {
		events[i], txs[i] = usageOf(u, fmt.Sprintf("conc-%03d", i), cost)
	}
	balances, errs := make([]int64, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { balances[i], errs[i] = b.ProcessUsage(f.ctx, events[i], txs[i]) })
	}
	wg.Wait()
	charged := map[string]bool{}
	var after []int64
	var refused, dup int
	for i, err := range errs {
		var ic *client.InsufficientCreditsError
		var de *client.DuplicateEventError
		switch {
		case err == nil:
			charged[events[i].EventID] = true
			after = append(after, balances[i])
		case errors.As(err, &ic):
			refused++
			if ic.Balance != 0 || ic.Required != cost {
				t.Errorf("event %d refused with %+v, want balance 0, required %d", i, *ic, cost)
			}
		case errors.As(err, &de):
			// An earlier attempt of this call applied.
			dup++
			charged[events[i].EventID] = true
		default:
			t.Errorf("event %d: %v", i, err)
		}
	}
	if dup > 0 {
		t.Logf("%d calls answered DuplicateEvent after a retry", dup)
	}
	if len(charged) != n/2 || refused != n/2 {
		t.Errorf("%d charged, %d refused; want %d and %d", len(charged), refused, n/2, n/2)
	}
	// The balances returned are distinct: each charge saw the one before.
	slices.Sort(after)
	if len(slices.Compact(after)) != len(after) {
		t.Errorf("two charges returned the same balance: %v", after)
	}
	if a := f.get(t, u); a.BalanceCents != 0 || a.LifetimeUsageCents != (n/2)*cost {
		t.Errorf("account %+v, want balance 0, lifetime usage %d", a, (n/2)*cost)
	}
	list := f.all(t, u)
	if len(list) != n/2 {
		t.Fatalf("%d transactions listed, want %d", len(list), n/2)
	}
	seenAfter := map[int64]bool{}
	for _, x := range list {
		if x.TransactionType != records.TxUsage || !charged[x.EventID] || x.AmountCents != cost {
			t.Errorf("listed %+v", x)
		}
		seenAfter[x.BalanceAfterCents] = true
	}
	for k := range int64(n / 2) {
		if !seenAfter[k*cost] {
			t.Errorf("no charge left the balance at %d", k*cost)
		}
	}
	for i, e := range events {
		if ok, err := f.b.HasUsageEventOf(f.ctx, u, e.EventID); err != nil || ok != charged[e.EventID] {
			t.Errorf("HasUsageEventOf(event %d) = %t, %v; charged %t", i, ok, err, charged[e.EventID])
		}
	}
}

// storesBillingBadInput: invalid arguments, refused by the typed store or
// (for what it cannot express) by the server, change nothing.
func storesBillingBadInput(t *testing.T, c *client.Client, f *billingFixture) {
	ctx, b := f.ctx, f.b
	u := f.account(t, 3, 500)
	other := f.g.accountOn(f.m, 3)
	before := f.all(t, u)
	e, tx := usageOf(u, "bad-1", 10)
	_, foreignTx := usageOf(other, "bad-1", 10)
	badTx := func(mut func(*records.CreditTransaction)) *records.CreditTransaction { x := *tx; mut(&x); return &x }
	badEvent := func(mut func(*records.UsageEvent)) *records.UsageEvent { x := *e; mut(&x); return &x }
	typed := map[string]error{
		"nil account":      b.PutAccount(ctx, nil),
		"negative balance": b.PutAccount(ctx, &records.Account{UserID: u, BalanceCents: -1}),
		"zero amount":      b.PutTransaction(ctx, badTx(func(x *records.CreditTransaction) { x.AmountCents = 0 })),
		"type 9":           b.PutTransaction(ctx, badTx(func(x *records.CreditTransaction) { x.TransactionType = 9 })),
		"empty event id":   b.PutUsageEvent(ctx, badEvent(func(x *records.UsageEvent) { x.EventID = "" })),
	}
	typed["update by 0"] = errOf(b.UpdateBalance(ctx, u, 0))
	typed["usage tx of another user"] = errOf(b.ProcessUsage(ctx, e, foreignTx))
	typed["negative cost"] = errOf(b.ProcessUsage(ctx, badEvent(func(x *records.UsageEvent) { x.CostCents = -1 }), tx))
	typed["event id 257 bytes"] = errOf(b.ProcessUsage(ctx, badEvent(func(x *records.UsageEvent) { x.EventID = strings.Repeat("e", 257) }), tx))
	typed["credits 0"] = errOf(b.AddCredits(ctx, u, 0, purchaseOf(u, 1)))
	typed["credits tx of another user"] = errOf(b.AddCredits(ctx, u, 5, purchaseOf(other, 5)))
	typed["limit -1"] = errOf(b.ListTransactionsByUser(ctx, u, -1, 0))
	typed["offset -1"] = errOf(b.ListTransactionsByUser(ctx, u, 1, -1))
	typed["has empty event"] = errOf(b.HasUsageEvent(ctx, ""))
	typed["get long event"] = errOf(b.GetUsageEvent(ctx, strings.Repeat("e", 257)))
	for name, err := range typed {
		wantErr(t, name, err, client.ErrInvalidArgument)
	}
	acct := u[:]
	raw := map[string]func(context.Context, rpc.BillingClient) error{
		"account user_id 15 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.PutAccount(ctx, &rpc.PutAccountRequest{Account: &rpc.Account{UserId: acct[:15]}})
			return err
		},
		"update user_id 17 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.UpdateBalance(ctx, &rpc.UpdateBalanceRequest{UserId: append(slices.Clone(acct), 0), DeltaCents: 5})
			return err
		},
		"update transaction_id 3 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.UpdateBalance(ctx, &rpc.UpdateBalanceRequest{UserId: acct, DeltaCents: 5, TransactionId: []byte{1, 2, 3}})
			return err
		},
		"update by 0": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.UpdateBalance(ctx, &rpc.UpdateBalanceRequest{UserId: acct})
			return err
		},
		"transaction type 9": func(ctx context.Context, bc rpc.BillingClient) error {
			p := rpc.TransactionToProto(tx)
			p.TransactionType = 9
			_, err := bc.PutTransaction(ctx, &rpc.PutTransactionRequest{Transaction: p})
			return err
		},
		"usage without transaction": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ProcessUsage(ctx, &rpc.ProcessUsageRequest{Event: rpc.UsageEventToProto(e)})
			return err
		},
		"usage tx of another user": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ProcessUsage(ctx, &rpc.ProcessUsageRequest{Event: rpc.UsageEventToProto(e), Transaction: rpc.TransactionToProto(foreignTx)})
			return err
		},
		"credits without transaction": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.AddCredits(ctx, &rpc.AddCreditsRequest{UserId: acct, AmountCents: 5})
			return err
		},
		"credits user_id empty": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.AddCredits(ctx, &rpc.AddCreditsRequest{AmountCents: 5, Transaction: rpc.TransactionToProto(purchaseOf(u, 5))})
			return err
		},
		"list before 5 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ListTransactionsByUser(ctx, &rpc.ListTransactionsRequest{UserId: acct, Before: []byte{1, 2, 3, 4, 5}})
			return err
		},
		"list offset and before": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.ListTransactionsByUser(ctx, &rpc.ListTransactionsRequest{UserId: acct, Offset: 1, Before: tx.TransactionID[:]})
			return err
		},
		"get transaction_id 17 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.GetTransaction(ctx, &rpc.TransactionRef{Target: &rpc.Target{UserId: acct}, TransactionId: make([]byte, 17)})
			return err
		},
		"has empty event id": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.HasUsageEvent(ctx, &rpc.UsageEventRef{Target: &rpc.Target{UserId: acct}})
			return err
		},
		"target user_id 32 bytes": func(ctx context.Context, bc rpc.BillingClient) error {
			_, err := bc.GetUsageEvent(ctx, &rpc.UsageEventRef{Target: &rpc.Target{UserId: make([]byte, 32)}, EventId: "x"})
			return err
		},
	}
	id := c.ShardOf(acct)
	for name, call := range raw {
		err := c.CallShard(ctx, id, client.CallOptions{}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			return call(ctx, rpc.NewBillingClient(cc))
		})
		wantErr(t, "raw "+name, err, client.ErrInvalidArgument)
	}
	if a := f.get(t, u); a.BalanceCents != 500 {
		t.Errorf("balance %d after bad input, want 500", a.BalanceCents)
	}
	if err := sameRecords("transactions after bad input", f.all(t, u), before); err != nil {
		t.Error(err)
	}
	if ok, err := b.HasUsageEvent(ctx, e.EventID); err != nil || ok {
		t.Errorf("bad input stored event %q: %t, %v", e.EventID, ok, err)
	}
	_, err := b.GetAccount(ctx, other)
	wantErr(t, "account of other after bad input", err, client.ErrNotFound)
}

// TestStoresBillingLeaderChange: a usage event processed before the leader
// of its account's shard stops, and sent again after, is charged once; so
// is a credit transaction added twice around the change.
func TestStoresBillingLeaderChange(t *testing.T) {
	tc := newTestCluster(t, 3, 8, nil)
	c := tc.client()
	ctx := ctxT(t, 2*time.Minute)
	f := &billingFixture{ctx: ctx, b: c.Billing(), g: newStoresIDs(3), m: c.Map()}
	b := f.b
	const sh = shard.ID(2)
	u := f.account(t, sh, 0)
	credit := purchaseOf(u, 1000)
	if bal, err := b.AddCredits(ctx, u, 1000, credit); err != nil || bal != 1000 {
		t.Fatalf("AddCredits = %d, %v", bal, err)
	}
	e, first := usageOf(u, "leader-change", 150)
	if bal, err := b.ProcessUsage(ctx, e, first); err != nil || bal != 850 {
		t.Fatalf("ProcessUsage = %d, %v; want 850", bal, err)
	}
	victim := tc.leaderOf(sh)
	if victim < 0 {
		t.Fatalf("no leader of shard %d", sh)
	}
	tc.stop(victim)
	// Another charge of the same event is the seed's DuplicateEvent; a
	// retry of the original charge (same transaction id) answers as the
	// original did. Neither charges again.
	_, second := usageOf(u, "leader-change", 150)
	_, err := b.ProcessUsage(ctx, e, second)
	wantDuplicate(t, "ProcessUsage of the event with a new transaction after the leader change", err, e.EventID)
	if bal, err := b.ProcessUsage(ctx, e, first); err != nil || bal != 850 {
		t.Errorf("ProcessUsage retried with its transaction after the leader change = %d, %v; want 850", bal, err)
	}
	// A repeat answers as the original did: the balance right after it.
	if bal, err := b.AddCredits(ctx, u, 1000, credit); err != nil || bal != 1000 {
		t.Errorf("AddCredits again after the leader change = %d, %v; want 1000", bal, err)
	}
	waitFor(t, 20*time.Second, "a new leader", func() error {
		if l := tc.currentLeaderOf(sh); l < 0 || l == victim {
			return fmt.Errorf("leader of shard %d: node %d", sh, l)
		}
		return nil
	})
	if a := f.get(t, u); a.BalanceCents != 850 || a.LifetimeUsageCents != 150 || a.LifetimeCreditsCents != 1000 {
		t.Errorf("account %+v, want balance 850, usage 150, credits 1000", a)
	}
	var ids []keys.TransactionID
	for _, x := range f.all(t, u) {
		ids = append(ids, x.TransactionID)
	}
	if !slices.Equal(ids, []keys.TransactionID{first.TransactionID, credit.TransactionID}) {
		t.Errorf("transactions %x, want the charge and the credit once each", ids)
	}
	// A new event is charged by the new leader.
	e2, tx2 := usageOf(u, "after-change", 50)
	if bal, err := b.ProcessUsage(ctx, e2, tx2); err != nil || bal != 800 {
		t.Errorf("ProcessUsage after the change = %d, %v; want 800", bal, err)
	}
}

// TestStoresNewTransactionID: ids carry their time, and strictly increase
// within the process even when the clock stands still or goes back, also
// across goroutines.
func TestStoresNewTransactionID(t *testing.T) {
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	id := client.NewTransactionID(future)
	if got := ulid.ULID(id).Time(); got != ulid.Timestamp(future) {
		t.Errorf("id time %d, want %d", got, ulid.Timestamp(future))
	}
	prev := id
	for i := range 5000 {
		now := future
		switch i % 3 {
		case 1:
			now = future.Add(-time.Hour) // the clock went back
		case 2:
			now = time.Unix(-5, 0) // before the epoch
		}
		id := client.NewTransactionID(now)
		if bytes.Compare(id[:], prev[:]) <= 0 {
			t.Fatalf("id %d (%v) is not after the previous one", i, now)
		}
		prev = id
	}
	const workers, each = 8, 500
	got := make([][]keys.TransactionID, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				got[w] = append(got[w], client.NewTransactionID(time.Now()))
			}
		})
	}
	wg.Wait()
	seen := map[keys.TransactionID]bool{}
	for _, ids := range got {
		for i, id := range ids {
			if seen[id] || (i > 0 && bytes.Compare(id[:], ids[i-1][:]) <= 0) {
				t.Fatalf("ids of one goroutine do not strictly increase, or repeat")
			}
			seen[id] = true
		}
	}
}
