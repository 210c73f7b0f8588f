package fsm

import (
	"errors"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

func reserveCmd(accN, txN int) *Command {
	return &Command{Op: OpReserveTx, AccountID: ptr(acct(accN)), TxID: ptr(txid(txN))}
}

// reserving makes c (an op that records a transaction) reserve its id in
// the same change.
func reserving(c *Command) *Command {
	c.TxID = ptr(c.Tx.TransactionID)
	return c
}

// TestReserveTx: the directory op is idempotent for its account, refuses
// another account's id and writes nothing then; an op that reserves in the
// same change writes the entry with its own writes, or nothing at all.
func TestReserveTx(t *testing.T) {
	funded := []*Command{putAccountCmd(account(0, 1000, 1000, 0)), putAccountCmd(account(1, 50, 50, 0))}
	dir := func(txN, accN int) kvw { a := acct(accN); return setw(keys.TxDirectory(txid(txN)), a[:]) }
	acc0 := keys.Account(acct(0))
	runOpCases(t, []opCase{
		{name: "reserve absent", cmd: reserveCmd(0, 1),
			writes: func(t testing.TB) []kvw { return []kvw{dir(1, 0)} }},
		{name: "reserve again: idempotent", setup: []*Command{reserveCmd(0, 1)}, cmd: reserveCmd(0, 1),
			writes: func(t testing.TB) []kvw { return nil }},
		{name: "reserve another account's id", setup: []*Command{reserveCmd(0, 1)}, cmd: reserveCmd(1, 1), err: ErrAlreadyExists},
		{name: "add credits reserving", setup: funded, cmd: reserving(addCreditsCmd(0, 2, 5, 9)), balance: 1005,
			writes: func(t testing.TB) []kvw {
				a := account(0, 1005, 1005, 0)
				a.UpdatedAt = 9
				return append([]kvw{dir(2, 0), setw(acc0, enc(t, a))}, txWrites(t, stored(creditTx(0, 2, 5), 1005, ""))...)
			}},
		{name: "add credits with an id another account reserved", setup: append(funded, reserveCmd(1, 2)),
			cmd: reserving(addCreditsCmd(0, 2, 5, 9)), err: ErrAlreadyExists},
		{name: "add credits after its own reservation (the cross-shard order)", setup: append(funded, reserveCmd(0, 2)),
			cmd: addCreditsCmd(0, 2, 5, 9), balance: 1005,
			writes: func(t testing.TB) []kvw {
				a := account(0, 1005, 1005, 0)
				a.UpdatedAt = 9
				return append([]kvw{setw(acc0, enc(t, a))}, txWrites(t, stored(creditTx(0, 2, 5), 1005, ""))...)
			}},
		{name: "exact retry reserving", setup: append(funded, reserving(addCreditsCmd(0, 2, 5, 9))),
			cmd: reserving(addCreditsCmd(0, 2, 5, 10)), balance: 1005, writes: func(t testing.TB) []kvw { return nil }},
		{name: "refused charge leaves no reservation", setup: funded,
			cmd: reserving(updateBalanceCmd(1, 3, -51, 9)), err: &InsufficientCreditsError{Balance: 50, Required: 51}},
		{name: "process usage with an id another account reserved", setup: append(funded, reserveCmd(0, 4)),
			cmd: reserving(processUsageCmd(1, 1, 4, 7, 9)), err: ErrAlreadyExists},
		{name: "put transaction with an id another account reserved", setup: []*Command{reserveCmd(1, 5)},
			cmd: reserving(&Command{Op: OpPutTransaction, Tx: creditTx(0, 5, 3)}), err: ErrAlreadyExists},
		{name: "put transaction reserving", cmd: reserving(&Command{Op: OpPutTransaction, Tx: creditTx(0, 5, 3)}),
			writes: func(t testing.TB) []kvw { return append([]kvw{dir(5, 0)}, txWrites(t, creditTx(0, 5, 3))...) }},
	})
}

// TestReserveTxCorruptEntry: a directory value that is not an account id
// (only a raw batch can write one) refuses the reservation.
func TestReserveTxCorruptEntry(t *testing.T) {
	r := newReplica(t, 1, nil)
	r.must(batchCmd(nil, Mutation{Kind: MutPut, Key: keys.TxDirectory(txid(1)), Value: []byte{1, 2}}))
	if res := r.apply(reserveCmd(0, 1)); !errors.Is(res.Err, ErrCorruptRecord) {
		t.Fatalf("reserve over a corrupt entry: %+v, want ErrCorruptRecord", res)
	}
}

// TestReserveTxSlots: the directory entry lives in the slot of the id, not
// of the account: a shard that owns the account's slot but not the id's
// answers moved, for the reservation and for an op that reserves in the
// same change (nothing written), and succeeds when it owns both.
func TestReserveTxSlots(t *testing.T) {
	slotOfTx := func(n int) shard.Slot { id := txid(n); return shard.SlotOf(id[:]) }
	a0 := acct(0)
	accSlot := shard.SlotOf(a0[:])
	id := 1
	for slotOfTx(id) == accSlot { // an id whose slot differs from the account's
		id++
	}
	idSlot := slotOfTx(id)
	var only shard.SlotSet
	only.Add(accSlot)
	r := newReplica(t, 1, &only)
	r.must(putAccountCmd(account(0, 10, 10, 0)))
	var me *MovedError
	if res := r.apply(reserveCmd(0, id)); !errors.As(res.Err, &me) || me.Slot != idSlot {
		t.Fatalf("reserve in a slot not owned: %+v, want moved from slot %d", res, idSlot)
	}
	before := mustDump(t, r.f)
	if res := r.apply(reserving(addCreditsCmd(0, id, 5, 9))); !errors.As(res.Err, &me) || me.Slot != idSlot {
		t.Fatalf("add credits reserving in a slot not owned: %+v, want moved from slot %d", res, idSlot)
	}
	if d := diffKVs(mustDump(t, r.f), before); d != "" {
		t.Fatalf("a refused charge wrote: %s", d)
	}
	if res := r.apply(addCreditsCmd(0, id, 5, 9)); res.Err != nil || res.Balance != 15 {
		t.Fatalf("add credits without reserving: %+v", res) // the cross-shard case's second write
	}
	both := only
	both.Add(idSlot)
	r2 := newReplica(t, 2, &both)
	r2.must(putAccountCmd(account(0, 10, 10, 0)))
	if res := r2.must(reserving(addCreditsCmd(0, id, 5, 9))); res.Balance != 15 {
		t.Fatalf("balance %d", res.Balance)
	}
	if v, err := r2.f.Get(keys.TxDirectory(txid(id))); err != nil || string(v) != string(a0[:]) {
		t.Fatalf("directory entry %x, %v", v, err)
	}
}

// TestReserveTxSince: the directory op, and an op that reserves in the
// same change, need VersionHardening; the same op without TxID does not.
func TestReserveTxSince(t *testing.T) {
	for _, c := range []*Command{reserveCmd(0, 1), reserving(addCreditsCmd(0, 1, 5, 9)), reserving(processUsageCmd(0, 1, 1, 5, 9)),
		reserving(updateBalanceCmd(0, 1, 5, 9)), reserving(&Command{Op: OpPutTransaction, Tx: creditTx(0, 5, 3)})} {
		if got := c.Since(); got != VersionHardening {
			t.Errorf("%s with tx_id: Since %d, want %d", c.Op, got, VersionHardening)
		}
		if c.Op == OpReserveTx {
			continue
		}
		c.TxID = nil
		if got := c.Since(); got != 1 {
			t.Errorf("%s without tx_id: Since %d, want 1", c.Op, got)
		}
	}
	multi := &Command{Op: OpMulti, Multi: [][]byte{mustEncode(t, addCreditsCmd(0, 1, 5, 9)), mustEncode(t, reserveCmd(0, 2))}}
	if got := multi.Since(); got != VersionHardening {
		t.Errorf("multi carrying a reservation: Since %d", got)
	}
}

// FuzzReserveTxValidate: Validate of a reservation, or of an op carrying
// tx_id, never panics; what it accepts names an id (and the op's own id
// for an op that records a transaction), and round-trips through the
// encoding unchanged.
func FuzzReserveTxValidate(f *testing.F) {
	f.Add(mustEncode(f, reserveCmd(0, 1)))
	f.Add(mustEncode(f, reserving(addCreditsCmd(0, 2, 5, 9))))
	f.Add(mustEncode(f, reserving(processUsageCmd(1, 1, 4, 7, 9))))
	bad := reserving(addCreditsCmd(0, 2, 5, 9))
	bad.TxID = ptr(txid(3))
	f.Add(mustEncode(f, bad))
	f.Add(mustEncode(f, &Command{Op: OpReserveTx, TxID: ptr(txid(1))}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		if c.Validate(Limits{}) != nil {
			return
		}
		if c.TxID != nil {
			switch {
			case c.Op == OpReserveTx && c.AccountID == nil:
				t.Fatalf("a reservation without an account validated: %+v", c)
			case c.Op != OpReserveTx && (c.Tx == nil || c.Tx.TransactionID != *c.TxID):
				t.Fatalf("%s reserving an id not its own validated", c.Op)
			}
		}
		if c.Op == OpReserveTx && c.TxID == nil {
			t.Fatalf("a reservation without an id validated")
		}
		again, err := EncodeCommand(c)
		if err != nil || string(again) != string(b) {
			t.Fatalf("round trip: %x != %x (%v)", again, b, err)
		}
	})
}
