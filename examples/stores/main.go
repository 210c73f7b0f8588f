// Command stores is a tour of swarmkv's typed stores: it calls every method
// of the agent registry (c.Registry(), seed 000) and of the billing ledger
// (c.Billing(), seed 001) against a running cluster, prints one line per
// call, and checks each result against the seeds' semantics. Then it fires
// 200 concurrent charges at an account funded for exactly 100 of them, and
// retries one usage event 5 times concurrently. It exits 1 on the first
// mismatch and prints "all checks passed" when everything held.
//
//	go run ./examples/stores --endpoints 127.0.0.1:7100
//
// Every id is fresh (crypto/rand), so the program can run any number of
// times against the same cluster; it leaves its records behind.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// timeout bounds connecting and each part of the tour.
var timeout time.Duration

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7100", "comma-separated gRPC addresses of one or more nodes")
	flag.DurationVar(&timeout, "timeout", 30*time.Second, "deadline of connecting and of each part of the tour (registry, billing, burst, idempotency)")
	flag.Parse()

	var eps []string
	for _, e := range strings.Split(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	ctx, cancel := callCtx()
	c, err := client.New(ctx, client.Config{Endpoints: eps})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "stores: connect to %v: %v\n", eps, err)
		os.Exit(2)
	}
	defer c.Close()
	fmt.Printf("connected to %v: %d shards\n", eps, c.Map().NumShards)

	registryTour(c.Registry())
	billingTour(c.Billing())
	burst(c.Billing())
	idempotency(c.Billing())

	fmt.Println("all checks passed")
}

// ---------------------------------------------------------------- helpers

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), timeout)
}

// fail reports a mismatch and exits non-zero.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "CHECK FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func check(ok bool, format string, args ...any) {
	if !ok {
		fail(format, args...)
	}
}

// must fails on any error of call what.
func must(err error, what string) {
	if err != nil {
		fail("%s: unexpected error: %v", what, err)
	}
}

// wantNotFound checks that call what answered client.ErrNotFound.
func wantNotFound(err error, what string) {
	if !errors.Is(err, client.ErrNotFound) {
		fail("%s: want client.ErrNotFound, got %v", what, err)
	}
}

func same(got, want any, what string) {
	if !reflect.DeepEqual(got, want) {
		fail("%s: record differs\n  got:  %+v\n  want: %+v", what, got, want)
	}
}

// show prints one line: the call and its result.
func show(call, format string, args ...any) {
	fmt.Printf("  %-36s %s\n", call, fmt.Sprintf(format, args...))
}

func section(title string) { fmt.Printf("\n== %s\n", title) }

func short(b []byte) string { return hex.EncodeToString(b[:4]) }

func newUser() (u keys.UserID)       { rand.Read(u[:]); return }
func newAgent() (a keys.AgentID)     { rand.Read(a[:]); return }
func newSession() (s keys.SessionID) { rand.Read(s[:]); return }
func newAccount() (a keys.AccountID) { rand.Read(a[:]); return }
func newEventID(tag string) string   { return "ex-" + tag + "-" + rand.Text() }

func agentIDs(as []*records.AgentRecord) []keys.AgentID {
	out := make([]keys.AgentID, len(as))
	for i, a := range as {
		out[i] = a.AgentID
	}
	return out
}

func txIDs(ts []*records.CreditTransaction) []keys.TransactionID {
	out := make([]keys.TransactionID, len(ts))
	for i, t := range ts {
		out[i] = t.TransactionID
	}
	return out
}

// agentsOrdered checks the registry's listing order: user id, then agent id.
func agentsOrdered(as []*records.AgentRecord) bool {
	return slices.IsSortedFunc(as, func(a, b *records.AgentRecord) int {
		if c := bytes.Compare(a.UserID[:], b.UserID[:]); c != 0 {
			return c
		}
		return bytes.Compare(a.AgentID[:], b.AgentID[:])
	})
}

