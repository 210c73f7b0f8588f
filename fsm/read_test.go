package fsm

import (
	"errors"
	"slices"
	"testing"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

func TestScanReverseCount(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	f.Apply(cmdLog(1, mustEncode(t, batchCmd(nil,
		put("\x20a", "1"), put("\x20b", ""), put("\x20c", "3"), put("\x21a", "4"), put("\xff\xff", "5")))))
	keysOf := func(kvs []KV) (s []string) {
		for _, kv := range kvs {
			s = append(s, string(kv.Key))
		}
		return s
	}
	for _, tc := range []struct {
		start, end  string
		limit, skip int
		want        []string
	}{
		{"", "", 0, 0, []string{"\xff\xff", "\x21a", "\x20c", "\x20b", "\x20a"}},
		{"\x20", "\x21", 0, 0, []string{"\x20c", "\x20b", "\x20a"}},
		{"\x20", "\x21", 2, 0, []string{"\x20c", "\x20b"}},
		{"\x20", "\x21", 2, 1, []string{"\x20b", "\x20a"}},
		{"\x20", "\x21", 0, 2, []string{"\x20a"}},
		{"\x20", "\x21", 5, 3, nil},
		{"\x20", "\x21", 1, -4, []string{"\x20c"}},
		{"\x20b", "\x20c", 0, 0, []string{"\x20b"}},
		{"\x00", "\x01", 0, 0, nil},
		{"\x00", "\x20b", 0, 0, []string{"\x20a"}},
		{"\x20c", "\x20a", 0, 0, nil},
		{"\x21", "", 0, 0, []string{"\xff\xff", "\x21a"}},
	} {
		kvs, err := f.ScanReverse([]byte(tc.start), []byte(tc.end), tc.limit, tc.skip)
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(kvs); !slices.Equal(got, tc.want) {
			t.Errorf("ScanReverse(%q, %q, %d, %d) = %q, want %q", tc.start, tc.end, tc.limit, tc.skip, got, tc.want)
		}
		n, err := f.Count([]byte(tc.start), []byte(tc.end))
		if err != nil {
			t.Fatal(err)
		}
		all, _ := f.Scan([]byte(tc.start), []byte(tc.end), 0)
		if n != len(all) {
			t.Errorf("Count(%q, %q) = %d, want %d", tc.start, tc.end, n, len(all))
		}
	}
	kvs, _ := f.ScanReverse([]byte("\x20"), []byte("\x21"), 1, 0)
	if string(kvs[0].Value) != "3" {
		t.Fatalf("value %q", kvs[0].Value)
	}
	kvs[0].Value[0] = 'x' // a copy
	if v, _ := f.Get([]byte("\x20c")); string(v) != "3" {
		t.Fatal("ScanReverse returned a shared slice")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ScanReverse(nil, nil, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ScanReverse after Close: %v", err)
	}
	if _, err := f.Count(nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Count after Close: %v", err)
	}
}

// TestTransactionsNewestFirst: the server's transaction listing, a reverse
// scan of one user's index range, returns newest first, paged.
func TestTransactionsNewestFirst(t *testing.T) {
	f := mustOpen(t, testConfig(1, t.TempDir()), nil)
	var cmds []*Command
	for i := range 10 {
		cmds = append(cmds, &Command{Op: OpPutTransaction, Tx: creditTx(i%2, i, int64(1+i))})
	}
	applyAll(t, f, 1, 0, cmds)
	prefix := keys.TransactionByUserPrefix(acct(0))
	page, err := f.ScanReverse(prefix, keys.PrefixEnd(prefix), 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, kv := range page {
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
		got = append(got, tx.AmountCents)
	}
	if !slices.Equal(got, []int64{7, 5}) { // account 0 holds ids 0,2,4,6,8; skip 8, take 6 and 4
		t.Fatalf("amounts %v, want [7 5]", got)
	}
	if n, _ := f.Count(prefix, keys.PrefixEnd(prefix)); n != 5 {
		t.Fatalf("Count = %d, want 5", n)
	}
}
