package keys

import (
	"bytes"
	"errors"
	"testing"
)

// addSeeds adds the seed corpus shared by the decoder fuzz targets: a valid
// key of table tb, that key truncated and extended, the empty key, and the
// key moved to every other table.
func addSeeds(f *testing.F, tb byte, valid []byte) {
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0xff))
	f.Add([]byte{})
	f.Add([]byte{tb})
	for other := range decoders {
		if other != tb {
			k := bytes.Clone(valid)
			k[0] = other
			f.Add(k)
		}
	}
}

// checkDecode fails unless a decode error wraps ErrMalformed, or, on
// success, re-encoding yields k again.
func checkDecode(t *testing.T, k []byte, err error, reencode func() []byte) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("decode %x: error %v does not wrap ErrMalformed", k, err)
		}
		return
	}
	if got := reencode(); !bytes.Equal(got, k) {
		t.Fatalf("decode %x re-encodes to %x", k, got)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	addSeeds(f, TableMeta, Meta("applied_index"))
	f.Fuzz(func(t *testing.T, k []byte) {
		name, err := DecodeMeta(k)
		checkDecode(t, k, err, func() []byte { return Meta(name) })
	})
}

func FuzzDecodeAgent(f *testing.F) {
	addSeeds(f, TableAgents, Agent(UserID(seq(1, 32)), AgentID(seq(0xa0, 32))))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, a, err := DecodeAgent(k)
		checkDecode(t, k, err, func() []byte { return Agent(u, a) })
	})
}

func FuzzDecodeAgentByStatus(f *testing.F) {
	addSeeds(f, TableAgentsByStatus, AgentByStatus(3, UserID(seq(1, 32)), AgentID(seq(0xa0, 32))))
	f.Fuzz(func(t *testing.T, k []byte) {
		s, u, a, err := DecodeAgentByStatus(k)
		checkDecode(t, k, err, func() []byte { return AgentByStatus(s, u, a) })
	})
}

func FuzzDecodeSession(f *testing.F) {
	addSeeds(f, TableSessions, Session(SessionID(seq(0x40, 16))))
	f.Fuzz(func(t *testing.T, k []byte) {
		s, err := DecodeSession(k)
		checkDecode(t, k, err, func() []byte { return Session(s) })
	})
}

func FuzzDecodeSessionByAgent(f *testing.F) {
	addSeeds(f, TableSessionsByAgent, SessionByAgent(AgentID(seq(0xa0, 32)), SessionID(seq(0x40, 16))))
	f.Fuzz(func(t *testing.T, k []byte) {
		a, s, err := DecodeSessionByAgent(k)
		checkDecode(t, k, err, func() []byte { return SessionByAgent(a, s) })
	})
}

func FuzzDecodeUser(f *testing.F) {
	addSeeds(f, TableUsers, User(UserID(seq(1, 32))))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, err := DecodeUser(k)
		checkDecode(t, k, err, func() []byte { return User(u) })
	})
}

func FuzzDecodeAgentOwner(f *testing.F) {
	addSeeds(f, TableAgentOwners, AgentOwner(AgentID(seq(0xa0, 32))))
	f.Fuzz(func(t *testing.T, k []byte) {
		a, err := DecodeAgentOwner(k)
		checkDecode(t, k, err, func() []byte { return AgentOwner(a) })
	})
}

func FuzzDecodeAccount(f *testing.F) {
	addSeeds(f, TableAccounts, Account(AccountID(seq(0x60, 16))))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, err := DecodeAccount(k)
		checkDecode(t, k, err, func() []byte { return Account(u) })
	})
}

func FuzzDecodeTransaction(f *testing.F) {
	addSeeds(f, TableTransactions, Transaction(TransactionID(seq(0x80, 16))))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodeTransaction(k)
		checkDecode(t, k, err, func() []byte { return Transaction(id) })
	})
}

func FuzzDecodeTransactionByUser(f *testing.F) {
	addSeeds(f, TableTransactionsByUser, TransactionByUser(AccountID(seq(0x60, 16)), TransactionID(seq(0x80, 16))))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, id, err := DecodeTransactionByUser(k)
		checkDecode(t, k, err, func() []byte { return TransactionByUser(u, id) })
	})
}

func FuzzDecodeTxDirectory(f *testing.F) {
	addSeeds(f, TableTxDirectory, TxDirectory(TransactionID(seq(0x80, 16))))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodeTxDirectory(k)
		checkDecode(t, k, err, func() []byte { return TxDirectory(id) })
	})
}

