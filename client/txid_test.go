package client

import (
	"bytes"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/shard"
)

// TestNewTransactionIDFor: the id's slot is the account's (its directory
// entry is in the account's shard), and ids keep increasing.
func TestNewTransactionIDFor(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	var prev keys.TransactionID
	for i := range 300 {
		u := keys.AccountID{byte(i), byte(i >> 8), 7}
		id := NewTransactionIDFor(now, u)
		if got, want := shard.SlotOf(id[:]), shard.SlotOf(u[:]); got != want {
			t.Fatalf("id %x in slot %d, account %x in slot %d", id, got, u, want)
		}
		if i > 0 && bytes.Compare(id[:], prev[:]) <= 0 {
			t.Fatalf("id %x does not follow %x", id, prev)
		}
		prev = id
	}
}