// newestFirst checks that transaction ids (ULIDs, time-ordered) strictly
// decrease.
func newestFirst(ts []*records.CreditTransaction) bool {
	for i := 1; i < len(ts); i++ {
		if bytes.Compare(ts[i-1].TransactionID[:], ts[i].TransactionID[:]) <= 0 {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------- registry

func registryTour(reg *client.Registry) {
	section("registry (seed 000)")
	uid := newUser()
	now := time.Now().UnixMilli()
	hb := now
	scout := &records.AgentRecord{AgentID: newAgent(), UserID: uid, Name: "scout", Status: records.AgentRunning,
		Spec:      records.AgentSpecRecord{CPUMillicores: 500, MemoryMB: 512, RuntimeVersion: "py3.12"},
		CreatedAt: now - 60_000, UpdatedAt: now - 60_000, LastHeartbeatAt: &hb}
	miner := &records.AgentRecord{AgentID: newAgent(), UserID: uid, Name: "miner", Status: records.AgentPending,
		Spec:      records.AgentSpecRecord{CPUMillicores: 2000, MemoryMB: 4096, RuntimeVersion: "go1.26"},
		CreatedAt: now - 60_000, UpdatedAt: now - 60_000}
	fmt.Printf("  user %s, agents scout %s and miner %s\n", short(uid[:]), short(scout.AgentID[:]), short(miner.AgentID[:]))

	ctx, cancel := callCtx()
	defer cancel()
	for _, a := range []*records.AgentRecord{scout, miner} {
		must(reg.PutAgent(ctx, a), "PutAgent "+a.Name)
		show("PutAgent", "%s %s (%s) -> ok", a.Name, short(a.AgentID[:]), a.Status)
	}

	got, err := reg.GetAgentOf(ctx, uid, scout.AgentID)
	must(err, "GetAgentOf scout")
	same(got, scout, "GetAgentOf scout")
	show("GetAgentOf(user, scout)", "%s, %s, %d mCPU -> matches what was put", got.Name, got.Status, got.Spec.CPUMillicores)

	got, err = reg.GetAgent(ctx, miner.AgentID)
	must(err, "GetAgent miner")
	same(got, miner, "GetAgent miner")
	show("GetAgent(miner)", "%s of user %s, %s -> matches (found by id alone)", got.Name, short(got.UserID[:]), got.Status)

	_, err = reg.GetAgent(ctx, newAgent())
	wantNotFound(err, "GetAgent of an unknown id")
	show("GetAgent(unknown id)", "ErrNotFound")

	list, err := reg.ListAgentsByUser(ctx, uid)
	must(err, "ListAgentsByUser")
	want := []keys.AgentID{scout.AgentID, miner.AgentID}
	slices.SortFunc(want, func(a, b keys.AgentID) int { return bytes.Compare(a[:], b[:]) })
	check(slices.Equal(agentIDs(list), want), "ListAgentsByUser: got %d agents %x, want both, ordered by agent id %x", len(list), agentIDs(list), want)
	show("ListAgentsByUser(user)", "%d agents, ordered by agent id", len(list))

	n, err := reg.CountAgentsByUser(ctx, uid)
	must(err, "CountAgentsByUser")
	check(n == 2, "CountAgentsByUser: got %d, want 2", n)
	show("CountAgentsByUser(user)", "%d", n)

	statusHas := func(s records.AgentState, id keys.AgentID) bool {
		as, err := reg.ListAgentsByStatus(ctx, s)
		must(err, "ListAgentsByStatus "+s.String())
		check(agentsOrdered(as), "ListAgentsByStatus %s: not ordered by user id, agent id", s)
		for _, a := range as {
			check(a.Status == s, "ListAgentsByStatus %s: agent %x has status %s", s, a.AgentID[:4], a.Status)
		}
		return slices.Contains(agentIDs(as), id)
	}
	check(statusHas(records.AgentRunning, scout.AgentID), "ListAgentsByStatus(running) lacks scout")
	check(!statusHas(records.AgentRunning, miner.AgentID), "ListAgentsByStatus(running) lists pending miner")
	check(statusHas(records.AgentPending, miner.AgentID), "ListAgentsByStatus(pending) lacks miner")
	show("ListAgentsByStatus(running/pending)", "scout running, miner pending")

	must(reg.UpdateAgentStatus(ctx, miner.AgentID, records.AgentRunning), "UpdateAgentStatus miner running")
	show("UpdateAgentStatus(miner, running)", "ok")
	got, err = reg.GetAgentOf(ctx, uid, miner.AgentID)
	must(err, "GetAgentOf miner after UpdateAgentStatus")
	check(got.Status == records.AgentRunning, "miner after UpdateAgentStatus: status %s, want running", got.Status)
	check(got.UpdatedAt != miner.UpdatedAt, "miner after UpdateAgentStatus: updated_at not stamped (%d)", got.UpdatedAt)
	check(got.Name == miner.Name && got.CreatedAt == miner.CreatedAt && got.Spec == miner.Spec, "miner after UpdateAgentStatus: other fields changed: %+v", got)
	show("GetAgentOf(user, miner)", "%s, updated_at %d (was %d)", got.Status, got.UpdatedAt, miner.UpdatedAt)
	check(statusHas(records.AgentRunning, miner.AgentID), "ListAgentsByStatus(running) lacks miner after UpdateAgentStatus")
	check(!statusHas(records.AgentPending, miner.AgentID), "ListAgentsByStatus(pending) still lists miner after UpdateAgentStatus")
	show("ListAgentsByStatus(running/pending)", "miner moved from pending to running")

	all, err := reg.ListAllAgents(ctx)
	must(err, "ListAllAgents")
	check(agentsOrdered(all), "ListAllAgents: not ordered by user id, agent id")
	ids := agentIDs(all)
	check(slices.Contains(ids, scout.AgentID) && slices.Contains(ids, miner.AgentID), "ListAllAgents lacks our agents")
	show("ListAllAgents()", "%d agents cluster-wide, ours included, ordered", len(all))

	// Sessions.
	s1 := &records.SessionRecord{SessionID: newSession(), AgentID: scout.AgentID, UserID: uid, Status: records.SessionActive, CreatedAt: now}
	s2 := &records.SessionRecord{SessionID: newSession(), AgentID: scout.AgentID, UserID: uid, Status: records.SessionActive, CreatedAt: now + 1}
	for _, s := range []*records.SessionRecord{s1, s2} {
		must(reg.PutSession(ctx, s), "PutSession")
		show("PutSession", "%s on scout (%s) -> ok", short(s.SessionID[:]), s.Status)
	}
	gs, err := reg.GetSession(ctx, s1.SessionID)
	must(err, "GetSession")
	same(gs, s1, "GetSession")
	show("GetSession(s1)", "%s, agent %s -> matches", gs.Status, short(gs.AgentID[:]))

	must(reg.UpdateSessionStatus(ctx, s1.SessionID, records.SessionClosed), "UpdateSessionStatus s1 closed")
	show("UpdateSessionStatus(s1, closed)", "ok")
	gs, err = reg.GetSession(ctx, s1.SessionID)
	must(err, "GetSession after UpdateSessionStatus")
	check(gs.Status == records.SessionClosed && gs.ClosedAt != nil, "s1 after close: status %s, closed_at %v; want closed with closed_at", gs.Status, gs.ClosedAt)
	show("GetSession(s1)", "%s, closed_at %d", gs.Status, *gs.ClosedAt)

	err = reg.UpdateSessionStatus(ctx, newSession(), records.SessionClosed)
	wantNotFound(err, "UpdateSessionStatus of an unknown session")
	show("UpdateSessionStatus(unknown)", "ErrNotFound")

	ss, err := reg.ListSessionsByAgent(ctx, scout.AgentID)
	must(err, "ListSessionsByAgent")
	wantS := []keys.SessionID{s1.SessionID, s2.SessionID}
	slices.SortFunc(wantS, func(a, b keys.SessionID) int { return bytes.Compare(a[:], b[:]) })
	gotS := make([]keys.SessionID, len(ss))
	for i, s := range ss {
		gotS[i] = s.SessionID
		if s.SessionID == s1.SessionID {
			check(s.Status == records.SessionClosed, "ListSessionsByAgent: s1 status %s, want closed", s.Status)
		}
	}
	check(slices.Equal(gotS, wantS), "ListSessionsByAgent(scout): got %x, want %x (by session id)", gotS, wantS)
	show("ListSessionsByAgent(scout)", "%d sessions, ordered by session id", len(ss))

	ss, err = reg.ListSessionsByAgent(ctx, miner.AgentID)
	must(err, "ListSessionsByAgent miner")
	check(len(ss) == 0, "ListSessionsByAgent(miner): got %d sessions, want 0", len(ss))
	show("ListSessionsByAgent(miner)", "0 sessions")

	// Users.
	u := &records.UserRecord{UserID: uid, Email: "ada@example.com", CreatedAt: now, LastSeenAt: now}
	must(reg.PutUser(ctx, u), "PutUser")
	show("PutUser", "%s %s -> ok", short(uid[:]), u.Email)
	gu, err := reg.GetUser(ctx, uid)
	must(err, "GetUser")
	same(gu, u, "GetUser")
	show("GetUser(user)", "%s -> matches", gu.Email)
	_, err = reg.GetUser(ctx, newUser())
	wantNotFound(err, "GetUser of an unknown user")
	show("GetUser(unknown)", "ErrNotFound")

	// Delete.
	must(reg.DeleteAgent(ctx, miner.AgentID), "DeleteAgent miner")
	show("DeleteAgent(miner)", "ok")
	_, err = reg.GetAgent(ctx, miner.AgentID)
	wantNotFound(err, "GetAgent after DeleteAgent")
	show("GetAgent(miner)", "ErrNotFound")
	_, err = reg.GetAgentOf(ctx, uid, miner.AgentID)
	wantNotFound(err, "GetAgentOf after DeleteAgent")
	show("GetAgentOf(user, miner)", "ErrNotFound")
	n, err = reg.CountAgentsByUser(ctx, uid)
	must(err, "CountAgentsByUser after DeleteAgent")
	check(n == 1, "CountAgentsByUser after DeleteAgent: got %d, want 1", n)
	show("CountAgentsByUser(user)", "%d", n)
	list, err = reg.ListAgentsByUser(ctx, uid)
	must(err, "ListAgentsByUser after DeleteAgent")
	check(slices.Equal(agentIDs(list), []keys.AgentID{scout.AgentID}), "ListAgentsByUser after DeleteAgent: got %x, want scout only", agentIDs(list))
	show("ListAgentsByUser(user)", "scout only")
	check(!statusHas(records.AgentRunning, miner.AgentID), "ListAgentsByStatus(running) still lists deleted miner")
	show("ListAgentsByStatus(running)", "miner gone from the status index")
	all, err = reg.ListAllAgents(ctx)
	must(err, "ListAllAgents after DeleteAgent")
	check(!slices.Contains(agentIDs(all), miner.AgentID), "ListAllAgents still lists deleted miner")
	show("ListAllAgents()", "miner gone")
	wantNotFound(reg.DeleteAgent(ctx, miner.AgentID), "second DeleteAgent")
	show("DeleteAgent(miner) again", "ErrNotFound")
	wantNotFound(reg.UpdateAgentStatus(ctx, miner.AgentID, records.AgentStopped), "UpdateAgentStatus of a deleted agent")
	show("UpdateAgentStatus(miner, stopped)", "ErrNotFound")
}

// ---------------------------------------------------------------- billing

func usage(acct keys.AccountID, eventID string, cost int64) (*records.UsageEvent, *records.CreditTransaction) {
	now := time.Now()
	e := &records.UsageEvent{EventID: eventID, UserID: acct, AgentID: "scout", Resource: "llm_tokens",
		Quantity: cost * 100, CostCents: cost, CreatedAt: now.UnixMilli()}
	t := &records.CreditTransaction{TransactionID: client.NewTransactionID(now), UserID: acct, AmountCents: cost,
		TransactionType: records.TxUsage, Description: "usage " + eventID, EventID: eventID, CreatedAt: now.UnixMilli()}
	return e, t
}

func credit(acct keys.AccountID, amount int64, typ records.TransactionType, desc string) *records.CreditTransaction {
	now := time.Now()
	return &records.CreditTransaction{TransactionID: client.NewTransactionID(now), UserID: acct, AmountCents: amount,
		TransactionType: typ, Description: desc, CreatedAt: now.UnixMilli()}
}

// openAccount puts an empty account and, if fund > 0, adds fund cents.
func openAccount(ctx context.Context, bill *client.Billing, fund int64) keys.AccountID {
	acct := newAccount()
	now := time.Now().UnixMilli()
	must(bill.PutAccount(ctx, &records.Account{UserID: acct, CreatedAt: now, UpdatedAt: now}), "PutAccount")
	show("PutAccount", "%s, balance 0 -> ok", short(acct[:]))
	if fund > 0 {
		bal, err := bill.AddCredits(ctx, acct, fund, credit(acct, fund, records.TxPurchase, "top-up"))
		must(err, "AddCredits")
		check(bal == fund, "AddCredits %d on an empty account: balance %d", fund, bal)
		show("AddCredits", "%d -> balance %d", fund, bal)
	}
	return acct
}

func wantBalance(ctx context.Context, bill *client.Billing, acct keys.AccountID, want int64, what string) *records.Account {
	a, err := bill.GetAccount(ctx, acct)
	must(err, "GetAccount "+what)
	check(a.BalanceCents == want, "GetAccount %s: balance %d, want %d", what, a.BalanceCents, want)
	return a
}

func billingTour(bill *client.Billing) {
	section("billing (seed 001)")
	ctx, cancel := callCtx()
	defer cancel()
	acct := newAccount()
	fmt.Printf("  account %s\n", short(acct[:]))

	_, err := bill.GetAccount(ctx, acct)
	wantNotFound(err, "GetAccount before PutAccount")
	show("GetAccount (not created yet)", "ErrNotFound")

	now := time.Now().UnixMilli()
	acc := &records.Account{UserID: acct, CreatedAt: now, UpdatedAt: now}
	must(bill.PutAccount(ctx, acc), "PutAccount")
	show("PutAccount", "balance 0 -> ok")
	ga, err := bill.GetAccount(ctx, acct)
	must(err, "GetAccount")
	same(ga, acc, "GetAccount")
	show("GetAccount", "balance %d -> matches", ga.BalanceCents)

	purchase := credit(acct, 5000, records.TxPurchase, "starter pack")
	bal, err := bill.AddCredits(ctx, acct, 5000, purchase)
	must(err, "AddCredits")
	check(bal == 5000, "AddCredits 5000: balance %d, want 5000", bal)
	show("AddCredits(5000, purchase)", "balance %d", bal)
	bal, err = bill.AddCredits(ctx, acct, 5000, purchase)
	must(err, "AddCredits same transaction again")
	check(bal == 5000, "AddCredits with an applied transaction id: balance %d, want 5000 (applied once)", bal)
	show("AddCredits(same tx again)", "balance %d (transaction applied once)", bal)

	bal, err = bill.UpdateBalance(ctx, acct, -1500)
	must(err, "UpdateBalance -1500")
	check(bal == 3500, "UpdateBalance -1500: balance %d, want 3500", bal)
	show("UpdateBalance(-1500)", "balance %d", bal)
	bal, err = bill.UpdateBalance(ctx, acct, 250)
	must(err, "UpdateBalance +250")
	check(bal == 3750, "UpdateBalance +250: balance %d, want 3750", bal)
	show("UpdateBalance(+250)", "balance %d", bal)
	_, err = bill.UpdateBalance(ctx, acct, -1_000_000)
	var ic *client.InsufficientCreditsError
	check(errors.As(err, &ic), "UpdateBalance -1000000: want *InsufficientCreditsError, got %v", err)
	check(ic.Balance == 3750 && ic.Required == 1_000_000, "UpdateBalance -1000000: %+v, want balance 3750 required 1000000", *ic)
	show("UpdateBalance(-1000000)", "InsufficientCredits{Balance: %d, Required: %d}", ic.Balance, ic.Required)
	wantBalance(ctx, bill, acct, 3750, "after refused UpdateBalance")

	// PutTransaction records a transaction without touching the balance.
	refund := credit(acct, 99, records.TxRefund, "goodwill (recorded only)")
	must(bill.PutTransaction(ctx, refund), "PutTransaction")
	show("PutTransaction(refund 99)", "ok")
	gt, err := bill.GetTransaction(ctx, refund.TransactionID)
	must(err, "GetTransaction refund")
	same(gt, refund, "GetTransaction refund")
	show("GetTransaction(refund)", "%s %d -> matches", gt.TransactionType, gt.AmountCents)
	wantBalance(ctx, bill, acct, 3750, "after PutTransaction")
	show("GetAccount", "balance 3750 (PutTransaction moves no money)")
	_, err = bill.GetTransaction(ctx, client.NewTransactionID(time.Now()))
	wantNotFound(err, "GetTransaction of an unknown id")
	show("GetTransaction(unknown)", "ErrNotFound")

	// ProcessUsage: charge once, refuse the same event again.
	ev, utx := usage(acct, newEventID("tour"), 120)
	has, err := bill.HasUsageEvent(ctx, ev.EventID)
	must(err, "HasUsageEvent before ProcessUsage")
	check(!has, "HasUsageEvent before ProcessUsage: true")
	show("HasUsageEvent(ev1)", "false")
	bal, err = bill.ProcessUsage(ctx, ev, utx)
	must(err, "ProcessUsage")
	check(bal == 3630, "ProcessUsage 120: balance %d, want 3630", bal)
	show("ProcessUsage(ev1, 120)", "balance %d", bal)
	_, utx2 := usage(acct, ev.EventID, 120)
	_, err = bill.ProcessUsage(ctx, ev, utx2)
	var de *client.DuplicateEventError
	check(errors.As(err, &de), "ProcessUsage of the same event again: want *DuplicateEventError, got %v", err)
	check(de.EventID == ev.EventID, "DuplicateEventError names %q, want %q", de.EventID, ev.EventID)
	show("ProcessUsage(ev1 again)", "DuplicateEvent{EventID: %s}", de.EventID)
	ga = wantBalance(ctx, bill, acct, 3630, "after duplicate ProcessUsage")
	check(ga.LifetimeCreditsCents == 5250 && ga.LifetimeUsageCents == 1620,
		"account lifetime stats: credits %d usage %d, want 5250 and 1620", ga.LifetimeCreditsCents, ga.LifetimeUsageCents)
	show("GetAccount", "balance %d, lifetime credits %d, usage %d", ga.BalanceCents, ga.LifetimeCreditsCents, ga.LifetimeUsageCents)
	has, err = bill.HasUsageEvent(ctx, ev.EventID)
	must(err, "HasUsageEvent")
	check(has, "HasUsageEvent after ProcessUsage: false")
	show("HasUsageEvent(ev1)", "true")
	ge, err := bill.GetUsageEvent(ctx, ev.EventID)
	must(err, "GetUsageEvent")
	same(ge, ev, "GetUsageEvent")
	show("GetUsageEvent(ev1)", "%s x%d, %d cents -> matches", ge.Resource, ge.Quantity, ge.CostCents)
	gt, err = bill.GetTransaction(ctx, utx.TransactionID)
	must(err, "GetTransaction usage")
	stored := *utx
	stored.BalanceAfterCents = 3630
	same(gt, &stored, "GetTransaction usage")
	show("GetTransaction(usage tx)", "%s %d, balance after %d, event %s", gt.TransactionType, gt.AmountCents, gt.BalanceAfterCents, gt.EventID)
	_, err = bill.GetTransaction(ctx, utx2.TransactionID)
	wantNotFound(err, "GetTransaction of the refused duplicate's transaction")
	show("GetTransaction(duplicate's tx)", "ErrNotFound (nothing written)")

	// PutUsageEvent stores an event without charging; it then counts as
	// processed.
	ev2, utx3 := usage(acct, newEventID("stored"), 40)
	must(bill.PutUsageEvent(ctx, ev2), "PutUsageEvent")
	show("PutUsageEvent(ev2)", "ok")
	ge, err = bill.GetUsageEvent(ctx, ev2.EventID)
	must(err, "GetUsageEvent ev2")
	same(ge, ev2, "GetUsageEvent ev2")
	show("GetUsageEvent(ev2)", "-> matches")
	has, err = bill.HasUsageEvent(ctx, ev2.EventID)
	must(err, "HasUsageEvent ev2")
	check(has, "HasUsageEvent after PutUsageEvent: false")
	show("HasUsageEvent(ev2)", "true")
	_, err = bill.ProcessUsage(ctx, ev2, utx3)
	check(errors.As(err, &de), "ProcessUsage of a stored event: want *DuplicateEventError, got %v", err)
	show("ProcessUsage(ev2)", "DuplicateEvent (stored events count as processed)")
	wantBalance(ctx, bill, acct, 3630, "after ProcessUsage of a stored event")
	_, err = bill.GetUsageEvent(ctx, newEventID("nope"))
	wantNotFound(err, "GetUsageEvent of an unknown id")
	show("GetUsageEvent(unknown)", "ErrNotFound")

	// Listings: newest first, offset pages and cursor pages agree.
	txs, err := bill.ListTransactionsByUser(ctx, acct, 100, 0)
	must(err, "ListTransactionsByUser")
	check(newestFirst(txs), "ListTransactionsByUser: not newest first: %x", txIDs(txs))
	types := make([]string, len(txs))
	for i, t := range txs {
		types[i] = t.TransactionType.String()
	}
	wantTypes := []string{"usage", "refund", "adjustment", "adjustment", "purchase"}
	check(slices.Equal(types, wantTypes), "ListTransactionsByUser: types %v, want %v", types, wantTypes)
	check(txs[0].TransactionID == utx.TransactionID && txs[1].TransactionID == refund.TransactionID && txs[4].TransactionID == purchase.TransactionID,
		"ListTransactionsByUser: ids %x, want usage, refund, ..., purchase", txIDs(txs))
	check(txs[2].AmountCents == 250 && txs[2].BalanceAfterCents == 3750 && txs[3].AmountCents == -1500 && txs[3].BalanceAfterCents == 3500,
		"ListTransactionsByUser: adjustments %+v %+v, want +250 -> 3750 and -1500 -> 3500", txs[2], txs[3])
	check(txs[4].BalanceAfterCents == 5000, "purchase balance after %d, want 5000", txs[4].BalanceAfterCents)
	show("ListTransactionsByUser(100, 0)", "%d, newest first: %s", len(txs), strings.Join(types, ", "))

	mid, err := bill.ListTransactionsByUser(ctx, acct, 2, 1)
	must(err, "ListTransactionsByUser limit 2 offset 1")
	check(slices.Equal(txIDs(mid), txIDs(txs[1:3])), "ListTransactionsByUser(2, 1): got %x, want entries 1..2 %x", txIDs(mid), txIDs(txs[1:3]))
	show("ListTransactionsByUser(2, 1)", "%s, %s", mid[0].TransactionType, mid[1].TransactionType)

	var paged []*records.CreditTransaction
	var before *keys.TransactionID
	for page := 1; ; page++ {
		p, next, err := bill.ListTransactionsPage(ctx, acct, before, 2)
		must(err, "ListTransactionsPage")
		check(len(p) <= 2, "ListTransactionsPage limit 2: got %d", len(p))
		paged = append(paged, p...)
		show(fmt.Sprintf("ListTransactionsPage(page %d)", page), "%d transactions, next cursor %v", len(p), next != nil)
		if next == nil {
			break
		}
		check(page < 10, "ListTransactionsPage: cursor never ends")
		before = next
	}
	check(slices.Equal(txIDs(paged), txIDs(txs)), "cursor pages %x differ from the offset listing %x", txIDs(paged), txIDs(txs))
	show("ListTransactionsPage (all pages)", "equal to the offset listing")

	// An unfunded account: the charge is refused, nothing changes.
	poor := openAccount(ctx, bill, 0)
	pev, ptx := usage(poor, newEventID("unfunded"), 50)
	_, err = bill.ProcessUsage(ctx, pev, ptx)
	check(errors.As(err, &ic), "ProcessUsage on an unfunded account: want *InsufficientCreditsError, got %v", err)
	check(ic.Balance == 0 && ic.Required == 50, "ProcessUsage on an unfunded account: %+v, want balance 0 required 50", *ic)
	show("ProcessUsage(unfunded, 50)", "InsufficientCredits{Balance: %d, Required: %d}", ic.Balance, ic.Required)
	has, err = bill.HasUsageEvent(ctx, pev.EventID)
	must(err, "HasUsageEvent of a refused event")
	check(!has, "HasUsageEvent of a refused charge: true (a refused charge must write nothing)")
	show("HasUsageEvent(refused event)", "false (nothing written)")
	ptxs, err := bill.ListTransactionsByUser(ctx, poor, 10, 0)
	must(err, "ListTransactionsByUser unfunded")
	check(len(ptxs) == 0, "unfunded account has %d transactions, want 0", len(ptxs))
	show("ListTransactionsByUser(unfunded)", "0")

	// Delete.
	must(bill.DeleteAccount(ctx, poor), "DeleteAccount")
	show("DeleteAccount(unfunded)", "ok")
	_, err = bill.GetAccount(ctx, poor)
	wantNotFound(err, "GetAccount after DeleteAccount")
	show("GetAccount(deleted)", "ErrNotFound")
	wantNotFound(bill.DeleteAccount(ctx, poor), "second DeleteAccount")
	show("DeleteAccount(deleted)", "ErrNotFound")
	_, err = bill.AddCredits(ctx, poor, 10, credit(poor, 10, records.TxGrant, "too late"))
	wantNotFound(err, "AddCredits to a deleted account")
	show("AddCredits(deleted, 10)", "ErrNotFound")
	pev, ptx = usage(poor, newEventID("deleted"), 1)
	_, err = bill.ProcessUsage(ctx, pev, ptx)
	wantNotFound(err, "ProcessUsage on a deleted account")
	show("ProcessUsage(deleted, 1)", "ErrNotFound")
}

// ---------------------------------------------------------------- concurrency

// burst funds an account for exactly 100 charges of 7 cents and fires 200
// concurrent ProcessUsage calls with distinct event ids.
func burst(bill *client.Billing) {
	const charges, cost, calls = 100, 7, 200
	section(fmt.Sprintf("concurrency: %d concurrent charges of %d cents, funds for %d", calls, cost, charges))
	ctx, cancel := callCtx()
	defer cancel()
	acct := openAccount(ctx, bill, charges*cost)

	type result struct {
		ev      string
		balance int64
		err     error
	}
	results := make([]result, calls)
	evs := make([]*records.UsageEvent, calls)
	txs := make([]*records.CreditTransaction, calls)
	for i := range calls {
		evs[i], txs[i] = usage(acct, newEventID(fmt.Sprintf("burst%03d", i)), cost)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			<-start
			bal, err := bill.ProcessUsage(ctx, evs[i], txs[i])
			results[i] = result{evs[i].EventID, bal, err}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t0)

	var ok, insufficient, duplicate int
	var balances []int64
	charged := map[string]bool{}
	for _, r := range results {
		var ic *client.InsufficientCreditsError
		var de *client.DuplicateEventError
		switch {
		case r.err == nil:
			ok++
			balances = append(balances, r.balance)
			charged[r.ev] = true
		case errors.As(r.err, &ic):
			insufficient++
			check(ic.Balance == 0 && ic.Required == cost, "refused charge %s: %+v, want balance 0 required %d (balances are multiples of %d)", r.ev, *ic, cost, cost)
		case errors.As(r.err, &de):
			duplicate++ // a retried attempt whose first try applied: charged, answer lost
		default:
			fail("ProcessUsage %s: unexpected error: %v", r.ev, r.err)
		}
	}
	show(fmt.Sprintf("ProcessUsage x%d", calls), "%d succeeded, %d InsufficientCredits, %d DuplicateEvent in %v (%.0f calls/s)",
		ok, insufficient, duplicate, wall.Round(time.Millisecond), float64(calls)/wall.Seconds())
	check(duplicate == 0, "%d charges answered DuplicateEvent: their first attempt applied but the answer was lost (leader change?)", duplicate)
	check(ok == charges && insufficient == calls-charges, "want exactly %d succeeded and %d InsufficientCredits, got %d and %d", charges, calls-charges, ok, insufficient)
	// Charges applied one at a time: the balances they answered are
	// exactly 693, 686, ..., 0, each once.
	slices.Sort(balances)
	for i, b := range balances {
		check(b == int64(i*cost), "balances answered by the successful charges are not 0, 7, ..., %d: %v", (charges-1)*cost, balances)
	}
	show("balances answered", "each of 0, 7, ..., %d exactly once", (charges-1)*cost)

	a := wantBalance(ctx, bill, acct, 0, "after the burst")
	check(a.LifetimeUsageCents == charges*cost, "lifetime usage %d, want %d", a.LifetimeUsageCents, charges*cost)
	show("GetAccount", "balance %d, lifetime usage %d", a.BalanceCents, a.LifetimeUsageCents)

	list, err := bill.ListTransactionsByUser(ctx, acct, 1000, 0)
	must(err, "ListTransactionsByUser after the burst")
	check(newestFirst(list), "ListTransactionsByUser after the burst: not newest first")
	var usageTx int
	afters := map[int64]bool{}
	for _, t := range list {
		switch t.TransactionType {
		case records.TxUsage:
			usageTx++
			check(charged[t.EventID], "usage transaction for event %q, which was not charged", t.EventID)
			check(t.AmountCents == cost, "usage transaction amount %d, want %d", t.AmountCents, cost)
			afters[t.BalanceAfterCents] = true
		case records.TxPurchase:
		default:
			fail("unexpected %s transaction after the burst", t.TransactionType)
		}
	}
	check(usageTx == charges && len(list) == charges+1, "after the burst: %d usage transactions of %d, want %d usage + 1 purchase", usageTx, len(list), charges)
	check(len(afters) == charges, "usage transactions carry %d distinct balance-after values, want %d", len(afters), charges)
	check(list[len(list)-1].TransactionType == records.TxPurchase, "oldest transaction is %s, want the purchase", list[len(list)-1].TransactionType)
	show("ListTransactionsByUser(1000, 0)", "%d usage + 1 purchase, newest first", usageTx)

	for _, r := range results {
		if r.err != nil {
			has, err := bill.HasUsageEvent(ctx, r.ev)
			must(err, "HasUsageEvent of a refused burst event")
			check(!has, "refused burst event %s is stored", r.ev)
			show("HasUsageEvent(a refused event)", "false")
			break
		}
	}
	fmt.Printf("  wall time for %d concurrent ProcessUsage calls: %v\n", calls, wall.Round(time.Millisecond))
}

// idempotency retries one usage event 5 times concurrently: it is charged
// once, the other attempts answer DuplicateEvent.
func idempotency(bill *client.Billing) {
	const attempts, cost, fund = 5, 30, 100
	section(fmt.Sprintf("idempotency: one event id, %d concurrent attempts", attempts))
	ctx, cancel := callCtx()
	defer cancel()
	acct := openAccount(ctx, bill, fund)

	evID := newEventID("retry")
	errs := make([]error, attempts)
	bals := make([]int64, attempts)
	var wg sync.WaitGroup
	for i := range attempts {
		// Each attempt as a separate retry would build it: the same event,
		// a fresh transaction id.
		ev, tx := usage(acct, evID, cost)
		wg.Go(func() { bals[i], errs[i] = bill.ProcessUsage(ctx, ev, tx) })
	}
	wg.Wait()
	var ok, dup int
	for i, err := range errs {
		var de *client.DuplicateEventError
		switch {
		case err == nil:
			ok++
			check(bals[i] == fund-cost, "the charging attempt answered balance %d, want %d", bals[i], fund-cost)
		case errors.As(err, &de):
			dup++
			check(de.EventID == evID, "DuplicateEventError names %q, want %q", de.EventID, evID)
		default:
			fail("ProcessUsage retry %d: unexpected error: %v", i, err)
		}
	}
	show(fmt.Sprintf("ProcessUsage(same event) x%d", attempts), "%d charged, %d DuplicateEvent", ok, dup)
	check(ok == 1 && dup == attempts-1, "want 1 charge and %d DuplicateEvent, got %d and %d", attempts-1, ok, dup)
	a := wantBalance(ctx, bill, acct, fund-cost, "after the retries")
	show("GetAccount", "balance %d (charged once)", a.BalanceCents)
	list, err := bill.ListTransactionsByUser(ctx, acct, 100, 0)
	must(err, "ListTransactionsByUser after the retries")
	var usageTx int
	for _, t := range list {
		if t.TransactionType == records.TxUsage {
			usageTx++
		}
	}
	check(usageTx == 1, "%d usage transactions after the retries, want 1", usageTx)
	show("ListTransactionsByUser", "%d usage transaction", usageTx)
}