func FuzzDecodeUsageEvent(f *testing.F) {
	k, err := UsageEvent("evt-01HZY")
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, TableUsageEvents, k)
	f.Add(append([]byte{TableUsageEvents}, bytes.Repeat([]byte{'e'}, MaxEventIDLen)...))
	f.Add(append([]byte{TableUsageEvents}, bytes.Repeat([]byte{'e'}, MaxEventIDLen+1)...))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, err := DecodeUsageEvent(k)
		checkDecode(t, k, err, func() []byte {
			k2, err := UsageEvent(id)
			if err != nil {
				t.Fatalf("DecodeUsageEvent accepted %x but UsageEvent(%q) fails: %v", k, id, err)
			}
			return k2
		})
	})
}

func FuzzDecodeKV(f *testing.F) {
	addSeeds(f, TableKV, KV([]byte("user-1"), []byte("key")))
	f.Add(KV(nil, nil))
	f.Add([]byte{TableKV, 0x00})
	f.Add([]byte{TableKV, 0xff, 0xff, 'a'})
	f.Add([]byte{TableKV, 0x04, 0x01})
	f.Fuzz(func(t *testing.T, k []byte) {
		rk, key, err := DecodeKV(k)
		checkDecode(t, k, err, func() []byte {
			if err := ValidateRoutingKey(rk); err != nil {
				t.Fatalf("DecodeKV accepted %x with invalid routing key: %v", k, err)
			}
			return KV(rk, key)
		})
	})
}

// FuzzKV checks the other direction: any valid routing key and key encode
// to a key that decodes back to them, inside KVPrefix(rk, nil) and
// KVPrefix(rk, key).
func FuzzKV(f *testing.F) {
	f.Add([]byte("a"), []byte("b"))
	f.Add([]byte("ab"), []byte(""))
	f.Add([]byte{}, []byte{0xff})
	f.Add([]byte{0xff, 0xff}, []byte{0xff})
	f.Fuzz(func(t *testing.T, rk, key []byte) {
		if ValidateRoutingKey(rk) != nil {
			t.Skip()
		}
		k := KV(rk, key)
		grk, gkey, err := DecodeKV(k)
		if err != nil || !bytes.Equal(grk, rk) || !bytes.Equal(gkey, key) {
			t.Fatalf("DecodeKV(KV(%x, %x)) = %x, %x, %v", rk, key, grk, gkey, err)
		}
		for _, p := range [][]byte{KVPrefix(rk, nil), KVPrefix(rk, key)} {
			if !inRange(k, p, PrefixEnd(p)) {
				t.Fatalf("KV(%x, %x) = %x outside prefix %x", rk, key, k, p)
			}
		}
	})
}

func FuzzPrefixEnd(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0x01}, []byte{0xff, 0xff})
	f.Add([]byte{0x01, 0xff}, []byte{0x00})
	f.Add([]byte{0xff, 0xff}, []byte{0x01})
	f.Add([]byte{0x12, 0x00, 0xfe}, []byte{0xff})
	f.Fuzz(func(t *testing.T, prefix, suffix []byte) {
		end := PrefixEnd(prefix)
		k := append(bytes.Clone(prefix), suffix...)
		if end == nil {
			for _, b := range prefix {
				if b != 0xff {
					t.Fatalf("PrefixEnd(%x) = nil, but the prefix is not all 0xff", prefix)
				}
			}
			return
		}
		if bytes.Compare(prefix, end) >= 0 {
			t.Fatalf("prefix %x >= PrefixEnd %x", prefix, end)
		}
		if bytes.Compare(k, end) >= 0 {
			t.Fatalf("key %x with prefix %x >= PrefixEnd %x", k, prefix, end)
		}
		// end is the smallest such key: it is prefix with its trailing
		// 0xff bytes dropped and the last remaining byte incremented.
		n := len(end)
		if n > len(prefix) || !bytes.Equal(end[:n-1], prefix[:n-1]) || end[n-1] != prefix[n-1]+1 ||
			prefix[n-1] == 0xff || bytes.Count(prefix[n:], []byte{0xff}) != len(prefix)-n {
			t.Fatalf("PrefixEnd(%x) = %x is not the least upper bound", prefix, end)
		}
		if bytes.HasPrefix(end, prefix) {
			t.Fatalf("PrefixEnd(%x) = %x itself has the prefix", prefix, end)
		}
	})
}
