package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/shard"
)

// checkAccountCache fails unless every cached account is the DB's value:
// the cache is exact between applies.
func checkAccountCache(t testing.TB, f *FSM) {
	t.Helper()
	for k, e := range f.accounts.m {
		got, found, err := getCopy(f.db, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if !found || !bytes.Equal(got, e.v) {
			t.Fatalf("account cache holds %x = %x; the DB has %x (found %v)", k, e.v, got, found)
		}
		if e.rec != nil {
			var a records.Account
			if err := records.Decode(got, &a); err != nil || a != *e.rec {
				t.Fatalf("account cache holds %x as %+v; the DB's decodes to %+v (%v)", k, *e.rec, a, err)
			}
		}
	}
}

// balanceOf reads account n's balance from the DB.
func balanceOf(t testing.TB, f *FSM, n int) int64 {
	t.Helper()
	v, found, err := getCopy(f.db, keys.Account(acct(n)))
	if err != nil || !found {
		t.Fatalf("account %d: found %v, %v", n, found, err)
	}
	var a records.Account
	if err := records.Decode(v, &a); err != nil {
		t.Fatal(err)
	}
	return a.BalanceCents
}

// chargedFSM returns a state machine that applied account 0 (balance
// 1000) and one charge of 300 (event 1, transaction 2): balance 700.
func chargedFSM(t *testing.T) *FSM {
	t.Helper()
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	for i, c := range []*Command{putAccountCmd(account(0, 1000, 1500, 500)), processUsageCmd(0, 1, 2, 300, 70)} {
		if r := f.Apply(cmdLog(uint64(i+1), mustEncode(t, c))).(*Result); r.Err != nil {
			t.Fatalf("%s: %v", c.Op, r.Err)
		}
	}
	return f
}

// TestAccountCacheReads: once an apply wrote an account, a charge of it
// reads only its event and transaction id from Pebble.
func TestAccountCacheReads(t *testing.T) {
	f := chargedFSM(t)
	checkAccountCache(t, f)
	b := f.db.NewIndexedBatch()
	defer b.Close()
	ch := &change{b: b, acct: &f.accounts}
	c := processUsageCmd(0, 3, 4, 100, 80)
	balance, err := ch.processUsage(c.Event, c.Tx, c.Time)
	if err != nil || balance != 600 {
		t.Fatalf("charge: balance %d, %v; want 600", balance, err)
	}
	if ch.reads != 2 {
		t.Fatalf("%d point reads, want 2 (event, transaction id)", ch.reads)
	}
}

// TestAccountCacheCoherent: every path that writes an account key other
// than a change keeps the cache exact, so the next charge sees what the DB
// holds.
func TestAccountCacheCoherent(t *testing.T) {
	cacheFull := func(t *testing.T, f *FSM, idx *uint64) {
		t.Helper()
		apply := func(c *Command) *Result {
			*idx++
			return f.Apply(cmdLog(*idx, mustEncode(t, c))).(*Result)
		}
		if r := apply(putAccountCmd(account(0, 1000, 1500, 500))); r.Err != nil {
			t.Fatal(r.Err)
		}
		if r := apply(processUsageCmd(0, 1, 2, 300, 70)); r.Err != nil || r.Balance != 700 {
			t.Fatalf("charge: %+v", r)
		}
		if _, ok := f.accounts.get(keys.Account(acct(0))); !ok {
			t.Fatal("the charged account is not cached")
		}
	}
	t.Run("raw batch", func(t *testing.T) {
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		var idx uint64
		cacheFull(t, f, &idx)
		v, err := records.Encode(account(0, 50, 1500, 1450))
		if err != nil {
			t.Fatal(err)
		}
		idx++
		if r := f.Apply(cmdLog(idx, mustEncode(t, batchCmd(nil, Mutation{Kind: MutPut, Key: keys.Account(acct(0)), Value: v})))).(*Result); !r.Succeeded {
			t.Fatalf("raw batch: %+v", r)
		}
		checkAccountCache(t, f)
		idx++
		r := f.Apply(cmdLog(idx, mustEncode(t, processUsageCmd(0, 3, 4, 100, 80)))).(*Result)
		var ice *InsufficientCreditsError
		if !errors.As(r.Err, &ice) || ice.Balance != 50 {
			t.Fatalf("charge of 100 after a raw write of balance 50: %+v", r)
		}
	})
	t.Run("restore", func(t *testing.T) {
		// The leader's state: the account at 1000, at a later index than
		// the follower's.
		leader := mustOpen(t, testConfig(1, t.TempDir()), nil)
		for i := uint64(1); i <= 10; i++ {
			c := &Command{Op: OpNoop}
			if i == 1 {
				c = putAccountCmd(account(0, 1000, 1500, 500))
			}
			if r := leader.Apply(cmdLog(i, mustEncode(t, c))).(*Result); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		f := mustOpen(t, testConfig(1, t.TempDir()), nil)
		var idx uint64
		cacheFull(t, f, &idx) // 700, cached
		if err := f.Restore(reader(snapshotBytes(t, leader))); err != nil {
			t.Fatal(err)
		}
		checkAccountCache(t, f)
		r := f.Apply(cmdLog(11, mustEncode(t, processUsageCmd(0, 3, 4, 100, 80)))).(*Result)
		if r.Err != nil || r.Balance != 900 {
			t.Fatalf("charge after restore: %+v, want balance 900", r)
		}
	})
	t.Run("slots moved out and back", func(t *testing.T) {
		S := shard.SlotSetOf(shard.SlotOf(func() []byte { a := acct(0); return a[:] }()))
		src := newReplica(t, 1, nil)
		dst := newReplica(t, 2, ptr(shard.AllSlots().Minus(S)))
		src.must(putAccountCmd(account(0, 1000, 1500, 500)))
		src.must(processUsageCmd(0, 1, 2, 300, 70)) // cached: 700
		move := func(from, to *replica, id uint64, target shard.ID) {
			t.Helper()
			from.must(freezeCmd(id, S, target, id))
			var pairs []Pair
			if err := from.f.ExportChunks(t.Context(), id, nil, Limits{}, 0, func(p []Pair) error { pairs = append(pairs, p...); return nil }); err != nil {
				t.Fatal(err)
			}
			to.must(ingestCmd(id, S, pairs...))
			to.must(adoptCmd(id, S))
			for from.must(dropCmd(id, 100)).Remaining != 0 {
			}
			checkAccountCache(t, from.f)
			checkAccountCache(t, to.f)
		}
		move(src, dst, 7, 2)
		if r := dst.must(processUsageCmd(0, 3, 4, 200, 80)); r.Balance != 500 {
			t.Fatalf("charge on the target: %+v", r)
		}
		move(dst, src, 8, 1)
		if r := src.must(processUsageCmd(0, 5, 6, 100, 90)); r.Balance != 400 {
			t.Fatalf("charge back on the source: balance %d, want 400", r.Balance)
		}
		if got := balanceOf(t, src.f, 0); got != 400 {
			t.Fatalf("stored balance %d", got)
		}
	})
}
