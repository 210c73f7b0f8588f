package api

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/records"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// billingServer implements the Billing gRPC service (seed 001) on a Node.
// ProcessUsage, AddCredits and UpdateBalance run inside the state machine:
// no read-modify-write happens here.
type billingServer struct {
	rpc.UnimplementedBillingServer
	*server
}

const accountIDLen = len(keys.AccountID{})

func (s *billingServer) PutAccount(ctx context.Context, req *rpc.PutAccountRequest) (*rpc.PutAccountResponse, error) {
	return putRecord[rpc.PutAccountResponse](ctx, s.server, req.GetAccount(), rpc.AccountFromProto,
		func(a *records.Account) ([]byte, *fsm.Command) {
			return a.UserID[:], &fsm.Command{Op: fsm.OpPutAccount, Account: a}
		})
}

func (s *billingServer) GetAccount(ctx context.Context, req *rpc.AccountRef) (*rpc.GetAccountResponse, error) {
	var a records.Account
	err := userGet(ctx, s.server, req.GetUserId(), rpc.AccountIDFromBytes, req.GetConsistency(), keys.Account, &a)
	if err != nil {
		return nil, err
	}
	return &rpc.GetAccountResponse{Account: rpc.AccountToProto(&a)}, nil
}

func (s *billingServer) DeleteAccount(ctx context.Context, req *rpc.AccountRef) (*rpc.DeleteAccountResponse, error) {
	user, err := rpc.AccountIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	if _, err := s.proposeRouted(ctx, user[:], &fsm.Command{Op: fsm.OpDeleteAccount, AccountID: &user}); err != nil {
		return nil, err
	}
	return &rpc.DeleteAccountResponse{}, nil
}

// newTransactionID makes a ULID at the proposer, in the slot of account
// user (its last two random bytes varied until it is: its directory entry
// is then in the account's shard, and the op one log entry; recordTx).
func newTransactionID(now time.Time, user keys.AccountID) keys.TransactionID {
	id := keys.TransactionID(ulid.MustNew(ulid.Timestamp(now), rand.Reader))
	want := shard.SlotOf(user[:])
	for i := 0; i < 1<<16 && shard.SlotOf(id[:]) != want; i++ {
		binary.BigEndian.PutUint16(id[14:], uint16(i))
	}
	return id
}

func (s *billingServer) UpdateBalance(ctx context.Context, req *rpc.UpdateBalanceRequest) (*rpc.BalanceResponse, error) {
	user, err := rpc.AccountIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	now := time.Now()
	txID := newTransactionID(now, user)
	if len(req.GetTransactionId()) > 0 {
		if txID, err = rpc.TransactionIDFromBytes(req.GetTransactionId()); err != nil {
			return nil, s.statusErr(0, badInput(err))
		}
	}
	delta := req.GetDeltaCents()
	tx := &records.CreditTransaction{TransactionID: txID, UserID: user, AmountCents: delta,
		TransactionType: records.TxAdjustment, Description: req.GetDescription(), CreatedAt: now.UnixMilli()}
	res, err := s.recordTx(ctx, user, &fsm.Command{Op: fsm.OpUpdateBalance, AccountID: &user, Amount: &delta, Tx: tx, Time: now.UnixMilli()})
	if err != nil {
		return nil, err
	}
	return &rpc.BalanceResponse{BalanceCents: res.Balance}, nil
}

func (s *billingServer) PutTransaction(ctx context.Context, req *rpc.PutTransactionRequest) (*rpc.PutTransactionResponse, error) {
	tx, err := rpc.TransactionFromProto(req.GetTransaction())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	if _, err := s.recordTx(ctx, tx.UserID, &fsm.Command{Op: fsm.OpPutTransaction, Tx: tx}); err != nil {
		return nil, err
	}
	return &rpc.PutTransactionResponse{}, nil
}

