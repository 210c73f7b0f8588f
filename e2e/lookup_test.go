package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/swarmkv/swarmkv/client"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
)

// TestLookupByIDAlone fills a 3-node cluster with agents (each with a
// session, and an account with a transaction per user) and measures lookups
// by agent, session and transaction id alone: parallel fan-outs answered
// from per-shard indexes, so their latency must not grow with the data.
// SWARM_LOOKUP_AGENTS sets the agent count (default 1000; the issue's
// figure uses 100000). It prints figures; it asserts correctness only.
func TestLookupByIDAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := 1000
	if v := os.Getenv("SWARM_LOOKUP_AGENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	c := newCluster(t, 3, 8)
	c.waitReady(c.nodes...)
	t.Logf("cluster ready after %v", time.Since(t0).Round(time.Millisecond))
	cl := c.client(c.nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	reg, bill := cl.Registry(), cl.Billing()
	const agentsPerUser = 10
	id := func(i int) (keys.UserID, keys.AgentID, keys.SessionID, keys.AccountID) {
		var u keys.UserID
		var a keys.AgentID
		var s keys.SessionID
		var acc keys.AccountID
		binary.BigEndian.PutUint64(u[:], uint64(i/agentsPerUser)+1)
		binary.BigEndian.PutUint64(a[:], uint64(i)+1)
		binary.BigEndian.PutUint64(s[:], uint64(i)+1)
		binary.BigEndian.PutUint64(acc[:], uint64(i/agentsPerUser)+1)
		return u, a, s, acc
	}
	now := time.Now().UnixMilli()
	start := time.Now()
	txIDs := make([]keys.TransactionID, n/agentsPerUser)
	if err := parallel(n, 64, func(i int) error {
		u, a, s, acc := id(i)
		if err := reg.PutAgent(ctx, &records.AgentRecord{AgentID: a, UserID: u, Name: fmt.Sprintf("agent-%d", i),
			Status: records.AgentState(i % 6), CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := reg.PutSession(ctx, &records.SessionRecord{SessionID: s, AgentID: a, UserID: u, CreatedAt: now}); err != nil {
			return err
		}
		if i%agentsPerUser == 0 {
			if err := bill.PutAccount(ctx, &records.Account{UserID: acc, CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
			tx := &records.CreditTransaction{TransactionID: client.NewTransactionID(time.Now()), UserID: acc,
				AmountCents: 100, TransactionType: records.TxGrant, CreatedAt: now}
			if _, err := bill.AddCredits(ctx, acc, 100, tx); err != nil {
				return err
			}
			txIDs[i/agentsPerUser] = tx.TransactionID
		}
		return nil
	}); err != nil {
		t.Fatalf("fill: %v", err)
	}
	t.Logf("filled %d agents, %d sessions, %d accounts+transactions in %v", n, n, n/agentsPerUser, time.Since(start).Round(time.Millisecond))

	measure := func(what string, samples int, op func(i int) error) {
		lat := make([]time.Duration, samples)
		for i := range samples {
			t0 := time.Now()
			if err := op(i); err != nil {
				t.Fatalf("%s %d: %v", what, i, err)
			}
			lat[i] = time.Since(t0)
		}
		slices.Sort(lat)
		t.Logf("%-26s n=%d p50=%v p90=%v p99=%v max=%v", what, samples,
			lat[samples/2].Round(time.Microsecond), lat[samples*9/10].Round(time.Microsecond),
			lat[samples*99/100].Round(time.Microsecond), lat[samples-1].Round(time.Microsecond))
	}
	const samples = 500
	step := max(1, n/samples)
	measure("GetAgent(agent id)", samples, func(i int) error {
		_, a, _, _ := id((i * step) % n)
		got, err := reg.GetAgent(ctx, a)
		if err == nil && got.AgentID != a {
			err = fmt.Errorf("got agent %x", got.AgentID)
		}
		return err
	})
	measure("GetSession(session id)", samples, func(i int) error {
		_, _, s, _ := id((i * step) % n)
		_, err := reg.GetSession(ctx, s)
		return err
	})
	measure("GetTransaction(tx id)", samples, func(i int) error {
		_, err := bill.GetTransaction(ctx, txIDs[(i*step/agentsPerUser)%len(txIDs)])
		return err
	})
	measure("GetAgentOf(user, agent)", samples, func(i int) error {
		u, a, _, _ := id((i * step) % n)
		_, err := reg.GetAgentOf(ctx, u, a)
		return err
	})
	measure("CountAgentsByUser(user)", samples, func(i int) error {
		u, _, _, _ := id((i * step) % n)
		cnt, err := reg.CountAgentsByUser(ctx, u)
		if err == nil && cnt != agentsPerUser {
			err = fmt.Errorf("count %d", cnt)
		}
		return err
	})
}
