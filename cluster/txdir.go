package cluster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/swarmkv/swarmkv/fsm"
	"github.com/swarmkv/swarmkv/keys"
	"github.com/swarmkv/swarmkv/rpc"
	"github.com/swarmkv/swarmkv/shard"
)

// The ledger's transaction-id directory, the cluster's side
// (docs/architecture.md, "The transaction-id directory"): the front of a
// billing op reserves the transaction id on the shard of the id's own
// slot before it records the transaction on the account's shard
// (api/billing.go, recordTx). ReserveTx makes that reservation from any
// node, on the leader of the id's shard: this node's replica when it
// leads, else the Admin call ReserveTransaction to the leader.

// ReserveTx reserves transaction id txID for account acct in the
// directory (fsm.OpReserveTx on the id's shard). It returns nil when the
// id is reserved for acct (now or before), an error wrapping
// fsm.ErrAlreadyExists when another account holds it, an error wrapping
// ErrLeaderNotReady when the id's shard has no leader this node can
// reach or its slot is moving (nothing done: send again), or the error
// of the proposal (ErrOutcomeUnknown, a gRPC status of the remote call).
// It never answers the directory shard's NotLeader or moved status,
// which a client would apply to the shard it called.
func (n *Node) ReserveTx(ctx context.Context, acct keys.AccountID, txID keys.TransactionID) error {
	id, r, err := n.replicaFor(txID[:])
	if err != nil {
		return err
	}
	if r != nil && r.IsLeader() {
		_, err := r.Propose(ctx, reserveCmd(acct, txID))
		if err == nil || !errors.Is(err, ErrNotLeader) {
			return reserveErr(id, err)
		}
	}
	leader, _ := n.leaderHint(id)
	if leader == "" && r == nil { // no replica here: ask a voter, which hints
		if st, _ := n.LocalState(); st != nil {
			if p := st.Placement(id); p != nil && len(p.Voters) > 0 {
				leader = p.Voters[0]
			}
		}
	}
	if leader == "" || leader == n.cfg.ID {
		return fmt.Errorf("%w: transaction-id directory: shard %d has no other leader known here", ErrLeaderNotReady, id)
	}
	a, ok := n.nodeAddrs(leader)
	req := &rpc.ReserveTransactionRequest{TransactionId: txID[:], UserId: acct[:]}
	for hop := 0; ; hop++ {
		if !ok || a.GRPCAddr == "" {
			return fmt.Errorf("%w: transaction-id directory: no address known for shard %d's leader", ErrLeaderNotReady, id)
		}
		conn, err := n.peers.Conn(a.GRPCAddr)
		if err != nil {
			return reserveErr(id, err)
		}
		_, err = rpc.NewAdminClient(conn).ReserveTransaction(ctx, req)
		if err == nil {
			return nil
		}
		st, _ := status.FromError(err)
		kind, detail := rpc.KindOf(st)
		nl, isNL := detail.(*rpc.NotLeader)
		if kind != rpc.KindNotLeader || !isNL || nl.GetLeaderAddr() == "" || hop > 0 {
			return reserveErr(id, err)
		}
		a, ok = NodeAddrs{GRPCAddr: nl.GetLeaderAddr()}, true // follow one hint
	}
}

func reserveCmd(acct keys.AccountID, txID keys.TransactionID) *fsm.Command {
	return &fsm.Command{Op: fsm.OpReserveTx, AccountID: &acct, TxID: &txID}
}

// reserveErr is ReserveTx's answer for err (nil: none): the directory
// shard's not-leader and moved answers, local or remote, become
// ErrLeaderNotReady; the rest are returned as they are.
func reserveErr(id shard.ID, err error) error {
	if err == nil {
		return nil
	}
	var me *fsm.MovedError
	if st, ok := status.FromError(err); ok {
		if k, _ := rpc.KindOf(st); k == rpc.KindNotLeader || k == rpc.KindMoved {
			return fmt.Errorf("%w: transaction-id directory (shard %d): %s", ErrLeaderNotReady, id, st.Message())
		}
		return err
	}
	if errors.Is(err, ErrNotLeader) || errors.As(err, &me) {
		return fmt.Errorf("%w: transaction-id directory (shard %d): %v", ErrLeaderNotReady, id, err)
	}
	return err
}

// ReserveTransaction is the Admin call of ReserveTx on the leader of the
// id's shard: it proposes the reservation on this node's replica
// (NotLeader with the hint when there is none or it does not lead) and
// never forwards it.
func (s *adminServer) ReserveTransaction(ctx context.Context, req *rpc.ReserveTransactionRequest) (*rpc.ReserveTransactionResponse, error) {
	txID, err := rpc.TransactionIDFromBytes(req.GetTransactionId())
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	acct, err := rpc.AccountIDFromBytes(req.GetUserId())
	if err != nil {
		return nil, StatusError(err, 0, nil)
	}
	id, r, err := s.node.replicaFor(txID[:])
	hint := func() (string, string) { return s.node.leaderHint(id) }
	if err != nil {
		return nil, StatusError(err, id, hint)
	}
	if r == nil {
		return nil, StatusError(ErrNotLeader, id, hint)
	}
	if _, err := r.Propose(ctx, reserveCmd(acct, txID)); err != nil {
		return nil, StatusError(err, id, hint)
	}
	return &rpc.ReserveTransactionResponse{}, nil
}