func (s *billingServer) GetTransaction(ctx context.Context, req *rpc.TransactionRef) (*rpc.GetTransactionResponse, error) {
	txID, err := rpc.TransactionIDFromBytes(req.GetTransactionId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	var tx records.CreditTransaction
	if err := getTargeted(ctx, s.server, req.GetTarget(), accountIDLen, req.GetConsistency(),
		keys.Transaction(txID), &tx, func() []byte { return tx.UserID[:] }); err != nil {
		return nil, err
	}
	return &rpc.GetTransactionResponse{Transaction: rpc.TransactionToProto(&tx)}, nil
}

// ListTransactionsByUser lists newest first: offset paging as the seed
// does (cost grows with the offset), or cursor paging with before (cost
// independent of depth).
func (s *billingServer) ListTransactionsByUser(ctx context.Context, req *rpc.ListTransactionsRequest) (*rpc.TransactionList, error) {
	var resp *rpc.TransactionList
	err := userRead(ctx, s.server, req.GetUserId(), rpc.AccountIDFromBytes, req.GetConsistency(), func(user keys.AccountID, v fsm.View) (err error) {
		resp, err = s.transactions(v, user, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// transactions answers a page of user's transactions from v: the index
// and the records from one view.
func (s *billingServer) transactions(v fsm.View, user keys.AccountID, req *rpc.ListTransactionsRequest) (*rpc.TransactionList, error) {
	limit := int(req.GetLimit())
	if limit <= 0 || limit > s.cfg.MaxScanPage {
		limit = s.cfg.MaxScanPage
	}
	prefix := keys.TransactionByUserPrefix(user)
	end := keys.PrefixEnd(prefix)
	skip := int(req.GetOffset())
	if b := req.GetBefore(); len(b) > 0 {
		before, err := rpc.TransactionIDFromBytes(b)
		if err != nil {
			return nil, s.statusErr(v.Shard(), badInput(err))
		}
		if skip > 0 {
			return nil, s.statusErr(v.Shard(), invalid("offset and before are exclusive"))
		}
		end = keys.TransactionByUser(user, before)
	}
	kvs, err := v.ScanReverse(prefix, end, limit+1, skip)
	if err != nil {
		return nil, s.statusErr(v.Shard(), err)
	}
	out := &rpc.TransactionList{}
	more := len(kvs) > limit
	if more {
		kvs = kvs[:limit]
	}
	for _, kv := range kvs {
		_, txID, err := keys.DecodeTransactionByUser(kv.Key)
		if err != nil {
			return nil, s.statusErr(v.Shard(), err)
		}
		var tx records.CreditTransaction
		if err := getRecord(s.server, v, keys.Transaction(txID), &tx); err != nil {
			return nil, s.statusErr(v.Shard(), fmt.Errorf("transaction index entry without its transaction: %w", err))
		}
		out.Transactions = append(out.Transactions, rpc.TransactionToProto(&tx))
		if more {
			out.NextBefore = txID[:]
		}
	}
	return out, nil
}

func (s *billingServer) usageEvent(ctx context.Context, req *rpc.UsageEventRef) (*records.UsageEvent, error) {
	key, err := keys.UsageEvent(req.GetEventId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	var e records.UsageEvent
	if err := getTargeted(ctx, s.server, req.GetTarget(), accountIDLen, req.GetConsistency(),
		key, &e, func() []byte { return e.UserID[:] }); err != nil {
		return nil, err
	}
	return &e, nil
}

func (s *billingServer) HasUsageEvent(ctx context.Context, req *rpc.UsageEventRef) (*rpc.HasUsageEventResponse, error) {
	_, err := s.usageEvent(ctx, req)
	if status.Code(err) == codes.NotFound {
		return &rpc.HasUsageEventResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &rpc.HasUsageEventResponse{Exists: true}, nil
}

func (s *billingServer) GetUsageEvent(ctx context.Context, req *rpc.UsageEventRef) (*rpc.GetUsageEventResponse, error) {
	e, err := s.usageEvent(ctx, req)
	if err != nil {
		return nil, err
	}
	return &rpc.GetUsageEventResponse{Event: rpc.UsageEventToProto(e)}, nil
}

func (s *billingServer) PutUsageEvent(ctx context.Context, req *rpc.PutUsageEventRequest) (*rpc.PutUsageEventResponse, error) {
	return putRecord[rpc.PutUsageEventResponse](ctx, s.server, req.GetEvent(), rpc.UsageEventFromProto,
		func(e *records.UsageEvent) ([]byte, *fsm.Command) {
			return e.UserID[:], &fsm.Command{Op: fsm.OpPutUsageEvent, Event: e}
		})
}

func (s *billingServer) ProcessUsage(ctx context.Context, req *rpc.ProcessUsageRequest) (*rpc.BalanceResponse, error) {
	e, err := rpc.UsageEventFromProto(req.GetEvent())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	tx, err := rpc.TransactionFromProto(req.GetTransaction())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	res, err := s.recordTx(ctx, e.UserID, &fsm.Command{Op: fsm.OpProcessUsage, Event: e, Tx: tx, Time: nowMs()})
	if err != nil {
		return nil, err
	}
	return &rpc.BalanceResponse{BalanceCents: res.Balance}, nil
}

func (s *billingServer) AddCredits(ctx context.Context, req *rpc.AddCreditsRequest) (*rpc.BalanceResponse, error) {
	user, err := rpc.AccountIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	tx, err := rpc.TransactionFromProto(req.GetTransaction())
	if err != nil {
		return nil, s.statusErr(0, badInput(err))
	}
	amount := req.GetAmountCents()
	res, err := s.recordTx(ctx, user, &fsm.Command{Op: fsm.OpAddCredits, AccountID: &user, Amount: &amount, Tx: tx, Time: nowMs()})
	if err != nil {
		return nil, err
	}
	return &rpc.BalanceResponse{BalanceCents: res.Balance}, nil
}

// The transaction-id directory (docs/architecture.md, "The transaction-id
// directory"). A transaction id is recorded on its account's shard, but
// reserved for that account in a directory keyed by the id itself, in the
// shard of the id's own slot, so that two accounts never hold one id
// anywhere in the cluster. recordTx does the two writes in order: reserve,
// then record. When one shard owns both slots they are one log entry (the
// op carries TxID: fsm reserves in the same change); otherwise the
// reservation is an OpReserveTx on the id's shard (proposed here when
// this node leads it, else on its leader through the Admin call
// ReserveTransaction: cluster.Node.ReserveTx), and the op follows on the
// account's shard. A crash or an error between the two leaves a
// reservation without its transaction: harmless, since only the same
// account may use the id, and the client's retry completes it.

// recordTx proposes cmd, an op that records cmd.Tx for account acct, after
// reserving its transaction id for acct. Before the cluster runs
// fsm.VersionHardening it proposes cmd alone (ids unique per shard).
func (s *billingServer) recordTx(ctx context.Context, acct keys.AccountID, cmd *fsm.Command) (*fsm.Result, error) {
	id, r, err := s.route(acct[:])
	if err != nil {
		return nil, err
	}
	if s.node.ActiveVersion() < fsm.VersionHardening {
		return s.proposeTo(ctx, id, r, cmd)
	}
	// Reserve nothing for a call this node cannot complete: not the
	// leader, or a command the replica would refuse.
	if !r.IsLeader() {
		return nil, s.notLeader(id)
	}
	if err := cmd.Validate(s.cfg.Limits); err != nil {
		return nil, s.statusErr(id, err)
	}
	txID := cmd.Tx.TransactionID
	dirID, _, err := s.node.Route(txID[:])
	if err != nil {
		return nil, s.statusErr(dirID, err)
	}
	if dirID == id {
		cmd.TxID = &txID
		return s.proposeTo(ctx, id, r, cmd)
	}
	if err := s.node.ReserveTx(ctx, acct, txID); err != nil {
		return nil, s.statusErr(dirID, err)
	}
	return s.proposeTo(ctx, id, r, cmd)
}
