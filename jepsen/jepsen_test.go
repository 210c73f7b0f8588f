package jepsen

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// allWorkloads returns the register, ledger and registry workloads (the
// watch and lease workloads have tests of their own: watch_test.go).
func allWorkloads(t *testing.T, runID string) []Workload {
	t.Helper()
	var out []Workload
	for _, n := range []string{"register", "ledger", "registry"} {
		w, err := NewWorkload(n, runID, WorkloadOptions{Keys: 8, OpsPerKey: 60})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

func brokenConnect(inner Connect, stale, lose bool) Connect {
	var n uint64
	return func(ctx context.Context) (DB, error) {
		db, err := inner(ctx)
		if err != nil {
			return nil, err
		}
		n++
		return NewBroken(db, n, stale, lose), nil
	}
}

// memRun runs every workload against connect without faults.
func memRun(t *testing.T, connect Connect) *Result {
	t.Helper()
	dir := t.TempDir()
	res, err := Run(context.Background(), Config{Connect: connect, Workloads: allWorkloads(t, "mem"),
		Duration: 250 * time.Millisecond, WorkersPerWorkload: 3, Seed: 1, OutDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func verdictOf(t *testing.T, res *Result, checker string) Verdict {
	t.Helper()
	for _, v := range res.Verdicts {
		if v.Checker == checker {
			return v
		}
	}
	t.Fatalf("no verdict of %s", checker)
	return Verdict{}
}

// A correct store passes every checker.
func TestCheckersAcceptCorrectStore(t *testing.T) {
	res := memRun(t, NewMemDB(MemBugs{}).Connect())
	if !res.Valid {
		t.Fatalf("correct store judged invalid:\n%s", res.Summary())
	}
	for _, k := range []string{"register read", "register write", "register cas", "ledger credit", "ledger charge", "registry status", "registry list"} {
		if res.Counts[k][OK] == 0 {
			t.Errorf("no successful %q ops:\n%s", k, res.Summary())
		}
	}
	if c := res.Counts["ledger recharge"]; c[Fail] == 0 || c[OK] > 0 {
		t.Errorf("re-submitted events: want only refusals, got %v", c)
	}
	if c := res.Counts["ledger reuse"]; c[Fail] == 0 || c[OK] > 0 {
		t.Errorf("re-used transaction ids: want only refusals, got %v", c)
	}
}

// The broken variants: each must make its checker report an anomaly.
func TestCheckersCatchBrokenStores(t *testing.T) {
	for _, tc := range []struct {
		name    string
		connect func() Connect
		checker string
		want    string
	}{
		{"stale reads", func() Connect { return brokenConnect(NewMemDB(MemBugs{}).Connect(), true, false) }, "register", "not linearizable"},
		{"lost writes", func() Connect { return brokenConnect(NewMemDB(MemBugs{}).Connect(), false, true) }, "register", "not linearizable"},
		{"lost status updates", func() Connect { return brokenConnect(NewMemDB(MemBugs{}).Connect(), false, true) }, "registry", "could be last"},
		{"double charge", func() Connect { return NewMemDB(MemBugs{NoEventDedup: true}).Connect() }, "ledger", "charged"},
		{"overwritten transaction", func() Connect { return NewMemDB(MemBugs{OverwriteTxID: true}).Connect() }, "ledger", "overwritten by a re-use"},
		// Transaction ids unique per shard only (before the directory):
		// another account's re-use takes effect.
		{"transaction id re-used by another account", func() Connect { return NewMemDB(MemBugs{TxIDPerAccount: true}).Connect() }, "ledger", "re-used by another account"},
		{"stale status index", func() Connect { return NewMemDB(MemBugs{StaleStatusIndex: true}).Connect() }, "registry", "listed under status"},
		// A move that copies its slot without freezing it: the writes
		// acknowledged during the move are lost at the publish, or
		// applied twice.
		{"move loses register writes", func() Connect { return NewMemDB(MemBugs{MoveLosesWrites: true}).Connect() }, "register", "not linearizable"},
		{"move loses ledger writes", func() Connect { return NewMemDB(MemBugs{MoveLosesWrites: true}).Connect() }, "ledger", "is not listed"},
		{"move duplicates register writes", func() Connect { return NewMemDB(MemBugs{MoveDuplicatesWrites: true}).Connect() }, "register", "not linearizable"},
		{"move duplicates ledger writes", func() Connect { return NewMemDB(MemBugs{MoveDuplicatesWrites: true}).Connect() }, "ledger", "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := memRun(t, tc.connect())
			v := verdictOf(t, res, tc.checker)
			if v.Valid {
				t.Fatalf("%s not detected by %s:\n%s", tc.name, tc.checker, res.Summary())
			}
			if !strings.Contains(strings.Join(v.Anomalies, "\n"), tc.want) {
				t.Errorf("anomalies do not mention %q:\n%s", tc.want, v)
			}
			if tc.checker == "register" {
				if len(v.Files) == 0 {
					t.Fatalf("no visualization written")
				}
				if st, err := os.Stat(v.Files[0]); err != nil || st.Size() == 0 {
					t.Errorf("visualization %s: %v", v.Files[0], err)
				}
			}
		})
	}
}

// Hand-written register histories: indeterminate writes may take effect
// late or never; a read may not see a value nobody wrote or an overwritten
// one.
func TestRegisterChecker(t *testing.T) {
	op := func(i, proc int, f string, in RegIn, out RegOut, o Outcome, inv, comp int64) Op {
		return Op{Index: i, Workload: "register", Process: proc, F: f, Input: in, Output: out, Outcome: o, Invoke: inv, Complete: comp}
	}
	k := "k"
	for _, tc := range []struct {
		name  string
		h     History
		valid bool
	}{
		{"info write seen late", History{
			op(0, 0, "write", RegIn{Key: k, Value: 1}, RegOut{}, Info, 0, 10),
			op(1, 1, "read", RegIn{Key: k}, RegOut{}, OK, 20, 30),
			op(2, 1, "read", RegIn{Key: k}, RegOut{Value: 1}, OK, 40, 50),
		}, true},
		{"info write never seen", History{
			op(0, 0, "write", RegIn{Key: k, Value: 1}, RegOut{}, Info, 0, 10),
			op(1, 1, "read", RegIn{Key: k}, RegOut{}, OK, 20, 30),
		}, true},
		{"failed write seen", History{
			op(0, 0, "write", RegIn{Key: k, Value: 1}, RegOut{}, Fail, 0, 10),
			op(1, 1, "read", RegIn{Key: k}, RegOut{Value: 1}, OK, 20, 30),
		}, false},
		{"stale read", History{
			op(0, 0, "write", RegIn{Key: k, Value: 1}, RegOut{}, OK, 0, 10),
			op(1, 0, "write", RegIn{Key: k, Value: 2}, RegOut{}, OK, 20, 30),
			op(2, 1, "read", RegIn{Key: k}, RegOut{Value: 1}, OK, 40, 50),
		}, false},
		{"cas applied on the right value", History{
			op(0, 0, "write", RegIn{Key: k, Value: 1}, RegOut{}, OK, 0, 10),
			op(1, 0, "cas", RegIn{Key: k, Value: 2, From: 1}, RegOut{Applied: true}, OK, 20, 30),
			op(2, 1, "cas", RegIn{Key: k, Value: 3, From: 1}, RegOut{Applied: false}, OK, 40, 50),
			op(3, 1, "read", RegIn{Key: k}, RegOut{Value: 2}, OK, 60, 70),
		}, true},
		{"cas applied twice", History{
			op(0, 0, "write", RegIn{Key: k, Value: 1}, RegOut{}, OK, 0, 10),
			op(1, 0, "cas", RegIn{Key: k, Value: 2, From: 1}, RegOut{Applied: true}, OK, 20, 30),
			op(2, 1, "cas", RegIn{Key: k, Value: 3, From: 1}, RegOut{Applied: true}, OK, 40, 50),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewRegister("t", 1, 10).Check(tc.h, t.TempDir())
			if v.Valid != tc.valid {
				t.Errorf("valid = %v, want %v: %s", v.Valid, tc.valid, v)
			}
		})
	}
}

// The in-process cluster under every nemesis: no anomalies.
func TestInProcNemeses(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run in -short mode")
	}
	runInProc(t, "all", 16*time.Second)
}

// A shorter run with partitions and kills, also in -short mode.
func TestInProcShort(t *testing.T) {
	runInProc(t, "isolate-leader,kill", 6*time.Second)
}

// Membership changes under load: a node replaced by a new one, a node
// removed, wiped and added again. Both must complete, and the nodes list
// must follow the members.
func TestInProcMembership(t *testing.T) {
	d, want := 10*time.Second, []string{"replace", "remove-readd"}
	if testing.Short() {
		// The first change (seed 7: remove-readd) must be done before the
		// second can start within 6 s; only one is required.
		d, want = 6*time.Second, nil
	}
	res, drv := runInProc(t, "replace,remove-readd", d)
	seen := map[string]bool{}
	for _, f := range res.Faults {
		if f.Error != "" {
			t.Errorf("%s: %s", f.Nemesis, f.Error)
		}
		seen[f.Nemesis] = true
	}
	if len(res.Faults) == 0 {
		t.Errorf("no membership change ran")
	}
	for _, n := range want {
		if !seen[n] {
			t.Errorf("nemesis %s never ran", n)
		}
	}
	if got := drv.Nodes(); len(got) != 3 || (seen["replace"] && slices.Equal(got, []string{"n1", "n2", "n3"})) {
		t.Errorf("members after %v: %v", res.Faults, got)
	}
}

func runInProc(t *testing.T, nemeses string, d time.Duration) (*Result, *InProc) {
	t.Helper()
	ctx := context.Background()
	drv, err := NewInProc(ctx, InProcConfig{Dir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	nems, err := Nemeses(nemeses)
	if err != nil {
		t.Fatal(err)
	}
	// The report outlives a failed test (its path is logged).
	out, err := os.MkdirTemp("", "swarmkv-jepsen-report-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(out)
		}
	})
	res, err := Run(ctx, Config{Driver: drv, Connect: DriverConnect(drv, time.Second),
		Workloads: allWorkloads(t, "inproc"), Nemeses: nems, Duration: d,
		Interval: 500 * time.Millisecond, FaultDuration: 1500 * time.Millisecond,
		WorkersPerWorkload: 3, OpTimeout: 3 * time.Second, Seed: 7, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res.Summary())
	if !res.Valid {
		t.Fatalf("anomalies; report in %s", out)
	}
	if len(res.Faults) == 0 {
		t.Errorf("no faults injected")
	}
	// The report measures each shard's unavailability during the faults.
	if len(res.Unavailability) == 0 || res.UnavailabilityError != "" || !strings.Contains(res.Summary(), "longest: ") {
		t.Errorf("no unavailability by shard: %v %s", res.Unavailability, res.UnavailabilityError)
	}
	for _, f := range []string{"history.json", "summary.txt", "summary.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	return res, drv
}

// Hand-written ledger histories: a re-use of an acknowledged transaction
// id that took effect (the state machine bug of issue 22, item 10) is an
// anomaly, whether it replaced the charge in its account's listing, moved
// it to another account, or was recorded by another account as its own
// (ids unique per shard only: issue 37, item 11); refused re-uses are
// valid.
func TestLedgerCheckerCatchesOverwrittenTransaction(t *testing.T) {
	l := NewLedger("t", 2)
	id := keys.TransactionID{1}
	tid := hex.EncodeToString(id[:])
	op := func(i int, f string, in LedgerIn, o Outcome) Op {
		return Op{Index: i, Workload: "ledger", F: f, Input: in, Output: LedgerOut{}, Outcome: o}
	}
	h := History{
		op(0, "credit", LedgerIn{Account: 0, Amount: 500, Tx: hex.EncodeToString([]byte{2: 1, 15: 0})}, OK),
		op(1, "charge", LedgerIn{Account: 0, Amount: 300, Tx: tid, Event: "e1"}, OK),
		op(2, "reuse", LedgerIn{Account: 0, Amount: 50, Tx: tid, Event: "e2"}, Info),
		op(3, "reuse", LedgerIn{Account: 1, Amount: 70, Tx: tid}, Fail),
	}
	credit := &records.CreditTransaction{TransactionID: keys.TransactionID{2: 1}, UserID: l.accounts[0], AmountCents: 500,
		TransactionType: records.TxPurchase, Description: "jepsen credit", BalanceAfterCents: 500}
	charge := &records.CreditTransaction{TransactionID: id, UserID: l.accounts[0], AmountCents: 300,
		TransactionType: records.TxUsage, Description: "jepsen usage", EventID: "e1", BalanceAfterCents: 200}
	overwritten := &records.CreditTransaction{TransactionID: id, UserID: l.accounts[0], AmountCents: 50,
		TransactionType: records.TxUsage, Description: reuseDescription, EventID: "e2", BalanceAfterCents: 150}
	reusedByOther := &records.CreditTransaction{TransactionID: id, UserID: l.accounts[1], AmountCents: 70,
		TransactionType: records.TxGrant, Description: reuseDescription, BalanceAfterCents: 70}
	for _, tc := range []struct {
		name      string
		txs       []*records.CreditTransaction
		bal, used int64
		has       map[string]bool
		want      string // "" for valid
	}{
		{"refused re-use", []*records.CreditTransaction{charge, credit}, 200, 300, map[string]bool{"e1": true}, ""},
		// The old state machine: both charges moved money, the listing
		// keeps the second.
		{"charge overwritten", []*records.CreditTransaction{overwritten, credit}, 150, 350, map[string]bool{"e1": true, "e2": true}, "overwritten by a re-use"},
		// The charge gone from the listing (replaced under another id's
		// owner): the acknowledged charge is missing.
		{"charge lost", []*records.CreditTransaction{credit}, 200, 300, map[string]bool{"e1": true}, "is not listed"},
		// Account 1's re-use (op 3) took effect on its own shard: the
		// original stays listed, the id is listed twice in the cluster.
		{"re-used by another account", []*records.CreditTransaction{charge, credit}, 200, 300, map[string]bool{"e1": true}, "re-used by another account"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l.final.acct = map[keys.AccountID]*records.Account{
				l.accounts[0]: {UserID: l.accounts[0], BalanceCents: tc.bal, LifetimeCreditsCents: 500, LifetimeUsageCents: tc.used},
				l.accounts[1]: {UserID: l.accounts[1]},
			}
			l.final.txs = map[keys.AccountID][]*records.CreditTransaction{l.accounts[0]: tc.txs}
			if tc.name == "re-used by another account" {
				l.final.acct[l.accounts[1]] = &records.Account{UserID: l.accounts[1], BalanceCents: 70, LifetimeCreditsCents: 70}
				l.final.txs[l.accounts[1]] = []*records.CreditTransaction{reusedByOther}
			}
			l.final.has = tc.has
			v := l.Check(h, "")
			if v.Valid != (tc.want == "") {
				t.Fatalf("valid = %v, want %v:\n%s", v.Valid, tc.want == "", v)
			}
			if tc.want != "" && !strings.Contains(strings.Join(v.Anomalies, "\n"), tc.want) {
				t.Errorf("anomalies do not mention %q:\n%s", tc.want, v)
			}
		})
	}
}

// Splits and merges under load, alone and while a node is down: the
// checkers pass, at least one split and one merge complete, and every
// move is in the history and the report.
func TestInProcSplitMerge(t *testing.T) {
	res, _ := runInProc(t, "split-merge,split-merge+kill", 12*time.Second)
	c := res.MoveCounts()
	t.Logf("moves: %s", c)
	if c.Splits == 0 || c.Merges == 0 {
		t.Errorf("want a split and a merge done, got %s:\n%s", c, res.Summary())
	}
	if c.Inconsistent > 0 || c.Unfinished > 0 {
		t.Errorf("moves: %s", c)
	}
	ops := res.History.Of("nemesis")
	if len(ops) != len(res.Moves) {
		t.Errorf("%d moves, %d nemesis ops in the history", len(res.Moves), len(ops))
	}
	for _, op := range ops {
		m, ok := op.Output.(MoveRecord)
		if !ok || m.Outcome == MoveDone && (op.Outcome != OK || m.ID == 0 || m.Duration <= 0) {
			t.Errorf("history op %+v", op)
		}
	}
	if !strings.Contains(res.Summary(), "Moves: ") {
		t.Errorf("summary without moves:\n%s", res.Summary())
	}
	v := verdictOf(t, res, "moves")
	if v.Stats["splits"] != c.Splits || v.Stats["merges"] != c.Merges {
		t.Errorf("moves verdict %v, counts %s", v, c)
	}
}

// A client whose map predates a split must still list every agent by
// status (the source shard leaves the moved slots out; the client must
// learn of the new shard, e.g. from a moved answer, not return a partial
// listing without an error). The split-merge run found this: its final
// reads connected to a node just restarted, whose map lagged.
func TestStaleMapListing(t *testing.T) {
	ctx := context.Background()
	drv, err := NewInProc(ctx, InProcConfig{Dir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	db, err := DriverConnect(drv, time.Second)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	user := keys.UserID{1, 2, 3}
	slot := shard.SlotOf(user[:])
	const agents = 5
	for i := range agents {
		a := &records.AgentRecord{AgentID: keys.AgentID{byte(i + 1)}, UserID: user, Name: "x", Status: records.AgentState(1), CreatedAt: 1, UpdatedAt: 1}
		if err := db.PutAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	n, err := drv.node("n1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.ClusterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one := shard.SlotSetOf(slot)
	m, err := n.SplitShard(ctx, st.Slots[slot], &one)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if st, err = n.ClusterState(ctx); err == nil && len(st.Moves) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Slots[slot] != m.Target {
		t.Fatalf("split %+v did not move slot %d: owner %d", m, slot, st.Slots[slot])
	}
	l, err := db.ListAgentsByStatus(ctx, records.AgentState(1))
	if err != nil || len(l) != agents {
		t.Errorf("listing by status with the map from before the split: %d agents, %v; want %d", len(l), err, agents)
	}
}
